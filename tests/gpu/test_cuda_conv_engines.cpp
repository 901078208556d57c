// The ResNet's two convolution engines on CUDA and its fused BatchNorm kernels, against the
// fp32 CPU backend (CpuOps, whose conv_* ops are im2col + GEMM): cuDNN's forward, data and
// filter gradient (fp32 with FMA math, TF32, bf16 and fp16; 1x1/3x3/7x7, strides 1 and 2,
// paddings 0/1/3, 3 input channels, odd channels, the accumulating data gradient), bitwise
// reproducible (deterministic algorithms) and replayed from a CUDA graph; BatchNorm + ReLU
// and BatchNorm + residual + ReLU forward, and the BatchNorm + ReLU backward (in place too);
// and a whole tiny ResNet step with each engine against the CPU's gradients. Tolerances on
// ‖out−ref‖/‖ref‖: fp32 1e-5, TF32 and 16-bit 1e-2. Skipped without a GPU (and the cuDNN cases
// in a build without cuDNN).
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include "models/cpu/cpu_ops.h"
#include "models/cuda/cuda_ops.h"
#include "models/image_data.h"
#include "models/resnet.h"
#include "tests/gpu/gpu_test_util.h"

namespace sb {
namespace {

using gpu_test::close;
using gpu_test::conv;
using gpu_test::GpuArray;
using gpu_test::host_view;
using gpu_test::rounded;

// The ResNet's convolutions in miniature (its stem on 3 channels, 3x3 at strides 1 and 2, the
// strided 1x1 downsample, a 1x1 stride 1), odd channel counts and no padding, with out channels.
struct ConvCase {
    Ops::ConvShape shape;
    int out_channels;
};
const ConvCase kCases[] = {
    {conv(2, 16, 16, 3, 7, 2, 3), 16}, {conv(2, 9, 9, 16, 3, 1, 1), 24}, {conv(2, 10, 10, 32, 3, 2, 1), 32},
    {conv(3, 8, 8, 16, 1, 2, 0), 64},  {conv(2, 6, 6, 64, 1, 1, 0), 16}, {conv(2, 7, 6, 5, 3, 1, 0), 7},
};

struct Mode {
    Precision precision;
    double tol;
};
const Mode kModes[] = {{Precision::fp32, 1e-5}, {Precision::tf32, 1e-2}, {Precision::bf16, 1e-2},
                       {Precision::fp16, 1e-2}};

class ConvEngineTest : public gpu_test::CudaOpsFixture {
protected:
    void SetUp() override {
        gpu_test::CudaOpsFixture::SetUp();
        if (IsSkipped()) return;
        if (!gpu_->has_cudnn()) GTEST_SKIP() << "this build has no cuDNN";
    }
    // Inputs on the dtype's grid (TF32's for tf32), so both sides convolve the same numbers.
    std::vector<float> input(size_t n, Precision p) {
        std::vector<float> v = rounded(values(n), compute_dtype(p));
        if (p == Precision::tf32)
            for (float& x : v) x = gpu_test::round_tf32(x);
        return v;
    }
};

TEST_F(ConvEngineTest, CudnnConvolutionsMatchTheCpuReference) {
    for (const Mode& m : kModes) {
        CudaOps gpu(m.precision, 0);
        const DType dt = compute_dtype(m.precision);
        for (const ConvCase& c : kCases) {
            const Ops::ConvShape& s = c.shape;
            const int64_t k = c.out_channels;
            SCOPED_TRACE(testing::Message() << precision_name(m.precision) << " " << s.describe() << " -> " << k);
            std::vector<float> x = input(static_cast<size_t>(s.in_rows() * s.channels), m.precision);
            std::vector<float> w = input(static_cast<size_t>(k * s.patch()), m.precision);
            std::vector<float> dy = input(static_cast<size_t>(s.out_rows() * k), m.precision);
            std::vector<float> prior = rounded(values(x.size()), dt);  // what the data gradient accumulates onto
            GpuArray gx(gpu, dt, s.in_rows(), s.channels), gw(gpu, dt, k, s.patch());
            GpuArray gy(gpu, dt, s.out_rows(), k), gdy(gpu, dt, s.out_rows(), k);
            GpuArray gdx(gpu, dt, s.in_rows(), s.channels), gdx_acc(gpu, dt, s.in_rows(), s.channels);
            GpuArray gdw(gpu, DType::f32, k, s.patch());
            gx.set(x);
            gw.set(w);
            gdy.set(dy);
            gdx_acc.set(prior);
            gpu.conv_forward(s, gx.tensor, gw.tensor, gy.tensor);
            gpu.conv_backward_data(s, gdy.tensor, gw.tensor, 0.0f, gdx.tensor);
            gpu.conv_backward_data(s, gdy.tensor, gw.tensor, 1.0f, gdx_acc.tensor);
            gpu.conv_backward_filter(s, gx.tensor, gdy.tensor, gdw.tensor);

            std::vector<float> y(dy.size()), dx(x.size()), dx_acc = prior, dwr(w.size());
            cpu_.conv_forward(s, host_view(x, s.in_rows(), s.channels), host_view(w, k, s.patch()),
                              host_view(y, s.out_rows(), k));
            cpu_.conv_backward_data(s, host_view(dy, s.out_rows(), k), host_view(w, k, s.patch()), 0.0f,
                                    host_view(dx, s.in_rows(), s.channels));
            cpu_.conv_backward_data(s, host_view(dy, s.out_rows(), k), host_view(w, k, s.patch()), 1.0f,
                                    host_view(dx_acc, s.in_rows(), s.channels));
            cpu_.conv_backward_filter(s, host_view(x, s.in_rows(), s.channels), host_view(dy, s.out_rows(), k),
                                      host_view(dwr, k, s.patch()));
            EXPECT_TRUE(close(gy.get(), y, m.tol)) << "forward";
            EXPECT_TRUE(close(gdx.get(), dx, m.tol)) << "data gradient";
            EXPECT_TRUE(close(gdx_acc.get(), dx_acc, m.tol)) << "data gradient accumulated";
            EXPECT_TRUE(close(gdw.get(), dwr, m.tol)) << "filter gradient";
            EXPECT_TRUE(gy.guards_intact() && gdx.guards_intact() && gdw.guards_intact());
        }
        EXPECT_EQ(gpu.conv_plan_count(), 3 * std::size(kCases)) << "one plan per direction and shape";
    }
}

// Deterministic algorithms only: the same call gives the same bits; and a captured graph of the
// three calls (plans made eagerly first) replays them bit for bit.
TEST_F(ConvEngineTest, CudnnConvolutionsAreReproducibleAndReplayFromAGraph) {
    CudaOps gpu(Precision::bf16, 0);
    const Ops::ConvShape s = conv(8, 28, 28, 64, 3, 1, 1);
    const int64_t k = 64;
    GpuArray x(gpu, DType::bf16, s.in_rows(), s.channels), w(gpu, DType::bf16, k, s.patch());
    GpuArray y(gpu, DType::bf16, s.out_rows(), k), dy(gpu, DType::bf16, s.out_rows(), k);
    GpuArray dx(gpu, DType::bf16, s.in_rows(), s.channels), dw(gpu, DType::f32, k, s.patch());
    x.set(values(static_cast<size_t>(s.in_rows() * s.channels)));
    w.set(values(static_cast<size_t>(k * s.patch())));
    dy.set(values(static_cast<size_t>(s.out_rows() * k)));
    auto step = [&] {
        gpu.conv_forward(s, x.tensor, w.tensor, y.tensor);
        gpu.conv_backward_data(s, dy.tensor, w.tensor, 0.0f, dx.tensor);
        gpu.conv_backward_filter(s, x.tensor, dy.tensor, dw.tensor);
    };
    step();
    const auto y1 = y.get_bytes(), dx1 = dx.get_bytes(), dw1 = dw.get_bytes();
    step();
    EXPECT_EQ(y.get_bytes(), y1);
    EXPECT_EQ(dx.get_bytes(), dx1);
    EXPECT_EQ(dw.get_bytes(), dw1);
    y.poison();
    dx.poison();
    dw.poison();
    gpu.begin_capture();
    try {
        step();
    } catch (...) {
        gpu.abandon_capture();
        throw;
    }
    const int graph = gpu.end_capture();
    gpu.replay(graph);
    gpu.synchronize();
    EXPECT_EQ(y.get_bytes(), y1);
    EXPECT_EQ(dx.get_bytes(), dx1);
    EXPECT_EQ(dw.get_bytes(), dw1);
    gpu.release_graph(graph);
    std::printf("%s", gpu.describe_conv_plans().c_str());
}

// ---------------------------------------------------------------------------- fused BatchNorm

constexpr float kBnEps = 1e-5f;
const std::pair<int64_t, int64_t> kBnShapes[] = {{37, 5}, {300, 64}, {98, 2048}, {513, 24}, {25088, 64}};
const DType kDTypes[] = {DType::f32, DType::bf16, DType::f16};

class FusedBatchNormTest : public gpu_test::CudaOpsFixture {};

TEST_F(FusedBatchNormTest, ReluAndResidualReluForwardMatchCpu) {
    for (DType dt : kDTypes)
        for (auto [rows, cols] : kBnShapes)
            for (bool residual : {false, true})
                for (int64_t offset : {0, 1}) {
                    SCOPED_TRACE(testing::Message() << dtype_name(dt) << " " << rows << "x" << cols
                                                    << " residual=" << residual << " offset=" << offset);
                    const size_t n = static_cast<size_t>(rows * cols);
                    std::vector<float> x = rounded(values(n), dt), r = rounded(values(n), dt);
                    std::vector<float> gamma = values(static_cast<size_t>(cols), 0.5f, 1.5f);
                    std::vector<float> beta = values(static_cast<size_t>(cols));
                    GpuArray gx(*gpu_, dt, rows, cols, offset), gr(*gpu_, dt, rows, cols, offset);
                    GpuArray gout(*gpu_, dt, rows, cols, offset), ggamma(*gpu_, DType::f32, 1, cols);
                    GpuArray gbeta(*gpu_, DType::f32, 1, cols), gmean(*gpu_, DType::f32, 1, cols);
                    GpuArray grstd(*gpu_, DType::f32, 1, cols);
                    gx.set(x);
                    gr.set(r);
                    ggamma.set(gamma);
                    gbeta.set(beta);
                    gpu_->batchnorm_relu_forward(gx.tensor, ggamma.f32(), gbeta.f32(), kBnEps,
                                                 residual ? gr.tensor : Tensor{}, gout.tensor, gmean.f32(),
                                                 grstd.f32());
                    std::vector<float> ref(n), mean(static_cast<size_t>(cols)), rstd(static_cast<size_t>(cols));
                    cpu_.batchnorm_relu_forward(host_view(x, rows, cols), gamma.data(), beta.data(), kBnEps,
                                                residual ? host_view(r, rows, cols) : Tensor{},
                                                host_view(ref, rows, cols), mean.data(), rstd.data());
                    const std::vector<float> out = gout.get();
                    EXPECT_TRUE(close(out, ref, gpu_test::tolerance(dt))) << "out";
                    EXPECT_TRUE(close(grstd.get(), rstd, 1e-5)) << "rstd";
                    size_t negative = 0;
                    for (float v : out) negative += v < 0.0f;
                    EXPECT_EQ(negative, 0u) << "the ReLU";
                    EXPECT_TRUE(gout.guards_intact());
                }
}

TEST_F(FusedBatchNormTest, ReluBackwardMatchesCpuAlsoInPlace) {
    for (DType dt : kDTypes)
        for (auto [rows, cols] : kBnShapes)
            for (bool in_place : {false, true}) {
                SCOPED_TRACE(testing::Message() << dtype_name(dt) << " " << rows << "x" << cols
                                                << " in_place=" << in_place);
                const size_t n = static_cast<size_t>(rows * cols);
                std::vector<float> x = rounded(values(n), dt), g = rounded(values(n), dt);
                std::vector<float> gamma = values(static_cast<size_t>(cols), 0.5f, 1.5f);
                std::vector<float> beta = values(static_cast<size_t>(cols));
                std::vector<float> y(n), mean(static_cast<size_t>(cols)), rstd(static_cast<size_t>(cols));
                cpu_.batchnorm_forward(host_view(x, rows, cols), gamma.data(), beta.data(), kBnEps,
                                       host_view(y, rows, cols), mean.data(), rstd.data());
                // Where bn(x) is within a few ulp of zero, the CPU (two roundings) and the GPU (a fused
                // multiply-add) may give it opposite signs, so the ReLU mask may differ: the gradient
                // there is zero, which makes the mask immaterial to every output.
                for (size_t i = 0; i < n; ++i)
                    if (std::fabs(y[i]) < 1e-5f * (std::fabs(beta[i % static_cast<size_t>(cols)]) + 1.0f)) g[i] = 0.0f;
                GpuArray gx(*gpu_, dt, rows, cols), gg(*gpu_, dt, rows, cols), gdx(*gpu_, dt, rows, cols);
                GpuArray ggamma(*gpu_, DType::f32, 1, cols), gbeta(*gpu_, DType::f32, 1, cols);
                GpuArray gmean(*gpu_, DType::f32, 1, cols), grstd(*gpu_, DType::f32, 1, cols);
                GpuArray gdgamma(*gpu_, DType::f32, 1, cols), gdbeta(*gpu_, DType::f32, 1, cols);
                gx.set(x);
                gg.set(g);
                ggamma.set(gamma);
                gbeta.set(beta);
                gmean.set(mean);
                grstd.set(rstd);
                GpuArray& result = in_place ? gg : gdx;
                gpu_->batchnorm_relu_backward(gx.tensor, gg.tensor, ggamma.f32(), gbeta.f32(), gmean.f32(),
                                              grstd.f32(), result.tensor, gdgamma.f32(), gdbeta.f32());
                std::vector<float> dx(n), dgamma(static_cast<size_t>(cols)), dbeta(static_cast<size_t>(cols));
                cpu_.batchnorm_relu_backward(host_view(x, rows, cols), host_view(g, rows, cols), gamma.data(),
                                             beta.data(), mean.data(), rstd.data(), host_view(dx, rows, cols),
                                             dgamma.data(), dbeta.data());
                EXPECT_TRUE(close(result.get(), dx, gpu_test::tolerance(dt))) << "grad_x";
                EXPECT_TRUE(close(gdgamma.get(), dgamma, 1e-5)) << "grad_gamma";
                EXPECT_TRUE(close(gdbeta.get(), dbeta, 1e-5)) << "grad_beta";
                EXPECT_TRUE(result.guards_intact());
            }
}

// ---------------------------------------------------------------------------- a whole ResNet step

// A tiny ResNet (both kinds of block, a strided downsample) in fp32 on CUDA with each engine,
// from the same weights and images as the CPU: loss and every gradient agree.
TEST(ConvEngines, ResNetStepMatchesTheCpuWithEitherEngine) {
    SKIP_WITHOUT_GPU();
    ResNetShape shape;
    shape.blocks = {2, 2};
    shape.width = 8;
    shape.image_size = 32;
    shape.num_classes = 10;
    const int batch = 4;
    CpuOps cpu;
    ResNet ref(cpu, shape);
    std::vector<float> params(ref.num_params()), grads(params.size());
    ref.init_params(params.data(), 11);
    std::vector<float> images(static_cast<size_t>(batch) * 32 * 32 * 3);
    std::vector<int32_t> labels(batch);
    make_image_shard(ImageTask{32, 10, 3}, 0, 0, batch, images.data(), labels.data());
    ref.bind(FlatBuffers{params.data(), params.data(), grads.data()}, batch);
    float ref_loss = 0;
    ref.forward_backward(Tensor{images.data(), DType::f32, batch, 32 * 32 * 3}, labels.data(), &ref_loss, 1.0f,
                         nullptr);
    for (ConvEngine engine : {ConvEngine::im2col, ConvEngine::cudnn}) {
        SCOPED_TRACE(conv_engine_name(engine));
        CudaOps gpu(Precision::fp32, 0);
        if (engine == ConvEngine::cudnn && !gpu.has_cudnn()) continue;
        ResNet m(gpu, shape, engine);
        const size_t bytes = params.size() * sizeof(float);
        DeviceBuffer p(gpu, bytes), g(gpu, bytes), img(gpu, images.size() * 4), lab(gpu, labels.size() * 4);
        DeviceBuffer loss(gpu, sizeof(float));
        gpu.upload(p.get(), params.data(), bytes);
        gpu.upload(img.get(), images.data(), images.size() * 4);
        gpu.upload(lab.get(), labels.data(), labels.size() * 4);
        m.bind(FlatBuffers{p.as<float>(), p.get(), g.as<float>()}, batch);
        m.forward_backward(Tensor{img.get(), DType::f32, batch, 32 * 32 * 3}, lab.as<int32_t>(), loss.as<float>(),
                           1.0f, nullptr);
        float got_loss = 0;
        std::vector<float> got(params.size());
        gpu.download(&got_loss, loss.get(), sizeof(float));
        gpu.download(got.data(), g.get(), bytes);
        EXPECT_NEAR(got_loss, ref_loss, 1e-5 * ref_loss);
        EXPECT_TRUE(close(got, grads, 1e-4)) << "all gradients";
    }
}

}  // namespace
}  // namespace sb
