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

    void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
              const Tensor& c, const float* bias = nullptr) override;

    void activation_forward(Activation act, const Tensor& pre, const Tensor& out) override;
    void activation_backward(Activation act, const Tensor& pre, const Tensor& grad_out,
                             const Tensor& grad_pre) override;
    void bias_grad(const Tensor& grad, float* bias_grad) override;
    void softmax_cross_entropy(const Tensor& logits, const int32_t* labels, float* loss,
                               const Tensor& grad_logits, float grad_scale) override;

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
};

}  // namespace sb
