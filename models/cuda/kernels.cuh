// Launchers of the CUDA kernels behind CudaOps (models/cuda/kernels.cu). Each takes raw
// device pointers and the dtype they hold, enqueues on ctx.stream and checks the launch.
// Element counts are 64-bit; all math is fp32 whatever the storage dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include <cuda_runtime_api.h>

#include "models/device_limits.h"
#include "models/ops.h"

namespace sb::kernels {

struct Context {
    cudaStream_t stream = nullptr;
    int sm_count = 1;  // sizes grid-stride grids
    uint64_t* dropout_generation = nullptr;  // device counter (Ops::advance_dropout_generation)
    // The limits launches are planned against (the device's, or an emulated architecture's),
    // and the shared-memory carveout (percent of the device's) that emulates the latter's
    // per-SM capacity; -1: the device's default.
    DeviceLimits limits;
    int carveout_percent = -1;
    // Each limit-dependent launch's variant, by kernel and shape class: what the record names.
    std::map<std::string, std::string>* variants = nullptr;
};

// cudaSuccess when this build has code the current device can run; otherwise the error a
// launch would fail with (cudaErrorNoKernelImageForDevice).
cudaError_t kernel_image_status();

// ++*counter on the stream: a graph node when captured, so each replay advances it.
void increment(const Context& ctx, uint64_t* counter);

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

// Row chunks for a two-stage column sum whose first-stage blocks own cols_per_block columns
// each: enough blocks for blocks_per_sm on every SM, at least 64 rows a chunk, none empty.
// Depends only on its arguments and sm_count, so sums split by it are bitwise reproducible on
// a given GPU.
int64_t column_sum_chunks(const Context& ctx, int64_t rows, int64_t cols, int64_t cols_per_block,
                          int64_t blocks_per_sm);
// Column sums of a rows x cols matrix. bias_grad_chunks() says how many row chunks the
// first stage splits the rows into; when it is > 1, `partials` must hold chunks * cols
// floats. With labels (one int32 per row; nullptr: none), the rows whose label is negative
// are not read: the sums are bitwise those with such rows zeroed.
int64_t bias_grad_chunks(const Context& ctx, int64_t rows, int64_t cols);
void bias_grad(const Context& ctx, DType dtype, const void* grad, const int32_t* labels, int64_t rows,
               int64_t cols, float* out, float* partials);
// out[c] = sum over chunks of partials[chunk * cols + c], in chunk order (the second stage).
void sum_partials(const Context& ctx, const float* partials, int64_t chunks, int64_t cols, float* out);

// Per-row loss into row_loss (rows + 1 floats: the last holds the labelled-row count),
// grad = (softmax - onehot) * grad_scale / labelled rows, then *loss = sum of row_loss /
// labelled rows (fixed-order reduction; 0 when no row is labelled). A negative label is an
// ignored row (zero loss and gradient); a label >= cols makes that row's loss and
// gradient NaN.
void softmax_cross_entropy(const Context& ctx, DType logits_dtype, const void* logits,
                           const int32_t* labels, int64_t rows, int64_t cols, DType grad_dtype,
                           void* grad, float grad_scale, float* row_loss, float* loss);

// out = a + b elementwise (out may alias a or b).
void add(const Context& ctx, DType dtype, const void* a, const void* b, void* out, size_t n);

// ---- transformer kernels (transformer_kernels.cu)

// Row-wise LayerNorm, one warp per row; mean and rstd (fp32, per row) saved.
void layernorm_forward(const Context& ctx, DType dtype, const void* x, const float* gamma, const float* beta,
                       float eps, int64_t rows, int64_t cols, void* out, float* mean, float* rstd);
// Floats the `partials` buffer of layernorm_backward and residual_layernorm_backward must hold
// for rows x cols (0: none is needed); it depends only on (rows, cols, sm_count).
int64_t layernorm_partials_floats(const Context& ctx, int64_t rows, int64_t cols);
// grad_x (may alias grad_out) and the fp32 grad_gamma/grad_beta (fixed-order row sums, no
// atomics); partials as layernorm_partials_floats says.
void layernorm_backward(const Context& ctx, DType dtype, const void* x, const void* grad_out, const float* gamma,
                        const float* mean, const float* rstd, int64_t rows, int64_t cols, void* grad_x,
                        float* grad_gamma, float* grad_beta, float* partials);

// Ops::residual_layernorm_forward: sum = residual + dropout(branch) (sum may alias
// residual), out = LayerNorm(sum), a warp per row.
void residual_layernorm_forward(const Context& ctx, DType dtype, const void* branch, const void* residual, float p,
                                uint64_t seed, const float* gamma, const float* beta, float eps, int64_t rows,
                                int64_t cols, void* sum, void* out, float* mean, float* rstd);
// Ops::residual_layernorm_backward, one kernel with the LayerNorm backward; the residual
// gradients may be nullptr; partials as layernorm_backward's.
void residual_layernorm_backward(const Context& ctx, DType dtype, const void* sum, const void* grad_out,
                                 const void* grad_out_residual, const void* grad_sum_residual, const float* gamma,
                                 const float* mean, const float* rstd, int64_t rows, int64_t cols, float p,
                                 uint64_t seed, void* grad_sum, void* grad_branch, float* grad_gamma,
                                 float* grad_beta, float* partials);

// out[i, :] (+)= table[ids[i], :]; an id outside [0, table_rows) writes NaN to its row.
void embedding_forward(const Context& ctx, DType dtype, const int32_t* ids, const void* table, int64_t table_rows,
                       int64_t rows, int64_t cols, void* out, bool accumulate);
// grad_table[ids[i], :] += grad_out[i, :] with fp32 atomics (ids out of range skipped).
void embedding_backward(const Context& ctx, DType dtype, const int32_t* ids, const void* grad_out, int64_t rows,
                        int64_t cols, float* grad_table, int64_t table_rows);

// Inverted dropout over n elements with the mask of models/dropout.h (out may alias in).
void dropout(const Context& ctx, DType dtype, const void* in, void* out, size_t n, float p, uint64_t seed);

// Attention layout changes between the packed rows of a projection, (batch*seq) x
// (parts*heads*head_dim) with each row [part0 | part1 | ...] and each part [head0 | ...],
// and `parts` separate batch x heads x seq x head_dim arrays (parts is 1 or 3).
// to_heads: rows -> heads[]; otherwise heads[] -> rows.
void attention_permute(const Context& ctx, DType dtype, void* rows, void* const* heads, int parts, int batch,
                       int seq, int nheads, int head_dim, bool to_heads);
// Per row of the (batch*heads*seq) x seq scores (already scaled): causal mask, softmax in
// fp32, P written over the scores; with p_drop > 0 the dropped, rescaled P also to pdrop.
void attention_softmax_forward(const Context& ctx, DType dtype, void* scores, void* pdrop, int64_t rows, int seq,
                               bool causal, float p_drop, uint64_t seed);
// ds = P * (dP - rowsum(P * dP)) in dtype, with dP = dropout_backward(dprobs) and dprobs
// the fp32 gradient of the dropped P (ds may alias dprobs when dtype is f32).
void attention_softmax_backward(const Context& ctx, DType dtype, const void* probs, const float* dprobs, void* ds,
                                int64_t rows, int seq, float p_drop, uint64_t seed);

// ---- fused attention (attention_kernels.cu): Ops::attention_* for the shapes of
// Ops::attention_fused, reading the packed QKV rows directly. lse: batch*heads*seq floats the forward
// writes and the backward reads; dsum: as many floats of scratch for the backward.
void fused_attention_forward(const Context& ctx, DType dtype, const Ops::AttentionShape& shape, const void* qkv,
                             void* out, float* lse, uint64_t seed);
void fused_attention_backward(const Context& ctx, DType dtype, const Ops::AttentionShape& shape, const void* qkv,
                              const void* out, const float* lse, const void* grad_out, void* grad_qkv, float* dsum,
                              uint64_t seed);

// ---- convolutional kernels (conv_kernels.cu). Images are NHWC row-major matrices,
// (batch*height*width) x channels; shapes as Ops::ConvShape (fewer than 2^31 pixels).
// Gathers and fixed-order reductions only: bitwise reproducible, no float atomics.

// Ops::im2col: one patch row per output pixel, zeros where the window is in the padding.
void im2col(const Context& ctx, DType dtype, const Ops::ConvShape& shape, const void* x, void* cols);
// Ops::col2im: each input element sums, in fp32, the patch entries im2col copied it to.
void col2im(const Context& ctx, DType dtype, const Ops::ConvShape& shape, const void* grad_cols, void* grad_x);
// Ops::maxpool_forward: out and, per output element, the window position of its first maximum
// as one byte (argmax: out_rows x channels bytes, vectorised when 16-byte aligned).
void maxpool_forward(const Context& ctx, DType dtype, const Ops::ConvShape& shape, const void* x, void* out,
                     uint8_t* argmax);
// Each input element sums grad_out over the windows whose recorded argmax position it is.
void maxpool_backward(const Context& ctx, DType dtype, const Ops::ConvShape& shape, const uint8_t* argmax,
                      const void* grad_out, void* grad_x);
// out[n, c] = mean of x over rows n*pixels .. n*pixels + pixels - 1; the backward spreads
// grad_out[n, c] / pixels over those rows.
void avgpool_forward(const Context& ctx, DType dtype, const void* x, int64_t batch, int pixels, int64_t cols,
                     void* out);
void avgpool_backward(const Context& ctx, DType dtype, const void* grad_out, int64_t batch, int pixels,
                      int64_t cols, void* grad_x);
// BatchNorm over the rows (Ops::batchnorm_*), in fixed row chunks; `scratch` must hold
// batchnorm_scratch_floats(rows, cols) floats (per-chunk partials), which depends only on
// (rows, cols, sm_count). grad_x may alias grad_out.
size_t batchnorm_scratch_floats(const Context& ctx, int64_t rows, int64_t cols);
// With `relu`: out = relu(bn(x) + residual) (residual may be null), Ops::batchnorm_relu_forward.
void batchnorm_forward(const Context& ctx, DType dtype, const void* x, const float* gamma, const float* beta,
                       float eps, int64_t rows, int64_t cols, void* out, float* mean, float* rstd, float* scratch,
                       bool relu = false, const void* residual = nullptr);
// With relu_beta: Ops::batchnorm_relu_backward, grad_out taken as 0 where bn(x) <= 0 (recomputed).
void batchnorm_backward(const Context& ctx, DType dtype, const void* x, const void* grad_out, const float* gamma,
                        const float* mean, const float* rstd, int64_t rows, int64_t cols, void* grad_x,
                        float* grad_gamma, float* grad_beta, float* scratch, const float* relu_beta = nullptr);

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

// *sum += models/checksum.h's checksum of `bytes` bytes at data (any alignment).
void checksum(const Context& ctx, const void* data, size_t bytes, uint64_t* sum);

}  // namespace sb::kernels
