// libFuzzer target: the config loader on arbitrary bytes. parse_config and
// validate_config may reject input only with sb::UserError (a clear file:line:col
// message); any other exception, a crash, or undefined behaviour (ASan/UBSan) is a bug.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <fmt/format.h>

#include "src/core/config.h"
#include "src/core/errors.h"

// Built without MPI (tests/fuzz/run_fuzz_config.sh compiles config.cpp alone), so the
// internal-failure formatting of src/core/errors.cpp is given here without rank and host.
namespace sb {
void throw_call_error(const char* library, const char* call, const std::string& message, const char* file,
                      int line) {
    throw std::runtime_error(fmt::format("{} call failed at {}:{}: {}: {}", library, file, line, call, message));
}
std::string mpi_error_string(int code) { return fmt::format("MPI error {}", code); }
}  // namespace sb

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        sb::TrainConfig cfg = sb::parse_config(text, "fuzz.yaml");
        sb::validate_config(cfg);
        // to_json(cfg).dump() is not checked yet: a config whose strings are not UTF-8 is
        // accepted and only fails when its record is written (tests/fuzz/findings/).
        (void)sb::to_json(cfg);
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
