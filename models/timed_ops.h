// The per-op timer of `train --profile-ops` (DESIGN: Projection, calibration): an Ops that
// forwards every call to the real backend and, while recording, times each call that the
// projection's trace would record. Identity, FLOPs and bytes come from a TraceOps fed the
// same call, so a timed op and a traced op are counted by one piece of code.
// Each op runs alone: the timer brackets it with two of the backend's markers and waits for
// it; on CUDA the stream is held while the op is issued, so the time is the op's device
// time without host launch gaps (nvbench's blocking kernel). CUDA graphs are off: a graph
// would replay the step as one launch, with no op to time.
#pragma once

#include <utility>
#include <vector>

#include "models/ops.h"
#include "models/trace_ops.h"

namespace sb {

class TimedOps final : public Ops {
public:
    // The marker slots the timer brackets each op with; callers must leave them alone.
    static constexpr int kOpStartMarker = kMaxMarkers - 2;
    static constexpr int kOpEndMarker = kMaxMarkers - 1;

    struct Sample {
        TracedOp op;
        double ms = 0;
    };

    // The accounting trace plans limit-dependent kernels against the backend's limits, so a
    // timed op is named by the variant that ran.
    explicit TimedOps(Ops& backend)
        : backend_(backend),
          accounting_(backend.precision(),
                      backend.device_limits() ? *backend.device_limits() : TraceOps::default_trace_limits()) {}

    // Ops issued between start_recording() and stop_recording() are timed, one sample per
    // call, in issue order; outside, calls are only forwarded.
    void start_recording() { recording_ = true; }
    void stop_recording() { recording_ = false; }
    const std::vector<Sample>& samples() const { return samples_; }
    std::vector<Sample> take_samples() { return std::exchange(samples_, {}); }

    std::string name() const override { return backend_.name(); }
    Precision precision() const override { return backend_.precision(); }
    const DeviceLimits* device_limits() const override { return backend_.device_limits(); }

    void* alloc(size_t bytes) override { return backend_.alloc(bytes); }
    void release(void* ptr) override { backend_.release(ptr); }
    void upload(void* dst, const void* host_src, size_t bytes) override { backend_.upload(dst, host_src, bytes); }
    void download(void* host_dst, const void* src, size_t bytes) override { backend_.download(host_dst, src, bytes); }
    void fill(const Tensor& t, float value) override { timed(&Ops::fill, t, value); }
    void cast(const Tensor& src, const Tensor& dst) override { timed(&Ops::cast, src, dst); }
    // The replica check's, not a step's: forwarded untimed.
    uint64_t checksum(const void* data, size_t bytes) override { return backend_.checksum(data, bytes); }
    void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta, const Tensor& c,
              const float* bias = nullptr) override {
        timed(&Ops::gemm, trans_a, trans_b, alpha, a, b, beta, c, bias);
    }
    // Timed as one op where the trace records one (the epilogue fused), else op by op.
    void linear_activation_forward(const Tensor& x, const Tensor& w, const float* bias, Activation act,
                                   const Tensor& pre, const Tensor& out) override {
        if (!gemm_fuses_activation(act, x.dtype)) return Ops::linear_activation_forward(x, w, bias, act, pre, out);
        timed(&Ops::linear_activation_forward, x, w, bias, act, pre, out);
    }
    void linear_activation_backward(const Tensor& grad_out, const Tensor& w, Activation act, const Tensor& pre,
                                    const Tensor& grad_pre) override {
        if (!gemm_fuses_activation(act, grad_out.dtype))
            return Ops::linear_activation_backward(grad_out, w, act, pre, grad_pre);
        timed(&Ops::linear_activation_backward, grad_out, w, act, pre, grad_pre);
    }
    void linear_weight_grad(const Tensor& grad_out, const Tensor& x, const Tensor& grad_w,
                            float* grad_bias) override {
        if (!gemm_fuses_bias_grad(grad_out.dtype)) return Ops::linear_weight_grad(grad_out, x, grad_w, grad_bias);
        timed(&Ops::linear_weight_grad, grad_out, x, grad_w, grad_bias);
    }
    void activation_forward(Activation act, const Tensor& pre, const Tensor& out) override {
        timed(&Ops::activation_forward, act, pre, out);
    }
    void activation_backward(Activation act, const Tensor& pre, const Tensor& grad_out,
                             const Tensor& grad_pre) override {
        timed(&Ops::activation_backward, act, pre, grad_out, grad_pre);
    }
    void bias_grad(const Tensor& grad, float* bias_grad) override { timed(&Ops::bias_grad, grad, bias_grad); }
    void labelled_bias_grad(const Tensor& grad, const int32_t* labels, int64_t labelled_rows,
                            float* bias_grad) override {
        timed(&Ops::labelled_bias_grad, grad, labels, labelled_rows, bias_grad);
    }
    void softmax_cross_entropy(const Tensor& logits, const int32_t* labels, int64_t labelled_rows, float* loss,
                               const Tensor& grad_logits, float grad_scale) override {
        timed(&Ops::softmax_cross_entropy, logits, labels, labelled_rows, loss, grad_logits, grad_scale);
    }
    void add(const Tensor& a, const Tensor& b, const Tensor& out) override { timed(&Ops::add, a, b, out); }
    void layernorm_forward(const Tensor& x, const float* gamma, const float* beta, float eps, const Tensor& out,
                           float* mean, float* rstd) override {
        timed(&Ops::layernorm_forward, x, gamma, beta, eps, out, mean, rstd);
    }
    void layernorm_backward(const Tensor& x, const Tensor& grad_out, const float* gamma, const float* mean,
                            const float* rstd, const Tensor& grad_x, float* grad_gamma, float* grad_beta) override {
        timed(&Ops::layernorm_backward, x, grad_out, gamma, mean, rstd, grad_x, grad_gamma, grad_beta);
    }
    void embedding_forward(const int32_t* ids, const Tensor& table, const Tensor& out, bool accumulate) override {
        timed(&Ops::embedding_forward, ids, table, out, accumulate);
    }
    void embedding_backward(const int32_t* ids, const Tensor& grad_out, float* grad_table,
                            int64_t table_rows) override {
        timed(&Ops::embedding_backward, ids, grad_out, grad_table, table_rows);
    }
    void dropout(const Tensor& in, const Tensor& out, float p, uint64_t seed) override {
        timed(&Ops::dropout, in, out, p, seed);
    }
    void residual_layernorm_forward(const Tensor& branch, const Tensor& residual, float p, uint64_t seed,
                                    const float* gamma, const float* beta, float eps, const Tensor& sum,
                                    const Tensor& out, float* mean, float* rstd) override {
        timed(&Ops::residual_layernorm_forward, branch, residual, p, seed, gamma, beta, eps, sum, out, mean, rstd);
    }
    void residual_layernorm_backward(const Tensor& sum, const Tensor& grad_out, const Tensor& grad_out_residual,
                                     const Tensor& grad_sum_residual, const float* gamma, const float* mean,
                                     const float* rstd, float p, uint64_t seed, const Tensor& grad_sum,
                                     const Tensor& grad_branch, float* grad_gamma, float* grad_beta) override {
        timed(&Ops::residual_layernorm_backward, sum, grad_out, grad_out_residual, grad_sum_residual, gamma, mean,
              rstd, p, seed, grad_sum, grad_branch, grad_gamma, grad_beta);
    }
    size_t attention_saved_bytes(const AttentionShape& shape) const override {
        return backend_.attention_saved_bytes(shape);
    }
    void attention_forward(const AttentionShape& shape, const Tensor& qkv, const Tensor& out, void* saved,
                           uint64_t seed) override {
        timed(&Ops::attention_forward, shape, qkv, out, saved, seed);
    }
    void attention_backward(const AttentionShape& shape, const Tensor& qkv, const Tensor& out, const void* saved,
                            const Tensor& grad_out, const Tensor& grad_qkv, uint64_t seed) override {
        timed(&Ops::attention_backward, shape, qkv, out, saved, grad_out, grad_qkv, seed);
    }
    void im2col(const ConvShape& shape, const Tensor& x, const Tensor& cols) override {
        timed(&Ops::im2col, shape, x, cols);
    }
    void col2im(const ConvShape& shape, const Tensor& grad_cols, const Tensor& grad_x) override {
        timed(&Ops::col2im, shape, grad_cols, grad_x);
    }
    void batchnorm_forward(const Tensor& x, const float* gamma, const float* beta, float eps, const Tensor& out,
                           float* mean, float* rstd) override {
        timed(&Ops::batchnorm_forward, x, gamma, beta, eps, out, mean, rstd);
    }
    void batchnorm_backward(const Tensor& x, const Tensor& grad_out, const float* gamma, const float* mean,
                            const float* rstd, const Tensor& grad_x, float* grad_gamma, float* grad_beta) override {
        timed(&Ops::batchnorm_backward, x, grad_out, gamma, mean, rstd, grad_x, grad_gamma, grad_beta);
    }
    void maxpool_forward(const ConvShape& shape, const Tensor& x, const Tensor& out, uint8_t* argmax) override {
        timed(&Ops::maxpool_forward, shape, x, out, argmax);
    }
    void maxpool_backward(const ConvShape& shape, const uint8_t* argmax, const Tensor& grad_out,
                          const Tensor& grad_x) override {
        timed(&Ops::maxpool_backward, shape, argmax, grad_out, grad_x);
    }
    void avgpool_forward(int pixels, const Tensor& x, const Tensor& out) override {
        timed(&Ops::avgpool_forward, pixels, x, out);
    }
    void avgpool_backward(int pixels, const Tensor& grad_out, const Tensor& grad_x) override {
        timed(&Ops::avgpool_backward, pixels, grad_out, grad_x);
    }
    bool has_cudnn() const override { return backend_.has_cudnn(); }
    void conv_forward(const ConvShape& shape, const Tensor& x, const Tensor& weight, const Tensor& out) override {
        timed(&Ops::conv_forward, shape, x, weight, out);
    }
    void conv_backward_data(const ConvShape& shape, const Tensor& grad_out, const Tensor& weight, float beta,
                            const Tensor& grad_x) override {
        timed(&Ops::conv_backward_data, shape, grad_out, weight, beta, grad_x);
    }
    void conv_backward_filter(const ConvShape& shape, const Tensor& x, const Tensor& grad_out,
                              const Tensor& grad_weight) override {
        timed(&Ops::conv_backward_filter, shape, x, grad_out, grad_weight);
    }
    void batchnorm_relu_forward(const Tensor& x, const float* gamma, const float* beta, float eps,
                                const Tensor& residual, const Tensor& out, float* mean, float* rstd) override {
        timed(&Ops::batchnorm_relu_forward, x, gamma, beta, eps, residual, out, mean, rstd);
    }
    void batchnorm_relu_backward(const Tensor& x, const Tensor& grad_out, const float* gamma, const float* beta,
                                 const float* mean, const float* rstd, const Tensor& grad_x, float* grad_gamma,
                                 float* grad_beta) override {
        timed(&Ops::batchnorm_relu_backward, x, grad_out, gamma, beta, mean, rstd, grad_x, grad_gamma, grad_beta);
    }
    void advance_dropout_generation() override { timed(&Ops::advance_dropout_generation); }
    void sgd_step(float* params, const float* grads, float* momentum, size_t n, const OptimizerConfig& cfg,
                  const Tensor& weights_copy) override {
        timed(&Ops::sgd_step, params, grads, momentum, n, cfg, weights_copy);
    }
    void adamw_step(float* params, const float* grads, float* m, float* v, size_t n, const OptimizerConfig& cfg,
                    int64_t step, const Tensor& weights_copy) override {
        timed(&Ops::adamw_step, params, grads, m, v, n, cfg, step, weights_copy);
    }
    bool unscale_and_check(float* grads, size_t n, float inv_scale) override;

    void* stream() override { return backend_.stream(); }
    void synchronize() override { backend_.synchronize(); }
    void record_marker(int slot) override;
    double elapsed_ms(int from_slot, int to_slot) override;
    // The timer holds the stream around each op itself; a caller's hold around many ops
    // would time them as one, so there is none (and no graphs: has_graphs() stays false).
    bool hold_stream() override { return false; }

private:
    // Forwards one call to the backend, timed as the op the accounting TraceOps records
    // for it (none recorded: not an op of the trace, forwarded untimed).
    template <class... Params, class... Args>
    void timed(void (Ops::*method)(Params...), Args&&... args) {
        if (!recording_) return (backend_.*method)(args...);
        const size_t before = accounting_.position();
        (static_cast<Ops&>(accounting_).*method)(args...);
        if (accounting_.position() == before) return (backend_.*method)(args...);
        time_last_op(/*hold=*/true, [&] { (backend_.*method)(args...); });
    }
    // Runs `issue` between the two op markers (holding the stream while it is issued when
    // `hold`) and appends the time to the sample of the op just recorded.
    template <class Issue>
    void time_last_op(bool hold, Issue&& issue);
    void check_slot(int slot) const;

    Ops& backend_;
    TraceOps accounting_;
    bool recording_ = false;
    std::vector<Sample> samples_;
};

template <class Issue>
void TimedOps::time_last_op(bool hold, Issue&& issue) {
    {
        // Released before the wait below, also when issuing throws: the wait on a stream left
        // held would last until the gate's own timeout.
        struct Hold {
            Ops& ops;
            bool held;
            ~Hold() { if (held) ops.release_stream(); }
        } gate{backend_, hold && backend_.hold_stream()};
        backend_.record_marker(kOpStartMarker);
        issue();
        backend_.record_marker(kOpEndMarker);
    }
    samples_.push_back({accounting_.trace().back(), backend_.elapsed_ms(kOpStartMarker, kOpEndMarker)});
    accounting_.clear();
}

}  // namespace sb
