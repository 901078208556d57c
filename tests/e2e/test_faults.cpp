// Rank failures through the real binary: a 3-rank train run where rank 2 is SIGKILLed or
// SIGSTOPped after the first record; the job must end within a bounded time, non-zero,
// naming the rank and host, with the record written before the fault intact and an
// "incomplete" record after it (the run's start record before them). Also: a writer
// SIGKILLed mid-append leaves at most a torn last line, which read_records reports instead of failing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "src/core/results.h"
#include "tests/e2e/e2e_util.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using sb::e2e::mpirun;
using sb::e2e::rank_pid;
using sb::e2e::slurp;

fs::path scratch() { return sb::e2e::scratch("faults"); }

struct Outcome {
    int code = -1;
    double seconds = 0;
    std::string err;
    std::vector<nlohmann::json> records;
    std::vector<std::string> warnings;
};

// Starts `mpirun -np 3 scalebench train` (rank 2 alone stalls nothing until the n = 3
// measurement), waits for the first record (n = 1), sends `sig` to `rank` (2 unless told).
Outcome run_with_fault(int sig, const std::string& tag, int rank = 2) {
    const fs::path dir = scratch();
    const std::string out = (dir / (tag + ".jsonl")).string(), err = (dir / (tag + ".err")).string();
    fs::remove(out);
    pid_t child = ::fork();
    if (child == 0) {
        ::setenv("SCALEBENCH_COLLECTIVE_TIMEOUT_S", "4", 1);
        std::freopen(err.c_str(), "w", stderr);
        std::freopen("/dev/null", "w", stdout);
        const std::string cmd = "exec " + mpirun(3) + SCALEBENCH_BINARY +
                                " train --config " + SCALEBENCH_SOURCE_DIR +
                                "/configs/ci-small.yaml --backend cpu --scaling 1,3 --steps 20000 --out " + out;
        ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    Outcome o;
    const auto start = Clock::now();
    // The first record (n = 1): the file holds the run's start record before it.
    while (slurp(out).find("\"subcommand\":\"train\"") == std::string::npos &&
           Clock::now() - start < std::chrono::seconds(120))
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    pid_t victim = 0;
    for (int i = 0; i < 100 && victim == 0; ++i, std::this_thread::sleep_for(std::chrono::milliseconds(20)))
        victim = rank_pid(child, rank);
    EXPECT_NE(victim, 0) << "rank " << rank << " of mpirun " << child << " not found";
    if (victim) ::kill(victim, sig);
    const auto fault = Clock::now();
    int status = 0;
    while (::waitpid(child, &status, WNOHANG) == 0) {
        if (Clock::now() - fault > std::chrono::seconds(90)) {  // a hang: the test fails, the job is ended
            ::kill(child, SIGKILL);
            if (victim) ::kill(victim, SIGKILL);
            ::waitpid(child, &status, 0);
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    o.seconds = std::chrono::duration<double>(Clock::now() - fault).count();
    o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    o.err = slurp(err);
    auto read = sb::read_records(out);
    o.records = read.records;
    o.warnings = read.warnings;
    return o;
}

void expect_intact_then_incomplete(const Outcome& o) {
    EXPECT_TRUE(o.warnings.empty()) << o.warnings.front();
    ASSERT_GE(o.records.size(), 1u);
    EXPECT_EQ(o.records[0]["subcommand"], "train");
    EXPECT_EQ(o.records[0]["world_size"], 1);
    EXPECT_TRUE(o.records[0]["checks_passed"].get<bool>());
    ASSERT_EQ(o.records.size(), 2u) << "expected the n = 1 record and the incomplete record";
    EXPECT_EQ(o.records[1]["subcommand"], "incomplete");
    EXPECT_EQ(o.records[1]["run_subcommand"], "train");
    EXPECT_EQ(o.records[1]["complete"], false);
    EXPECT_FALSE(o.records[1]["error"].get<std::string>().empty());
}

TEST(Faults, StoppedRankEndsTheJobNamingItAndMarksTheResultsIncomplete) {
    Outcome o = run_with_fault(SIGSTOP, "stopped");
    EXPECT_LT(o.seconds, 60) << o.err;
    EXPECT_NE(o.code, 0) << o.err;
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    EXPECT_NE(o.err.find("did not complete within 4 s; rank(s) 2 (" + std::string(host) + ") stopped answering"),
              std::string::npos)
        << o.err;
    expect_intact_then_incomplete(o);
    EXPECT_NE(o.records.back()["error"].get<std::string>().find("rank(s) 2 ("), std::string::npos);
}

// Rank 0, the one that writes the records, stopped: the other ranks name it and end the job, and
// the launcher's SIGTERM then reaches rank 0. Its record says what happened (it stood still past
// the collective timeout), not "the launcher stopped the job" as if the SIGTERM were the cause.
TEST(Faults, StoppedRankZeroIsRecordedAsStoppedNotAsTheLaunchersSigterm) {
    Outcome o = run_with_fault(SIGSTOP, "stopped-rank0", 0);
    EXPECT_LT(o.seconds, 60) << o.err;
    EXPECT_NE(o.code, 0) << o.err;
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    EXPECT_NE(o.err.find("rank(s) 0 (" + std::string(host) + ") stopped answering"), std::string::npos) << o.err;
    expect_intact_then_incomplete(o);
    const std::string error = o.records.back()["error"].get<std::string>();
    EXPECT_NE(error.find("rank 0 on " + std::string(host) + " stopped running for longer than the collective timeout (4 s"),
              std::string::npos)
        << error;
    EXPECT_EQ(error.find("the launcher stopped the job"), std::string::npos) << error;
}

TEST(Faults, KilledRankEndsTheJobNamingItAndMarksTheResultsIncomplete) {
    Outcome o = run_with_fault(SIGKILL, "killed");
    EXPECT_LT(o.seconds, 60) << o.err;
    EXPECT_NE(o.code, 0) << o.err;
    // mpirun names the rank and host of a process that died ("process rank 2 ... on node H").
    EXPECT_NE(o.err.find("rank 2"), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("signal 9"), std::string::npos) << o.err;
    expect_intact_then_incomplete(o);
}

// A child appends large records in a loop and is SIGKILLed at a random moment; every
// line but possibly the last parses, and a torn last line is a warning, not a failure.
TEST(Faults, WriterKilledMidAppendLeavesWholeRecordsAndAtMostATornLastLine) {
    std::mt19937 rng(std::random_device{}());
    for (int trial = 0; trial < 5; ++trial) {
        const std::string path = (scratch() / ("torn" + std::to_string(trial) + ".jsonl")).string();
        fs::remove(path);
        pid_t child = ::fork();
        if (child == 0) {
            nlohmann::json record = {{"subcommand", "train"}, {"payload", std::string(1 << 20, 'x')}};
            for (int i = 0;; ++i) {
                record["i"] = i;
                sb::append_record(path, record);
            }
        }
        // Kill at a random moment once the first record is down (a loaded machine may
        // take a while to schedule the child at all).
        for (int waited = 0; waited < 1000 && !(fs::exists(path) && fs::file_size(path) > (1u << 20)); ++waited)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 400));
        ::kill(child, SIGKILL);
        int status = 0;
        ::waitpid(child, &status, 0);
        auto read = sb::read_records(path);
        ASSERT_GE(read.records.size(), 1u);
        for (size_t i = 0; i < read.records.size(); ++i) {
            EXPECT_EQ(read.records[i]["i"], static_cast<int>(i));
            EXPECT_EQ(read.records[i]["payload"].get<std::string>().size(), 1u << 20);
        }
        ASSERT_LE(read.warnings.size(), 1u);
        if (!read.warnings.empty()) EXPECT_NE(read.warnings[0].find("torn last"), std::string::npos) << read.warnings[0];
    }
}

// A torn line planted by hand is always reported (the kill above may land between writes).
TEST(Faults, ReaderReportsATornLastLine) {
    const std::string path = (scratch() / "planted.jsonl").string();
    fs::remove(path);
    sb::append_record(path, {{"subcommand", "train"}, {"i", 0}});
    std::ofstream(path, std::ios::app) << "{\"subcommand\": \"train\", \"i\": 1, \"pay";
    auto read = sb::read_records(path);
    ASSERT_EQ(read.records.size(), 1u);
    ASSERT_EQ(read.warnings.size(), 1u);
    EXPECT_NE(read.warnings[0].find(":2: skipped torn last line"), std::string::npos) << read.warnings[0];
}

}  // namespace
