// The collective timeout without a fault: a rank that is late but alive (it answers the
// side channel's pings) is not named and the collective completes; waits that complete
// in time leave no trace. The abort paths end the job, so tests/e2e/test_faults.cpp
// checks them through the real binary.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <thread>

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

}  // namespace
