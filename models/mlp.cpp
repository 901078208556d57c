// The MLP model: parameter layout, PyTorch-style init, and forward/backward on Ops
// with gradients reported layer by layer in reverse as they land (for the bucketer).
#include "models/mlp.h"

#include "models/rng.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/errors.h"

namespace sb {

Mlp::Mlp(Ops& ops, const MlpShape& shape)
    : ops_(ops), shape_(shape), dtype_(compute_dtype(ops.precision())) {
    widths_.push_back(shape.input_dim);
    widths_.insert(widths_.end(), shape.hidden.begin(), shape.hidden.end());
    widths_.push_back(shape.num_classes);
    for (size_t i = 0; i < widths_.size(); ++i)
        if (widths_[i] <= 0)
            throw UserError("mlp: every layer width must be positive; width " + std::to_string(i) + " is " +
                            std::to_string(widths_[i]));
    size_t offset = 0;
    for (int l = 0; l < num_layers(); ++l) {
        const int in = widths_[l], out = widths_[l + 1];
        const std::string prefix = "layer" + std::to_string(l);
        params_.push_back(ParamInfo{prefix + ".weight", offset, out, in});
        offset += params_.back().count();
        params_.push_back(ParamInfo{prefix + ".bias", offset, 1, out});
        offset += params_.back().count();
    }
}

void Mlp::init_params(float* host_params, uint64_t seed) const {
    for (size_t p = 0; p < params_.size(); ++p) {
        const int layer = static_cast<int>(p / 2);
        const double bound = 1.0 / std::sqrt(static_cast<double>(widths_[layer]));  // fan_in
        PortableRng rng(mix_seed(seed, p));
        float* dst = host_params + params_[p].offset;
        for (size_t i = 0; i < params_[p].count(); ++i) dst[i] = static_cast<float>(rng.uniform(-bound, bound));
    }
}

void Mlp::bind(const FlatBuffers& buffers, int batch_rows) {
    SB_REQUIRE(buffers.complete(), "mlp bind: every flat buffer must be set");
    SB_REQUIRE(batch_rows > 0, "mlp bind: batch_rows must be positive; got " + std::to_string(batch_rows));
    buffers_ = buffers;
    batch_rows_ = batch_rows;
    const size_t esize = dtype_size(dtype_);
    const size_t rows = static_cast<size_t>(batch_rows);
    pre_.clear();
    post_.clear();
    int max_width = 0;
    for (int l = 0; l < num_layers(); ++l) {
        const int out = widths_[l + 1];
        max_width = std::max(max_width, out);
        pre_.emplace_back(ops_, rows * out * esize);
        if (l + 1 < num_layers()) post_.emplace_back(ops_, rows * out * esize);
    }
    grad_a_ = DeviceBuffer(ops_, rows * max_width * esize);
    grad_b_ = DeviceBuffer(ops_, rows * max_width * esize);
}

Tensor Mlp::weight(int layer) const {
    const ParamInfo& p = params_[2 * layer];
    return Tensor{buffers_.weight(params_, 2 * layer, dtype_size(dtype_)), dtype_, p.rows, p.cols};
}

const float* Mlp::bias(int layer) const { return buffers_.master(params_, 2 * layer + 1); }

Tensor Mlp::logits() const { return pre_.back().tensor(dtype_, batch_rows_, widths_.back()); }

void Mlp::forward_backward(const Tensor& inputs, const int32_t* labels, float* loss, float grad_scale,
                           GradientSink* sink) {
    SB_REQUIRE(batch_rows_ > 0, "mlp forward_backward before bind");
    SB_REQUIRE(inputs.rows == batch_rows_ && inputs.cols == widths_[0] && inputs.dtype == dtype_,
               "mlp inputs must be " + std::to_string(batch_rows_) + "x" + std::to_string(widths_[0]) + " " +
                   dtype_name(dtype_) + "; got " + std::to_string(inputs.rows) + "x" + std::to_string(inputs.cols) +
                   " " + dtype_name(inputs.dtype));
    const int L = num_layers();
    const int64_t B = batch_rows_;
    auto pre = [&](int l) { return pre_[l].tensor(dtype_, B, widths_[l + 1]); };
    auto post = [&](int l) { return l < 0 ? inputs : post_[l].tensor(dtype_, B, widths_[l + 1]); };

    // Forward: Z_l = A_{l-1} @ W_l^T + b_l; A_l = act(Z_l) except on the last layer.
    for (int l = 0; l + 1 < L; ++l)
        ops_.linear_activation_forward(post(l - 1), weight(l), bias(l), shape_.activation, pre(l), post(l));
    ops_.gemm(false, true, 1.0f, post(L - 2), weight(L - 1), 0.0f, pre(L - 1), bias(L - 1));

    // dZ of the last layer = (softmax - onehot) * grad_scale / B.
    DeviceBuffer* cur = &grad_a_;
    DeviceBuffer* other = &grad_b_;
    ops_.softmax_cross_entropy(pre(L - 1), labels, B, loss, cur->tensor(dtype_, B, widths_[L]),
                               grad_scale);  // every sample has a class

    // Backward in reverse: db, dW straight into the fp32 gradient slots (reported as soon
    // as written, bias first: reverse parameter order), then dZ_{l-1} = (dZ_l @ W_l) *
    // act'(Z_{l-1}). The first layer needs no dX.
    for (int l = L - 1; l >= 0; --l) {
        const Tensor dz = cur->tensor(dtype_, B, widths_[l + 1]);
        const ParamInfo& wp = params_[2 * l];
        ops_.linear_weight_grad(dz, post(l - 1),
                                Tensor{buffers_.gradient(params_, 2 * l), DType::f32, wp.rows, wp.cols},
                                buffers_.gradient(params_, 2 * l + 1));
        if (sink) {
            sink->gradient_ready(2 * l + 1);
            sink->gradient_ready(2 * l);
        }
        if (l > 0) {
            const Tensor dz_below = other->tensor(dtype_, B, widths_[l]);
            ops_.linear_activation_backward(dz, weight(l), shape_.activation, pre(l - 1), dz_below);
            std::swap(cur, other);
        }
    }
}

// Exact GEMM FLOPs (2 per multiply-add): forward X W^T and backward dW on every layer,
// dX on every layer but the first (not computed). Bias, activation and loss work is
// O(width), not counted. Hence 6*sum(in*out) - 2*in0*out0, not the rounded 6N.
double Mlp::flops_per_sample() const {
    double flops = 0.0;
    for (int l = 0; l < num_layers(); ++l) {
        const double mac = static_cast<double>(widths_[l]) * widths_[l + 1];
        flops += (l == 0 ? 4.0 : 6.0) * mac;
    }
    return flops;
}

}  // namespace sb
