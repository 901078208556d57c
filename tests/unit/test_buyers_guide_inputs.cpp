// What the buyer's guide reads and what it takes on: a results folder is scanned without
// blocking on a FIFO or reading a device, a record file over the bound is refused by name,
// malformed record fields are not believed, and a profile's ranged numbers are bounded before
// the bands project every corner of them.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "src/core/config.h"
#include "base/errors.h"
#include "src/core/files.h"
#include "src/projection/buyers_guide.h"
#include "src/projection/record_scan.h"
#include "src/projection/soak_scoring.h"
#include "src/projection/workload_projection.h"

namespace sb {
namespace {

const std::string kSource = SCALEBENCH_SOURCE_DIR;

std::filesystem::path fresh_folder(const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() / fmt::format("scalebench-{}-{}", name, ::getpid());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

const char* kH200 = "NVIDIA H200";

nlohmann::json gemm_record(double tflops, const std::string& timestamp) {
    return {{"subcommand", "gemm"}, {"dtype", "fp16"}, {"m", 8192}, {"n", 8192}, {"k", 8192},
            {"tflops", tflops},     {"time_ms", {{"median", 2.0}}}, {"gpu", {{"name", kH200}}},
            {"timestamp", timestamp}};
}

TEST(ResultsFolderScan, FifosAndDevicesAreSkippedAndRegularFilesRead) {
    const auto dir = fresh_folder("scan-special");
    ASSERT_EQ(::mkfifo((dir / "a-fifo.jsonl").c_str(), 0644), 0);  // a read would wait for a writer forever
    std::filesystem::create_symlink("/dev/zero", dir / "b-zero.jsonl");  // a read would never end
    std::ofstream(dir / "c.jsonl") << gemm_record(700, "2026-01-01T00:00:00Z").dump() << "\n";
    std::vector<std::string> files;
    for_each_measured_record(dir.string(), [&](const nlohmann::json&, const std::string& file) { files.push_back(file); });
    EXPECT_EQ(files, std::vector<std::string>{(dir / "c.jsonl").string()});
    const auto [record, file] = latest_record(dir.string(), [](const nlohmann::json& r) { return text_of(r, "subcommand") == "gemm"; });
    EXPECT_EQ(file, (dir / "c.jsonl").string());
    EXPECT_EQ(number_of(record, "tflops"), 700);
    std::filesystem::remove_all(dir);
}

TEST(ResultsFolderScan, ARecordFileOverTheBoundIsRefusedNamingIt) {
    const auto dir = fresh_folder("scan-large");
    const auto big = dir / "big.jsonl";
    std::ofstream(big).close();
    std::filesystem::resize_file(big, static_cast<uintmax_t>(kMaxRecordFileBytes) + 1);  // sparse: no disk used
    try {
        latest_record(dir.string(), [](const nlohmann::json&) { return true; });
        ADD_FAILURE() << "a record file over the bound was read";
    } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find(big.string()), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("more than"), std::string::npos) << e.what();
    }
    std::filesystem::remove_all(dir);
}

TEST(ResultsFolderScan, MalformedFieldsAreNotBelieved) {
    const auto dir = fresh_folder("scan-malformed");
    const HardwareProfile h200 = load_hardware_profile(kSource + "/configs/hardware/h200-sxm.yaml");
    std::ofstream out(dir / "r.jsonl");
    // Fields of the wrong type: a reader that trusted them would throw or count them.
    out << R"({"subcommand":"stress","complete":"yes","world_size":"8","elapsed_s":"long","sdc_checks":[1],)"
        << R"("run_id":7,"timestamp":20261201,"projected":"no","gpu":{"name":"NVIDIA H200"},"workloads":"all",)"
        << R"("telemetry_by_rank":[{"ecc_uncorrected_delta":"many","temperature_c":3}]})" << "\n";
    out << R"({"subcommand":"stress","run_id":"b","complete":true,"world_size":1,"gpu":"NVIDIA H200","environment":{"gpu":7}})"
        << "\n";
    // A measured figure that cannot be one: a negative or zero rate stands beside no projection.
    out << gemm_record(-5, "2027-01-01T00:00:00Z").dump() << "\n" << gemm_record(0, "2027-01-02T00:00:00Z").dump() << "\n";
    out.close();
    std::vector<SoakRun> runs;
    ASSERT_NO_THROW(runs = soak_runs(h200, dir.string()));
    ASSERT_EQ(runs.size(), 1u);  // the first record, an interval (its `complete` is not true); the second names no GPU
    EXPECT_FALSE(runs[0].complete);
    EXPECT_EQ(runs[0].world_size, 0);
    EXPECT_EQ(runs[0].replica_checks, 0);
    EXPECT_EQ(runs[0].ecc_uncorrected, 0);
    EXPECT_EQ(soak_summary(h200, dir.string()), "");  // no summary of the H200's
    for (const CardFigure& f : card_tests(h200, Calibration{}, kSource + "/configs", dir.string()))
        EXPECT_LT(f.measured, 0) << f.test << " believed a record of " << f.measured_from;
    std::filesystem::remove_all(dir);
}

TEST(RangedNumbers, AProfileWithMoreThanTheBoundIsRefusedBeforeAnyProjection) {
    HardwareProfile hw = load_hardware_profile(kSource + "/configs/hardware/h200-sxm.yaml");
    size_t ranged = ranged_keys(hw).size();
    for (auto& [key, number] : sourced_numbers(hw)) {
        if (number->is_range() || ranged == kMaxRangedNumbers) continue;
        number->lo = number->value * 0.9;
        number->hi = number->value * 1.1;
        number->lo_source = number->hi_source = "a test's range";
        ++ranged;
    }
    ASSERT_EQ(ranged_keys(hw).size(), kMaxRangedNumbers);
    EXPECT_NO_THROW(check_ranged_count(hw));
    for (auto& [key, number] : sourced_numbers(hw))
        if (!number->is_range()) {
            number->lo = number->hi = number->value;
            number->lo_source = number->hi_source = "a test's range";
            break;
        }
    ASSERT_EQ(ranged_keys(hw).size(), kMaxRangedNumbers + 1);
    try {
        check_ranged_count(hw);
        ADD_FAILURE() << "a profile of " << kMaxRangedNumbers + 1 << " ranged numbers was taken";
    } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find(hw.source), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(fmt::format("{} ranged numbers", kMaxRangedNumbers + 1)), std::string::npos)
            << e.what();
    }
    // The bands refuse it too, whoever calls them.
    const TrainConfig cfg;
    std::vector<Projection> rows;
    EXPECT_THROW(widen_to_ranges(rows, cfg, hw, Calibration{}, {1}, {1}), UserError);
    EXPECT_THROW(comm_table(CostModel(hw), {2}, {1}), UserError);
}

}  // namespace
}  // namespace sb
