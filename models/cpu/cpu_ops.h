// The CPU backend of Ops (models/ops.h): fp32 only, single-threaded (several ranks
// share the cores), host memory as "backend memory". It is the reference the CUDA
// backend is checked against and the backend of CPU-only scaling runs over MPI.
#pragma once

#include <array>
#include <chrono>
#include <vector>

#include "models/ops.h"

namespace sb {

class CpuOps final : public Ops {
public:
    // Throws UserError for any precision other than fp32.
    explicit CpuOps(Precision p = Precision::fp32);

    std::string name() const override { return "cpu"; }
    Precision precision() const override { return precision_; }

    void* alloc(size_t bytes) override;
    void release(void* ptr) override;
    void upload(void* dst, const void* host_src, size_t bytes) override;
    void download(void* host_dst, const void* src, size_t bytes) override;
    void fill(const Tensor& t, float value) override;
    void cast(const Tensor& src, const Tensor& dst) override;
    uint64_t checksum(const void* data, size_t bytes) override;

    void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
              const Tensor& c, const float* bias = nullptr) override;

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
    void advance_dropout_generation() override { ++dropout_generation_; }
    // saved: P, the post-softmax probabilities before dropout (batch x heads x seq x seq fp32).
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
    void avgpool_forward(int pixels, const Tensor& x, const Tensor& out) override;
    void avgpool_backward(int pixels, const Tensor& grad_out, const Tensor& grad_x) override;

    void sgd_step(float* params, const float* grads, float* momentum, size_t n,
                  const OptimizerConfig& cfg, const Tensor& weights_copy) override;
    void adamw_step(float* params, const float* grads, float* m, float* v, size_t n,
                    const OptimizerConfig& cfg, int64_t step, const Tensor& weights_copy) override;
    bool unscale_and_check(float* grads, size_t n, float inv_scale) override;

    void* stream() override { return nullptr; }
    void synchronize() override {}
    void record_marker(int slot) override;
    double elapsed_ms(int from_slot, int to_slot) override;

private:
    using Clock = std::chrono::steady_clock;
    Precision precision_;
    std::array<Clock::time_point, kMaxMarkers> markers_{};
    std::array<bool, kMaxMarkers> marker_set_{};
    std::vector<float> pack_a_, pack_b_;  // GEMM packing scratch, reused across calls
    std::vector<float> conv_cols_, conv_tmp_;  // the conv_* ops' patches and products
    uint64_t dropout_generation_ = 0;
};

}  // namespace sb
