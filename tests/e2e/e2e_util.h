// Helpers of the end-to-end tests: a scratch folder per test binary, reading files whole,
// the launcher of an N-rank run, and running a command for its exit code and output.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/core/results.h"

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

// The launcher of an `np`-rank run (SCALEBENCH_MPIRUN, tests/CMakeLists.txt), ending in a
// space: mpirun(2) + SCALEBENCH_BINARY + " train ...".
inline std::string mpirun(int np) { return std::string(SCALEBENCH_MPIRUN) + " -np " + std::to_string(np) + " "; }

// Runs `command` through the shell with no standard input, its output and errors kept in
// `dir`: the exit code (128 + the signal when killed) and what it printed.
inline Result run_shell(const std::string& command, const std::filesystem::path& dir) {
    std::filesystem::create_directories(dir);
    const std::string cmd =
        command + " >" + (dir / "out").string() + " 2>" + (dir / "err").string() + " </dev/null";
    Result r;
    const int status = std::system(cmd.c_str());
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(dir / "out");
    r.err = slurp(dir / "err");
    return r;
}

// The records of one subcommand in a JSONL file, in order.
inline std::vector<nlohmann::json> records_of(const std::string& path, const std::string& subcommand) {
    std::vector<nlohmann::json> out;
    for (const auto& r : sb::read_records(path).records)
        if (r["subcommand"] == subcommand) out.push_back(r);
    return out;
}

}  // namespace sb::e2e
