// The CPU backend's transformer ops (models/ops.h) against direct formulas, and every
// backward against central finite differences of L = sum(out * G) for a random G.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "models/cpu/cpu_ops.h"
#include "models/dropout.h"
#include "models/rng.h"

#include "tests/test_util.h"

namespace sb {
namespace {

using test::random_vector;
using test::view;

double dot(const std::vector<float>& a, const std::vector<float>& b) {
    double s = 0.0;
    for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
    return s;
}

// Central differences of loss() in every element of x against `analytic`; tolerance
// abs_tol + rel_tol * |fd|. Returns the number of mismatches (the first few are reported).
int check_against_fd(const char* what, std::vector<float>& x, const std::vector<float>& analytic,
                     const std::function<double()>& loss, float h = 1e-2f, double abs_tol = 2e-3,
                     double rel_tol = 1e-2) {
    int bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const float keep = x[i];
        x[i] = keep + h;
        const double lp = loss();
        x[i] = keep - h;
        const double lm = loss();
        x[i] = keep;
        const double fd = (lp - lm) / (2.0 * h);
        if (!(std::fabs(analytic[i] - fd) <= abs_tol + rel_tol * std::fabs(fd))) {
            if (bad < 3) ADD_FAILURE() << what << " element " << i << ": analytic " << analytic[i] << " vs fd " << fd;
            ++bad;
        }
    }
    return bad;
}

TEST(TransformerOps, Int32DtypeForTokenIds) {
    EXPECT_EQ(dtype_size(DType::i32), 4u);
    EXPECT_STREQ(dtype_name(DType::i32), "int32");
}

TEST(TransformerOps, AddInPlaceAndOutOfPlace) {
    CpuOps ops;
    std::vector<float> a = random_vector(35, 1), b = random_vector(35, 2), out(35);
    ops.add(view(a, 5, 7), view(b, 5, 7), view(out, 5, 7));
    for (int i = 0; i < 35; ++i) EXPECT_EQ(out[i], a[i] + b[i]);
    ops.add(view(a, 5, 7), view(b, 5, 7), view(a, 5, 7));
    EXPECT_EQ(a, out);
    std::vector<float> wrong(36);
    EXPECT_ANY_THROW(ops.add(view(a, 5, 7), view(wrong, 6, 6), view(out, 5, 7)));
}

TEST(TransformerOps, GeluErfAgainstFormulaAndFiniteDifferences) {
    CpuOps ops;
    const int n = 101;
    std::vector<float> x = random_vector(n, 3, -5.0, 5.0), y(n), g = random_vector(n, 4), d(n);
    ops.activation_forward(Activation::gelu_erf, view(x, 1, n), view(y, 1, n));
    for (int i = 0; i < n; ++i) {
        const double xi = x[i];
        EXPECT_NEAR(y[i], 0.5 * xi * (1.0 + std::erf(xi / std::sqrt(2.0))), 1e-5) << xi;
    }
    ops.activation_backward(Activation::gelu_erf, view(x, 1, n), view(g, 1, n), view(d, 1, n));
    std::vector<float> tmp(n);
    auto loss = [&] {
        ops.activation_forward(Activation::gelu_erf, view(x, 1, n), view(tmp, 1, n));
        return dot(tmp, g);
    };
    EXPECT_EQ(check_against_fd("gelu_erf", x, d, loss), 0);
}

TEST(TransformerOps, LayerNormForwardAgainstFormula) {
    CpuOps ops;
    const int rows = 4, cols = 37;
    std::vector<float> x = random_vector(rows * cols, 5, -3.0, 5.0), out(rows * cols), mean(rows), rstd(rows);
    std::vector<float> gamma = random_vector(cols, 6, 0.5, 1.5), beta = random_vector(cols, 7);
    ops.layernorm_forward(view(x, rows, cols), gamma.data(), beta.data(), 1e-5f, view(out, rows, cols), mean.data(),
                          rstd.data());
    for (int i = 0; i < rows; ++i) {
        double mu = 0, var = 0;
        for (int j = 0; j < cols; ++j) mu += x[i * cols + j];
        mu /= cols;
        for (int j = 0; j < cols; ++j) var += (x[i * cols + j] - mu) * (x[i * cols + j] - mu);
        var /= cols;  // biased, as torch
        EXPECT_NEAR(mean[i], mu, 1e-6);
        EXPECT_NEAR(rstd[i], 1.0 / std::sqrt(var + 1e-5), 1e-5);
        for (int j = 0; j < cols; ++j)
            EXPECT_NEAR(out[i * cols + j], (x[i * cols + j] - mu) / std::sqrt(var + 1e-5) * gamma[j] + beta[j], 1e-5);
    }
    EXPECT_ANY_THROW(ops.layernorm_forward(view(x, rows, cols), gamma.data(), beta.data(), 1e-5f,
                                           view(x, rows, cols), mean.data(), rstd.data()));
}

TEST(TransformerOps, LayerNormBackwardAgainstFiniteDifferences) {
    CpuOps ops;
    const int rows = 3, cols = 16;
    std::vector<float> x = random_vector(rows * cols, 8, -2.0, 2.0), out(rows * cols), mean(rows), rstd(rows);
    std::vector<float> gamma = random_vector(cols, 9, 0.5, 1.5), beta = random_vector(cols, 10);
    std::vector<float> g = random_vector(rows * cols, 11);
    ops.layernorm_forward(view(x, rows, cols), gamma.data(), beta.data(), 1e-5f, view(out, rows, cols), mean.data(),
                          rstd.data());
    std::vector<float> dx(rows * cols), dgamma(cols, NAN), dbeta(cols, NAN);
    ops.layernorm_backward(view(x, rows, cols), view(g, rows, cols), gamma.data(), mean.data(), rstd.data(),
                           view(dx, rows, cols), dgamma.data(), dbeta.data());
    auto loss = [&] {
        std::vector<float> o(rows * cols), m(rows), r(rows);
        ops.layernorm_forward(view(x, rows, cols), gamma.data(), beta.data(), 1e-5f, view(o, rows, cols), m.data(),
                              r.data());
        return dot(o, g);
    };
    EXPECT_EQ(check_against_fd("layernorm dx", x, dx, loss, 1e-2f), 0);
    EXPECT_EQ(check_against_fd("layernorm dgamma", gamma, dgamma, loss), 0);
    EXPECT_EQ(check_against_fd("layernorm dbeta", beta, dbeta, loss), 0);
    // grad_x may alias grad_out.
    std::vector<float> inplace = g, dg2(cols), db2(cols);
    ops.layernorm_backward(view(x, rows, cols), view(inplace, rows, cols), gamma.data(), mean.data(), rstd.data(),
                           view(inplace, rows, cols), dg2.data(), db2.data());
    EXPECT_EQ(inplace, dx);
}

TEST(TransformerOps, EmbeddingGatherAccumulateAndScatterAdd) {
    CpuOps ops;
    const int vocab = 7, width = 5, rows = 6;
    std::vector<float> table = random_vector(vocab * width, 12), out(rows * width), base = random_vector(rows * width, 13);
    std::vector<int32_t> ids = {3, 0, 6, 3, 3, 1};
    ops.embedding_forward(ids.data(), view(table, vocab, width), view(out, rows, width), false);
    for (int i = 0; i < rows; ++i)
        for (int j = 0; j < width; ++j) EXPECT_EQ(out[i * width + j], table[ids[i] * width + j]);
    std::vector<float> acc = base;
    ops.embedding_forward(ids.data(), view(table, vocab, width), view(acc, rows, width), true);
    for (int e = 0; e < rows * width; ++e) EXPECT_FLOAT_EQ(acc[e], base[e] + out[e]);

    // Backward: the adjoint of the gather, added to what the table gradient held.
    std::vector<float> g = random_vector(rows * width, 14), dtable(vocab * width, 1.0f);
    ops.embedding_backward(ids.data(), view(g, rows, width), dtable.data(), vocab);
    for (int v = 0; v < vocab; ++v)
        for (int j = 0; j < width; ++j) {
            double s = 1.0;
            for (int i = 0; i < rows; ++i)
                if (ids[i] == v) s += g[i * width + j];
            EXPECT_NEAR(dtable[v * width + j], s, 1e-6);
        }
    std::vector<int32_t> bad = {0, 7, 0, 0, 0, 0};
    EXPECT_ANY_THROW(ops.embedding_forward(bad.data(), view(table, vocab, width), view(out, rows, width), false));
    EXPECT_ANY_THROW(ops.embedding_backward(bad.data(), view(g, rows, width), dtable.data(), vocab));
}

TEST(TransformerOps, DropoutKeepsTheCounterMaskAndScales) {
    CpuOps ops;
    const int n = 20000;
    const float p = 0.1f;
    std::vector<float> x = random_vector(n, 15), y(n);
    ops.dropout(view(x, 100, 200), view(y, 100, 200), p, 77);
    int kept = 0;
    for (int i = 0; i < n; ++i) {
        const bool keep = dropout_keep(77, static_cast<uint64_t>(i), p);
        kept += keep;
        EXPECT_FLOAT_EQ(y[i], keep ? x[i] / (1.0f - p) : 0.0f);
    }
    EXPECT_NEAR(kept / static_cast<double>(n), 1.0 - p, 0.01);
    // In place gives the same; another seed another mask; p = 0 is the identity.
    std::vector<float> inplace = x, other(n), same(n);
    ops.dropout(view(inplace, 100, 200), view(inplace, 100, 200), p, 77);
    EXPECT_EQ(inplace, y);
    ops.dropout(view(x, 100, 200), view(other, 100, 200), p, 78);
    EXPECT_NE(other, y);
    ops.dropout(view(x, 100, 200), view(same, 100, 200), 0.0f, 77);
    EXPECT_EQ(same, x);
    // The next generation (the next step) draws a new mask from the same seed.
    std::vector<float> next(n);
    ops.advance_dropout_generation();
    ops.dropout(view(x, 100, 200), view(next, 100, 200), p, 77);
    EXPECT_NE(next, y);
    for (int i = 0; i < n; ++i)
        EXPECT_EQ(next[i] != 0.0f, dropout_keep(dropout_seed_at(77, 1), static_cast<uint64_t>(i), p)) << i;
}

// The integer threshold the kernels compare with is the definition r >= p * 2^16, r element
// i's 16 bits of the hash of i / 4: at the threshold's edges and on hashed indices, for
// several p; the nibble the fused attention reads is the same four decisions.
TEST(TransformerOps, DropoutThresholdIsTheDefinition) {
    const float ps[] = {0.0f, 1e-9f, 0.1f, 0.25f, 0.5f, 0.9f, 0.99999994f};
    for (float p : ps) {
        const double x = static_cast<double>(p) * 65536.0;
        const uint32_t t = dropout_threshold(p);
        EXPECT_GE(static_cast<double>(t), x) << p;
        EXPECT_LT(static_cast<double>(t) - 1.0, x) << p;
        for (uint64_t i = 0; i < 20000; ++i) {
            const uint64_t r = (dropout_hash(99, i / 4) >> (16 * (i % 4))) & 0xffffu;
            ASSERT_EQ(dropout_keep(99, i, p), static_cast<double>(r) >= x) << p << " " << i;
            ASSERT_EQ((dropout_keep_nibble(99, i / 4, t) >> (i % 4)) & 1u, dropout_keep(99, i, p) ? 1u : 0u)
                << p << " " << i;
        }
    }
    EXPECT_EQ(dropout_threshold(0.5f), 1u << 15);  // exact: kept iff r >= 2^15
}

// The four elements one hash decides are independent draws: at p = 1/2 each of the four
// elements of a quad, and each pair of them, is kept as often as independence says.
TEST(TransformerOps, DropoutQuadsAreIndependentDraws) {
    const int quads = 100000;
    int kept[4] = {}, both[4][4] = {};
    for (uint64_t q = 0; q < quads; ++q) {
        const uint32_t bits = dropout_keep_nibble(5, q, dropout_threshold(0.5f));
        for (int a = 0; a < 4; ++a) {
            kept[a] += (bits >> a) & 1;
            for (int b = a + 1; b < 4; ++b) both[a][b] += ((bits >> a) & (bits >> b)) & 1;
        }
    }
    for (int a = 0; a < 4; ++a) {
        EXPECT_NEAR(kept[a] / static_cast<double>(quads), 0.5, 0.01) << a;
        for (int b = a + 1; b < 4; ++b) EXPECT_NEAR(both[a][b] / static_cast<double>(quads), 0.25, 0.01) << a << b;
    }
}

// Attention straight from the definition, in double, with the dropout mask drawn per
// (b, h, i, j) as the contract says.
std::vector<double> attention_reference(const Ops::AttentionShape& s, const std::vector<float>& qkv, uint64_t seed) {
    const int W = s.heads * s.head_dim;
    std::vector<double> out(static_cast<size_t>(s.batch) * s.seq * W, 0.0);
    for (int b = 0; b < s.batch; ++b)
        for (int h = 0; h < s.heads; ++h)
            for (int i = 0; i < s.seq; ++i) {
                std::vector<double> sc(s.seq, -INFINITY);
                double mx = -INFINITY;
                for (int j = 0; j < s.seq; ++j) {
                    if (s.causal && j > i) continue;
                    double d = 0;
                    for (int e = 0; e < s.head_dim; ++e)
                        d += static_cast<double>(qkv[(b * s.seq + i) * 3 * W + h * s.head_dim + e]) *
                             qkv[(b * s.seq + j) * 3 * W + W + h * s.head_dim + e];
                    sc[j] = d / std::sqrt(static_cast<double>(s.head_dim));
                    mx = std::max(mx, sc[j]);
                }
                double z = 0;
                for (int j = 0; j < s.seq; ++j) z += std::exp(sc[j] - mx);
                for (int j = 0; j < s.seq; ++j) {
                    double p = std::exp(sc[j] - mx) / z;
                    const uint64_t idx =
                        attention_dropout_index((static_cast<uint64_t>(b) * s.heads + h) * s.seq + i, j, s.seq);
                    if (s.dropout_p > 0) p = dropout_keep(seed, idx, s.dropout_p) ? p / (1.0 - s.dropout_p) : 0.0;
                    for (int e = 0; e < s.head_dim; ++e)
                        out[(b * s.seq + i) * W + h * s.head_dim + e] +=
                            p * qkv[(b * s.seq + j) * 3 * W + 2 * W + h * s.head_dim + e];
                }
            }
    return out;
}

void check_attention(bool causal, float dropout_p) {
    SCOPED_TRACE(testing::Message() << "causal=" << causal << " dropout=" << dropout_p);
    CpuOps ops;
    Ops::AttentionShape s{2, 5, 3, 4, causal, dropout_p};
    const int rows = s.batch * s.seq, W = s.heads * s.head_dim;
    const uint64_t seed = 4242;
    std::vector<float> qkv = random_vector(static_cast<size_t>(rows) * 3 * W, 16, -1.5, 1.5), out(rows * W);
    std::vector<float> saved(ops.attention_saved_bytes(s) / sizeof(float));
    ops.attention_forward(s, view(qkv, rows, 3 * W), view(out, rows, W), saved.data(), seed);
    const std::vector<double> ref = attention_reference(s, qkv, seed);
    for (size_t e = 0; e < ref.size(); ++e) EXPECT_NEAR(out[e], ref[e], 1e-5) << e;
    if (causal) {  // the first query sees only itself: out = its own v (up to dropout)
        for (int h = 0; h < s.heads; ++h)
            for (int e = 0; e < s.head_dim; ++e) {
                const uint64_t idx = attention_dropout_index(static_cast<uint64_t>(h) * s.seq, 0, s.seq);
                const float keep = dropout_p > 0 && !dropout_keep(seed, idx, dropout_p) ? 0.0f : 1.0f / (1.0f - dropout_p);
                EXPECT_NEAR(out[h * s.head_dim + e], keep * qkv[2 * W + h * s.head_dim + e], 1e-5);
            }
    }

    // Backward against finite differences of sum(out * G), with the same seed (same mask).
    std::vector<float> g = random_vector(out.size(), 17), grad(qkv.size(), NAN);
    ops.attention_backward(s, view(qkv, rows, 3 * W), view(out, rows, W), saved.data(), view(g, rows, W),
                           view(grad, rows, 3 * W), seed);
    auto loss = [&] {
        std::vector<float> o(rows * W), sv(saved.size());
        ops.attention_forward(s, view(qkv, rows, 3 * W), view(o, rows, W), sv.data(), seed);
        return dot(o, g);
    };
    EXPECT_EQ(check_against_fd("attention dqkv", qkv, grad, loss, 1e-2f), 0);
}

TEST(TransformerOps, AttentionFullAgainstDefinitionAndFiniteDifferences) { check_attention(false, 0.0f); }
TEST(TransformerOps, AttentionCausalAgainstDefinitionAndFiniteDifferences) { check_attention(true, 0.0f); }
TEST(TransformerOps, AttentionWithDropoutUsesOneMaskForwardAndBackward) {
    check_attention(false, 0.3f);
    check_attention(true, 0.3f);
}

TEST(TransformerOps, SoftmaxCrossEntropyIgnoresNegativeLabels) {
    CpuOps ops;
    const int rows = 5, cols = 4;
    std::vector<float> logits = random_vector(rows * cols, 18, -2.0, 2.0), grad(rows * cols, NAN);
    std::vector<int32_t> labels = {2, -1, 0, -1, 3};
    float loss = 0;
    ops.softmax_cross_entropy(view(logits, rows, cols), labels.data(), 3, &loss, view(grad, rows, cols), 2.0f);
    double direct = 0;
    for (int i : {0, 2, 4}) {
        double z = 0;
        for (int j = 0; j < cols; ++j) z += std::exp(static_cast<double>(logits[i * cols + j]));
        direct += std::log(z) - logits[i * cols + labels[i]];
    }
    EXPECT_NEAR(loss, direct / 3, 1e-6);  // mean over the 3 labelled rows only
    for (int j = 0; j < cols; ++j) {
        EXPECT_EQ(grad[1 * cols + j], 0.0f);
        EXPECT_EQ(grad[3 * cols + j], 0.0f);
    }
    // Labelled rows: (softmax - onehot) * grad_scale / 3.
    for (int i : {0, 2, 4}) {
        double z = 0;
        for (int j = 0; j < cols; ++j) z += std::exp(static_cast<double>(logits[i * cols + j]));
        for (int j = 0; j < cols; ++j) {
            const double sm = std::exp(static_cast<double>(logits[i * cols + j])) / z;
            EXPECT_NEAR(grad[i * cols + j], (sm - (j == labels[i])) * 2.0 / 3, 1e-6);
        }
    }
    // No labelled row at all: loss 0, gradient 0 (not NaN).
    std::vector<int32_t> none(rows, -1);
    ops.softmax_cross_entropy(view(logits, rows, cols), none.data(), 0, &loss, view(grad, rows, cols), 1.0f);
    EXPECT_EQ(loss, 0.0f);
    for (float v : grad) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace sb
