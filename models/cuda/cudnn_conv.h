// cuDNN's convolutions for CudaOps (conv_engine cudnn; built only where cmake found cuDNN):
// forward, data gradient and filter gradient on NHWC tensors and KRSC ([out, ky, kx, in])
// filters, fp32 accumulation (FMA-only math for fp32, TF32 allowed for tf32, tensor cores for
// bf16/fp16). Each (direction, shape, dtype) gets its descriptors and algorithm once: the
// fastest deterministic algorithm cudnnFind* measures that fits the fixed workspace (the
// heuristic cudnnGet*_v7 instead when the stream is being captured, where nothing may run).
// cuDNN types stay in cudnn_conv.cpp.
#pragma once

#include <cstddef>
#include <memory>

#include <cuda_runtime_api.h>

#include "models/ops.h"

namespace sb {

class CudnnConvolutions {
public:
    // Work goes to `stream`; allocates the workspace (kWorkspaceBytes) at once.
    CudnnConvolutions(cudaStream_t stream, Precision precision);
    ~CudnnConvolutions();
    CudnnConvolutions(const CudnnConvolutions&) = delete;
    CudnnConvolutions& operator=(const CudnnConvolutions&) = delete;

    static constexpr size_t kWorkspaceBytes = size_t{256} << 20;

    // y = conv(x, w); x, w, y in `dtype`.
    void forward(const Ops::ConvShape& s, int out_channels, DType dtype, const void* x, const void* w, void* y);
    // dx = conv's input gradient + beta * dx.
    void backward_data(const Ops::ConvShape& s, int out_channels, DType dtype, const void* dy, const void* w,
                       float beta, void* dx);
    // dw = conv's filter gradient, in `dtype` (overwritten).
    void backward_filter(const Ops::ConvShape& s, int out_channels, DType dtype, const void* x, const void* dy,
                         void* dw);
    size_t plan_count() const;
    // "forward 8x56x56x64 k3/1 p1 -> 64 bf16: algo 1 (find, 0.123 ms, 0 MiB)", one line per plan.
    std::string describe_plans() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace sb
