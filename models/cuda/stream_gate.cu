#include "models/cuda/stream_gate.h"

#include <atomic>

#include "models/cuda/cuda_check.h"

namespace sb {

namespace {
// Never hold a stream forever: if the host does not release it within this time (it
// would have to be stalled), the kernel lets the stream go on by itself.
constexpr unsigned long long kTimeoutNs = 10ull * 1000 * 1000 * 1000;

__device__ unsigned long long global_time_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// One thread polls the mapped flag; __nanosleep keeps it from flooding PCIe with reads.
__global__ void spin_until_released(volatile int* flag) {
    const unsigned long long start = global_time_ns();
    while (*flag == 0 && global_time_ns() - start < kTimeoutNs) __nanosleep(2000);
}
}  // namespace

StreamGate::StreamGate() {
    void* host = nullptr;
    SB_CHECK_CUDA(cudaHostAlloc(&host, sizeof(int), cudaHostAllocMapped));
    flag_ = static_cast<volatile int*>(host);
    *flag_ = 1;
    SB_CHECK_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_flag_), host, 0));
}

StreamGate::~StreamGate() {
    if (flag_) cudaFreeHost(const_cast<int*>(flag_));
}

void StreamGate::hold(cudaStream_t stream) {
    *flag_ = 0;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    spin_until_released<<<1, 1, 0, stream>>>(device_flag_);
    SB_CHECK_LAUNCH();
}

void StreamGate::release() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    *flag_ = 1;
}

}  // namespace sb
