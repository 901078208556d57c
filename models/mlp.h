// The MLP model (DESIGN: models/): Linear -> activation, ..., Linear -> logits, written
// once against Ops. Parameters sit in the flat buffers in forward order
// (layer{i}.weight [out, in], layer{i}.bias [1, out]); backward reports each gradient
// the moment it is written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/ops.h"

namespace sb {

struct MlpShape {
    int input_dim = 0;
    std::vector<int> hidden;  // widths of the hidden layers; may be empty (a linear model)
    int num_classes = 0;
    Activation activation = Activation::relu;
};

class Mlp final : public Model {
public:
    // Throws UserError on non-positive widths.
    Mlp(Ops& ops, const MlpShape& shape);

    std::string name() const override { return "mlp"; }
    const std::vector<ParamInfo>& params() const override { return params_; }
    // PyTorch nn.Linear's default init: weights and biases U(-1/sqrt(in), 1/sqrt(in)),
    // each parameter from its own stream keyed by (seed, parameter index).
    void init_params(float* host_params, uint64_t seed) const override;
    void bind(const FlatBuffers& buffers, int batch_rows) override;
    void forward_backward(const Tensor& inputs, const int32_t* labels, float* loss, float grad_scale,
                          GradientSink* sink) override;
    double flops_per_sample() const override;

    const MlpShape& shape() const { return shape_; }
    int num_layers() const { return static_cast<int>(widths_.size()) - 1; }
    // Logits of the last forward_backward (batch_rows x num_classes, compute dtype).
    Tensor logits() const;

private:
    Tensor weight(int layer) const;  // compute copy, [out, in]
    const float* bias(int layer) const;

    Ops& ops_;
    MlpShape shape_;
    DType dtype_;
    std::vector<int> widths_;  // input_dim, hidden..., num_classes
    std::vector<ParamInfo> params_;
    FlatBuffers buffers_;
    int batch_rows_ = 0;
    std::vector<DeviceBuffer> pre_;   // Z per layer (the last one holds the logits)
    std::vector<DeviceBuffer> post_;  // A = act(Z) per hidden layer
    DeviceBuffer grad_a_, grad_b_;    // ping-pong dA / dZ, batch x max width
};

}  // namespace sb
