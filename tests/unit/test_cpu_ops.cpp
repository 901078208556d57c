// The CPU backend against independent references: GEMM against a naive double loop for
// every transpose and odd sizes, activations and the loss against finite differences,
// the optimizers against PyTorch's update rules written out step by step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "models/checksum.h"
#include "models/cpu/cpu_ops.h"
#include "models/mlp.h"
#include "models/rng.h"
#include "base/errors.h"

#include "tests/test_util.h"

namespace sb {
namespace {

using test::random_vector;
using test::view;

// C = alpha op(A) op(B) + beta C0 + bias, in double; also the sum of |terms| per element
// for a rounding-aware tolerance.
void reference_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const std::vector<float>& a,
                    const std::vector<float>& b, double beta, const std::vector<float>& c0, const float* bias,
                    std::vector<double>& c, std::vector<double>& mag) {
    c.assign(static_cast<size_t>(m) * n, 0.0);
    mag.assign(c.size(), 0.0);
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
            double s = 0.0, sa = 0.0;
            for (int p = 0; p < k; ++p) {
                const double av = ta ? a[static_cast<size_t>(p) * m + i] : a[static_cast<size_t>(i) * k + p];
                const double bv = tb ? b[static_cast<size_t>(j) * k + p] : b[static_cast<size_t>(p) * n + j];
                s += av * bv;
                sa += std::fabs(av * bv);
            }
            double r = alpha * s;
            double rm = std::fabs(alpha) * sa;
            if (beta != 0.0) {
                r += beta * c0[static_cast<size_t>(i) * n + j];
                rm += std::fabs(beta * c0[static_cast<size_t>(i) * n + j]);
            }
            if (bias) {
                r += bias[j];
                rm += std::fabs(bias[j]);
            }
            c[static_cast<size_t>(i) * n + j] = r;
            mag[static_cast<size_t>(i) * n + j] = rm;
        }
}

// Runs one GEMM and checks every element; returns the number of mismatches.
int check_gemm(CpuOps& ops, bool ta, bool tb, int m, int n, int k, float alpha, float beta, bool with_bias,
               bool nan_c, uint64_t seed) {
    std::vector<float> a = random_vector(static_cast<size_t>(m) * k, seed);
    std::vector<float> b = random_vector(static_cast<size_t>(k) * n, seed + 1);
    std::vector<float> c0 = random_vector(static_cast<size_t>(m) * n, seed + 2);
    std::vector<float> bias = random_vector(n, seed + 3);
    std::vector<float> c = c0;
    if (nan_c) std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());
    ops.gemm(ta, tb, alpha, ta ? view(a, k, m) : view(a, m, k), tb ? view(b, n, k) : view(b, k, n), beta,
             view(c, m, n), with_bias ? bias.data() : nullptr);
    std::vector<double> ref, mag;
    reference_gemm(ta, tb, m, n, k, alpha, a, b, beta, c0, with_bias ? bias.data() : nullptr, ref, mag);
    int bad = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double tol = 4e-7 * (k + 4) * mag[i] + 1e-30;
        if (!(std::fabs(c[i] - ref[i]) <= tol)) {
            if (bad < 3)
                ADD_FAILURE() << "gemm ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k
                              << " element " << i << ": " << c[i] << " vs " << ref[i];
            ++bad;
        }
    }
    return bad;
}

TEST(CpuOps, EnumNamesAndSizes) {
    EXPECT_EQ(dtype_size(DType::f32), 4u);
    EXPECT_EQ(dtype_size(DType::bf16), 2u);
    EXPECT_EQ(dtype_size(DType::f16), 2u);
    EXPECT_STREQ(dtype_name(DType::bf16), "bf16");
    EXPECT_EQ(compute_dtype(Precision::fp32), DType::f32);
    EXPECT_EQ(compute_dtype(Precision::tf32), DType::f32);
    EXPECT_EQ(compute_dtype(Precision::bf16), DType::bf16);
    EXPECT_EQ(compute_dtype(Precision::fp16), DType::f16);
    EXPECT_STREQ(precision_name(Precision::tf32), "tf32");
    EXPECT_STREQ(activation_name(Activation::gelu), "gelu");
    EXPECT_STREQ(activation_name(Activation::none), "none");
}

TEST(CpuOps, RejectsPrecisionsOtherThanFp32) {
    EXPECT_THROW(CpuOps(Precision::bf16), UserError);
    EXPECT_THROW(CpuOps(Precision::fp16), UserError);
    EXPECT_THROW(CpuOps(Precision::tf32), UserError);
    try {
        CpuOps ops(Precision::bf16);
    } catch (const UserError& e) {
        EXPECT_STREQ(e.what(), "the cpu backend supports precision fp32 only; got bf16");
    }
    CpuOps ops;
    EXPECT_EQ(ops.precision(), Precision::fp32);
    EXPECT_EQ(ops.name(), "cpu");
    EXPECT_EQ(ops.stream(), nullptr);
}

TEST(CpuOps, GemmAllTransposesOddSizes) {
    CpuOps ops;
    const int sizes[] = {1, 3, 17, 65, 130};
    uint64_t seed = 100;
    int bad = 0, runs = 0;
    for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
            for (int m : sizes)
                for (int n : sizes)
                    for (int k : sizes) {
                        bad += check_gemm(ops, ta, tb, m, n, k, 1.0f, 0.0f, false, false, seed += 10);
                        ++runs;
                    }
    EXPECT_EQ(runs, 500);
    EXPECT_EQ(bad, 0);
}

TEST(CpuOps, GemmAlphaBetaBias) {
    CpuOps ops;
    int bad = 0;
    for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb) {
            bad += check_gemm(ops, ta, tb, 65, 17, 130, 0.75f, -1.5f, true, false, 7 + ta * 2 + tb);
            bad += check_gemm(ops, ta, tb, 3, 130, 65, -2.0f, 1.0f, false, false, 17 + ta * 2 + tb);
            bad += check_gemm(ops, ta, tb, 17, 3, 1, 1.0f, 0.5f, true, false, 27 + ta * 2 + tb);
            bad += check_gemm(ops, ta, tb, 5, 7, 9, 0.0f, 2.0f, true, false, 37 + ta * 2 + tb);
        }
    // Larger than every cache block (MC, KC, NC) in every dimension.
    bad += check_gemm(ops, false, true, 300, 2100, 520, 1.0f, 0.25f, true, false, 99);
    bad += check_gemm(ops, true, false, 131, 70, 600, 1.0f, 0.0f, false, false, 98);
    EXPECT_EQ(bad, 0);
}

TEST(CpuOps, GemmBetaZeroIgnoresNanInC) {
    CpuOps ops;
    int bad = 0;
    for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb) {
            bad += check_gemm(ops, ta, tb, 17, 65, 3, 1.0f, 0.0f, true, true, 50 + ta * 2 + tb);
            bad += check_gemm(ops, ta, tb, 1, 130, 17, 0.5f, 0.0f, false, true, 60 + ta * 2 + tb);
        }
    EXPECT_EQ(bad, 0);
}

TEST(CpuOps, GemmRejectsMismatchedShapes) {
    CpuOps ops;
    std::vector<float> a(6), b(6), c(4);
    EXPECT_ANY_THROW(ops.gemm(false, false, 1.0f, view(a, 2, 3), view(b, 2, 3), 0.0f, view(c, 2, 2)));
    EXPECT_NO_THROW(ops.gemm(false, true, 1.0f, view(a, 2, 3), view(b, 2, 3), 0.0f, view(c, 2, 2)));
    Tensor half = view(a, 2, 3);
    half.dtype = DType::bf16;
    EXPECT_ANY_THROW(ops.gemm(false, true, 1.0f, half, half, 0.0f, view(c, 2, 2)));
}

double activation_reference(Activation act, double x) {
    switch (act) {
        case Activation::none: return x;
        case Activation::relu: return x > 0 ? x : 0;
        case Activation::tanh: return std::tanh(x);
        case Activation::gelu:
            return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    }
    return 0;
}

TEST(CpuOps, ActivationsForwardAndBackwardAgainstFiniteDifferences) {
    CpuOps ops;
    const int n = 257;
    std::vector<float> x = random_vector(n, 5, -4.0, 4.0);
    for (float& v : x)
        if (std::fabs(v) < 0.05f) v = 0.3f;  // keep finite differences away from relu's kink
    std::vector<float> g = random_vector(n, 6);
    for (Activation act : {Activation::none, Activation::relu, Activation::gelu, Activation::tanh}) {
        SCOPED_TRACE(activation_name(act));
        std::vector<float> y(n), d(n);
        ops.activation_forward(act, view(x, 1, n), view(y, 1, n));
        for (int i = 0; i < n; ++i) EXPECT_NEAR(y[i], activation_reference(act, x[i]), 1e-5) << i;
        ops.activation_backward(act, view(x, 1, n), view(g, 1, n), view(d, 1, n));
        const float h = 1e-2f;
        std::vector<float> xp = x, xm = x, yp(n), ym(n);
        for (int i = 0; i < n; ++i) {
            xp[i] += h;
            xm[i] -= h;
        }
        ops.activation_forward(act, view(xp, 1, n), view(yp, 1, n));
        ops.activation_forward(act, view(xm, 1, n), view(ym, 1, n));
        for (int i = 0; i < n; ++i) {
            const double fd = (static_cast<double>(yp[i]) - ym[i]) / (2.0 * h);
            EXPECT_NEAR(d[i], g[i] * fd, 2e-3) << "x=" << x[i];
        }
        // grad_pre may alias grad_out.
        std::vector<float> inplace = g;
        ops.activation_backward(act, view(x, 1, n), view(inplace, 1, n), view(inplace, 1, n));
        for (int i = 0; i < n; ++i) EXPECT_EQ(inplace[i], d[i]);
    }
}

TEST(CpuOps, BiasGradSumsRows) {
    CpuOps ops;
    const int rows = 33, cols = 19;
    std::vector<float> g = random_vector(rows * cols, 8);
    std::vector<float> out(cols, std::numeric_limits<float>::quiet_NaN());
    ops.bias_grad(view(g, rows, cols), out.data());
    for (int j = 0; j < cols; ++j) {
        double s = 0;
        for (int i = 0; i < rows; ++i) s += g[i * cols + j];
        EXPECT_NEAR(out[j], s, 1e-5);
    }
}

// Rows whose label is negative are not read: junk there (NaN, inf) changes nothing, and the
// sums are bit for bit bias_grad's over the matrix with those rows zeroed.
TEST(CpuOps, LabelledBiasGradReadsOnlyLabelledRows) {
    CpuOps ops;
    const int rows = 33, cols = 19;
    std::vector<float> g = random_vector(rows * cols, 8);
    std::vector<int32_t> labels(rows);
    for (int i = 0; i < rows; ++i) labels[i] = i % 3 == 0 ? i % cols : -1 - i % 2;  // 11 labelled
    std::vector<float> zeroed = g;
    for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j)
            if (labels[i] < 0) {
                g[i * cols + j] = j % 2 ? std::numeric_limits<float>::quiet_NaN() : -INFINITY;
                zeroed[i * cols + j] = 0.0f;
            }
    std::vector<float> want(cols), got(cols, std::numeric_limits<float>::quiet_NaN());
    ops.bias_grad(view(zeroed, rows, cols), want.data());
    ops.labelled_bias_grad(view(g, rows, cols), labels.data(), 11, got.data());
    for (int j = 0; j < cols; ++j) {
        EXPECT_EQ(got[j], want[j]) << j;
        double s = 0;
        for (int i = 0; i < rows; i += 3) s += g[i * cols + j];
        EXPECT_NEAR(got[j], s, 1e-5) << j;
    }
}

// labelled_rows is what the trace counts the bytes by: the CPU refuses a wrong one, naming both counts.
TEST(CpuOps, LabelledRowsMustCountTheLabelsThatAreNotNegative) {
    CpuOps ops;
    std::vector<float> logits(6), grad(6), sums(3);
    std::vector<int32_t> labels = {-1, 2};
    float loss = 0;
    const auto message = [](auto&& call) {
        try {
            call();
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    const std::string loss_error = message(
        [&] { ops.softmax_cross_entropy(view(logits, 2, 3), labels.data(), 2, &loss, view(grad, 2, 3), 1.0f); });
    EXPECT_NE(loss_error.find("softmax_cross_entropy"), std::string::npos) << loss_error;
    EXPECT_NE(loss_error.find("labelled_rows is 2 but 1 of 2 labels are >= 0"), std::string::npos) << loss_error;
    const std::string bias_error =
        message([&] { ops.labelled_bias_grad(view(grad, 2, 3), labels.data(), 0, sums.data()); });
    EXPECT_NE(bias_error.find("labelled_bias_grad"), std::string::npos) << bias_error;
    EXPECT_NE(bias_error.find("labelled_rows is 0 but 1 of 2 labels are >= 0"), std::string::npos) << bias_error;
}

TEST(CpuOps, SoftmaxCrossEntropyLossAndGradient) {
    CpuOps ops;
    const int rows = 6, cols = 5;
    std::vector<float> logits = random_vector(rows * cols, 9, -3.0, 3.0);
    std::vector<int32_t> labels = {0, 4, 2, 2, 1, 3};
    std::vector<float> grad(rows * cols);
    float loss = 0;
    ops.softmax_cross_entropy(view(logits, rows, cols), labels.data(), rows, &loss, view(grad, rows, cols), 1.0f);

    // Direct formula: mean of -log(exp(x_y) / sum exp(x)).
    double direct = 0;
    for (int i = 0; i < rows; ++i) {
        double s = 0;
        for (int j = 0; j < cols; ++j) s += std::exp(static_cast<double>(logits[i * cols + j]));
        direct += -std::log(std::exp(static_cast<double>(logits[i * cols + labels[i]])) / s);
    }
    EXPECT_NEAR(loss, direct / rows, 1e-6);

    // Gradient against central differences of the loss.
    std::vector<float> scratch(rows * cols);
    for (int e = 0; e < rows * cols; ++e) {
        const float h = 1e-2f;
        std::vector<float> lp = logits, lm = logits;
        lp[e] += h;
        lm[e] -= h;
        float fp = 0, fm = 0;
        ops.softmax_cross_entropy(view(lp, rows, cols), labels.data(), rows, &fp, view(scratch, rows, cols), 1.0f);
        ops.softmax_cross_entropy(view(lm, rows, cols), labels.data(), rows, &fm, view(scratch, rows, cols), 1.0f);
        EXPECT_NEAR(grad[e], (static_cast<double>(fp) - fm) / (2.0 * h), 2e-4) << e;
    }

    // grad_scale multiplies the gradient, not the loss.
    std::vector<float> scaled(rows * cols);
    float loss_scaled = 0;
    ops.softmax_cross_entropy(view(logits, rows, cols), labels.data(), rows, &loss_scaled, view(scaled, rows, cols), 1024.0f);
    EXPECT_FLOAT_EQ(loss_scaled, loss);
    for (int e = 0; e < rows * cols; ++e) EXPECT_FLOAT_EQ(scaled[e], 1024.0f * grad[e]);
}

TEST(CpuOps, SoftmaxCrossEntropyIsStableForHugeLogits) {
    CpuOps ops;
    std::vector<float> logits = {1000.0f, 1001.0f, 999.0f, -1000.0f, 0.0f, 1000.0f};
    std::vector<int32_t> labels = {1, 0};
    std::vector<float> grad(6);
    float loss = 0;
    ops.softmax_cross_entropy(view(logits, 2, 3), labels.data(), 2, &loss, view(grad, 2, 3), 1.0f);
    const double l0 = std::log(std::exp(-1.0) + 1.0 + std::exp(-2.0));          // row 0, label at the max
    const double l1 = 2000.0 + std::log(1.0 + std::exp(-1000.0) + std::exp(-2000.0));  // row 1
    EXPECT_NEAR(loss, (l0 + l1) / 2, 1e-3);
    for (float g : grad) EXPECT_TRUE(std::isfinite(g));
    EXPECT_NEAR(grad[3], -0.5, 1e-6);  // softmax ~ 0 at the label
    EXPECT_NEAR(grad[5], 0.5, 1e-6);
}

TEST(CpuOps, SoftmaxCrossEntropyRejectsLabelsOutOfRange) {
    CpuOps ops;
    std::vector<float> logits(6), grad(6);
    float loss = 0;
    std::vector<int32_t> too_big = {0, 3};  // negative labels are valid: ignored rows (test_transformer_ops)
    EXPECT_ANY_THROW(ops.softmax_cross_entropy(view(logits, 2, 3), too_big.data(), 2, &loss, view(grad, 2, 3), 1.0f));
}

TEST(CpuOps, SgdMatchesTorchOverThreeSteps) {
    CpuOps ops;
    OptimizerConfig cfg;
    cfg.kind = OptimizerConfig::Kind::sgd;
    cfg.lr = 0.1f;
    cfg.momentum = 0.9f;
    cfg.weight_decay = 0.01f;
    std::vector<float> p = {1.0f, -2.0f}, copy(2, 0.0f), buf(2, 0.0f);
    const double grads[3][2] = {{0.5, 0.1}, {-0.25, 0.2}, {1.0, -0.3}};
    double rp[2] = {1.0, -2.0}, rb[2] = {0.0, 0.0};
    for (int step = 0; step < 3; ++step) {
        std::vector<float> g = {static_cast<float>(grads[step][0]), static_cast<float>(grads[step][1])};
        ops.sgd_step(p.data(), g.data(), buf.data(), 2, cfg, view(copy, 1, 2));
        for (int i = 0; i < 2; ++i) {
            const double gd = grads[step][i] + 0.01 * rp[i];
            rb[i] = step == 0 ? gd : 0.9 * rb[i] + gd;  // torch: buf = g on the first step
            rp[i] -= 0.1 * rb[i];
            EXPECT_NEAR(p[i], rp[i], 1e-6) << "step " << step + 1;
            EXPECT_EQ(copy[i], p[i]);
        }
        if (step == 0) {
            EXPECT_NEAR(p[0], 0.949, 1e-7);  // 1 - 0.1 * (0.5 + 0.01 * 1)
        }
    }
    // Without momentum no buffer is needed.
    cfg.momentum = 0.0f;
    std::vector<float> q = {1.0f}, gq = {0.5f};
    ops.sgd_step(q.data(), gq.data(), nullptr, 1, cfg, Tensor{});
    EXPECT_NEAR(q[0], 1.0 - 0.1 * (0.5 + 0.01), 1e-7);
}

TEST(CpuOps, AdamwMatchesTorchOverThreeSteps) {
    CpuOps ops;
    OptimizerConfig cfg;
    cfg.lr = 0.1f;
    cfg.weight_decay = 0.1f;
    cfg.beta1 = 0.9f;
    cfg.beta2 = 0.999f;
    cfg.eps = 1e-8f;
    std::vector<float> p = {1.0f, -0.5f}, m(2, 0.0f), v(2, 0.0f), copy(2, 0.0f);
    const double grads[3][2] = {{0.5, -1e-3}, {-0.25, 2.0}, {1.0, 0.0}};
    double rp[2] = {1.0, -0.5}, rm[2] = {0, 0}, rv[2] = {0, 0};
    for (int step = 1; step <= 3; ++step) {
        std::vector<float> g = {static_cast<float>(grads[step - 1][0]), static_cast<float>(grads[step - 1][1])};
        ops.adamw_step(p.data(), g.data(), m.data(), v.data(), 2, cfg, step, view(copy, 1, 2));
        for (int i = 0; i < 2; ++i) {
            const double gd = grads[step - 1][i];
            rp[i] *= 1.0 - 0.1 * 0.1;
            rm[i] = 0.9 * rm[i] + 0.1 * gd;
            rv[i] = 0.999 * rv[i] + 0.001 * gd * gd;
            const double mhat = rm[i] / (1.0 - std::pow(0.9, step));
            const double vhat = rv[i] / (1.0 - std::pow(0.999, step));
            rp[i] -= 0.1 * mhat / (std::sqrt(vhat) + 1e-8);
            EXPECT_NEAR(p[i], rp[i], 2e-6) << "step " << step << " element " << i;
            EXPECT_EQ(copy[i], p[i]);
        }
        // Adam's first step moves each weight by lr * sign(g) after the decay.
        if (step == 1) {
            EXPECT_NEAR(p[0], 0.99 - 0.1, 1e-6);
        }
    }
    std::vector<float> g(2, 0.0f);
    EXPECT_ANY_THROW(ops.adamw_step(p.data(), g.data(), m.data(), v.data(), 2, cfg, 0, Tensor{}));
    Tensor half_copy = view(copy, 1, 2);
    half_copy.dtype = DType::bf16;
    EXPECT_ANY_THROW(ops.adamw_step(p.data(), g.data(), m.data(), v.data(), 2, cfg, 4, half_copy));
}

TEST(CpuOps, UnscaleAndCheckCatchesInfAndNan) {
    CpuOps ops;
    std::vector<float> g = {2.0f, -4.0f, 8.0f};
    EXPECT_TRUE(ops.unscale_and_check(g.data(), g.size(), 0.25f));
    EXPECT_EQ(g, (std::vector<float>{0.5f, -1.0f, 2.0f}));
    std::vector<float> with_inf = {1.0f, std::numeric_limits<float>::infinity(), 1.0f};
    EXPECT_FALSE(ops.unscale_and_check(with_inf.data(), with_inf.size(), 0.5f));
    std::vector<float> with_nan = {1.0f, 1.0f, std::numeric_limits<float>::quiet_NaN()};
    EXPECT_FALSE(ops.unscale_and_check(with_nan.data(), with_nan.size(), 0.5f));
}

TEST(CpuOps, MemoryFillCastAndMarkers) {
    CpuOps ops;
    DeviceBuffer buf(ops, 100 * sizeof(float));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.get()) % 64, 0u);
    ops.fill(buf.tensor(DType::f32, 10, 10), 3.5f);
    std::vector<float> host(100);
    ops.download(host.data(), buf.get(), host.size() * sizeof(float));
    for (float x : host) EXPECT_EQ(x, 3.5f);
    std::vector<float> src = random_vector(100, 11);
    ops.upload(buf.get(), src.data(), src.size() * sizeof(float));
    DeviceBuffer dst(ops, 100 * sizeof(float));
    ops.cast(buf.tensor(DType::f32, 10, 10), dst.tensor(DType::f32, 1, 100));
    ops.download(host.data(), dst.get(), host.size() * sizeof(float));
    EXPECT_EQ(host, src);
    EXPECT_ANY_THROW(ops.cast(buf.tensor(DType::f32, 10, 10), dst.tensor(DType::f16, 10, 10)));

    ops.record_marker(0);
    ops.record_marker(1);
    EXPECT_GE(ops.elapsed_ms(0, 1), 0.0);
    EXPECT_ANY_THROW(ops.elapsed_ms(0, 5));
    EXPECT_ANY_THROW(ops.record_marker(Ops::kMaxMarkers));
}

// The replica checksum sees every single-bit flip (each bit of a word, and the tail),
// a change of length (a trailing zero byte included) and two words swapped; the CPU
// backend's checksum is it.
TEST(Checksum, SeesEveryFlippedBitALengthChangeAndSwappedWords) {
    std::vector<unsigned char> data(8 * 5 + 3);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 37 + 11);
    const uint64_t base = checksum_host(data.data(), data.size());
    for (size_t byte = 0; byte < data.size(); ++byte) {
        for (int bit = 0; bit < 8; ++bit) {
            data[byte] ^= static_cast<unsigned char>(1u << bit);
            EXPECT_NE(checksum_host(data.data(), data.size()), base) << "byte " << byte << " bit " << bit;
            data[byte] ^= static_cast<unsigned char>(1u << bit);
        }
    }
    EXPECT_EQ(checksum_host(data.data(), data.size()), base);
    std::vector<unsigned char> longer = data;
    longer.push_back(0);
    EXPECT_NE(checksum_host(longer.data(), longer.size()), base);
    std::vector<unsigned char> swapped = data;
    std::swap_ranges(swapped.begin(), swapped.begin() + 8, swapped.begin() + 8);
    EXPECT_NE(checksum_host(swapped.data(), swapped.size()), base);
    CpuOps cpu;
    EXPECT_EQ(cpu.checksum(data.data(), data.size()), base);
}

}  // namespace
}  // namespace sb
