// libFuzzer target: every reader of text the program takes, on arbitrary bytes. The first byte
// picks the reader: 0 the config loader (parse_config, validate_config, to_json), 1 a hardware
// profile (parse_hardware_profile, its per-key ranges), 2 a record file (parse_records, the
// calibration checks on every record, every record written back through json_text), 3 a doctor
// snapshot (parse_snapshot). A reader may reject input only with sb::UserError (a clear message
// naming where); any other exception, a crash, or undefined behaviour (ASan/UBSan) is a bug.
// (guide.json is read by results/compare_report.py: tests/plot/test_compare_report.sh mutates it.)
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <fmt/format.h>

#include "src/core/config.h"
#include "base/errors.h"
#include "src/core/results.h"
#include "src/doctor/snapshot.h"
#include "src/projection/calibration_checks.h"
#include "src/projection/hardware.h"

// Built without MPI (tests/fuzz/run_fuzz_inputs.sh compiles the readers alone), so the
// internal-failure formatting of base/errors.cpp is given here without rank and host.
namespace sb {
void throw_call_error(const char* library, const char* call, const std::string& message, const char* file,
                      int line) {
    throw std::runtime_error(fmt::format("{} call failed at {}:{}: {}: {}", library, file, line, call, message));
}
std::string mpi_error_string(int code) { return fmt::format("MPI error {}", code); }
}  // namespace sb

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
    if (size == 0) return 0;
    const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
    try {
        switch (data[0] % 4) {
        case 0: {
            sb::TrainConfig cfg = sb::parse_config(text, "fuzz.yaml");
            sb::validate_config(cfg);
            // A config accepted is one its records can hold: the record's JSON is written whole.
            (void)sb::json_text(sb::to_json(cfg));
            break;
        }
        case 1:
            (void)sb::parse_hardware_profile(text, "fuzz-profile.yaml");
            break;
        case 2: {
            const sb::ReadResult read = sb::parse_records(text, "fuzz.jsonl");
            // Records read back are writable again (the one sanitizer), and checked as calibration.
            for (const auto& record : read.records) {
                (void)sb::json_text(record);
                try {
                    sb::check_calibration_record(record, "fuzz.jsonl: record");
                } catch (const sb::UserError&) {
                }
            }
            break;
        }
        default:
            (void)sb::doctor::parse_snapshot(text, "fuzz-snapshot.json");
            break;
        }
    } catch (const sb::UserError& e) {
        if (std::string(e.what()).empty()) {
            std::fprintf(stderr, "empty UserError message\n");
            std::abort();
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "not a UserError: %s\n", e.what());
        std::abort();
    }
    return 0;
}
