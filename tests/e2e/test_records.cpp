// The records' promises (docs/reliability.md) through the real binary: every way a run ends
// leaves a truthful record, and no input does work before it is refused. The cases, numbered
// in the sections below: a torn last line (1); the launcher stopped with SIGTERM or SIGINT, or
// killed, and rank 0 killed (2); a rank stopped during start-up and a stopped launcher (3); a
// config that is a folder or holds no keys (4); an output that cannot be written (5); a duration
// past any clock (6); a model too large for memory (7); report on invalid lines (8). The plot
// script's case (9) is in tests/plot/test_plot_scaling.sh. Signals go to processes found by pid;
// every wait is bounded.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "src/core/results.h"
#include "tests/e2e/e2e_util.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using sb::e2e::kSmall;
using sb::e2e::mpirun;
using sb::e2e::rank_pid;
using sb::e2e::ranks_of;
using sb::e2e::slurp;

fs::path scratch() { return sb::e2e::scratch("records"); }

// Polls `done` every 20 ms for at most `limit`; whether it became true.
bool wait_until(const std::function<bool()>& done, std::chrono::seconds limit) {
    const auto until = Clock::now() + limit;
    while (!done()) {
        if (Clock::now() > until) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
}

// Alive and not a zombie (a rank whose launcher died is reparented, maybe to a reaper that never reaps).
bool alive(pid_t pid) {
    const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    const size_t close = stat.rfind(')');
    return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}
bool rank_alive(const std::pair<const int, pid_t>& rank) { return alive(rank.second); }

struct Job {
    pid_t mpirun = 0;
    std::string out, err;
};

// Starts `mpirun -np N scalebench ARGS --out OUT` (stdout to a file, the collective timeout 4 s).
Job launch(int np, const std::string& args, const std::string& tag) {
    Job job;
    job.out = (scratch() / (tag + ".jsonl")).string();
    job.err = (scratch() / (tag + ".err")).string();
    fs::remove(job.out);
    const std::string stdout_path = (scratch() / (tag + ".stdout")).string();
    job.mpirun = ::fork();
    if (job.mpirun == 0) {
        ::setenv("SCALEBENCH_COLLECTIVE_TIMEOUT_S", "4", 1);
        std::freopen(job.err.c_str(), "w", stderr);
        std::freopen(stdout_path.c_str(), "w", stdout);
        const std::string cmd = "exec " + mpirun(np) + SCALEBENCH_BINARY + " " + args + " --out " + job.out;
        ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    return job;
}

// Waits (bounded) for mpirun to exit; a hang is ended with SIGKILL and reported. Returns its code.
int finish(pid_t mpirun, std::chrono::seconds limit = std::chrono::seconds(60)) {
    int status = 0;
    const bool ended = wait_until([&] { return ::waitpid(mpirun, &status, WNOHANG) == mpirun; }, limit);
    if (!ended) {
        ADD_FAILURE() << "mpirun " << mpirun << " did not end within " << limit.count() << " s";
        ::kill(mpirun, SIGKILL);
        ::waitpid(mpirun, &status, 0);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool file_has(const std::string& path, const std::string& text) {
    return fs::exists(path) && slurp(path).find(text) != std::string::npos;
}

// Whether the last run of `path` is closed, by an `incomplete` record when `incomplete`.
bool last_run_closed(const std::string& path, bool incomplete) {
    if (!fs::exists(path)) return false;
    const sb::ReadResult read = sb::read_records(path);
    return !read.runs.empty() && read.runs.back().end_line > 0 && read.runs.back().incomplete == incomplete;
}

// Sends `sig` to mpirun once the file holds `ready`, then waits for mpirun, its ranks and
// rank 0's record guard; returns the read file.
sb::ReadResult stop_launcher(const Job& job, int sig, const std::string& ready) {
    EXPECT_TRUE(wait_until([&] { return file_has(job.out, ready); }, std::chrono::seconds(120))) << slurp(job.err);
    const std::map<int, pid_t> ranks = ranks_of(job.mpirun);
    ::kill(job.mpirun, sig);
    finish(job.mpirun);
    EXPECT_TRUE(wait_until([&] { return std::none_of(ranks.begin(), ranks.end(), rank_alive); }, std::chrono::seconds(30)))
        << "ranks outlived mpirun";
    wait_until([&] { return last_run_closed(job.out, true); }, std::chrono::seconds(10));  // the guard's record
    return sb::read_records(job.out);
}

const std::string kStress = "stress" + kSmall + " --duration 10m --interval 1s";

// ---- case 1

TEST(Records, ARunAppendedAfterATornLineIsReadBackWhole) {
    const fs::path dir = scratch();
    const std::string whole = (dir / "whole.jsonl").string(), torn = (dir / "torn.jsonl").string();
    fs::remove(whole);
    const std::string run = std::string(SCALEBENCH_BINARY) + kSmall + " --steps 3 --warmup 1 >/dev/null 2>&1 --out ";
    ASSERT_EQ(std::system((run + whole).c_str()), 0);
    const std::string text = slurp(whole);
    ASSERT_GT(text.size(), 700u);
    std::ofstream(torn) << text.substr(0, 700);  // inside the train record, after the start record
    ASSERT_EQ(std::system((run + torn).c_str()), 0);
    const sb::ReadResult read = sb::read_records(torn);
    ASSERT_EQ(read.records.size(), 1u);  // the second run's train record, whole
    EXPECT_EQ(read.records[0]["subcommand"], "train");
    EXPECT_EQ(read.records[0]["run_id"], read.runs.back().run_id);
    ASSERT_EQ(read.runs.size(), 2u);
    EXPECT_EQ(read.runs[0].end_line, 0);  // the first run: cut short where the file was torn
    EXPECT_GT(read.runs[1].end_line, 0);
    EXPECT_FALSE(read.runs[1].incomplete);
    ASSERT_EQ(read.warnings.size(), 2u);
    EXPECT_NE(read.warnings[0].find("torn.jsonl:2: skipped invalid line"), std::string::npos) << read.warnings[0];
    EXPECT_NE(read.warnings[1].find("torn.jsonl:1: the train run started here"), std::string::npos) << read.warnings[1];
}

// ---- case 2

TEST(Records, LauncherSigtermLeavesTheIncompleteRecordIn20Of20Runs) {
    int present = 0;
    for (int i = 0; i < 20; ++i) {
        const Job job = launch(2, kStress, "sigterm" + std::to_string(i));
        const sb::ReadResult read = stop_launcher(job, SIGTERM, "\"subcommand\":\"stress\"");
        const bool ok = !read.records.empty() && read.records.back()["subcommand"] == "incomplete" &&
                        !read.runs.empty() && read.runs.back().incomplete;
        EXPECT_TRUE(ok) << "run " << i << ": " << slurp(job.err);
        present += ok;
    }
    EXPECT_EQ(present, 20);
}

TEST(Records, LauncherSigintLeavesTheIncompleteRecord) {
    for (int i = 0; i < 3; ++i) {
        const Job job = launch(2, kStress, "sigint" + std::to_string(i));
        const sb::ReadResult read = stop_launcher(job, SIGINT, "\"subcommand\":\"stress\"");
        ASSERT_FALSE(read.records.empty());
        EXPECT_EQ(read.records.back()["subcommand"], "incomplete") << slurp(job.err);
        ASSERT_FALSE(read.runs.empty());
        EXPECT_TRUE(read.runs.back().incomplete);
    }
}

// comm appends each size as it is measured, so a stopped sweep keeps what it measured.
TEST(Records, CommStoppedBySigtermKeepsTheSizesMeasuredAndIsIncomplete) {
    const Job job = launch(2, "comm --backend mpi -b 8 -e 256M -f 2 -n 20 -w 1", "comm-sigterm");
    const sb::ReadResult read = stop_launcher(job, SIGTERM, "\"subcommand\":\"comm_size\"");
    ASSERT_GE(read.records.size(), 2u) << slurp(job.err);
    EXPECT_EQ(read.records.front()["subcommand"], "comm_size");
    EXPECT_EQ(read.records.back()["subcommand"], "incomplete");
    ASSERT_EQ(read.runs.size(), 1u);
    EXPECT_TRUE(read.runs[0].incomplete);
}

// SIGKILL reaches no handler: rank 0's record guard writes the incomplete record for it.
TEST(Records, Rank0KilledLeavesTheIncompleteRecordThroughItsGuard) {
    const Job job = launch(2, kStress, "kill-rank0");
    ASSERT_TRUE(wait_until([&] { return file_has(job.out, "\"subcommand\":\"stress\""); }, std::chrono::seconds(120)));
    const pid_t rank0 = rank_pid(job.mpirun, 0);
    ASSERT_NE(rank0, 0);
    ::kill(rank0, SIGKILL);
    EXPECT_NE(finish(job.mpirun), 0);
    EXPECT_TRUE(wait_until([&] { return last_run_closed(job.out, true); }, std::chrono::seconds(10)));
    const sb::ReadResult read = sb::read_records(job.out);
    ASSERT_FALSE(read.records.empty());
    EXPECT_EQ(read.records.back()["subcommand"], "incomplete");
    EXPECT_NE(read.records.back()["error"].get<std::string>().find("ended before the run finished"),
              std::string::npos);
}

// mpirun killed outright: its ranks notice their launcher is gone, close the run and end.
TEST(Records, LauncherKilledEndsItsRanksAndLeavesTheIncompleteRecord) {
    const Job job = launch(2, kStress, "kill-mpirun");
    const sb::ReadResult read = stop_launcher(job, SIGKILL, "\"subcommand\":\"stress\"");
    ASSERT_FALSE(read.records.empty());
    EXPECT_EQ(read.records.back()["subcommand"], "incomplete");
    ASSERT_FALSE(read.runs.empty());
    EXPECT_TRUE(read.runs.back().incomplete);
}

// ---- case 3

TEST(Records, ARankStoppedDuringStartUpEndsTheJobInBoundedTime) {
    const Job job = launch(3, "train" + kSmall + " --steps 3", "stopped-at-start");
    pid_t victim = 0;
    ASSERT_TRUE(wait_until([&] { return (victim = rank_pid(job.mpirun, 1)) != 0; }, std::chrono::seconds(60)));
    ::kill(victim, SIGSTOP);
    const auto stopped = Clock::now();
    EXPECT_NE(finish(job.mpirun, std::chrono::seconds(90)), 0);
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - stopped).count(), 60.0);
    ::kill(victim, SIGKILL);
    const std::string err = slurp(job.err);
    // Stopped inside MPI_Init (the usual case) or just after it: either deadline names it.
    EXPECT_TRUE(err.find("MPI start-up (MPI_Init and the first collective) did not complete within 4 s") !=
                    std::string::npos ||
                err.find("did not complete within 4 s") != std::string::npos)
        << err;
}

TEST(Records, AStoppedLauncherDoesNotKeepItsRanksOnceTheRunIsRecorded) {
    const Job job = launch(2, "train" + kSmall + " --steps 50 --warmup 1", "stopped-mpirun");
    ASSERT_TRUE(wait_until([&] { return file_has(job.out, "\"subcommand\":\"start\""); }, std::chrono::seconds(120)));
    const std::map<int, pid_t> ranks = ranks_of(job.mpirun);
    ASSERT_EQ(ranks.size(), 2u);
    ::kill(job.mpirun, SIGSTOP);
    EXPECT_TRUE(wait_until([&] { return std::none_of(ranks.begin(), ranks.end(), rank_alive); }, std::chrono::seconds(60)))
        << "ranks kept waiting for a stopped mpirun";
    ::kill(job.mpirun, SIGKILL);
    finish(job.mpirun);
    EXPECT_TRUE(last_run_closed(job.out, false)) << slurp(job.out);
}

// ---- the refusals (cases 4 to 7): exit 2 with one line, no work done, no record written

using Refusal = sb::e2e::Result;

Refusal refuse(const std::string& args, int np = 1) {
    return sb::e2e::run_shell((np > 1 ? mpirun(np) : "") + SCALEBENCH_BINARY + " " + args, scratch() / "refusal");
}

TEST(Records, AConfigThatIsAFolderOrHoldsNoKeysIsRefused) {
    const fs::path dir = scratch() / "a-folder";
    fs::create_directories(dir);
    const std::string comma = (scratch() / "comma.yaml").string(), out = (scratch() / "none.jsonl").string();
    std::ofstream(comma) << ",\n";
    fs::remove(out);
    Refusal r = refuse("--config " + dir.string() + " --out " + out);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err, "scalebench: error: " + dir.string() + ": cannot read config file: Is a directory\n");
    r = refuse("--config " + comma + " --out " + out);
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find(comma + ":1:1: the config holds no keys"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_FALSE(fs::exists(out));
}

TEST(Records, AnOutputThatCannotBeWrittenIsRefusedBeforeAnyWork) {
    const fs::path folder = scratch() / "out-folder";
    fs::create_directories(folder);
    for (const std::string& out : {folder.string(), std::string("/dev/full"), std::string("/proc/no/such")}) {
        for (const std::string& command : {"train" + kSmall, std::string("comm --backend mpi -b 8 -e 1K"), kStress}) {
            const Refusal r = refuse(command + " --out " + out, 2);
            EXPECT_EQ(r.code, 2) << command << " --out " << out << "\n" << r.err;
            EXPECT_EQ(r.err.rfind("scalebench: error: ", 0), 0u) << r.err;
            EXPECT_NE(r.err.find(out + ": "), std::string::npos) << r.err;
            EXPECT_TRUE(r.out.empty()) << command << " --out " << out << " did work first:\n" << r.out;
        }
    }
}

TEST(Records, ADurationPastAnyClockIsRefused) {
    Refusal r = refuse("stress" + kSmall + " --duration 99999999999999999999s");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--duration '99999999999999999999s': must be in [0, 31622400], got 99999999999999999999 "
                         "(seconds: a year (366d) holds any soak"),
              std::string::npos)
        << r.err;
    r = refuse("stress" + kSmall + " --duration 400d");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--duration '400d': must be in (0, 31622400], got 34560000 (seconds: a year (366d)"),
              std::string::npos)
        << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(Records, AModelTooLargeForMemoryIsRefusedWithTheSizesOnce) {
    const std::string config = (scratch() / "huge.yaml").string(), out = (scratch() / "huge.jsonl").string();
    std::ofstream(config) << "mlp:\n  input_dim: 1000000\n  hidden: [1000000, 1000000]\n";
    fs::remove(out);
    const Refusal r = refuse("--config " + config + " --backend cpu --out " + out, 2);
    EXPECT_EQ(r.code, 2) << r.err;
    const std::string want = config + ": the mlp workload (2000018000016 parameters) at batch 128 needs ";
    const size_t at = r.err.find(want);
    ASSERT_NE(at, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(want, at + 1), std::string::npos) << "printed more than once:\n" << r.err;
    EXPECT_NE(r.err.find("GiB (host memory available"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("use a smaller model or batch"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_FALSE(fs::exists(out));
}

// ---- case 8 through the binary (the unit tests hold the details)

// A stress run holds every workload at once: their footprints add up.
TEST(Records, StressWorkloadsThatFitAloneButNotTogetherAreRefused) {
    const long long available_kib = [] {
        std::ifstream in("/proc/meminfo");
        std::string key, unit;
        long long kib = 0;
        while (in >> key >> kib >> unit)
            if (key == "MemAvailable:") return kib;
        return 0LL;
    }();
    ASSERT_GT(available_kib, 0);
    // An MLP of one hidden layer whose parameters, gradients and two AdamW states (16 bytes a
    // parameter) take about 60% of available memory: two of them at once do not fit.
    const double target_params = 0.6 * available_kib * 1024.0 / 16;
    const long long width = static_cast<long long>(std::sqrt(target_params));
    const std::string config = (scratch() / "half.yaml").string(), out = (scratch() / "half.jsonl").string();
    // Two files of one workload (a list naming one file twice is refused as a repeat).
    const std::string twin = (scratch() / "half-twin.yaml").string();
    for (const std::string& path : {config, twin})
        std::ofstream(path) << "mlp:\n  input_dim: " << width << "\n  hidden: [" << width << "]\n  num_classes: 2\n"
                            << "batch_size: 1\noptimizer: {kind: adamw}\n";
    fs::remove(out);
    const Refusal r = refuse("stress --config " + config + "," + twin + " --backend cpu --duration 2s --interval 1s --out " + out);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("every workload held at once"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out));
}

TEST(Records, ReportRefusesAFileWithoutAValidRecordAndNamesBadLines) {
    const std::string empty = (scratch() / "empty.jsonl").string(), mixed = (scratch() / "mixed.jsonl").string();
    std::ofstream(empty) << "";
    std::ofstream(mixed) << R"({"subcommand":"train","world_size":1,"samples_per_s":5.0})" << "\n"
                         << R"({"subcommand":"train","world_size":"2","samples_per_s":5.0})" << "\n";
    Refusal r = refuse("report " + empty);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err, "scalebench: error: " + empty + ": no valid record in the file (0 line(s) skipped)\n");
    r = refuse("report " + mixed);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find(mixed + ":2: skipped train record: field 'world_size'"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
}

}  // namespace
