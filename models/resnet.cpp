// The ResNet: torchvision's parameter layout and init, forward and backward on Ops,
// gradients reported in reverse as they become final (per unit: BatchNorm beta and gamma,
// then the convolution's weight).
#include "models/resnet.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "models/rng.h"
#include "base/errors.h"

namespace sb {
namespace {

constexpr int kExpansion = 4;  // a bottleneck's output has 4x its inner channels

void require_shape(bool ok, const std::string& what) {
    if (!ok) throw UserError("resnet: " + what);
}

}  // namespace

ResNet::ResNet(Ops& ops, const ResNetShape& shape, ConvEngine engine)
    : ops_(ops), shape_(shape), engine_(engine), dtype_(compute_dtype(ops.precision())) {
    const ResNetShape& s = shape;
    require_shape(!s.blocks.empty() && std::all_of(s.blocks.begin(), s.blocks.end(), [](int b) { return b > 0; }),
                  "every stage needs at least one block");
    require_shape(s.width > 0 && s.num_classes > 1 && s.bn_eps > 0.0f, "width, num_classes and bn_eps must be positive");
    const ResNetShapeProblem problem = resnet_shape_problem(s);
    require_shape(problem.reason.empty(), problem.reason);

    stem_ = add_unit("conv1.weight", "bn1", 3, s.width, 7, 2, s.image_size, true);
    int h = units_[static_cast<size_t>(stem_)].conv.out_height();
    pool_.height = pool_.width = h;
    pool_.channels = s.width;
    pool_.kernel = 3;
    pool_.stride = 2;
    pool_.padding = 1;
    h = pool_.out_height();
    int in_channels = s.width;
    for (size_t stage = 0; stage < s.blocks.size(); ++stage) {
        const int planes = s.width << stage, out_channels = planes * kExpansion;
        for (int b = 0; b < s.blocks[stage]; ++b) {
            const std::string p = "layer" + std::to_string(stage + 1) + "." + std::to_string(b) + ".";
            const int stride = (b == 0 && stage > 0) ? 2 : 1;  // v1.5: the 3x3 convolution strides
            Block block;
            block.unit1 = add_unit(p + "conv1.weight", p + "bn1", in_channels, planes, 1, 1, h, true);
            block.unit2 = add_unit(p + "conv2.weight", p + "bn2", planes, planes, 3, stride, h, true);
            block.unit3 = add_unit(p + "conv3.weight", p + "bn3", planes, out_channels, 1, 1,
                                   units_[static_cast<size_t>(block.unit2)].conv.out_height(), false);
            if (b == 0)
                block.downsample = add_unit(p + "downsample.0.weight", p + "downsample.1", in_channels, out_channels,
                                            1, stride, h, false);
            h = units_[static_cast<size_t>(block.unit3)].conv.out_height();
            in_channels = out_channels;
            blocks_.push_back(std::move(block));
        }
    }
    final_channels_ = in_channels;
    final_pixels_ = h * h;
    fc_w_ = add_param("fc.weight", s.num_classes, in_channels);
    fc_b_ = add_param("fc.bias", 1, s.num_classes);
}

int ResNet::add_param(const std::string& name, int64_t rows, int64_t cols) {
    const size_t offset = params_.empty() ? 0 : params_.back().offset + params_.back().count();
    params_.push_back(ParamInfo{name, offset, rows, cols});
    return static_cast<int>(params_.size()) - 1;
}

int ResNet::add_unit(const std::string& conv_name, const std::string& bn_name, int in_channels, int out_channels,
                     int kernel, int stride, int height, bool relu) {
    ConvUnit u;
    u.conv.height = u.conv.width = height;
    u.conv.channels = in_channels;
    u.conv.kernel = kernel;
    u.conv.stride = stride;
    u.conv.padding = kernel / 2;
    u.out_channels = out_channels;
    u.relu = relu;
    u.weight = add_param(conv_name, out_channels, u.conv.patch());
    u.gamma = add_param(bn_name + ".weight", 1, out_channels);
    u.beta = add_param(bn_name + ".bias", 1, out_channels);
    units_.push_back(std::move(u));
    return static_cast<int>(units_.size()) - 1;
}

void ResNet::init_params(float* host_params, uint64_t seed) const {
    for (const ConvUnit& u : units_) {
        const ParamInfo& w = params_[static_cast<size_t>(u.weight)];
        const double std_dev = std::sqrt(2.0 / (static_cast<double>(u.out_channels) * u.conv.kernel * u.conv.kernel));
        PortableRng rng(mix_seed(seed, static_cast<uint64_t>(u.weight)));
        for (size_t i = 0; i < w.count(); ++i) host_params[w.offset + i] = static_cast<float>(std_dev * rng.normal());
        std::fill_n(host_params + params_[static_cast<size_t>(u.gamma)].offset, u.out_channels, 1.0f);
        std::fill_n(host_params + params_[static_cast<size_t>(u.beta)].offset, u.out_channels, 0.0f);
    }
    const double bound = 1.0 / std::sqrt(static_cast<double>(final_channels_));
    for (int p : {fc_w_, fc_b_}) {
        const ParamInfo& info = params_[static_cast<size_t>(p)];
        PortableRng rng(mix_seed(seed, static_cast<uint64_t>(p)));
        for (size_t i = 0; i < info.count(); ++i)
            host_params[info.offset + i] = static_cast<float>(rng.uniform(-bound, bound));
    }
}

void ResNet::bind(const FlatBuffers& buffers, int batch_rows) {
    SB_REQUIRE(buffers.complete(), "resnet bind: every flat buffer must be set");
    SB_REQUIRE(batch_rows > 0, "resnet bind: batch_rows must be positive; got " + std::to_string(batch_rows));
    buffers_ = buffers;
    batch_ = batch_rows;
    const size_t es = dtype_size(dtype_);
    int64_t max_act = 0, max_cols = 0;
    // A block's conv3 BatchNorm writes the block's output: its unit holds no bn_out (never
    // allocated, so the trace's footprint and the backend's allocations agree).
    std::vector<bool> writes_block_out(units_.size(), false);
    for (const Block& b : blocks_) writes_block_out[static_cast<size_t>(b.unit3)] = true;
    for (size_t i = 0; i < units_.size(); ++i) {
        ConvUnit& u = units_[i];
        u.conv.batch = batch_rows;
        const int64_t elems = u.out_rows() * u.out_channels;
        max_act = std::max(max_act, elems);
        if (!u.direct() && engine_ == ConvEngine::im2col) max_cols = std::max(max_cols, u.out_rows() * u.conv.patch());
        u.conv_out = DeviceBuffer(ops_, static_cast<size_t>(elems) * es);
        u.bn_out = writes_block_out[i] ? DeviceBuffer() : DeviceBuffer(ops_, static_cast<size_t>(elems) * es);
        u.mean = DeviceBuffer(ops_, static_cast<size_t>(u.out_channels) * sizeof(float));
        u.rstd = DeviceBuffer(ops_, static_cast<size_t>(u.out_channels) * sizeof(float));
    }
    for (Block& b : blocks_) {
        const ConvUnit& u3 = units_[static_cast<size_t>(b.unit3)];
        b.out = DeviceBuffer(ops_, static_cast<size_t>(u3.out_rows() * u3.out_channels) * es);
    }
    pool_.batch = batch_rows;
    pool_out_ = DeviceBuffer(ops_, static_cast<size_t>(pool_.out_rows() * pool_.channels) * es);
    pool_argmax_ = DeviceBuffer(ops_, static_cast<size_t>(pool_.out_rows() * pool_.channels));
    pooled_ = DeviceBuffer(ops_, static_cast<size_t>(batch_rows) * final_channels_ * es);
    logits_ = DeviceBuffer(ops_, static_cast<size_t>(batch_rows) * shape_.num_classes * es);
    cols_ = DeviceBuffer(ops_, static_cast<size_t>(max_cols) * es);
    for (DeviceBuffer& g : grad_) g = DeviceBuffer(ops_, static_cast<size_t>(max_act) * es);
}

Tensor ResNet::weight(int index) const {
    const ParamInfo& p = params_[static_cast<size_t>(index)];
    return Tensor{buffers_.weight(params_, index, dtype_size(dtype_)), dtype_, p.rows, p.cols};
}

Tensor ResNet::grad_matrix(int index) const {
    const ParamInfo& p = params_[static_cast<size_t>(index)];
    return Tensor{grad(index), DType::f32, p.rows, p.cols};
}

void ResNet::report(GradientSink* sink, int param) const {
    if (sink) sink->gradient_ready(param);
}

void ResNet::conv_forward(ConvUnit& u, const Tensor& in) {
    const Tensor conv_out = act(u.conv_out, u.out_rows(), u.out_channels);
    if (u.direct()) {
        ops_.gemm(false, true, 1.0f, in, weight(u.weight), 0.0f, conv_out);
    } else if (engine_ == ConvEngine::cudnn) {
        ops_.conv_forward(u.conv, in, weight(u.weight), conv_out);
    } else {
        const Tensor patches = act(cols_, u.out_rows(), u.conv.patch());
        ops_.im2col(u.conv, in, patches);
        ops_.gemm(false, true, 1.0f, patches, weight(u.weight), 0.0f, conv_out);
    }
}

void ResNet::unit_forward(ConvUnit& u, const Tensor& in) {
    conv_forward(u, in);
    const Tensor conv_out = act(u.conv_out, u.out_rows(), u.out_channels);
    if (u.relu)
        ops_.batchnorm_relu_forward(conv_out, master(u.gamma), master(u.beta), shape_.bn_eps, Tensor{}, unit_out(u),
                                    u.mean.as<float>(), u.rstd.as<float>());
    else
        ops_.batchnorm_forward(conv_out, master(u.gamma), master(u.beta), shape_.bn_eps, unit_out(u),
                               u.mean.as<float>(), u.rstd.as<float>());
}

void ResNet::unit_backward(ConvUnit& u, const Tensor& in, const Tensor& dout, const Tensor& dconv,
                           const Tensor& grad_in, GradientSink* sink, float beta) {
    const Tensor conv_out = act(u.conv_out, u.out_rows(), u.out_channels);
    if (u.relu)
        ops_.batchnorm_relu_backward(conv_out, dout, master(u.gamma), master(u.beta), u.mean.as<float>(),
                                     u.rstd.as<float>(), dconv, grad(u.gamma), grad(u.beta));
    else
        ops_.batchnorm_backward(conv_out, dout, master(u.gamma), u.mean.as<float>(), u.rstd.as<float>(), dconv,
                                grad(u.gamma), grad(u.beta));
    report(sink, u.beta);
    report(sink, u.gamma);
    if (u.direct()) {
        ops_.gemm(true, false, 1.0f, dconv, in, 0.0f, grad_matrix(u.weight));
        report(sink, u.weight);
        if (grad_in.data) ops_.gemm(false, false, 1.0f, dconv, weight(u.weight), beta, grad_in);
    } else if (engine_ == ConvEngine::cudnn) {
        ops_.conv_backward_filter(u.conv, in, dconv, grad_matrix(u.weight));
        report(sink, u.weight);
        if (grad_in.data) ops_.conv_backward_data(u.conv, dconv, weight(u.weight), beta, grad_in);
    } else {
        SB_REQUIRE(beta == 0.0f, "resnet: col2im overwrites, so an im2col convolution cannot accumulate");
        // Recomputed rather than kept from the forward: one patch buffer serves every conv.
        const Tensor patches = act(cols_, u.out_rows(), u.conv.patch());
        ops_.im2col(u.conv, in, patches);
        ops_.gemm(true, false, 1.0f, dconv, patches, 0.0f, grad_matrix(u.weight));
        report(sink, u.weight);
        if (grad_in.data == nullptr) return;
        ops_.gemm(false, false, 1.0f, dconv, weight(u.weight), 0.0f, patches);
        ops_.col2im(u.conv, patches, grad_in);
    }
}

void ResNet::forward_backward(const Tensor& inputs, const int32_t* labels, float* loss, float grad_scale,
                              GradientSink* sink) {
    SB_REQUIRE(batch_ > 0, "resnet forward_backward before bind");
    const int64_t image_elems = static_cast<int64_t>(shape_.image_size) * shape_.image_size * 3;
    SB_REQUIRE(inputs.rows == batch_ && inputs.cols == image_elems && inputs.dtype == dtype_,
               "resnet inputs must be " + std::to_string(batch_) + "x" + std::to_string(image_elems) + " " +
                   dtype_name(dtype_) + "; got " + std::to_string(inputs.rows) + "x" + std::to_string(inputs.cols) +
                   " " + dtype_name(inputs.dtype));
    const Tensor image{inputs.data, dtype_, inputs.rows * shape_.image_size * shape_.image_size, 3};
    ConvUnit& stem = units_[static_cast<size_t>(stem_)];
    auto unit = [&](int index) -> ConvUnit& { return units_[static_cast<size_t>(index)]; };
    auto block_out = [&](const Block& b) { return act(b.out, unit(b.unit3).out_rows(), unit(b.unit3).out_channels); };
    auto grad_buffer = [&](int i, int64_t rows, int64_t cols) { return act(grad_[i], rows, cols); };

    // ---- forward
    unit_forward(stem, image);
    const Tensor pool_out = act(pool_out_, pool_.out_rows(), pool_.channels);
    ops_.maxpool_forward(pool_, unit_out(stem), pool_out, pool_argmax_.as<uint8_t>());
    std::vector<Tensor> block_in;  // each block's input, kept for the backward
    Tensor x = pool_out;
    for (Block& b : blocks_) {
        block_in.push_back(x);
        ConvUnit& u3 = unit(b.unit3);
        unit_forward(unit(b.unit1), x);
        unit_forward(unit(b.unit2), unit_out(unit(b.unit1)));
        conv_forward(u3, unit_out(unit(b.unit2)));
        Tensor shortcut = x;
        if (b.downsample >= 0) {
            unit_forward(unit(b.downsample), x);
            shortcut = unit_out(unit(b.downsample));
        }
        x = block_out(b);  // relu(bn3(conv3) + shortcut)
        ops_.batchnorm_relu_forward(act(u3.conv_out, u3.out_rows(), u3.out_channels), master(u3.gamma),
                                    master(u3.beta), shape_.bn_eps, shortcut, x, u3.mean.as<float>(),
                                    u3.rstd.as<float>());
    }
    const Tensor pooled = act(pooled_, batch_, final_channels_);
    ops_.avgpool_forward(final_pixels_, x, pooled);
    const Tensor logits = act(logits_, batch_, shape_.num_classes);
    ops_.gemm(false, true, 1.0f, pooled, weight(fc_w_), 0.0f, logits, master(fc_b_));
    ops_.softmax_cross_entropy(logits, labels, batch_, loss, logits, grad_scale);  // every image has a class

    // ---- backward: logits now hold their gradient
    ops_.linear_weight_grad(logits, pooled, grad_matrix(fc_w_), grad(fc_b_));
    report(sink, fc_b_);
    report(sink, fc_w_);
    const Tensor dpooled = grad_buffer(1, batch_, final_channels_);
    ops_.gemm(false, false, 1.0f, logits, weight(fc_w_), 0.0f, dpooled);
    int g = 0;  // grad_[g] holds the gradient of the current block's output
    ops_.avgpool_backward(final_pixels_, dpooled, grad_buffer(g, x.rows, x.cols));
    for (size_t i = blocks_.size(); i-- > 0;) {
        Block& b = blocks_[i];
        const Tensor& in = block_in[i];
        ConvUnit &u1 = unit(b.unit1), &u2 = unit(b.unit2), &u3 = unit(b.unit3);
        const int free1 = (g + 1) % 4, free2 = (g + 2) % 4, free3 = (g + 3) % 4;
        const Tensor dsum = grad_buffer(g, u3.out_rows(), u3.out_channels);
        ops_.activation_backward(Activation::relu, block_out(b), dsum, dsum);  // relu' from its output: the same
        // The gradient of the block's input: the shortcut's share first, then conv1's input
        // gradient accumulated onto it (conv1 is 1x1 stride 1: a GEMM with beta 1). An identity
        // shortcut's share is dsum itself, so it collects in dsum's buffer once conv3 is done with it.
        Tensor dx = dsum;
        const Tensor d2 = grad_buffer(free1, u2.out_rows(), u2.out_channels);
        if (b.downsample >= 0) {
            // The downsample's parameters come last in the block, so their gradients go first (the
            // bucketer all-reduces in reverse parameter order); dsum stays for conv3, so the
            // downsample's BatchNorm writes to free1.
            dx = grad_buffer(free3, in.rows, in.cols);
            unit_backward(unit(b.downsample), in, dsum, grad_buffer(free1, u3.out_rows(), u3.out_channels), dx,
                          sink);
            unit_backward(u3, unit_out(u2), dsum, dsum, d2, sink);
        } else {
            // The identity shortcut needs dsum at the end, so conv3's BatchNorm writes to free2.
            unit_backward(u3, unit_out(u2), dsum, grad_buffer(free2, u3.out_rows(), u3.out_channels), d2, sink);
        }
        const Tensor d1 = grad_buffer(free2, u1.out_rows(), u1.out_channels);
        unit_backward(u2, unit_out(u1), d2, d2, d1, sink);
        unit_backward(u1, in, d1, d1, dx, sink, 1.0f);
        if (b.downsample >= 0) g = free3;
    }
    const Tensor dstem = grad_buffer((g + 1) % 4, stem.out_rows(), stem.out_channels);
    ops_.maxpool_backward(pool_, pool_argmax_.as<uint8_t>(), grad_buffer(g, pool_out.rows, pool_out.cols), dstem);
    unit_backward(stem, image, dstem, dstem, Tensor{}, sink);
}

double ResNet::flops_per_sample() const {
    double flops = 0.0;
    for (size_t i = 0; i < units_.size(); ++i) {
        const ConvUnit& u = units_[i];
        const double pixels = static_cast<double>(u.conv.out_height()) * u.conv.out_width();
        const double mac = pixels * u.out_channels * static_cast<double>(u.conv.patch());
        flops += (static_cast<int>(i) == stem_ ? 4.0 : 6.0) * mac;  // the stem has no input gradient
    }
    return flops + 6.0 * static_cast<double>(final_channels_) * shape_.num_classes;
}

}  // namespace sb
