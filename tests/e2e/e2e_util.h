// Helpers of the end-to-end tests: a scratch folder per test binary, reading files whole,
// and the outcome of one run of the binary.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace sb::e2e {

struct Result {
    int code = -1;
    std::string out, err;
};

// A folder of this process's own under the temp directory, named after `suite`.
inline std::filesystem::path scratch(const std::string& suite) {
    auto dir = std::filesystem::temp_directory_path() / ("scalebench-" + suite + "-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return dir;
}

inline std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

}  // namespace sb::e2e
