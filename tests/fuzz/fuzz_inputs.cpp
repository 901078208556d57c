// libFuzzer target: every reader of text the program takes, on arbitrary bytes. The first byte
// picks the reader (modulo 5): 0 the config loader (parse_config, validate_config, to_json), 1 a
// hardware profile (parse_hardware_profile, its per-key ranges), 2 a record file (parse_records,
// the calibration checks on every record, every record written back through json_text), 3 a
// doctor snapshot (parse_snapshot), 4 a host section (apply_host_section, `project --host`: onto
// the shipped a100-sxm4-40gb profile, read once). A reader may reject input only with
// sb::UserError (a clear message naming where); any other exception, a crash, or undefined
// behaviour (ASan/UBSan) is a bug.
// Not here: scenario files (load_scenario, src/projection/buyers_guide.cpp, which includes the
// projection and MPI headers and does not build with clang 14: it needs a source of its own to be
// linked into this target), and guide.json, read only by results/compare_report.py in Python: its
// fuzzing is tests/plot/test_compare_report.sh's mutations (every field to the wrong type, figures
// out of range, not finite, missing).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
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

namespace {

// The profile a fuzzed host section is applied to: a shipped one, parsed once.
const sb::HardwareProfile& base_profile() {
    static const sb::HardwareProfile profile = [] {
        const std::string path = std::string(SCALEBENCH_SOURCE_DIR) + "/configs/hardware/a100-sxm4-40gb.yaml";
        std::ifstream in(path);
        std::ostringstream text;
        text << in.rdbuf();
        if (!in) {
            std::fprintf(stderr, "cannot read %s\n", path.c_str());
            std::abort();
        }
        return sb::parse_hardware_profile(text.str(), path);
    }();
    return profile;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
    if (size == 0) return 0;
    const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
    try {
        switch (data[0] % 5) {
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
        case 3:
            (void)sb::doctor::parse_snapshot(text, "fuzz-snapshot.json");
            break;
        default: {
            sb::HardwareProfile hw = base_profile();
            sb::apply_host_section(hw, text, "fuzz-host.yaml");
            break;
        }
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
