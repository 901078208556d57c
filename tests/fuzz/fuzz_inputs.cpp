// libFuzzer target: every input the program reads as text, on arbitrary bytes. The first byte
// picks the reader: the config loader (parse_config, validate_config, to_json), a hardware
// profile (parse_hardware_profile), or a record file (parse_records, then every record's
// dump). A reader may reject input only with sb::UserError (a clear message naming where);
// any other exception, a crash, or undefined behaviour (ASan/UBSan) is a bug.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <fmt/format.h>

#include "src/core/config.h"
#include "base/errors.h"
#include "src/core/results.h"
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
        switch (data[0] % 3) {
        case 0: {
            sb::TrainConfig cfg = sb::parse_config(text, "fuzz.yaml");
            sb::validate_config(cfg);
            // A config accepted is one its records can hold: dump() throws on a string that is not
            // UTF-8 (tests/fuzz/findings/accepted-invalid-utf8.yaml).
            (void)sb::to_json(cfg).dump();
            break;
        }
        case 1:
            (void)sb::parse_hardware_profile(text, "fuzz-profile.yaml");
            break;
        default: {
            const sb::ReadResult read = sb::parse_records(text, "fuzz.jsonl");
            // Records read back must be writable again: replace invalid UTF-8 rather than throw.
            for (const auto& record : read.records) (void)record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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
