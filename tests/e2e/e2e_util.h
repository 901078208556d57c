// Helpers of the end-to-end tests: a scratch folder per test binary, reading files whole,
// the launcher of an N-rank run and the CI-sized workload, running a command for its exit
// code and output, and finding the ranks a launcher started.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>
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

// `dir`/`name`, removed first: the file a test's run writes afresh.
inline std::string fresh_file(const std::filesystem::path& dir, const std::string& name) {
    const auto p = dir / name;
    std::filesystem::remove(p);
    return p.string();
}

// The launcher of an `np`-rank run (SCALEBENCH_MPIRUN, tests/CMakeLists.txt), ending in a
// space: mpirun(2) + SCALEBENCH_BINARY + " train ...".
inline std::string mpirun(int np) { return std::string(SCALEBENCH_MPIRUN) + " -np " + std::to_string(np) + " "; }

// The CI-sized workload (configs/ci-small.yaml) on the CPU backend, as flags.
inline const std::string kSmall = std::string(" --config ") + SCALEBENCH_SOURCE_DIR + "/configs/ci-small.yaml --backend cpu";

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

// The pid of each rank `launcher` (an mpirun's pid) started, by rank (OMPI_COMM_WORLD_RANK of
// its children); a rank not found is missing from the map.
inline std::map<int, pid_t> ranks_of(pid_t launcher) {
    std::map<int, pid_t> ranks;
    constexpr std::string_view kRankVariable = "OMPI_COMM_WORLD_RANK=";
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        const std::string name = entry.path().filename();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        const std::string stat = slurp(entry.path() / "stat");
        const size_t close = stat.rfind(')');
        if (close == std::string::npos || close + 2 >= stat.size()) continue;
        std::istringstream rest(stat.substr(close + 2));
        char state = 0;
        pid_t parent = 0;
        rest >> state >> parent;
        if (parent != launcher) continue;
        std::istringstream vars(slurp(entry.path() / "environ"));
        for (std::string var; std::getline(vars, var, '\0');)
            if (var.rfind(kRankVariable, 0) == 0)
                ranks[std::atoi(var.c_str() + kRankVariable.size())] = static_cast<pid_t>(std::stoi(name));
    }
    return ranks;
}

// The pid of rank `rank` of `launcher`, or 0 when it is not (or no longer) there.
inline pid_t rank_pid(pid_t launcher, int rank) {
    const auto ranks = ranks_of(launcher);
    const auto it = ranks.find(rank);
    return it == ranks.end() ? 0 : it->second;
}

}  // namespace sb::e2e
