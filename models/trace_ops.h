// The tracing backend of the projection (DESIGN: Projection): an Ops that computes nothing
// and records every call the real model code issues, in issue order, with its shapes,
// dtype, FLOPs and bytes moved. Memory is fake: alloc returns distinct non-null addresses
// nobody dereferences, upload/download do nothing. A model bound to TraceOps and run once
// gives the op list the runner would execute for the same config.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "models/device_limits.h"
#include "models/model.h"
#include "models/ops.h"

namespace sb {

struct TracedOp {
    std::string kind;       // the Ops method, e.g. "gemm", "layernorm_forward"
    // What else picks the kernel: a GEMM's epilogue ("bias", "accumulate" for beta != 0),
    // the activation ("gelu_erf"), attention's mask and dropout ("causal+dropout", and
    // "+tiled" for a fused backward of a short sequence that the target GPU's limits keep
    // from the one-block kernel), an embedding added in place ("accumulate"); empty otherwise.
    std::string variant;
    DType dtype = DType::f32;  // of the main operand (gemm: the inputs)
    bool tensor_core = false;  // a GEMM-like op whose FLOPs run at the GEMM peak
    // GEMM-like ops: C (m x n) = A (m x k) @ B (k x n), `batch` times, with A and/or B
    // transposed as the call asked. Other ops: m x n is the main operand's shape.
    int64_t m = 0, n = 0, k = 0, batch = 1;
    bool trans_a = false, trans_b = false;
    double flops = 0;  // 2 per multiply-add; elementwise work is counted in bytes only
    double bytes = 0;  // read + written, in backend memory
};

// Two calls are the same op when everything above is equal: one key for both.
std::string op_key(const TracedOp& op);
// The same without FLOPs and bytes: the kernel and shape a profile timed, whatever byte model counted it.
std::string op_shape_key(const TracedOp& op);
// "gemm 4096x2304x768 NT", "layernorm_forward 4096x768", "attention_forward 128x128x64 x384 causal".
std::string op_label(const TracedOp& op);

class TraceOps : public Ops {
public:
    // `limits`: the target GPU's, which pick the variants of limit-dependent kernels; by
    // default sm_90's (the H200 the shipped op profiles were measured on).
    explicit TraceOps(Precision precision, const DeviceLimits& limits = default_trace_limits())
        : precision_(precision), limits_(limits) {}
    static const DeviceLimits& default_trace_limits();
    std::string name() const override { return "trace"; }
    Precision precision() const override { return precision_; }
    const DeviceLimits* device_limits() const override { return &limits_; }
    // What the CUDA backend of a build with cuDNN runs, in every build: conv_engine auto traces
    // cuDNN's convolutions (the trace records them without the library), so a projection does not
    // depend on the build it comes from (the CPU build's answer is the cuDNN build's).
    bool has_cudnn() const override;

    const std::vector<TracedOp>& trace() const { return ops_; }
    size_t position() const { return ops_.size(); }  // index the next op will get
    void clear() { ops_.clear(); }
    // Backend memory the model asked for so far (released memory not subtracted: buffers
    // live for the whole run), the footprint a GPU must hold.
    double allocated_bytes() const { return allocated_; }

    void* alloc(size_t bytes) override;
    void release(void*) override {}
    void upload(void*, const void*, size_t) override {}
    void download(void*, const void*, size_t) override {}
    void fill(const Tensor& t, float value) override;
    void cast(const Tensor& src, const Tensor& dst) override;
    uint64_t checksum(const void* data, size_t bytes) override;
    void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta, const Tensor& c,
              const float* bias = nullptr) override;
    // One GEMM each where gemm_fuses_*() says CUDA fuses the epilogue, else the ops composed.
    void linear_activation_forward(const Tensor& x, const Tensor& w, const float* bias, Activation act,
                                   const Tensor& pre, const Tensor& out) override;
    void linear_activation_backward(const Tensor& grad_out, const Tensor& w, Activation act, const Tensor& pre,
                                    const Tensor& grad_pre) override;
    void linear_weight_grad(const Tensor& grad_out, const Tensor& x, const Tensor& grad_w,
                            float* grad_bias) override;
    void activation_forward(Activation act, const Tensor& pre, const Tensor& out) override;
    void activation_backward(Activation act, const Tensor& pre, const Tensor& grad_out,
                             const Tensor& grad_pre) override;
    void bias_grad(const Tensor& grad, float* bias_grad) override;
    void labelled_bias_grad(const Tensor& grad, const int32_t* labels, int64_t labelled_rows,
                            float* bias_grad) override;
    void softmax_cross_entropy(const Tensor& logits, const int32_t* labels, int64_t labelled_rows, float* loss,
                               const Tensor& grad_logits, float grad_scale) override;
    void add(const Tensor& a, const Tensor& b, const Tensor& out) override;
    void layernorm_forward(const Tensor& x, const float* gamma, const float* beta, float eps, const Tensor& out,
                           float* mean, float* rstd) override;
    void layernorm_backward(const Tensor& x, const Tensor& grad_out, const float* gamma, const float* mean,
                            const float* rstd, const Tensor& grad_x, float* grad_gamma, float* grad_beta) override;
    void embedding_forward(const int32_t* ids, const Tensor& table, const Tensor& out, bool accumulate) override;
    void embedding_backward(const int32_t* ids, const Tensor& grad_out, float* grad_table,
                            int64_t table_rows) override;
    void dropout(const Tensor& in, const Tensor& out, float p, uint64_t seed) override;
    // One op each, as CUDA fuses them (the CPU composes them).
    void residual_layernorm_forward(const Tensor& branch, const Tensor& residual, float p, uint64_t seed,
                                    const float* gamma, const float* beta, float eps, const Tensor& sum,
                                    const Tensor& out, float* mean, float* rstd) override;
    void residual_layernorm_backward(const Tensor& sum, const Tensor& grad_out, const Tensor& grad_out_residual,
                                     const Tensor& grad_sum_residual, const float* gamma, const float* mean,
                                     const float* rstd, float p, uint64_t seed, const Tensor& grad_sum,
                                     const Tensor& grad_branch, float* grad_gamma, float* grad_beta) override;
    void advance_dropout_generation() override {}  // a one-thread kernel: no cost worth modelling
    size_t attention_saved_bytes(const AttentionShape& shape) const override;
    void attention_forward(const AttentionShape& shape, const Tensor& qkv, const Tensor& out, void* saved,
                           uint64_t seed) override;
    void attention_backward(const AttentionShape& shape, const Tensor& qkv, const Tensor& out, const void* saved,
                            const Tensor& grad_out, const Tensor& grad_qkv, uint64_t seed) override;
    void im2col(const ConvShape& shape, const Tensor& x, const Tensor& cols) override;
    void col2im(const ConvShape& shape, const Tensor& grad_cols, const Tensor& grad_x) override;
    void batchnorm_forward(const Tensor& x, const float* gamma, const float* beta, float eps, const Tensor& out,
                           float* mean, float* rstd) override;
    void batchnorm_backward(const Tensor& x, const Tensor& grad_out, const float* gamma, const float* mean,
                            const float* rstd, const Tensor& grad_x, float* grad_gamma, float* grad_beta) override;
    void maxpool_forward(const ConvShape& shape, const Tensor& x, const Tensor& out, uint8_t* argmax) override;
    void maxpool_backward(const ConvShape& shape, const uint8_t* argmax, const Tensor& grad_out,
                          const Tensor& grad_x) override;
    void avgpool_forward(int pixels, const Tensor& x, const Tensor& out) override;
    void avgpool_backward(int pixels, const Tensor& grad_out, const Tensor& grad_x) override;
    // The convolution as one GEMM-like op, C (out_rows x out_channels) = patches (x patch()) @ W^T:
    // the FLOPs of im2col + GEMM, the bytes of the tensors alone (no patch matrix).
    void conv_forward(const ConvShape& shape, const Tensor& x, const Tensor& weight, const Tensor& out) override;
    void conv_backward_data(const ConvShape& shape, const Tensor& grad_out, const Tensor& weight, float beta,
                            const Tensor& grad_x) override;
    void conv_backward_filter(const ConvShape& shape, const Tensor& x, const Tensor& grad_out,
                              const Tensor& grad_weight) override;
    void batchnorm_relu_forward(const Tensor& x, const float* gamma, const float* beta, float eps,
                                const Tensor& residual, const Tensor& out, float* mean, float* rstd) override;
    void batchnorm_relu_backward(const Tensor& x, const Tensor& grad_out, const float* gamma, const float* beta,
                                 const float* mean, const float* rstd, const Tensor& grad_x, float* grad_gamma,
                                 float* grad_beta) override;

    void sgd_step(float* params, const float* grads, float* momentum, size_t n, const OptimizerConfig& cfg,
                  const Tensor& weights_copy) override;
    void adamw_step(float* params, const float* grads, float* m, float* v, size_t n, const OptimizerConfig& cfg,
                    int64_t step, const Tensor& weights_copy) override;
    bool unscale_and_check(float* grads, size_t n, float inv_scale) override;

    void* stream() override { return nullptr; }
    void synchronize() override {}
    void record_marker(int) override {}
    double elapsed_ms(int, int) override { return 0.0; }

private:
    TracedOp& record(const char* kind, DType dtype, double bytes);
    TracedOp& record(const char* kind, const Tensor& main, double bytes);  // shape and dtype of `main`
    // A GEMM op(A) op(B) into C; `bytes` beyond its operands (C read again, a bias, an epilogue's).
    TracedOp& record_gemm(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, const Tensor& c,
                          double extra_bytes, std::string variant);
    TracedOp& record_conv(const char* kind, const ConvShape& shape, int64_t out_channels, DType dtype, double bytes);
    TracedOp& record_attention(const char* kind, const AttentionShape& shape, DType dtype, double bytes,
                               double products);

    Precision precision_;
    DeviceLimits limits_;
    std::vector<TracedOp> ops_;
    uintptr_t next_address_ = 4096;
    double allocated_ = 0;
};

// Records, for each parameter, the trace position at which backward reported its
// gradient final: the op index the gradient is ready after.
class TraceGradientSink : public GradientSink {
public:
    TraceGradientSink(const TraceOps& ops, size_t num_params) : ops_(ops), ready_after_(num_params, -1) {}
    void gradient_ready(int param_index) override;
    // ready_after()[i]: number of ops issued when gradient i was reported; -1 if never.
    const std::vector<int64_t>& ready_after() const { return ready_after_; }
    const std::vector<int>& order() const { return order_; }  // parameter indices, as reported

private:
    const TraceOps& ops_;
    std::vector<int64_t> ready_after_;
    std::vector<int> order_;
};

}  // namespace sb
