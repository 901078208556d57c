// Calibration records checked for kind, backend and range (src/projection/calibration_checks.h)
// before calibrate() believes them: each example is a shipped record with one field changed.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/errors.h"
#include "src/core/results.h"
#include "src/projection/calibration_checks.h"
#include "src/projection/hardware.h"
#include "src/projection/projection.h"

namespace sb {
namespace {

const std::string kSource = SCALEBENCH_SOURCE_DIR;

nlohmann::json first_record(const std::string& file, const std::string& subcommand) {
    for (const nlohmann::json& r : read_records(kSource + "/" + file).records)
        if (r.value("subcommand", "") == subcommand) return r;
    ADD_FAILURE() << file << " holds no " << subcommand << " record";
    return {};
}

// The calibration's error for the record after `change`, or "<calibrated>".
std::string calibrate_error(nlohmann::json record, const std::function<void(nlohmann::json&)>& change) {
    change(record);
    const auto path = std::filesystem::temp_directory_path() / ("sb-calibration-" + std::to_string(::getpid()) + ".jsonl");
    std::ofstream(path, std::ios::trunc) << json_text(record) << "\n";
    const HardwareProfile h200 = load_hardware_profile(kSource + "/configs/hardware/h200-sxm.yaml");
    std::string error = "<calibrated>";
    try {
        calibrate(h200, {path.string()});
    } catch (const UserError& e) {
        error = e.what();
    }
    std::filesystem::remove(path);
    return error;
}

TEST(CalibrationChecks, ACommRecordOfTheMpiBackendIsNotTheGpusDeviceCopy) {
    const nlohmann::json comm = first_record("results/h200-one-gpu/gemm/comm.jsonl", "comm");
    EXPECT_EQ(calibrate_error(comm, [](nlohmann::json&) {}), "<calibrated>");
    const std::string e = calibrate_error(comm, [](nlohmann::json& r) { r["backend"] = "mpi"; });
    EXPECT_NE(e.find("a comm record of backend 'mpi' times host memory, not the GPU"), std::string::npos) << e;
}

TEST(CalibrationChecks, NumbersOutsideTheirRangeAreRefusedNamingTheKey) {
    const nlohmann::json op = first_record("results/h200-kernel-history/maxpool-rows/check/opprof_bert-base_b256.jsonl", "op_profile");
    EXPECT_EQ(calibrate_error(op, [](nlohmann::json&) {}), "<calibrated>");
    std::string e = calibrate_error(op, [](nlohmann::json& r) { r["ms"]["median"] = 1e9; });
    EXPECT_NE(e.find("record 1: key 'ms.median': must be in (0, 100000], got 1000000000 (one op of over 100 s"),
              std::string::npos) << e;
    e = calibrate_error(op, [](nlohmann::json& r) { r["local_batch"] = -1; });
    EXPECT_NE(e.find("key 'local_batch': must be in [1, 16777216], got -1"), std::string::npos) << e;
    const nlohmann::json train = first_record("results/h200-one-gpu/gemm/mlp-large.jsonl", "train");
    e = calibrate_error(train, [](nlohmann::json& r) { r["local_batch"] = -1; });
    EXPECT_NE(e.find("key 'local_batch': must be in [1, 16777216], got -1"), std::string::npos) << e;
    // A comm record's fit and its largest size, the figures calibration reads.
    const nlohmann::json comm = first_record("results/h200-one-gpu/gemm/comm.jsonl", "comm");
    e = calibrate_error(comm, [](nlohmann::json& r) { r["fit"]["alpha_us"] = 1e10; });
    EXPECT_NE(e.find("record 1: key 'fit.alpha_us': must be in [0, 1000000000], got 10000000000 (a collective's call"),
              std::string::npos) << e;
    e = calibrate_error(comm, [](nlohmann::json& r) { r["rows"][25]["out_of_place"]["time_us"] = 0; });
    EXPECT_NE(e.find("record 1: key 'rows.last.out_of_place.time_us': must be in (0, 1000000000000], got 0"),
              std::string::npos) << e;
    e = calibrate_error(comm, [](nlohmann::json& r) { r["rows"][25]["size_bytes"] = 0; });
    EXPECT_NE(e.find("record 1: key 'rows.last.size_bytes': must be in (0, 1000000000000000], got 0"), std::string::npos)
        << e;
}

}  // namespace
}  // namespace sb
