// The collective timeout without a fault: a rank that is late but alive (it answers the
// side channel's pings) is not named and the collective completes; waits that complete
// in time leave no trace. How the NCCL watchdog names a peer without MPI: a process's state
// read from this host, and a rank stopped on purpose named while the running ones are not.
// The abort paths end the job, so tests/e2e/test_faults.cpp checks them through the real
// binary.
#include <gtest/gtest.h>
#include <mpi.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "collectives/mpi_communicator.h"
#include "collectives/deadline.h"

namespace {

using Clock = std::chrono::steady_clock;

struct FaultHandling {
    explicit FaultHandling(double timeout_s) : saved(sb::collective_timeout_s()) {
        sb::set_collective_timeout_s(timeout_s);
        sb::init_fault_handling(MPI_COMM_WORLD);
    }
    ~FaultHandling() {
        sb::shutdown_fault_handling();
        sb::set_collective_timeout_s(saved);
    }
    double saved;
};

TEST(Faults, LateButAliveRankIsWaitedForAndTheCollectiveCompletes) {
    FaultHandling handling(0.3);
    sb::MpiCommunicator comm(MPI_COMM_WORLD);
    float value = static_cast<float>(comm.rank() + 1);
    if (comm.rank() == comm.size() - 1) {
        // Late by several timeouts, but answering pings as a rank inside MPI does.
        const auto until = Clock::now() + std::chrono::milliseconds(1500);
        while (Clock::now() < until) {
            sb::serve_side_channel();
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    const auto start = Clock::now();
    auto request = comm.all_reduce(&value, &value, 1, sb::DType::f32, sb::ReduceOp::sum);
    request->wait();
    const int n = comm.size();
    EXPECT_EQ(value, static_cast<float>(n * (n + 1) / 2));
    if (comm.rank() == 0 && n > 1) EXPECT_GT(std::chrono::duration<double>(Clock::now() - start).count(), 1.0);
}

TEST(Faults, BlockingCollectivesGoThroughTheDeadlineAndStillWork) {
    FaultHandling handling(30);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int sum = 0;
    ASSERT_EQ(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    EXPECT_EQ(sum, size * (size - 1) / 2);
    int root_value = rank == 0 ? 42 : 0;
    ASSERT_EQ(MPI_Bcast(&root_value, 1, MPI_INT, 0, MPI_COMM_WORLD), MPI_SUCCESS);
    EXPECT_EQ(root_value, 42);
    std::vector<int> gathered(static_cast<size_t>(size));
    ASSERT_EQ(MPI_Allgather(&rank, 1, MPI_INT, gathered.data(), 1, MPI_INT, MPI_COMM_WORLD), MPI_SUCCESS);
    for (int r = 0; r < size; ++r) EXPECT_EQ(gathered[r], r);
    MPI_Comm dup = MPI_COMM_NULL;
    ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &dup), MPI_SUCCESS);
    ASSERT_EQ(MPI_Barrier(dup), MPI_SUCCESS);
    MPI_Comm_free(&dup);
}

// Polls `pid` until it is in `state`, for up to 5 s (a signal takes effect a moment later).
bool reaches(long pid, sb::ProcessState state) {
    const auto until = Clock::now() + std::chrono::seconds(5);
    while (sb::process_state(pid) != state && Clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return sb::process_state(pid) == state;
}

TEST(Faults, AProcessIsReadRunningStoppedOrGone) {
    EXPECT_EQ(sb::process_state(::getpid()), sb::ProcessState::running);
    const pid_t child = ::fork();
    if (child == 0) {
        for (;;) ::pause();
    }
    ASSERT_GT(child, 0);
    EXPECT_TRUE(reaches(child, sb::ProcessState::running));
    ::kill(child, SIGSTOP);
    EXPECT_TRUE(reaches(child, sb::ProcessState::stopped));
    ::kill(child, SIGKILL);
    EXPECT_TRUE(reaches(child, sb::ProcessState::gone)) << "a zombie is gone";
    ::waitpid(child, nullptr, 0);
    EXPECT_EQ(sb::process_state(child), sb::ProcessState::gone) << "an absent process is gone";
}

// What the watchdog says after a collective's timeout: nobody named while every rank runs;
// the last rank named as stopped, with its host, while it is stopped (rank 0 resumes it).
TEST(Faults, AStoppedPeerIsNamedWithItsHostAndRunningOnesAreNot) {
    FaultHandling handling(30);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) GTEST_SKIP() << "needs mpirun -np 2 or more";
    std::vector<int> everyone(static_cast<size_t>(size));
    std::iota(everyone.begin(), everyone.end(), 0);
    const sb::FailedPeers none = sb::find_failed_peers(everyone, 0);
    EXPECT_TRUE(none.ranks.empty()) << none.text;
    EXPECT_EQ(none.text, "every other rank of it is running on this host");  // CI runs every rank on one host
    MPI_Barrier(MPI_COMM_WORLD);  // every rank has looked before the last one stops

    const int last = size - 1;
    long last_pid = ::getpid();
    MPI_Bcast(&last_pid, 1, MPI_LONG, last, MPI_COMM_WORLD);
    if (rank == last) ::raise(SIGSTOP);  // until rank 0 sends SIGCONT
    if (rank == 0) {
        const bool stopped = reaches(last_pid, sb::ProcessState::stopped);
        const sb::FailedPeers found = sb::find_failed_peers(everyone, 1.0);
        ::kill(static_cast<pid_t>(last_pid), SIGCONT);
        EXPECT_TRUE(stopped);
        EXPECT_EQ(found.ranks, std::vector<int>{last}) << found.text;
        const std::string named = sb::rank_and_host_text(last);  // "R (HOST)"
        EXPECT_EQ(found.text, "rank(s) " + named.substr(0, named.size() - 1) + ", process stopped) stopped answering");
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
