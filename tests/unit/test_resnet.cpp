// The ResNet model (models/resnet.*) and its image data (models/image_data.*): parameter
// counts equal torchvision's, names and order as its state_dict, torchvision's init, the
// whole backward against central finite differences for every parameter, gradients
// reported once each and only when final, the FLOP count against torchvision's published
// figure, the data's shard purity, and the loss falling on the CPU.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "collectives/mpi_communicator.h"
#include "models/cpu/cpu_ops.h"
#include "models/image_data.h"
#include "models/resnet.h"
#include "models/rng.h"
#include "models/trace_ops.h"
#include "src/core/config.h"
#include "base/errors.h"
#include "src/commands/runner.h"
#include "src/core/workload.h"
#include "tests/test_util.h"

namespace sb {
namespace {

std::string preset_path(const std::string& name) { return std::string(SCALEBENCH_SOURCE_DIR) + "/configs/" + name; }

ResNetShape with_blocks(std::vector<int> blocks) {
    ResNetShape s;
    s.blocks = std::move(blocks);
    return s;
}

TEST(ResNet, ParameterCountsEqualTorchvision) {
    // sum(p.numel() for p in torchvision.models.resnet50().parameters()) and likewise:
    // the figures torchvision's model documentation lists (25,557,032; 44,549,160; 60,192,808).
    CpuOps ops;
    EXPECT_EQ(ResNet(ops, with_blocks({3, 4, 6, 3})).num_params(), 25557032u);
    EXPECT_EQ(ResNet(ops, with_blocks({3, 4, 23, 3})).num_params(), 44549160u);
    EXPECT_EQ(ResNet(ops, with_blocks({3, 8, 36, 3})).num_params(), 60192808u);
    EXPECT_EQ(ResNet(ops, load_config_file(preset_path("resnet50.yaml")).resnet).num_params(), 25557032u);
    EXPECT_EQ(ResNet(ops, load_config_file(preset_path("resnet152.yaml")).resnet).num_params(), 60192808u);
}

TEST(ResNet, ParameterNamesAndLayoutFollowTorchvision) {
    CpuOps ops;
    ResNet m(ops, ResNetShape{});
    const auto& p = m.params();
    // torchvision's state_dict order without the BatchNorm running statistics (buffers).
    ASSERT_EQ(p.size(), 161u);
    EXPECT_EQ(p[0].name, "conv1.weight");
    EXPECT_EQ(p[0].rows, 64);
    EXPECT_EQ(p[0].cols, 7 * 7 * 3);  // [out, ky, kx, in]
    EXPECT_EQ(p[1].name, "bn1.weight");
    EXPECT_EQ(p[2].name, "bn1.bias");
    EXPECT_EQ(p[3].name, "layer1.0.conv1.weight");
    EXPECT_EQ(p[12].name, "layer1.0.downsample.0.weight");
    EXPECT_EQ(p[12].rows, 256);
    EXPECT_EQ(p[12].cols, 64);
    EXPECT_EQ(p[13].name, "layer1.0.downsample.1.weight");
    const auto conv2 = std::find_if(p.begin(), p.end(), [](const ParamInfo& q) { return q.name == "layer2.0.conv2.weight"; });
    ASSERT_NE(conv2, p.end());
    EXPECT_EQ(conv2->rows, 128);
    EXPECT_EQ(conv2->cols, 3 * 3 * 128);
    EXPECT_EQ(p[p.size() - 2].name, "fc.weight");
    EXPECT_EQ(p[p.size() - 2].rows, 1000);
    EXPECT_EQ(p[p.size() - 2].cols, 2048);
    EXPECT_EQ(p.back().name, "fc.bias");
    for (size_t i = 1; i < p.size(); ++i) EXPECT_EQ(p[i].offset, p[i - 1].offset + p[i - 1].count());
}

TEST(ResNet, RejectsShapesItCannotBuild) {
    CpuOps ops;
    ResNetShape small;
    small.image_size = 16;  // four stages need a total stride of 32
    EXPECT_THROW(ResNet(ops, small), UserError);
    EXPECT_THROW(ResNet(ops, with_blocks({})), UserError);
    EXPECT_THROW(ResNet(ops, with_blocks({2, 0})), UserError);
    EXPECT_THROW(parse_config("model: resnet\nresnet:\n  image_size: 16\n", "x.yaml"), UserError);
    try {
        parse_config("model: resnet\nresnet:\n  blocks: [1, 1]\n  image_size: 4\n", "x.yaml");
        FAIL() << "accepted an image smaller than the stride";
    } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find("x.yaml:4:15: key 'resnet.image_size'"), std::string::npos) << e.what();
    }
    EXPECT_THROW(parse_config("model: resnet\nresnet:\n  blocks: [1, 1]\n  widht: 4\n", "x.yaml"), UserError);
    try {  // 4096 << 3 stages x 4 = 131072 channels at the last stage
        parse_config("model: resnet\nresnet:\n  width: 4096\n", "x.yaml");
        FAIL() << "accepted a width that grows past the channel limit";
    } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find("x.yaml:3:10: key 'resnet.width'"), std::string::npos) << e.what();
    }
}

TEST(ResNet, InitFollowsTorchvision) {
    CpuOps ops;
    ResNet m(ops, with_blocks({1, 1}));
    std::vector<float> a(m.num_params()), b(m.num_params());
    m.init_params(a.data(), 7);
    m.init_params(b.data(), 7);
    EXPECT_EQ(a, b);
    for (const ParamInfo& p : m.params()) {
        double sum2 = 0, max_abs = 0;
        for (size_t i = 0; i < p.count(); ++i) {
            sum2 += static_cast<double>(a[p.offset + i]) * a[p.offset + i];
            max_abs = std::max(max_abs, std::fabs(static_cast<double>(a[p.offset + i])));
        }
        const double rms = std::sqrt(sum2 / static_cast<double>(p.count()));
        if (p.name.rfind("fc.", 0) == 0) {
            EXPECT_LE(max_abs, 1.0 / std::sqrt(512.0)) << p.name;  // U(+-1/sqrt(fan_in)), fan_in 128 * 4
            EXPECT_NEAR(rms, 1.0 / std::sqrt(512.0) / std::sqrt(3.0), 0.25 / std::sqrt(512.0)) << p.name;
        } else if (p.name.find(".weight") != std::string::npos && p.rows == 1) {
            EXPECT_EQ(rms, 1.0) << p.name;  // BatchNorm gamma
        } else if (p.rows == 1) {
            EXPECT_EQ(rms, 0.0) << p.name;  // BatchNorm beta
        } else {
            // kaiming_normal_(mode='fan_out'): std sqrt(2 / (out * k * k)); k from the name.
            const double k2 = p.name == "conv1.weight" ? 49 : p.name.find("conv2") != std::string::npos ? 9 : 1;
            EXPECT_NEAR(rms, std::sqrt(2.0 / (static_cast<double>(p.rows) * k2)),
                        0.15 * std::sqrt(2.0 / (static_cast<double>(p.rows) * k2)))
                << p.name;
        }
    }
}

// A tiny ResNet on the CPU with its own flat buffers.
struct Tiny {
    ResNetShape shape;
    ConvEngine engine = ConvEngine::im2col;  // cudnn: the conv_* ops (on the CPU, its reference)
    int batch = 3;
    std::vector<float> params, grads, images;
    std::vector<int32_t> labels;

    Tiny() {
        shape.blocks = {1, 2};
        shape.width = 2;
        shape.image_size = 16;
        shape.num_classes = 5;
        CpuOps ops;
        ResNet m(ops, shape);
        params.resize(m.num_params());
        m.init_params(params.data(), 3);
        // BatchNorm gamma and beta away from 1 and 0, so their gradients are not special.
        PortableRng rng(5);
        for (const ParamInfo& p : m.params())
            if (p.rows == 1 && p.name.rfind("fc.", 0) != 0)
                for (size_t i = 0; i < p.count(); ++i) params[p.offset + i] = static_cast<float>(rng.uniform(0.5, 1.5));
        grads.assign(params.size(), NAN);
        images.resize(static_cast<size_t>(batch) * 16 * 16 * 3);
        labels.resize(static_cast<size_t>(batch));
        make_image_shard(ImageTask{16, 5, 9}, 0, 0, batch, images.data(), labels.data());
    }

    float run(GradientSink* sink = nullptr) {
        CpuOps ops;
        ResNet m(ops, shape, engine);
        m.bind(FlatBuffers{params.data(), params.data(), grads.data()}, batch);
        float loss = 0;
        m.forward_backward(Tensor{images.data(), DType::f32, batch, 16 * 16 * 3}, labels.data(), &loss, 1.0f, sink);
        return loss;
    }
};

TEST(ResNet, BackwardMatchesFiniteDifferencesForEveryParameter) {
    for (ConvEngine engine : {ConvEngine::im2col, ConvEngine::cudnn}) {
    SCOPED_TRACE(conv_engine_name(engine));
    Tiny t;
    t.engine = engine;
    t.run();
    const std::vector<float> analytic = t.grads;
    CpuOps ops;
    ResNet names(ops, t.shape);
    // A small step: every ReLU follows a BatchNorm, so many inputs sit near its kink, and at
    // 2e-3 some cross it (the difference is then not the derivative).
    test::expect_gradients_match_finite_differences(names.params(), t.params, analytic, 5e-4f, [&] { return t.run(); });
    }
}

// The conv engine changes how a convolution is issued (one conv_* op, data gradients
// accumulated in place), not what it computes: on the CPU, whose conv_* ops are im2col +
// GEMM, both engines give the same loss and gradients to fp32 rounding. On the GPU the
// conv_* ops are cuDNN's (tests/gpu/test_cuda_conv_ops.cpp).
TEST(ResNet, BothConvEnginesGiveTheSameGradients) {
    Tiny a, b;
    b.engine = ConvEngine::cudnn;
    EXPECT_NEAR(a.run(), b.run(), 1e-6);
    ASSERT_EQ(a.grads.size(), b.grads.size());
    double diff2 = 0, ref2 = 0;
    for (size_t i = 0; i < a.grads.size(); ++i) {
        diff2 += (static_cast<double>(a.grads[i]) - b.grads[i]) * (static_cast<double>(a.grads[i]) - b.grads[i]);
        ref2 += static_cast<double>(a.grads[i]) * a.grads[i];
    }
    EXPECT_LT(std::sqrt(diff2 / ref2), 1e-5);
}

// auto takes cuDNN only where the backend has it (never the CPU; a trace in every build, so a
// projection does not depend on the build);
// cudnn on the CPU is refused naming the file and key, before any model is built; a trace takes
// cudnn in any build (a cuDNN run's record is projected from anywhere).
TEST(ResNet, ConvEngineResolvesPerBackend) {
    TrainConfig cfg = parse_config("model: resnet\n", "r.yaml");
    CpuOps cpu;
    TraceOps trace(Precision::bf16);
    EXPECT_EQ(resolve_conv_engine(cfg, cpu), ConvEngine::im2col);
    EXPECT_EQ(resolve_conv_engine(cfg, trace), ConvEngine::cudnn);
    cfg.conv_engine = ConvEngine::cudnn;
    EXPECT_EQ(resolve_conv_engine(cfg, trace), ConvEngine::cudnn);
    try {
        resolve_conv_engine(cfg, cpu);
        ADD_FAILURE() << "cudnn accepted on the CPU";
    } catch (const UserError& e) {
        EXPECT_EQ(std::string(e.what()).rfind("r.yaml: key 'conv_engine': cudnn: ", 0), 0u) << e.what();
    }
    EXPECT_THROW(create_model(cfg, cpu), UserError);
    cfg.conv_engine = ConvEngine::im2col;
    EXPECT_EQ(resolve_conv_engine(cfg, trace), ConvEngine::im2col);
}

// What `project` learns from: with the cudnn engine every convolution but the 1x1 stride-1
// ones (GEMMs) is one conv_forward, one conv_backward_filter and (but for the stem) one
// conv_backward_data in the trace, and no im2col or col2im remains; BatchNorm is fused with
// its ReLU (and the residual add), so no standalone add or ReLU forward is left.
TEST(ResNet, TraceCountsEachCudnnConvolutionAsOneOp) {
    ResNetShape shape = with_blocks({3, 4, 6, 3});
    shape.image_size = 64;
    auto count = [](const TraceOps& t, const std::string& kind) {
        return std::count_if(t.trace().begin(), t.trace().end(), [&](const TracedOp& op) { return op.kind == kind; });
    };
    for (ConvEngine engine : {ConvEngine::im2col, ConvEngine::cudnn}) {
        SCOPED_TRACE(conv_engine_name(engine));
        TraceOps ops(Precision::bf16);
        ResNet m(ops, shape, engine);
        DeviceBuffer params(ops, m.num_params() * 4), weights(ops, m.num_params() * 2), grads(ops, m.num_params() * 4);
        DeviceBuffer images(ops, size_t{2} * 64 * 64 * 3 * 2), labels(ops, 2 * 4);
        m.bind(FlatBuffers{params.as<float>(), weights.get(), grads.as<float>()}, 2);
        float loss = 0;
        m.forward_backward(Tensor{images.get(), DType::bf16, 2, 64 * 64 * 3}, labels.as<int32_t>(), &loss, 1.0f,
                           nullptr);
        // ResNet-50's convolutions that are not 1x1 stride 1: the stem, 16 3x3 and the 3 strided downsamples.
        const long spatial = engine == ConvEngine::cudnn ? 20 : 0;
        EXPECT_EQ(count(ops, "conv_forward"), spatial);
        EXPECT_EQ(count(ops, "conv_backward_filter"), spatial);
        EXPECT_EQ(count(ops, "conv_backward_data"), spatial == 0 ? 0 : spatial - 1);
        EXPECT_EQ(count(ops, "im2col"), engine == ConvEngine::im2col ? 40 : 0);
        EXPECT_EQ(count(ops, "col2im"), engine == ConvEngine::im2col ? 19 : 0);
        // The 33 1x1 stride-1 convolutions and the classifier, 3 GEMMs each; im2col adds 3 per
        // other convolution but for the stem's input gradient.
        EXPECT_EQ(count(ops, "gemm"), 3 * 34 + (engine == ConvEngine::im2col ? 3 * 20 - 1 : 0));
        EXPECT_EQ(count(ops, "batchnorm_relu_forward"), 1 + 16 * 2 + 16);  // stem, conv1/conv2, each block's end
        EXPECT_EQ(count(ops, "batchnorm_relu_backward"), 1 + 16 * 2);
        EXPECT_EQ(count(ops, "batchnorm_forward"), 4);  // the downsamples
        EXPECT_EQ(count(ops, "add"), 0);
        EXPECT_EQ(count(ops, "activation_forward"), 0);
        for (const TracedOp& op : ops.trace())
            if (op.kind.rfind("conv_", 0) == 0) {
                EXPECT_TRUE(op.tensor_core);
                EXPECT_EQ(op.flops, 2.0 * static_cast<double>(op.m) * op.n * op.k);
            }
    }
}

TEST(ResNet, EveryGradientReportedOnceWhenFinalInReverseParameterOrder) {
    Tiny t;
    CpuOps ops;
    ResNet names(ops, t.shape);
    test::RecordingSink sink;
    sink.params = &names.params();
    sink.grads = &t.grads;
    t.run(&sink);
    test::expect_each_gradient_reported_once_when_final(sink, t.grads);
    // Exactly the reverse of the parameter order (the bucketer's, as DDP's): fc.bias first, the
    // downsample before its block's conv3, conv1.weight last.
    std::vector<int> reverse(names.params().size());
    for (size_t i = 0; i < reverse.size(); ++i) reverse[i] = static_cast<int>(reverse.size() - 1 - i);
    EXPECT_EQ(sink.order, reverse);
}

TEST(ResNet, FlopsPerSampleIsThreeTimesTorchvisionsForwardCount) {
    CpuOps ops;
    ResNet m(ops, ResNetShape{});
    // torchvision lists ResNet-50 at 4.09 GFLOPS, which are multiply-adds of the forward at
    // 224x224. Ours: forward + weight gradient + input gradient (not the stem's, whose input
    // is the image), 2 FLOPs per multiply-add.
    const double stem_macs = 112.0 * 112 * 64 * 147;
    const double forward_macs = (m.flops_per_sample() + 2 * stem_macs) / 6.0;
    EXPECT_NEAR(forward_macs / 1e9, 4.09, 0.01);
}

// ---- image data

TEST(ImageData, ShardsArePureFunctionsOfSlotAndRowAndClassesDiffer) {
    const ImageTask task{8, 4, 11};
    const size_t elems = 8 * 8 * 3;
    std::vector<float> whole(12 * elems), part(4 * elems), other(12 * elems);
    std::vector<int32_t> whole_labels(12), part_labels(4), other_labels(12);
    make_image_shard(task, 3, 0, 12, whole.data(), whole_labels.data());
    make_image_shard(task, 3, 8, 4, part.data(), part_labels.data());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + 8 * elems));
    EXPECT_TRUE(std::equal(part_labels.begin(), part_labels.end(), whole_labels.begin() + 8));
    make_image_shard(task, 4, 0, 12, other.data(), other_labels.data());
    EXPECT_NE(other, whole);
    for (int32_t l : whole_labels) {
        EXPECT_GE(l, 0);
        EXPECT_LT(l, 4);
    }
    // Images of one class share their pattern: closer to each other than to another class's.
    std::vector<float> many(400 * elems);
    std::vector<int32_t> many_labels(400);
    make_image_shard(task, 0, 0, 400, many.data(), many_labels.data());
    auto distance = [&](int a, int b) {
        double d = 0;
        for (size_t e = 0; e < elems; ++e) d += std::pow(many[a * elems + e] - many[b * elems + e], 2);
        return d;
    };
    double same = 0, different = 0;
    int n_same = 0, n_different = 0;
    for (int a = 0; a < 40; ++a)
        for (int b = a + 1; b < 40; ++b)
            (many_labels[a] == many_labels[b] ? (same += distance(a, b), ++n_same)
                                              : (different += distance(a, b), ++n_different));
    ASSERT_GT(n_same, 0);
    EXPECT_LT(same / n_same, 0.6 * different / n_different);
}

TEST(ImageData, DatasetServesTheRowsOfItsRank) {
    TrainConfig cfg = load_config_file(preset_path("ci-resnet.yaml"));
    CpuOps ops;
    auto all = create_dataset(cfg, ops, 8, 0, 8);
    auto second = create_dataset(cfg, ops, 8, 1, 4);  // rank 1 of 2
    const Tensor a = all->inputs(5), b = second->inputs(5);
    EXPECT_EQ(b.rows, 4);
    EXPECT_EQ(b.cols, 32 * 32 * 3);
    const auto* pa = static_cast<const float*>(a.data);
    const auto* pb = static_cast<const float*>(b.data);
    EXPECT_TRUE(std::equal(pb, pb + 4 * b.cols, pa + 4 * b.cols));
    EXPECT_TRUE(std::equal(second->labels(5), second->labels(5) + 4, all->labels(5) + 4));
}

TEST(ResNet, LossFallsOnTheCpuWithin30Steps) {
    TrainConfig cfg = load_config_file(preset_path("ci-resnet.yaml"));
    validate_config(cfg);
    CpuOps ops;
    MpiCommunicator comm(MPI_COMM_SELF);
    DataParallelTrainer trainer(cfg, ops, comm);
    std::vector<float> losses;
    for (int s = 0; s < 30; ++s) {
        trainer.step(s);
        losses.push_back(trainer.last_loss());
    }
    const double first = (losses[0] + losses[1] + losses[2]) / 3, last = (losses[27] + losses[28] + losses[29]) / 3;
    EXPECT_NEAR(losses[0], std::log(10.0), 0.7);  // near uniform over the classes at the start
    EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
    for (float l : losses) EXPECT_TRUE(std::isfinite(l));
}

}  // namespace
}  // namespace sb
