// A one-GPU stand-in for a peer that stopped answering, for the NCCL half of the fault
// handling (tests/e2e/test_nccl_faults.cpp): the compute stream is held by a host
// function that never returns, so a bucket all-reduce issued behind it, as the trainer
// issues one, never completes. The watchdog must then abort the communicator and end the
// job within the collective timeout, naming the collective, the rank and the host, with
// the incomplete record written to argv[1]. Exits 77 where no GPU is visible.
#include <mpi.h>

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "collectives/nccl_communicator.h"
#include "models/cuda/cuda_ops.h"
#include "src/system/environment.h"
#include "collectives/deadline.h"
#include "src/system/run_records.h"

namespace {

void CUDART_CB hold_forever(void*) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    if (argc != 2) {
        std::fprintf(stderr, "usage: nccl_stall_probe OUT.jsonl\n");
        MPI_Finalize();
        return 2;
    }
    if (sb::visible_gpu_count() == 0) {
        MPI_Finalize();
        return 77;
    }
    sb::init_process_info(MPI_COMM_WORLD);
    sb::init_fault_handling(MPI_COMM_WORLD);
    sb::begin_run({argv[1]}, "probe", MPI_COMM_WORLD);
    sb::CudaOps ops(sb::Precision::fp32, 0);
    sb::NcclCommunicator comm(MPI_COMM_WORLD, ops.stream(), sb::CollectiveStream::own);
    const size_t count = size_t{1} << 20;
    sb::DeviceBuffer gradients(ops, count * sizeof(float));
    cudaLaunchHostFunc(static_cast<cudaStream_t>(ops.stream()), hold_forever, nullptr);
    auto request = comm.all_reduce(gradients.get(), gradients.get(), count, sb::DType::f32, sb::ReduceOp::avg);
    request->wait();
    std::fprintf(stderr, "probe: all-reduce issued behind a stalled stream; waiting\n");
    ops.synchronize();  // does not return: the watchdog ends the job
    std::fprintf(stderr, "probe: the stalled all-reduce completed, which it cannot\n");
    return 1;
}
