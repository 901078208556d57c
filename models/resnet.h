// The ResNet model (DESIGN: models/): torchvision's bottleneck ResNet (v1.5, the stride on
// the 3x3 convolution, as NVIDIA's and MLPerf's ResNet-50), written once against Ops.
// Activations are NHWC ((batch*h*w) x channels matrices); a 1x1 stride-1 convolution is a
// GEMM on the activation itself, any other one a GEMM over im2col's patches or one conv_* op
// (ConvEngine). BatchNorm in training mode uses the batch statistics and is fused with the
// ReLU after it (and with the residual add at a block's end). Parameters sit in the flat buffers under torchvision's
// state_dict names in its order; a conv weight is [out, ky, kx, in] (torchvision's
// [out, in, ky, kx] permuted: channels_last).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/ops.h"

namespace sb {

struct ResNetShape {
    std::vector<int> blocks = {3, 4, 6, 3};  // bottlenecks per stage: ResNet-50 (101: 3,4,23,3; 152: 3,8,36,3)
    int width = 64;        // channels of the stem and of the first stage's bottleneck (x2 per stage)
    int image_size = 224;  // square RGB images
    int num_classes = 1000;
    float bn_eps = 1e-5f;
};

// The widest a stage may grow (the last stage's bottleneck output, 4 x width x 2^(stages-1)).
constexpr int kMaxResNetChannels = 1 << 16;

// What makes a shape unbuildable beyond each field's own range: the field ("image_size",
// "width") and the reason; an empty reason when the shape can be built (blocks non-empty).
struct ResNetShapeProblem {
    std::string key, reason;
};
// Inline: the config loader (and its fuzz target, built from a few sources) checks it too.
inline ResNetShapeProblem resnet_shape_problem(const ResNetShape& s) {
    // The stem halves the image twice (7x7/2 conv, 3x3/2 max pool), every stage after the first once more.
    const int64_t stride = int64_t{4} << (s.blocks.size() - 1);
    if (s.image_size < stride)
        return {"image_size", "image_size " + std::to_string(s.image_size) +
                                  " is smaller than the network's total stride " + std::to_string(stride) + " (" +
                                  std::to_string(s.blocks.size()) + " stages)"};
    if ((static_cast<int64_t>(s.width) << (s.blocks.size() - 1)) * 4 > kMaxResNetChannels)
        return {"width", "width " + std::to_string(s.width) + " grows to more than " +
                             std::to_string(kMaxResNetChannels) + " channels over " + std::to_string(s.blocks.size()) +
                             " stages"};
    return {};
}

class ResNet final : public Model {
public:
    // Throws UserError on a shape that cannot be built (an image too small for the strides, ...).
    ResNet(Ops& ops, const ResNetShape& shape, ConvEngine engine = ConvEngine::im2col);

    std::string name() const override { return "resnet"; }
    const std::vector<ParamInfo>& params() const override { return params_; }
    // As torchvision: conv weights N(0, 2 / fan_out) (kaiming_normal_, mode fan_out),
    // BatchNorm gamma 1 beta 0, the classifier nn.Linear's U(+-1/sqrt(fan_in)) for weight and bias.
    void init_params(float* host_params, uint64_t seed) const override;
    void bind(const FlatBuffers& buffers, int batch_rows) override;
    // inputs: batch_rows x (image_size^2 * 3), each row an NHWC image in the compute dtype;
    // labels: batch_rows int32 classes.
    void forward_backward(const Tensor& inputs, const int32_t* labels, float* loss, float grad_scale,
                          GradientSink* sink) override;
    // The convolutions' and the classifier's GEMM FLOPs (forward, weight gradient and, but for
    // the stem, input gradient): 3x the usual 2 x 4.1 GMAC forward count of ResNet-50.
    double flops_per_sample() const override;

    const ResNetShape& shape() const { return shape_; }
    ConvEngine conv_engine() const { return engine_; }

private:
    // A convolution followed by BatchNorm (and, when `relu`, the ReLU after it, fused: bn_out
    // holds relu(bn(conv_out))). A block's conv3 writes its BatchNorm fused with the residual
    // add and ReLU into the block's output instead, and has no bn_out.
    struct ConvUnit {
        Ops::ConvShape conv;  // batch filled in by bind
        int out_channels = 0;
        bool relu = true;
        int weight = -1, gamma = -1, beta = -1;  // parameter indices
        DeviceBuffer conv_out, bn_out, mean, rstd;
        int64_t out_rows() const { return conv.out_rows(); }
        bool direct() const { return conv.kernel == 1 && conv.stride == 1; }  // a GEMM on the input itself
    };
    struct Block {
        int unit1 = -1, unit2 = -1, unit3 = -1, downsample = -1;  // indices into units_
        DeviceBuffer out;  // relu(bn3 + shortcut)
    };

    int add_param(const std::string& name, int64_t rows, int64_t cols);
    int add_unit(const std::string& conv_name, const std::string& bn_name, int in_channels, int out_channels,
                 int kernel, int stride, int height, bool relu);
    Tensor weight(int index) const;
    const float* master(int index) const { return buffers_.master(params_, index); }
    float* grad(int index) const { return buffers_.gradient(params_, index); }
    Tensor grad_matrix(int index) const;
    Tensor act(const DeviceBuffer& b, int64_t rows, int64_t cols) const { return b.tensor(dtype_, rows, cols); }
    Tensor unit_out(const ConvUnit& u) const { return act(u.bn_out, u.out_rows(), u.out_channels); }
    void report(GradientSink* sink, int param) const;

    // conv_out = conv(in) on the engine (a GEMM for 1x1 stride 1).
    void conv_forward(ConvUnit& u, const Tensor& in);
    // conv_forward, then bn_out = relu(bn(conv_out)) (or bn(conv_out) without `relu`).
    void unit_forward(ConvUnit& u, const Tensor& in);
    // From dout (the gradient of the unit's output: of the ReLU's when `relu`, else of the
    // BatchNorm's), writes the gradient of the convolution's output to dconv (dout itself, or a
    // buffer when dout must stay), reports the unit's gradients and, unless grad_in.data is null,
    // writes the gradient of its input: grad_in = that + beta * grad_in (beta 1 accumulates, for
    // 1x1 stride-1 and cuDNN convolutions).
    void unit_backward(ConvUnit& u, const Tensor& in, const Tensor& dout, const Tensor& dconv, const Tensor& grad_in,
                       GradientSink* sink, float beta = 0.0f);

    Ops& ops_;
    ResNetShape shape_;
    ConvEngine engine_;
    DType dtype_;
    std::vector<ParamInfo> params_;
    std::vector<ConvUnit> units_;  // in forward order: the stem, then each block's conv1..3 and downsample
    std::vector<Block> blocks_;
    int stem_ = 0;
    Ops::ConvShape pool_;  // the stem's 3x3/2 max pool
    int final_channels_ = 0, final_pixels_ = 0;
    int fc_w_ = -1, fc_b_ = -1;

    FlatBuffers buffers_;
    int batch_ = 0;
    DeviceBuffer pool_out_, pooled_, logits_;
    DeviceBuffer pool_argmax_;  // the max pool's window position of each output's maximum, one byte each
    DeviceBuffer cols_;  // im2col engine: patches (forward, weight gradient) and their gradient, reused by every conv
    DeviceBuffer grad_[4];  // gradients of activations, each as large as the largest activation
};

}  // namespace sb
