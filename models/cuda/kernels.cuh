// Launchers of the CUDA kernels behind CudaOps (models/cuda/kernels.cu). Each takes raw
// device pointers and the dtype they hold, enqueues on ctx.stream and checks the launch.
// Element counts are 64-bit; all math is fp32 whatever the storage dtype.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "models/ops.h"

namespace sb::kernels {

struct Context {
    cudaStream_t stream = nullptr;
    int sm_count = 1;  // sizes grid-stride grids
};

void fill(const Context& ctx, void* data, DType dtype, size_t n, float value);
void cast(const Context& ctx, const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n);

void activation_forward(const Context& ctx, Activation act, DType dtype, const void* pre, void* out,
                        size_t n);
// grad_pre may alias grad_out.
void activation_backward(const Context& ctx, Activation act, DType dtype, const void* pre,
                         const void* grad_out, void* grad_pre, size_t n);

// c = acc + beta * c + bias[j], rounded once to c's dtype (c is not read when beta == 0):
// the GEMM fallback when cuBLASLt has no fused bias for a case. acc is fp32 and may alias c.
void gemm_bias_epilogue(const Context& ctx, DType dtype, void* c, const float* acc, int64_t rows, int64_t cols,
                        float beta, const float* bias);

// Column sums of a rows x cols matrix. bias_grad_chunks() says how many row chunks the
// first stage splits the rows into; when it is > 1, `partials` must hold chunks * cols
// floats. The split depends only on (rows, cols, sm_count), so results are bitwise
// reproducible on a given GPU.
int64_t bias_grad_chunks(const Context& ctx, int64_t rows, int64_t cols);
void bias_grad(const Context& ctx, DType dtype, const void* grad, int64_t rows, int64_t cols,
               float* out, float* partials);

// Per-row loss into row_loss (rows floats), grad = (softmax - onehot) * grad_scale / rows,
// then *loss = mean of row_loss (fixed-order reduction). A label outside [0, cols) makes
// that row's loss and gradient NaN.
void softmax_cross_entropy(const Context& ctx, DType logits_dtype, const void* logits,
                           const int32_t* labels, int64_t rows, int64_t cols, DType grad_dtype,
                           void* grad, float grad_scale, float* row_loss, float* loss);

// buf = mu * buf + (g + wd * p); p -= lr * buf (plain SGD when momentum is null).
// copy (may be null) receives the updated p in copy_dtype.
void sgd_step(const Context& ctx, float* params, const float* grads, float* momentum, size_t n,
              float lr, float mu, float weight_decay, void* copy, DType copy_dtype);

// torch.optim.AdamW: m, v moments; p = p * (1 - lr*wd) - step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps)
// with step_size = lr / (1 - beta1^t) and inv_sqrt_bc2 = 1 / sqrt(1 - beta2^t) from the caller.
void adamw_step(const Context& ctx, float* params, const float* grads, float* m, float* v, size_t n,
                float lr, float beta1, float beta2, float eps, float weight_decay, float step_size,
                float inv_sqrt_bc2, void* copy, DType copy_dtype);

// grads *= inv_scale; *flag = 1 if any result is inf or NaN (flag is not cleared here).
void unscale_and_check(const Context& ctx, float* grads, size_t n, float inv_scale, int* flag);

}  // namespace sb::kernels
