// Holding a CUDA stream while work is queued (nvbench's "blocking kernel"): a kernel
// spins on a host-mapped flag, so everything issued behind it runs back to back once
// the host releases it. Timing that work measures device time without host launch gaps.
#pragma once

#include <cuda_runtime_api.h>

namespace sb {

class StreamGate {
public:
    StreamGate();
    ~StreamGate();
    StreamGate(const StreamGate&) = delete;
    StreamGate& operator=(const StreamGate&) = delete;

    void hold(cudaStream_t stream);  // the stream waits from here until release()
    void release();

private:
    volatile int* flag_ = nullptr;  // host-mapped: 0 = hold, 1 = released
    int* device_flag_ = nullptr;
};

}  // namespace sb
