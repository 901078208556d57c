// The NCCL half of the fault handling on one GPU: an all-reduce stuck behind a stalled
// stream (tests/faults/nccl_stall_probe.cpp) must end the job within the collective
// timeout, non-zero, naming the collective, the rank and the host, with the incomplete
// record written and no crash on the way out. A peer that stops or dies is the shared-GPU
// fault runs' (tests/faults/peer_fault.py). Skips without CUDA or a GPU.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "src/core/results.h"
#include "tests/e2e/e2e_util.h"

namespace {

using Clock = std::chrono::steady_clock;
using sb::e2e::mpirun;

TEST(NcclFaults, StalledCollectiveEndsTheJobNamingItWithTheIncompleteRecord) {
#ifndef NCCL_STALL_PROBE
    GTEST_SKIP() << "built without CUDA";
#else
    const auto dir = sb::e2e::scratch("nccl-faults");
    const std::string out = (dir / "stall.jsonl").string(), err = (dir / "stall.err").string();
    std::filesystem::remove(out);
    const auto start = Clock::now();
    pid_t child = ::fork();
    if (child == 0) {
        ::setpgid(0, 0);  // mpirun and the probe in a group of their own, killed together on a hang
        ::setenv("SCALEBENCH_COLLECTIVE_TIMEOUT_S", "3", 1);
        std::freopen(err.c_str(), "w", stderr);
        const std::string cmd = "exec " + mpirun(1) + NCCL_STALL_PROBE + " " + out;
        ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    int status = 0;
    while (::waitpid(child, &status, WNOHANG) == 0) {
        if (Clock::now() - start > std::chrono::seconds(90)) {  // a hang: fail, and end it, probe included
            ::kill(-child, SIGKILL);
            ::waitpid(child, &status, 0);
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    const std::string text = sb::e2e::slurp(err);
    if (code == 77) GTEST_SKIP() << "no GPU visible";
    EXPECT_NE(code, 0) << text;
    EXPECT_LT(seconds, 60.0) << "the job should end soon after the 3 s timeout";
    EXPECT_NE(text.find("NCCL collective all_reduce did not complete within 3 s"), std::string::npos) << text;
    EXPECT_NE(text.find("rank 0 on "), std::string::npos) << text;
    // One rank: no peer to name, and the abort leaves no thread inside the freed communicator.
    EXPECT_NE(text.find("it has no other rank: the stall is this rank's own"), std::string::npos) << text;
    EXPECT_EQ(text.find("Process received signal"), std::string::npos) << text;
    const auto read = sb::read_records(out);
    EXPECT_TRUE(read.warnings.empty());
    ASSERT_EQ(read.records.size(), 1u) << text;
    EXPECT_EQ(read.records[0]["subcommand"], "incomplete");
    EXPECT_EQ(read.records[0]["complete"], false);
    EXPECT_NE(read.records[0]["error"].get<std::string>().find("all_reduce"), std::string::npos);
#endif
}

}  // namespace
