// The CUDA implementation of Ops (DESIGN: models/cuda/): one non-blocking compute stream,
// GEMMs through cuBLASLt with a cache of descriptors and heuristic-chosen algorithms (so a
// training step makes no heuristic query after its first), and the kernels of kernels.cu.
// cuBLAS types stay in cuda_ops.cu, so files that include this compile with a plain C++
// compiler (cuda_runtime_api.h is a C header).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <cuda_runtime_api.h>

#include "models/device_limits.h"
#include "models/ops.h"

namespace sb {

// GPUs this process can see; 0 (never an exception) when there is no driver or GPU.
int visible_gpu_count();

// The limits of `device` as the runtime reports them (source "device").
DeviceLimits read_device_limits(int device);

class CudaOps final : public Ops {
public:
    // Makes `device` current for the calling thread and keeps it: one rank drives one GPU.
    // Reads the device's limits, or under SCALEBENCH_DEVICE_LIMITS an architecture's
    // (effective_limits); a GPU this build has no code for, or an unknown override, is a
    // UserError.
    CudaOps(Precision precision, int device);
    ~CudaOps() override;
    CudaOps(const CudaOps&) = delete;
    CudaOps& operator=(const CudaOps&) = delete;

    cudaStream_t cuda_stream() const;
    int device() const;
    // GEMM plans (descriptors + chosen algorithm) cached so far; one per distinct
    // shape/transpose/dtype/bias/alignment combination.
    size_t matmul_plan_count() const;
    // Of those, the plans with an epilogue (bias, GELU, bias gradient) that cuBLASLt could not
    // fuse (the GEMM, then kernels).
    size_t matmul_unfused_epilogue_plan_count() const;

    // The limits every limit-dependent launch is planned against (the device's, or the
    // emulated architecture's), and the device's own.
    const DeviceLimits* device_limits() const override;
    const DeviceLimits& hardware_limits() const;
    // Plans later launches against `limits` (tests: a claimed architecture's table row), with the
    // emulated SM's shared memory as the carveout; clears kernel_variants().
    void set_device_limits(const DeviceLimits& limits);
    // Which variant each limit-dependent kernel ran, by kernel and shape class, since the
    // limits were set: {"attention_backward bf16 head_dim 64 seq <= 128": "one_block", ...}.
    std::map<std::string, std::string> kernel_variants() const;

    std::string name() const override { return "cuda"; }
    Precision precision() const override;

    void* alloc(size_t bytes) override;
    void release(void* ptr) override;
    void upload(void* dst, const void* host_src, size_t bytes) override;
    void download(void* host_dst, const void* src, size_t bytes) override;
    void fill(const Tensor& t, float value) override;
    void cast(const Tensor& src, const Tensor& dst) override;
    uint64_t checksum(const void* data, size_t bytes) override;

    void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
              const Tensor& c, const float* bias = nullptr) override;

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
    void residual_layernorm_forward(const Tensor& branch, const Tensor& residual, float p, uint64_t seed,
                                    const float* gamma, const float* beta, float eps, const Tensor& sum,
                                    const Tensor& out, float* mean, float* rstd) override;
    void residual_layernorm_backward(const Tensor& sum, const Tensor& grad_out, const Tensor& grad_out_residual,
                                     const Tensor& grad_sum_residual, const float* gamma, const float* mean,
                                     const float* rstd, float p, uint64_t seed, const Tensor& grad_sum,
                                     const Tensor& grad_branch, float* grad_gamma, float* grad_beta) override;
    void advance_dropout_generation() override;
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
    bool has_cudnn() const override;
    void conv_forward(const ConvShape& shape, const Tensor& x, const Tensor& weight, const Tensor& out) override;
    void conv_backward_data(const ConvShape& shape, const Tensor& grad_out, const Tensor& weight, float beta,
                            const Tensor& grad_x) override;
    void conv_backward_filter(const ConvShape& shape, const Tensor& x, const Tensor& grad_out,
                              const Tensor& grad_weight) override;
    // cuDNN plans (descriptors + algorithm) cached so far, and one line on each; 0 and "" without cuDNN.
    size_t conv_plan_count() const;
    std::string describe_conv_plans() const;
    void batchnorm_relu_forward(const Tensor& x, const float* gamma, const float* beta, float eps,
                                const Tensor& residual, const Tensor& out, float* mean, float* rstd) override;
    void batchnorm_relu_backward(const Tensor& x, const Tensor& grad_out, const float* gamma, const float* beta,
                                 const float* mean, const float* rstd, const Tensor& grad_x, float* grad_gamma,
                                 float* grad_beta) override;
    void avgpool_forward(int pixels, const Tensor& x, const Tensor& out) override;
    void avgpool_backward(int pixels, const Tensor& grad_out, const Tensor& grad_x) override;

    void sgd_step(float* params, const float* grads, float* momentum, size_t n,
                  const OptimizerConfig& cfg, const Tensor& weights_copy) override;
    void adamw_step(float* params, const float* grads, float* m, float* v, size_t n,
                    const OptimizerConfig& cfg, int64_t step, const Tensor& weights_copy) override;
    bool unscale_and_check(float* grads, size_t n, float inv_scale) override;

    void* stream() override;
    void synchronize() override;
    void record_marker(int slot) override;
    double elapsed_ms(int from_slot, int to_slot) override;
    bool hold_stream() override;
    void release_stream() override;
    bool has_graphs() const override { return true; }
    void begin_capture() override;
    int end_capture() override;
    void abandon_capture() override;
    void replay(int graph) override;
    void release_graph(int graph) override;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace sb
