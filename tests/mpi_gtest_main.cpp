// GoogleTest main for every scalebench test binary: initialises MPI (a singleton when
// not under mpirun), prints results from rank 0 only, and exits non-zero on every rank
// when any rank failed, so a failure on rank 3 fails the CTest entry too.
#include <gtest/gtest.h>
#include <mpi.h>

#include "src/system/environment.h"

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    sb::init_process_info(MPI_COMM_WORLD);
    ::testing::InitGoogleTest(&argc, argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0) {
        auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
        delete listeners.Release(listeners.default_result_printer());
    }
    int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && any_failed && !failed) std::fprintf(stderr, "a test failed on another rank\n");
    MPI_Finalize();
    return any_failed;
}
