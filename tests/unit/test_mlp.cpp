// The MLP on the CPU backend: parameter layout, init, forward against a double-precision
// reference, the whole backward against central finite differences of the loss, and
// the gradient_ready contract the bucketer relies on (once each, reverse order, final).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "models/cpu/cpu_ops.h"
#include "models/mlp.h"
#include "models/rng.h"
#include "base/errors.h"

namespace sb {
namespace {

// A bound model on the CPU with its own flat buffers and one batch of data.
struct Harness {
    CpuOps ops;
    Mlp model;
    int batch;
    std::vector<float> params, grads, x;
    std::vector<int32_t> labels;

    Harness(const MlpShape& shape, int batch_rows, uint64_t seed) : model(ops, shape), batch(batch_rows) {
        params.resize(model.num_params());
        grads.assign(model.num_params(), 0.0f);
        model.init_params(params.data(), seed);
        model.bind(FlatBuffers{params.data(), params.data(), grads.data()}, batch);
        PortableRng rng(seed + 1);
        x.resize(static_cast<size_t>(batch) * shape.input_dim);
        for (float& v : x) v = static_cast<float>(rng.normal());
        for (int i = 0; i < batch; ++i) labels.push_back(static_cast<int32_t>(rng.next_u64() % shape.num_classes));
    }
    float loss(GradientSink* sink = nullptr, float grad_scale = 1.0f) {
        float l = 0;
        model.forward_backward(Tensor{x.data(), DType::f32, batch, model.shape().input_dim}, labels.data(), &l,
                               grad_scale, sink);
        return l;
    }
};

double act_ref(Activation act, double z) {
    switch (act) {
        case Activation::none: return z;
        case Activation::relu: return z > 0 ? z : 0;
        case Activation::tanh: return std::tanh(z);
        case Activation::gelu: return 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
    }
    return 0;
}

// Mean cross-entropy of the model in double, straight from the parameter layout.
double reference_loss(const Harness& h) {
    const MlpShape& s = h.model.shape();
    const auto& p = h.model.params();
    double total = 0;
    for (int r = 0; r < h.batch; ++r) {
        std::vector<double> a(h.x.begin() + static_cast<size_t>(r) * s.input_dim,
                              h.x.begin() + static_cast<size_t>(r + 1) * s.input_dim);
        for (int l = 0; l < h.model.num_layers(); ++l) {
            const ParamInfo& w = p[2 * l];
            const ParamInfo& b = p[2 * l + 1];
            std::vector<double> z(w.rows);
            for (int o = 0; o < w.rows; ++o) {
                double acc = h.params[b.offset + o];
                for (int i = 0; i < w.cols; ++i) acc += h.params[w.offset + o * w.cols + i] * a[i];
                z[o] = l + 1 < h.model.num_layers() ? act_ref(s.activation, acc) : acc;
            }
            a = z;
        }
        double mx = a[0], sum = 0;
        for (double v : a) mx = std::max(mx, v);
        for (double v : a) sum += std::exp(v - mx);
        total += std::log(sum) + mx - a[h.labels[r]];
    }
    return total / h.batch;
}

TEST(Mlp, ParameterLayoutIsForwardOrderAndContiguous) {
    CpuOps ops;
    Mlp model(ops, MlpShape{10, {20, 30}, 5, Activation::relu});
    const auto& p = model.params();
    ASSERT_EQ(p.size(), 6u);
    const char* names[] = {"layer0.weight", "layer0.bias", "layer1.weight", "layer1.bias", "layer2.weight",
                           "layer2.bias"};
    const int64_t shapes[6][2] = {{20, 10}, {1, 20}, {30, 20}, {1, 30}, {5, 30}, {1, 5}};
    size_t offset = 0;
    for (size_t i = 0; i < p.size(); ++i) {
        EXPECT_EQ(p[i].name, names[i]);
        EXPECT_EQ(p[i].offset, offset);
        EXPECT_EQ(p[i].rows, shapes[i][0]);
        EXPECT_EQ(p[i].cols, shapes[i][1]);
        offset += p[i].count();
    }
    EXPECT_EQ(model.num_params(), 200u + 20 + 600 + 30 + 150 + 5);
    EXPECT_EQ(model.num_params(), offset);
    EXPECT_EQ(model.name(), "mlp");
    EXPECT_EQ(model.num_layers(), 3);
}

TEST(Mlp, RejectsNonPositiveWidths) {
    CpuOps ops;
    EXPECT_THROW(Mlp(ops, MlpShape{0, {4}, 3, Activation::relu}), UserError);
    EXPECT_THROW(Mlp(ops, MlpShape{4, {4, -1}, 3, Activation::relu}), UserError);
    EXPECT_THROW(Mlp(ops, MlpShape{4, {4}, 0, Activation::relu}), UserError);
}

TEST(Mlp, InitIsDeterministicAndKaimingUniform) {
    CpuOps ops;
    Mlp model(ops, MlpShape{64, {256}, 10, Activation::gelu});
    std::vector<float> a(model.num_params()), b(model.num_params()), c(model.num_params());
    model.init_params(a.data(), 42);
    model.init_params(b.data(), 42);
    model.init_params(c.data(), 43);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    for (const ParamInfo& p : model.params()) {
        const double bound = 1.0 / std::sqrt(static_cast<double>(p.name[5] == '0' ? 64 : 256));
        double sum = 0, sq = 0;
        for (size_t i = 0; i < p.count(); ++i) {
            const double v = a[p.offset + i];
            EXPECT_LE(std::fabs(v), bound) << p.name;
            sum += v;
            sq += v * v;
        }
        if (p.count() >= 1000) {  // U(-b, b): mean 0, variance b^2 / 3
            EXPECT_NEAR(sum / p.count(), 0.0, 0.1 * bound) << p.name;
            EXPECT_NEAR(sq / p.count(), bound * bound / 3, 0.1 * bound * bound) << p.name;
        }
    }
    // The layout's first values are pinned: a change of generator changes every result.
    PortableRng rng(mix_seed(42, 0));
    EXPECT_EQ(a[0], static_cast<float>(rng.uniform(-0.125, 0.125)));
}

TEST(Mlp, ForwardLossMatchesDoubleReference) {
    for (Activation act : {Activation::none, Activation::relu, Activation::gelu, Activation::tanh}) {
        SCOPED_TRACE(activation_name(act));
        Harness h(MlpShape{9, {17, 5}, 6, act}, 13, 7);
        EXPECT_NEAR(h.loss(), reference_loss(h), 2e-6);
    }
}

TEST(Mlp, BackwardMatchesFiniteDifferencesForEveryParameter) {
    for (Activation act : {Activation::none, Activation::relu, Activation::gelu, Activation::tanh}) {
        SCOPED_TRACE(activation_name(act));
        Harness h(MlpShape{5, {7, 6}, 4, act}, 3, 11);
        h.loss();
        const std::vector<float> analytic = h.grads;
        int bad = 0;
        for (size_t i = 0; i < h.params.size(); ++i) {
            const float saved = h.params[i];
            const float step = 1e-3f;
            h.params[i] = saved + step;
            const double up = reference_loss(h);
            h.params[i] = saved - step;
            const double down = reference_loss(h);
            h.params[i] = saved;
            // The double-precision loss keeps finite differences free of fp32 rounding noise.
            const double fd = (up - down) / (2.0 * (static_cast<double>(saved + step) - saved));
            if (std::fabs(analytic[i] - fd) > 1e-4 + 1e-3 * std::fabs(fd)) {
                if (++bad <= 5) ADD_FAILURE() << "param " << i << ": backward " << analytic[i] << " vs fd " << fd;
            }
        }
        EXPECT_EQ(bad, 0);
        // Also against the model's own fp32 loss on a few parameters, with a coarser step.
        for (size_t i : {size_t(0), h.params.size() / 2, h.params.size() - 1}) {
            const float saved = h.params[i];
            h.params[i] = saved + 1e-2f;
            const double up = h.loss();
            h.params[i] = saved - 1e-2f;
            const double down = h.loss();
            h.params[i] = saved;
            EXPECT_NEAR(analytic[i], (up - down) / 2e-2, 2e-3) << i;
        }
    }
}

TEST(Mlp, GradScaleScalesEveryGradient) {
    Harness h(MlpShape{6, {8}, 3, Activation::tanh}, 4, 3);
    const float l1 = h.loss(nullptr, 1.0f);
    const std::vector<float> g1 = h.grads;
    const float l2 = h.loss(nullptr, 256.0f);
    EXPECT_EQ(l1, l2);
    for (size_t i = 0; i < g1.size(); ++i) EXPECT_FLOAT_EQ(h.grads[i], 256.0f * g1[i]);
}

// Records the order of gradient_ready calls and a copy of each slot at that moment.
class RecordingSink : public GradientSink {
public:
    RecordingSink(const Mlp& model, const std::vector<float>& grads) : model_(model), grads_(grads) {}
    void gradient_ready(int index) override {
        order.push_back(index);
        const ParamInfo& p = model_.params().at(index);
        snapshots.emplace_back(grads_.begin() + p.offset, grads_.begin() + p.offset + p.count());
    }
    std::vector<int> order;
    std::vector<std::vector<float>> snapshots;

private:
    const Mlp& model_;
    const std::vector<float>& grads_;
};

TEST(Mlp, GradientReadyOncePerParameterInReverseOrderWhenFinal) {
    Harness h(MlpShape{6, {8, 7, 5}, 4, Activation::gelu}, 5, 21);
    // Garbage in the gradient buffer: a slot reported before it is written would show NaN.
    std::fill(h.grads.begin(), h.grads.end(), std::numeric_limits<float>::quiet_NaN());
    RecordingSink sink(h.model, h.grads);
    h.loss(&sink);
    const int n = static_cast<int>(h.model.params().size());
    ASSERT_EQ(static_cast<int>(sink.order.size()), n);
    for (int i = 0; i < n; ++i) EXPECT_EQ(sink.order[i], n - 1 - i);
    for (int i = 0; i < n; ++i) {
        const ParamInfo& p = h.model.params()[sink.order[i]];
        const std::vector<float> final_value(h.grads.begin() + p.offset, h.grads.begin() + p.offset + p.count());
        EXPECT_EQ(sink.snapshots[i], final_value) << p.name;  // also fails on any NaN left
    }
}

TEST(Mlp, FlopsPerSampleCountsEveryGemm) {
    CpuOps ops;
    Mlp model(ops, MlpShape{10, {20, 30}, 5, Activation::relu});
    // forward 2*MAC and dW 2*MAC per layer; dX 2*MAC for all but the first layer.
    EXPECT_DOUBLE_EQ(model.flops_per_sample(), 4.0 * 10 * 20 + 6.0 * 20 * 30 + 6.0 * 30 * 5);
    Mlp linear(ops, MlpShape{8, {}, 3, Activation::none});
    EXPECT_DOUBLE_EQ(linear.flops_per_sample(), 4.0 * 8 * 3);
}

}  // namespace
}  // namespace sb
