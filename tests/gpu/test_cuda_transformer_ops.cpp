// CudaOps' transformer ops against the fp32 CPU backend (CpuOps) on fresh random inputs:
// add, LayerNorm, embeddings, dropout, attention (with and without causal mask and
// dropout, every precision) and the softmax cross-entropy's ignored rows. Outputs are
// poisoned with NaN first and guarded on both sides; bf16/f16 inputs are rounded on the
// host so the CPU sees exactly the GPU's inputs. Tolerances on ‖out−ref‖/‖ref‖: fp32 1e-5,
// tf32 1e-3, bf16/fp16 1e-2; fp32 outputs computed from identical inputs (LayerNorm's
// mean/rstd and parameter gradients, embedding gradients) 1e-5 for every input dtype.
// Dropout masks must equal models/dropout.h's bit for bit, attention's read element by
// element off the fused kernels' outputs. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "models/cpu/cpu_ops.h"
#include "models/cuda/cuda_ops.h"
#include "models/dropout.h"
#include "tests/gpu/gpu_test_util.h"

namespace sb {
namespace {

using gpu_test::close;
using gpu_test::GpuArray;
using gpu_test::host_view;
using gpu_test::rounded;
using gpu_test::tolerance;

const DType kDTypes[] = {DType::f32, DType::bf16, DType::f16};

class TransformerOpsTest : public gpu_test::CudaOpsFixture {
protected:
    DeviceBuffer upload_ids(const std::vector<int32_t>& ids) {
        DeviceBuffer buf(*gpu_, ids.size() * sizeof(int32_t));
        gpu_->upload(buf.get(), ids.data(), buf.bytes());
        return buf;
    }
    // Checks residual_layernorm_forward on fresh inputs (defined with its tests); the CPU's
    // sum, mean and rstd come back for the backward.
    void check_residual_layernorm_forward(DType dtype, int64_t rows, int64_t cols, float p, uint64_t seed,
                                          const std::vector<float>& gamma, const std::vector<float>& beta,
                                          std::vector<float>& sum, std::vector<float>& mean, std::vector<float>& rstd);
};

// ---------------------------------------------------------------------------- add

TEST_F(TransformerOpsTest, AddMatchesCpuAlsoInPlace) {
    for (DType dtype : kDTypes)
        for (int64_t n : {1, 1027, (1 << 20) + 3})
            for (int64_t offset : {0, 1})
                for (int in_place : {0, 1, 2}) {  // out separate, out == a, out == b
                    SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " n=" << n << " offset=" << offset
                                                    << " in_place=" << in_place);
                    std::vector<float> a = rounded(values(static_cast<size_t>(n)), dtype);
                    std::vector<float> b = rounded(values(static_cast<size_t>(n)), dtype);
                    GpuArray ga(*gpu_, dtype, 1, n, offset), gb(*gpu_, dtype, 1, n, offset);
                    GpuArray gout(*gpu_, dtype, 1, n, offset);
                    ga.set(a);
                    gb.set(b);
                    GpuArray& result = in_place == 1 ? ga : in_place == 2 ? gb : gout;
                    gpu_->add(ga.tensor, gb.tensor, result.tensor);
                    std::vector<float> ref(a.size());
                    cpu_.add(host_view(a, 1, n), host_view(b, 1, n), host_view(ref, 1, n));
                    EXPECT_TRUE(close(result.get(), ref, tolerance(dtype)));
                    EXPECT_TRUE(result.guards_intact());
                }
}

// ---------------------------------------------------------------------------- LayerNorm

// Odd widths take the scalar path, multiples of 8 the 16-byte one (the backward fused up to
// 1024 columns); 4100 > any register tile. 4103 x 768: the fused backward's warps own one
// row or two (257 blocks of 8 warps on an H200).
const std::pair<int64_t, int64_t> kLnShapes[] = {{1, 1},      {37, 129}, {64, 768}, {300, 1024},
                                                 {4103, 768}, {5, 4100}};
// The forwards hold rows of up to 1024 elements in 16-byte vectors in registers, 8, 16, 24 or
// 32 elements a lane (64, 512, 768 and 1024 columns of 16 bits), one row a warp: 8192 rows are
// 1024 blocks of 8 warps; on an H200 the grid stops at 132 x 64 blocks, so at 67587 rows three
// warps take a second row. 2048 columns are beyond the registers in every dtype.
const std::pair<int64_t, int64_t> kLnForwardShapes[] = {{9, 512}, {8192, 1024}, {67587, 64}, {7, 2048}};
constexpr float kLnEps = 1e-5f;

TEST_F(TransformerOpsTest, LayerNormForwardMatchesCpu) {
    std::vector<std::pair<int64_t, int64_t>> shapes(std::begin(kLnShapes), std::end(kLnShapes));
    shapes.insert(shapes.end(), std::begin(kLnForwardShapes), std::end(kLnForwardShapes));
    for (DType dtype : kDTypes)
        for (auto [rows, cols] : shapes)
            for (int64_t offset : {0, 1}) {
                SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << rows << "x" << cols
                                                << " offset=" << offset);
                // A per-row shift: the variance must be taken around the mean, not as E[x^2]-E[x]^2.
                std::vector<float> x = values(static_cast<size_t>(rows * cols));
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(r * cols + c)] += 3.0f * (r % 5);
                x = rounded(x, dtype);
                std::vector<float> gamma = values(static_cast<size_t>(cols), 0.5f, 1.5f);
                std::vector<float> beta = values(static_cast<size_t>(cols));
                GpuArray gx(*gpu_, dtype, rows, cols, offset), gout(*gpu_, dtype, rows, cols, offset);
                GpuArray ggamma(*gpu_, DType::f32, 1, cols, offset), gbeta(*gpu_, DType::f32, 1, cols, offset);
                GpuArray gmean(*gpu_, DType::f32, 1, rows, offset), grstd(*gpu_, DType::f32, 1, rows, offset);
                gx.set(x);
                ggamma.set(gamma);
                gbeta.set(beta);
                gpu_->layernorm_forward(gx.tensor, ggamma.f32(), gbeta.f32(), kLnEps, gout.tensor, gmean.f32(),
                                        grstd.f32());
                std::vector<float> ref(x.size()), mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
                cpu_.layernorm_forward(host_view(x, rows, cols), gamma.data(), beta.data(), kLnEps,
                                       host_view(ref, rows, cols), mean.data(), rstd.data());
                EXPECT_TRUE(close(gout.get(), ref, tolerance(dtype))) << "out";
                EXPECT_TRUE(close(gmean.get(), mean, 1e-5)) << "mean";
                EXPECT_TRUE(close(grstd.get(), rstd, 1e-5)) << "rstd";
                EXPECT_TRUE(gout.guards_intact() && gmean.guards_intact() && grstd.guards_intact());
            }
}

TEST_F(TransformerOpsTest, LayerNormBackwardMatchesCpuAlsoInPlace) {
    for (DType dtype : kDTypes)
        for (auto [rows, cols] : kLnShapes)
            for (bool in_place : {false, true}) {
                const int64_t offset = in_place ? 1 : 0;
                SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << rows << "x" << cols
                                                << " in_place=" << in_place);
                const size_t n = static_cast<size_t>(rows * cols);
                std::vector<float> x = rounded(values(n), dtype), g = rounded(values(n), dtype);
                std::vector<float> gamma = values(static_cast<size_t>(cols), 0.5f, 1.5f);
                std::vector<float> beta = values(static_cast<size_t>(cols));
                // mean/rstd from the CPU forward, given to both backends.
                std::vector<float> y(n), mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
                cpu_.layernorm_forward(host_view(x, rows, cols), gamma.data(), beta.data(), kLnEps,
                                       host_view(y, rows, cols), mean.data(), rstd.data());

                GpuArray gx(*gpu_, dtype, rows, cols, offset), gg(*gpu_, dtype, rows, cols, offset);
                GpuArray gdx(*gpu_, dtype, rows, cols, offset), ggamma(*gpu_, DType::f32, 1, cols, offset);
                GpuArray gmean(*gpu_, DType::f32, 1, rows, offset), grstd(*gpu_, DType::f32, 1, rows, offset);
                GpuArray gdgamma(*gpu_, DType::f32, 1, cols, offset), gdbeta(*gpu_, DType::f32, 1, cols, offset);
                gx.set(x);
                gg.set(g);
                ggamma.set(gamma);
                gmean.set(mean);
                grstd.set(rstd);
                GpuArray& result = in_place ? gg : gdx;
                gpu_->layernorm_backward(gx.tensor, gg.tensor, ggamma.f32(), gmean.f32(), grstd.f32(), result.tensor,
                                         gdgamma.f32(), gdbeta.f32());
                std::vector<float> dx(n), dgamma(static_cast<size_t>(cols)), dbeta(static_cast<size_t>(cols));
                cpu_.layernorm_backward(host_view(x, rows, cols), host_view(g, rows, cols), gamma.data(), mean.data(),
                                        rstd.data(), host_view(dx, rows, cols), dgamma.data(), dbeta.data());
                if (cols == 1) {
                    // One column: grad_x is 0 exactly (x - mean = 0), and what either backend returns
                    // is g·gamma - mean(g·gamma) rounded, times rstd = 1/sqrt(eps) = 316: a few
                    // float epsilons of g·gamma, scaled by rstd, not a relative error.
                    const std::vector<float> got = result.get();
                    for (size_t i = 0; i < n; ++i)
                        EXPECT_LE(std::fabs(got[i]), 8 * FLT_EPSILON * rstd[i] * std::fabs(g[i] * gamma[0])) << i;
                } else {
                    EXPECT_TRUE(close(result.get(), dx, tolerance(dtype))) << "grad_x";
                }
                EXPECT_TRUE(close(gdgamma.get(), dgamma, 1e-5)) << "grad_gamma";
                EXPECT_TRUE(close(gdbeta.get(), dbeta, 1e-5)) << "grad_beta";
                EXPECT_TRUE(result.guards_intact() && gdgamma.guards_intact() && gdbeta.guards_intact());
            }
}

// ------------------------------------------------- residual add + dropout + LayerNorm (fused)

// Against the CPU's composition of dropout, add and LayerNorm (the definition): sum, out, mean
// and rstd, and the dropout mask element for element (a dropped element leaves sum equal to the
// residual on both backends). Then in place, sum over the residual: the same bits as with sum
// apart (each lane reads its vectors of a row before it writes them).
void TransformerOpsTest::check_residual_layernorm_forward(DType dtype, int64_t rows, int64_t cols, float p,
                                                          uint64_t seed, const std::vector<float>& gamma,
                                                          const std::vector<float>& beta, std::vector<float>& sum,
                                                          std::vector<float>& mean, std::vector<float>& rstd) {
    const double tol = dtype == DType::f32 ? 1e-5 : tolerance(dtype);
    const size_t n = static_cast<size_t>(rows * cols);
    std::vector<float> branch = rounded(values(n), dtype), residual = rounded(values(n), dtype);
    GpuArray gbranch(*gpu_, dtype, rows, cols), gres(*gpu_, dtype, rows, cols);
    GpuArray gsum(*gpu_, dtype, rows, cols), gout(*gpu_, dtype, rows, cols);
    GpuArray ggamma(*gpu_, DType::f32, 1, cols), gbeta(*gpu_, DType::f32, 1, cols);
    GpuArray gmean(*gpu_, DType::f32, 1, rows), grstd(*gpu_, DType::f32, 1, rows);
    gbranch.set(branch);
    gres.set(residual);
    ggamma.set(gamma);
    gbeta.set(beta);
    gpu_->residual_layernorm_forward(gbranch.tensor, gres.tensor, p, seed, ggamma.f32(), gbeta.f32(), kLnEps,
                                     gsum.tensor, gout.tensor, gmean.f32(), grstd.f32());
    std::vector<float> out(n);
    sum.assign(n, 0.0f);
    mean.assign(static_cast<size_t>(rows), 0.0f);
    rstd.assign(static_cast<size_t>(rows), 0.0f);
    cpu_.residual_layernorm_forward(host_view(branch, rows, cols), host_view(residual, rows, cols), p, seed,
                                    gamma.data(), beta.data(), kLnEps, host_view(sum, rows, cols),
                                    host_view(out, rows, cols), mean.data(), rstd.data());
    const std::vector<float> got_sum = gsum.get();
    EXPECT_TRUE(close(got_sum, sum, tol)) << "sum";
    EXPECT_TRUE(close(gout.get(), out, tol)) << "out";
    EXPECT_TRUE(close(gmean.get(), mean, tol)) << "mean";
    EXPECT_TRUE(close(grstd.get(), rstd, tol)) << "rstd";
    size_t mask_differs = 0, dropped = 0;
    for (size_t i = 0; i < n; ++i) {
        mask_differs += (got_sum[i] == residual[i]) != (sum[i] == residual[i]);
        dropped += sum[i] == residual[i];
    }
    EXPECT_EQ(mask_differs, 0u) << "forward dropout mask";
    if (p > 0.0f) EXPECT_GT(dropped, 0u);
    EXPECT_TRUE(gsum.guards_intact() && gout.guards_intact() && gmean.guards_intact() && grstd.guards_intact());

    GpuArray gout2(*gpu_, dtype, rows, cols), gmean2(*gpu_, DType::f32, 1, rows), grstd2(*gpu_, DType::f32, 1, rows);
    gpu_->residual_layernorm_forward(gbranch.tensor, gres.tensor, p, seed, ggamma.f32(), gbeta.f32(), kLnEps,
                                     gres.tensor, gout2.tensor, gmean2.f32(), grstd2.f32());
    EXPECT_EQ(gres.get_bytes(), gsum.get_bytes()) << "sum in place";
    EXPECT_EQ(gout2.get_bytes(), gout.get_bytes()) << "out with sum in place";
    EXPECT_EQ(gmean2.get_bytes(), gmean.get_bytes()) << "mean with sum in place";
    EXPECT_EQ(grstd2.get_bytes(), grstd.get_bytes()) << "rstd with sum in place";
    EXPECT_TRUE(gres.guards_intact() && gout2.guards_intact() && gmean2.guards_intact() && grstd2.guards_intact());
}

// The forward's register-held rows at every tile (kLnForwardShapes), with dropout and without.
TEST_F(TransformerOpsTest, ResidualLayerNormForwardMatchesCpuAlsoInPlace) {
    for (DType dtype : kDTypes)
        for (auto [rows, cols] : kLnForwardShapes)
            for (float p : {0.0f, 0.1f}) {
                SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << rows << "x" << cols << " p=" << p);
                const std::vector<float> gamma = values(static_cast<size_t>(cols), 0.5f, 1.5f);
                const std::vector<float> beta = values(static_cast<size_t>(cols));
                std::vector<float> sum, mean, rstd;
                check_residual_layernorm_forward(dtype, rows, cols, p, 0x5eed, gamma, beta, sum, mean, rstd);
            }
}

// Against the CPU's composition of dropout, add and LayerNorm (the definition), with dropout 0
// and 0.1: the forward as check_residual_layernorm_forward checks it (also in place); the
// backward in the aliasings the transformer issues (BERT's top layer: grad_sum is grad_out;
// post-LN: grad_out is grad_branch, grad_sum the residual gradient of out; pre-LN: grad_sum the
// residual gradient of sum) and with every buffer apart and both residual gradients. The
// dropout mask is the CPU's element for element: a dropped element leaves sum equal to the
// residual and a zero in grad_branch, on both backends. The backward's paths: rows of up to
// 1024 elements in 16-byte vectors are fused, one block (3 x 768) writing the parameter
// gradients itself, several (37 x 100 in fp32, 300 x 1024, 4096 x 64, 4103 x 768, 5000 x 1024:
// 3, 19, 256, 257 and 264 on an H200) a row of partials each, the last two with warps that own
// different counts of rows (1 or 2, 2 or 3); 100 columns of 16 bits (scalar loads) and 1536
// columns take the separate parameter-gradient kernel, in one row chunk and in several (8 on an
// H200). With every buffer apart, a second run must give the same bits (fixed-order sums, no
// atomics).
TEST_F(TransformerOpsTest, ResidualLayerNormMatchesCpuInEveryAliasing) {
    const std::pair<int64_t, int64_t> shapes[] = {{3, 768},    {37, 100},    {300, 1024}, {4096, 64},
                                                  {4103, 768}, {5000, 1024}, {512, 1536}};
    enum Variant { kTop, kPostLn, kPreLn, kApart };
    const uint64_t seed = 0x5eed;
    const auto same_bits = [](const std::vector<float>& x, const std::vector<float>& y) {
        return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
    };
    for (DType dtype : kDTypes)
        for (auto [rows, cols] : shapes)
            for (float p : {0.0f, 0.1f}) {
                SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << rows << "x" << cols << " p=" << p);
                const double tol = dtype == DType::f32 ? 1e-5 : tolerance(dtype);
                const size_t n = static_cast<size_t>(rows * cols);
                std::vector<float> gamma = values(static_cast<size_t>(cols), 0.5f, 1.5f);
                std::vector<float> beta = values(static_cast<size_t>(cols));
                std::vector<float> sum, mean, rstd;
                check_residual_layernorm_forward(dtype, rows, cols, p, seed, gamma, beta, sum, mean, rstd);
                GpuArray ggamma(*gpu_, DType::f32, 1, cols);
                ggamma.set(gamma);

                // Backward from the CPU's sum, mean and rstd (both backends read the same).
                const std::vector<float> sum_in = rounded(sum, dtype);
                for (Variant v : {kTop, kPostLn, kPreLn, kApart}) {
                    SCOPED_TRACE(testing::Message() << "variant " << v);
                    std::vector<float> a = rounded(values(n, -1.0f, 1.0f), dtype);
                    std::vector<float> b = rounded(values(n, -1.0f, 1.0f), dtype);
                    std::vector<float> c = rounded(values(n, -1.0f, 1.0f), dtype);
                    std::vector<float> d = rounded(values(n, -1.0f, 1.0f), dtype);
                    GpuArray ga(*gpu_, dtype, rows, cols), gb(*gpu_, dtype, rows, cols);
                    GpuArray gc(*gpu_, dtype, rows, cols), gd(*gpu_, dtype, rows, cols);
                    GpuArray gs(*gpu_, dtype, rows, cols), gm(*gpu_, DType::f32, 1, rows);
                    GpuArray gr(*gpu_, DType::f32, 1, rows), gdgamma(*gpu_, DType::f32, 1, cols);
                    GpuArray gdbeta(*gpu_, DType::f32, 1, cols), gsep(*gpu_, dtype, rows, cols);
                    ga.set(a);
                    gb.set(b);
                    gc.set(c);
                    gd.set(d);
                    gs.set(sum_in);
                    gm.set(mean);
                    gr.set(rstd);
                    // (grad_out, grad_out_residual, grad_sum_residual, grad_sum, grad_branch) on each
                    // backend's buffers a, b, c, d and a separate output e.
                    struct Roles { int out, out_res, sum_res, grad_sum, branch; };  // -1: none
                    const Roles r = v == kTop      ? Roles{0, -1, -1, 0, 1}
                                    : v == kPostLn ? Roles{1, 0, -1, 0, 1}
                                    : v == kPreLn  ? Roles{1, -1, 0, 0, 1}
                                                   : Roles{0, 1, 2, 3, 4};
                    std::vector<float> e(n, NAN);
                    std::vector<float>* host[] = {&a, &b, &c, &d, &e};
                    GpuArray* dev[] = {&ga, &gb, &gc, &gd, &gsep};
                    const auto gpu_t = [&](int i) { return i < 0 ? Tensor{} : dev[i]->tensor; };
                    const auto cpu_t = [&](int i) { return i < 0 ? Tensor{} : host_view(*host[i], rows, cols); };
                    gpu_->residual_layernorm_backward(gs.tensor, gpu_t(r.out), gpu_t(r.out_res), gpu_t(r.sum_res),
                                                      ggamma.f32(), gm.f32(), gr.f32(), p, seed, gpu_t(r.grad_sum),
                                                      gpu_t(r.branch), gdgamma.f32(), gdbeta.f32());
                    std::vector<float> sum_host = sum_in, dgamma(static_cast<size_t>(cols)),
                                       dbeta(static_cast<size_t>(cols));
                    cpu_.residual_layernorm_backward(host_view(sum_host, rows, cols), cpu_t(r.out), cpu_t(r.out_res),
                                                     cpu_t(r.sum_res), gamma.data(), mean.data(), rstd.data(), p, seed,
                                                     cpu_t(r.grad_sum), cpu_t(r.branch), dgamma.data(), dbeta.data());
                    const std::vector<float> got_sum_grad = dev[r.grad_sum]->get();
                    const std::vector<float> got_branch = dev[r.branch]->get();
                    EXPECT_TRUE(close(got_sum_grad, *host[r.grad_sum], tol)) << "grad_sum";
                    EXPECT_TRUE(close(got_branch, *host[r.branch], tol)) << "grad_branch";
                    EXPECT_TRUE(close(gdgamma.get(), dgamma, tol)) << "grad_gamma";
                    EXPECT_TRUE(close(gdbeta.get(), dbeta, tol)) << "grad_beta";
                    // A dropped element is an exact zero on both backends; a kept one may round to
                    // zero on one of them in 16 bits (the GPU rounds the residual sum once, the
                    // CPU's chain twice), so only a zero against a value beyond the tolerance counts.
                    size_t zeros_differ = 0;
                    for (size_t i = 0; i < n; ++i) {
                        const float want = (*host[r.branch])[i];
                        zeros_differ += (got_branch[i] == 0.0f) != (want == 0.0f) &&
                                        std::max(std::fabs(got_branch[i]), std::fabs(want)) > tol;
                    }
                    EXPECT_EQ(zeros_differ, 0u) << "backward dropout mask";
                    for (GpuArray* g : dev) EXPECT_TRUE(g->guards_intact());
                    if (v == kApart) {  // inputs untouched: a second run gives the same bits
                        const std::vector<float> dgamma1 = gdgamma.get(), dbeta1 = gdbeta.get();
                        gpu_->residual_layernorm_backward(gs.tensor, gpu_t(r.out), gpu_t(r.out_res),
                                                          gpu_t(r.sum_res), ggamma.f32(), gm.f32(), gr.f32(), p, seed,
                                                          gpu_t(r.grad_sum), gpu_t(r.branch), gdgamma.f32(),
                                                          gdbeta.f32());
                        EXPECT_TRUE(same_bits(gdgamma.get(), dgamma1)) << "grad_gamma rerun";
                        EXPECT_TRUE(same_bits(gdbeta.get(), dbeta1)) << "grad_beta rerun";
                        EXPECT_TRUE(same_bits(dev[r.grad_sum]->get(), got_sum_grad)) << "grad_sum rerun";
                        EXPECT_TRUE(same_bits(dev[r.branch]->get(), got_branch)) << "grad_branch rerun";
                    }
                }
            }
}

// ---------------------------------------------------------------------------- embeddings

TEST_F(TransformerOpsTest, EmbeddingForwardGathersAndAccumulates) {
    const std::pair<int64_t, int64_t> tables[] = {{1, 1}, {50, 37}, {3000, 768}};
    for (DType dtype : kDTypes)
        for (auto [vocab, cols] : tables)
            for (int64_t offset : {0, 1})
                for (bool accumulate : {false, true}) {
                    SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " table " << vocab << "x" << cols
                                                    << " offset=" << offset << " accumulate=" << accumulate);
                    const int64_t rows = 257;
                    std::vector<float> table = rounded(values(static_cast<size_t>(vocab * cols)), dtype);
                    std::vector<int32_t> ids(static_cast<size_t>(rows));
                    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
                    for (int32_t& id : ids) id = pick(rng_);
                    std::vector<float> out0 = rounded(values(static_cast<size_t>(rows * cols)), dtype);
                    GpuArray gtable(*gpu_, dtype, vocab, cols, offset), gout(*gpu_, dtype, rows, cols, offset);
                    gtable.set(table);
                    if (accumulate) gout.set(out0);
                    DeviceBuffer gids = upload_ids(ids);
                    gpu_->embedding_forward(gids.as<int32_t>(), gtable.tensor, gout.tensor, accumulate);
                    std::vector<float> ref = out0;
                    cpu_.embedding_forward(ids.data(), host_view(table, vocab, cols), host_view(ref, rows, cols),
                                           accumulate);
                    if (accumulate) {
                        EXPECT_TRUE(close(gout.get(), ref, tolerance(dtype)));
                    } else {  // a gather is exact
                        EXPECT_EQ(gout.get_bytes(), gpu_test::encode(ref, dtype));
                    }
                    EXPECT_TRUE(gout.guards_intact());
                }
}

// The GPU cannot throw on a bad id: its row comes out NaN, the others are right.
TEST_F(TransformerOpsTest, EmbeddingForwardBadIdGivesNaNRow) {
    const int64_t vocab = 10, cols = 16;
    GpuArray table(*gpu_, DType::bf16, vocab, cols), out(*gpu_, DType::bf16, 3, cols);
    table.set(rounded(values(static_cast<size_t>(vocab * cols)), DType::bf16));
    DeviceBuffer ids = upload_ids({1, static_cast<int32_t>(vocab), 2});
    gpu_->embedding_forward(ids.as<int32_t>(), table.tensor, out.tensor, false);
    std::vector<float> got = out.get();
    for (int64_t c = 0; c < cols; ++c) {
        EXPECT_TRUE(std::isfinite(got[static_cast<size_t>(c)]));
        EXPECT_TRUE(std::isnan(got[static_cast<size_t>(cols + c)]));
        EXPECT_TRUE(std::isfinite(got[static_cast<size_t>(2 * cols + c)]));
    }
}

// Many rows share an id (as positions do): the fp32 atomics must add them all.
TEST_F(TransformerOpsTest, EmbeddingBackwardAddsRepeatedIdsInFp32) {
    const std::pair<int64_t, int64_t> tables[] = {{1, 1}, {50, 37}, {128, 768}, {3000, 768}};
    for (DType dtype : kDTypes)
        for (auto [vocab, cols] : tables)
            for (int64_t offset : {0, 1}) {
                SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " table " << vocab << "x" << cols
                                                << " offset=" << offset);
                const int64_t rows = 1000;
                std::vector<float> g = rounded(values(static_cast<size_t>(rows * cols)), dtype);
                std::vector<int32_t> ids(static_cast<size_t>(rows));
                std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(std::min<int64_t>(vocab, 128) - 1));
                for (int32_t& id : ids) id = pick(rng_);
                std::vector<float> table_grad = values(static_cast<size_t>(vocab * cols));  // pre-filled by the caller
                GpuArray gg(*gpu_, dtype, rows, cols, offset), gtg(*gpu_, DType::f32, vocab, cols, offset);
                gg.set(g);
                gtg.set(table_grad);
                DeviceBuffer gids = upload_ids(ids);
                gpu_->embedding_backward(gids.as<int32_t>(), gg.tensor, gtg.f32(), vocab);
                // The exact sums (double) and the sums of magnitudes: fp32 atomics add in any order, so a
                // cancelling sum of many rows carries rounding of the order of its terms, not of its
                // result. Each element is held to 1e-6 of its terms' magnitudes: far above fp32's
                // rounding over 1000 adds (about 1e-7 of them), far below one term left out.
                std::vector<double> exact(table_grad.begin(), table_grad.end()), magnitude(exact.size());
                for (size_t i = 0; i < magnitude.size(); ++i) magnitude[i] = std::fabs(exact[i]);
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t c = 0; c < cols; ++c) {
                        const size_t at = static_cast<size_t>(ids[static_cast<size_t>(r)] * cols + c);
                        exact[at] += g[static_cast<size_t>(r * cols + c)];
                        magnitude[at] += std::fabs(g[static_cast<size_t>(r * cols + c)]);
                    }
                const std::vector<float> got = gtg.get();
                size_t off_by_more = 0;
                for (size_t i = 0; i < got.size(); ++i)
                    if (!(std::fabs(got[i] - exact[i]) <= 1e-6 * magnitude[i])) ++off_by_more;
                EXPECT_EQ(off_by_more, 0u);
                EXPECT_TRUE(gtg.guards_intact());
            }
}

// ---------------------------------------------------------------------------- dropout

// The generation counter lives on the device; both backends advance it the same way.
TEST_F(TransformerOpsTest, DropoutGenerationAdvancesAsOnTheCpu) {
    const int64_t n = 4099;
    const float p = 0.25f;
    const uint64_t seed = rng_();
    std::vector<float> x = values(static_cast<size_t>(n));  // never 0
    GpuArray gin(*gpu_, DType::f32, 1, n, 0), gout(*gpu_, DType::f32, 1, n, 0);
    gin.set(x);
    gpu_->dropout(gin.tensor, gout.tensor, p, seed);
    const std::vector<float> first = gout.get();
    for (int g = 0; g < 3; ++g) {
        gpu_->advance_dropout_generation();
        cpu_.advance_dropout_generation();
    }
    gpu_->dropout(gin.tensor, gout.tensor, p, seed);
    const std::vector<float> got = gout.get();
    std::vector<float> ref(x.size());
    cpu_.dropout(host_view(x, 1, n), host_view(ref, 1, n), p, seed);
    EXPECT_EQ(got, ref);
    EXPECT_NE(got, first) << "a new generation draws a new mask";
    size_t wrong = 0;
    for (size_t i = 0; i < got.size(); ++i) wrong += dropout_keep(dropout_seed_at(seed, 3), i, p) != (got[i] != 0.0f);
    EXPECT_EQ(wrong, 0u);
}

TEST_F(TransformerOpsTest, DropoutMaskIsTheSharedCounterHashAndMatchesCpu) {
    for (DType dtype : kDTypes)
        for (int64_t n : {1, 1027, (1 << 20) + 3})
            for (int64_t offset : {0, 1})
                for (float p : {0.0f, 0.1f, 0.5f})
                    for (bool in_place : {false, true}) {
                        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " n=" << n << " offset=" << offset
                                                        << " p=" << p << " in_place=" << in_place);
                        const uint64_t seed = rng_();
                        std::vector<float> x = rounded(values(static_cast<size_t>(n)), dtype);  // never 0
                        GpuArray gin(*gpu_, dtype, 1, n, offset), gout(*gpu_, dtype, 1, n, offset);
                        gin.set(x);
                        GpuArray& result = in_place ? gin : gout;
                        gpu_->dropout(gin.tensor, result.tensor, p, seed);
                        const std::vector<float> got = result.get();
                        size_t wrong_mask = 0, kept = 0;
                        for (size_t i = 0; i < got.size(); ++i) {
                            const bool keep = dropout_keep(seed, i, p);
                            kept += keep;
                            wrong_mask += keep != (got[i] != 0.0f);
                        }
                        EXPECT_EQ(wrong_mask, 0u) << "elements kept/dropped unlike dropout_keep";
                        if (n > 1000 && p > 0.0f)  // the kept share is 1 - p (5 sigma)
                            EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - p,
                                        5.0 * std::sqrt(p * (1.0 - p) / n));
                        std::vector<float> ref(x.size());
                        std::vector<float> x_cpu = x;
                        cpu_.dropout(host_view(x_cpu, 1, n), host_view(ref, 1, n), p, seed);
                        EXPECT_TRUE(close(got, ref, tolerance(dtype)));
                        EXPECT_TRUE(result.guards_intact());
                    }
}

// ---------------------------------------------------------------------------- attention

struct AttentionCase {
    Precision precision;
    int batch, seq, heads, head_dim;
};

double attention_tolerance(Precision p) {
    switch (p) {
        case Precision::fp32: return 1e-5;
        case Precision::tf32: return 1e-3;
        default: return 1e-2;
    }
}

// Forward output and the backward's grad_qkv against the CPU, for a causal mask or not and
// dropout or not. The GPU's `saved` starts as NaN: the backward may read only what the
// forward wrote.
class AttentionTest : public TransformerOpsTest,
                      public ::testing::WithParamInterface<std::tuple<Precision, bool, float>> {};

TEST_P(AttentionTest, ForwardAndBackwardMatchCpu) {
    const Precision precision = std::get<0>(GetParam());
    const bool causal = std::get<1>(GetParam());
    const float dropout_p = std::get<2>(GetParam());
    const DType dtype = compute_dtype(precision);
    CudaOps gpu(precision, 0);
    // Odd seq and head_dim 12 (scalar paths); 39 rows of 13 (two rows a warp, the last warp
    // half full); BERT's head shape (16-byte paths, two rows a warp in 16-bit); seq 256.
    // In bf16/fp16 head_dim 64 and 128 run the fused kernels (Ops::attention_fused). Their
    // backward takes one block per (batch, head) up to seq 128 (128, 100, 77, 17, 13, 1:
    // partial 16-key and 32-query tiles, idle warps) and the dQ and dK/dV kernels beyond
    // (129, 200, 256: partial 64-row and 32/64-key tiles).
    const AttentionCase cases[] = {
        {precision, 2, 37, 3, 12},  {precision, 1, 13, 3, 8},    {precision, 2, 128, 4, 64},
        {precision, 1, 256, 2, 64}, {precision, 2, 77, 2, 64},   {precision, 1, 13, 2, 64},
        {precision, 2, 1, 2, 64},   {precision, 1, 17, 3, 64},   {precision, 1, 100, 2, 64},
        {precision, 2, 129, 2, 64}, {precision, 1, 128, 2, 128}, {precision, 1, 100, 1, 128},
        {precision, 1, 200, 2, 128}, {precision, 2, 129, 1, 128}};
    for (const AttentionCase& c : cases) {
        SCOPED_TRACE(testing::Message() << precision_name(precision) << " causal=" << causal << " dropout="
                                        << dropout_p << " B=" << c.batch << " S=" << c.seq << " H=" << c.heads
                                        << " D=" << c.head_dim);
        Ops::AttentionShape shape;
        shape.batch = c.batch;
        shape.seq = c.seq;
        shape.heads = c.heads;
        shape.head_dim = c.head_dim;
        shape.causal = causal;
        shape.dropout_p = dropout_p;
        const uint64_t seed = rng_();
        const int64_t rows = int64_t{c.batch} * c.seq, width = int64_t{c.heads} * c.head_dim;
        // TF32 GEMMs see inputs already rounded to TF32 (what the GPU multiplies).
        auto inputs = [&](size_t n) {
            std::vector<float> v = rounded(values(n), dtype);
            if (precision == Precision::tf32)
                for (float& x : v) x = gpu_test::round_tf32(x);
            return v;
        };
        std::vector<float> qkv = inputs(static_cast<size_t>(rows * 3 * width));
        std::vector<float> grad_out = inputs(static_cast<size_t>(rows * width));

        GpuArray gqkv(gpu, dtype, rows, 3 * width), gout(gpu, dtype, rows, width);
        GpuArray ggrad_out(gpu, dtype, rows, width), ggrad_qkv(gpu, dtype, rows, 3 * width);
        const size_t saved_bytes = gpu.attention_saved_bytes(shape);
        ASSERT_GT(saved_bytes, 0u);
        DeviceBuffer saved(gpu, saved_bytes);
        gpu.upload(saved.get(), std::vector<uint8_t>(saved_bytes, 0xff).data(), saved_bytes);  // NaN in any dtype
        gqkv.set(qkv);
        ggrad_out.set(grad_out);
        gpu.attention_forward(shape, gqkv.tensor, gout.tensor, saved.get(), seed);
        gpu.attention_backward(shape, gqkv.tensor, gout.tensor, saved.get(), ggrad_out.tensor, ggrad_qkv.tensor,
                               seed);

        std::vector<float> out(static_cast<size_t>(rows * width)), grad_qkv(qkv.size());
        std::vector<uint8_t> cpu_saved(cpu_.attention_saved_bytes(shape));
        cpu_.attention_forward(shape, host_view(qkv, rows, 3 * width), host_view(out, rows, width),
                               cpu_saved.data(), seed);
        cpu_.attention_backward(shape, host_view(qkv, rows, 3 * width), host_view(out, rows, width),
                                cpu_saved.data(), host_view(grad_out, rows, width),
                                host_view(grad_qkv, rows, 3 * width), seed);
        const double tol = attention_tolerance(precision);
        EXPECT_TRUE(close(gout.get(), out, tol)) << "out";
        EXPECT_TRUE(close(ggrad_qkv.get(), grad_qkv, tol)) << "grad_qkv";
        EXPECT_TRUE(gout.guards_intact() && ggrad_qkv.guards_intact());

        if (Ops::attention_fused(dtype, c.head_dim)) {
            // Fused: nothing seq x seq is saved, only a float per (batch, head, query), and the
            // backward has no atomics: a second run gives the same bits.
            EXPECT_EQ(saved_bytes, static_cast<size_t>(c.batch) * c.heads * c.seq * sizeof(float));
            const std::vector<uint8_t> first = ggrad_qkv.get_bytes();
            ggrad_qkv.poison();
            gpu.attention_backward(shape, gqkv.tensor, gout.tensor, saved.get(), ggrad_out.tensor, ggrad_qkv.tensor,
                                   seed);
            EXPECT_EQ(ggrad_qkv.get_bytes(), first) << "fused backward not reproducible";
        }

        // Causal: the first query sees only the first key, so its output is that value.
        if (causal && dropout_p == 0.0f) {
            const std::vector<float> got = gout.get();
            for (int64_t d = 0; d < width; ++d) {
                const float v0 = qkv[static_cast<size_t>(2 * width + d)];
                EXPECT_NEAR(got[static_cast<size_t>(d)], v0, 1e-2 * std::fabs(v0) + 1e-6) << "d=" << d;
            }
        }
    }
}

std::string attention_name(const ::testing::TestParamInfo<std::tuple<Precision, bool, float>>& info) {
    return std::string(precision_name(std::get<0>(info.param))) + (std::get<1>(info.param) ? "_causal" : "_full") +
           (std::get<2>(info.param) > 0.0f ? "_dropout" : "_nodropout");
}

INSTANTIATE_TEST_SUITE_P(EveryPrecisionMaskAndDropout, AttentionTest,
                         ::testing::Combine(::testing::Values(Precision::fp32, Precision::tf32, Precision::bf16,
                                                              Precision::fp16),
                                            ::testing::Bool(), ::testing::Values(0.0f, 0.1f)),
                         attention_name);

// The fused kernels' dropout mask, element by element: with Q = K = 0 every allowed P is
// 1/n > 0, and with V = the identity O[i, j] = dropout(P)[i, j] for keys j < head_dim, so
// O[i, j] != 0 exactly when models/dropout.h keeps (b, h, i, j). With dO = the identity,
// dV[j, i] = dropout(P)[i, j] reads the backward's mask the same way for queries i < head_dim.
// Seq 102 pads each mask row to 104 (models/dropout.h's attention_dropout_index) and runs the
// one-block backward with head_dim 128 (every element read) and 64; seq 160 the dQ and dK/dV
// kernels. The second generation draws the mask from dropout_seed_at(seed, 1).
TEST_F(TransformerOpsTest, FusedAttentionDropoutIsTheCounterMask) {
    for (const Precision precision : {Precision::bf16, Precision::fp16})
        for (const bool causal : {false, true})
            for (const Ops::AttentionShape shape :
                 {Ops::AttentionShape{2, 102, 2, 128, causal, 0.3f}, Ops::AttentionShape{1, 102, 2, 64, causal, 0.3f},
                  Ops::AttentionShape{1, 160, 2, 128, causal, 0.3f}}) {
                SCOPED_TRACE(testing::Message() << precision_name(precision) << " causal=" << causal
                                                << " S=" << shape.seq << " D=" << shape.head_dim);
                const DType dtype = compute_dtype(precision);
                CudaOps gpu(precision, 0);
                ASSERT_TRUE(Ops::attention_fused(dtype, shape.head_dim));
                const int S = shape.seq, D = shape.head_dim, H = shape.heads, W = H * D;
                const int64_t rows = int64_t{shape.batch} * S;
                std::vector<float> qkv(static_cast<size_t>(rows * 3 * W), 0.0f),
                    grad_out(static_cast<size_t>(rows * W));
                for (int64_t r = 0; r < rows; ++r)
                    for (int h = 0; h < H; ++h)
                        for (int d = 0; d < D; ++d) {
                            const float identity = d == r % S ? 1.0f : 0.0f;
                            qkv[static_cast<size_t>(r * 3 * W + 2 * W + h * D + d)] = identity;
                            grad_out[static_cast<size_t>(r * W + h * D + d)] = identity;
                        }
                GpuArray gqkv(gpu, dtype, rows, 3 * W), gout(gpu, dtype, rows, W);
                GpuArray ggrad_out(gpu, dtype, rows, W), ggrad_qkv(gpu, dtype, rows, 3 * W);
                gqkv.set(qkv);
                ggrad_out.set(grad_out);
                DeviceBuffer saved(gpu, gpu.attention_saved_bytes(shape));
                const uint64_t seed = rng_();
                for (uint64_t generation = 0; generation < 2; ++generation) {
                    if (generation == 1) gpu.advance_dropout_generation();
                    gpu.attention_forward(shape, gqkv.tensor, gout.tensor, saved.get(), seed);
                    gpu.attention_backward(shape, gqkv.tensor, gout.tensor, saved.get(), ggrad_out.tensor,
                                           ggrad_qkv.tensor, seed);
                    const std::vector<float> out = gout.get(), grad = ggrad_qkv.get();
                    const uint64_t drawn = dropout_seed_at(seed, generation);
                    int64_t wrong_out = 0, wrong_dv = 0, read_out = 0, read_dv = 0, kept = 0, allowed = 0;
                    for (int b = 0; b < shape.batch; ++b)
                        for (int h = 0; h < H; ++h)
                            for (int i = 0; i < S; ++i)
                                for (int j = 0; j < S; ++j) {
                                    const bool visible = !causal || j <= i;
                                    const uint64_t index =
                                        attention_dropout_index((static_cast<uint64_t>(b) * H + h) * S + i, j, S);
                                    const bool keep = visible && dropout_keep(drawn, index, shape.dropout_p);
                                    if (j < D) {
                                        const float o = out[static_cast<size_t>((int64_t{b} * S + i) * W + h * D + j)];
                                        wrong_out += (o != 0.0f) != keep;
                                        ++read_out;
                                    }
                                    if (i < D) {
                                        const float dv = grad[static_cast<size_t>((int64_t{b} * S + j) * 3 * W +
                                                                                  2 * W + h * D + i)];
                                        wrong_dv += (dv != 0.0f) != keep;
                                        ++read_dv;
                                    }
                                    kept += keep;
                                    allowed += visible;
                                }
                    EXPECT_EQ(wrong_out, 0) << "generation " << generation << ", of " << read_out;
                    EXPECT_EQ(wrong_dv, 0) << "generation " << generation << ", of " << read_dv;
                    EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(allowed), 0.7, 0.03);
                }
            }
}

TEST_F(TransformerOpsTest, AttentionRejectsWrongShapesAndDTypes) {
    Ops::AttentionShape shape;
    shape.batch = 2;
    shape.seq = 8;
    shape.heads = 2;
    shape.head_dim = 4;
    GpuArray qkv(*gpu_, DType::f32, 16, 24), out(*gpu_, DType::f32, 16, 8), bad(*gpu_, DType::f32, 16, 9);
    DeviceBuffer saved(*gpu_, gpu_->attention_saved_bytes(shape));
    EXPECT_THROW(gpu_->attention_forward(shape, qkv.tensor, bad.tensor, saved.get(), 1), std::exception);
    GpuArray qkv16(*gpu_, DType::bf16, 16, 24);  // fp32 backend: inputs must be f32
    EXPECT_THROW(gpu_->attention_forward(shape, qkv16.tensor, out.tensor, saved.get(), 1), std::exception);
    shape.dropout_p = 1.0f;
    EXPECT_THROW(gpu_->attention_forward(shape, qkv.tensor, out.tensor, saved.get(), 1), std::exception);
}

// ---------------------------------------------------------------------------- loss with ignored rows

// Masked-LM labels: most rows are -1 (ignored). Their gradient rows are exactly zero, and
// the loss and the other rows' gradients average over the labelled rows only.
TEST_F(TransformerOpsTest, SoftmaxCrossEntropyIgnoresNegativeLabels) {
    const std::pair<int64_t, int64_t> shapes[] = {{37, 10}, {256, 1000}, {40, 30522}, {7, 50257}};
    for (DType dtype : kDTypes)
        for (auto [rows, cols] : shapes)
            for (bool in_place : {false, true}) {
                SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << rows << "x" << cols
                                                << " in_place=" << in_place);
                std::vector<float> logits = rounded(values(static_cast<size_t>(rows * cols), 0.05f, 2.0f), dtype);
                std::vector<int32_t> labels(static_cast<size_t>(rows));
                std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(cols - 1));
                std::bernoulli_distribution labelled(0.15);
                for (int32_t& l : labels) l = labelled(rng_) ? pick(rng_) : -100;
                labels[0] = pick(rng_);  // at least one labelled row
                labels[1] = -1;          // and one ignored
                const int64_t labelled_rows =
                    std::count_if(labels.begin(), labels.end(), [](int32_t l) { return l >= 0; });
                GpuArray glogits(*gpu_, dtype, rows, cols), ggrad(*gpu_, dtype, rows, cols), gloss(*gpu_, DType::f32, 1, 1);
                glogits.set(logits);
                DeviceBuffer glabels = upload_ids(labels);
                GpuArray& grad = in_place ? glogits : ggrad;
                const float grad_scale = 1024.0f;
                gpu_->softmax_cross_entropy(glogits.tensor, glabels.as<int32_t>(), labelled_rows, gloss.f32(),
                                            grad.tensor, grad_scale);
                const std::vector<float> got = grad.get();
                size_t nonzero_ignored = 0;
                for (int64_t r = 0; r < rows; ++r)
                    if (labels[static_cast<size_t>(r)] < 0)
                        for (int64_t c = 0; c < cols; ++c) nonzero_ignored += got[static_cast<size_t>(r * cols + c)] != 0.0f;
                EXPECT_EQ(nonzero_ignored, 0u) << "ignored rows must have a zero gradient";

                std::vector<float> ref_logits = logits, ref_grad(logits.size());
                float ref_loss = 0.0f;
                cpu_.softmax_cross_entropy(host_view(ref_logits, rows, cols), labels.data(), labelled_rows,
                                           &ref_loss, host_view(ref_grad, rows, cols), grad_scale);
                const float loss = gloss.get()[0];
                EXPECT_LE(std::fabs(loss - ref_loss), 1e-5 * std::max(std::fabs(ref_loss), 0.1f))
                    << "loss " << loss << " vs reference " << ref_loss;
                EXPECT_TRUE(close(got, ref_grad, tolerance(dtype))) << "gradient";
                EXPECT_TRUE(grad.guards_intact());
            }
}

// A -inf logit is a class excluded: the transformer's padded vocabulary (the last columns,
// llm.c's 50304 for 50257) and, so that no thread's order matters, -inf scattered anywhere
// but the label (the first column and the unaligned ends included). Loss and gradient equal
// the CPU's over the same logits, which equal the CPU's over the valid columns alone; the
// excluded classes' gradient is exactly zero.
TEST_F(TransformerOpsTest, SoftmaxCrossEntropyExcludesMinusInfClasses) {
    struct Shape { int64_t rows, valid, cols; bool scattered; };
    const Shape shapes[] = {{37, 11, 128, false}, {64, 30522, 30592, false}, {5, 50257, 50304, false},
                            {33, 1001, 1001, true}};
    for (DType dtype : kDTypes)
        for (const Shape& sh : shapes) {
            const int64_t rows = sh.rows, cols = sh.cols;
            SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << rows << "x" << cols << " valid " << sh.valid
                                            << (sh.scattered ? " scattered" : ""));
            std::vector<float> logits = rounded(values(static_cast<size_t>(rows * cols), 0.05f, 2.0f), dtype);
            std::vector<int32_t> labels(static_cast<size_t>(rows));
            std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(sh.valid - 1));
            std::bernoulli_distribution drop(0.1);
            std::vector<bool> excluded(logits.size(), false);
            for (int64_t r = 0; r < rows; ++r) {
                labels[static_cast<size_t>(r)] = r == 1 ? -1 : pick(rng_);
                for (int64_t c = 0; c < cols; ++c) {
                    const size_t i = static_cast<size_t>(r * cols + c);
                    excluded[i] = c >= sh.valid ||
                                  (sh.scattered && c != labels[static_cast<size_t>(r)] && (c == 0 || drop(rng_)));
                    if (excluded[i]) logits[i] = -INFINITY;
                }
            }
            GpuArray glogits(*gpu_, dtype, rows, cols), gloss(*gpu_, DType::f32, 1, 1);
            glogits.set(logits);
            DeviceBuffer glabels = upload_ids(labels);
            gpu_->softmax_cross_entropy(glogits.tensor, glabels.as<int32_t>(), rows - 1, gloss.f32(), glogits.tensor,
                                        1.0f);  // row 1 ignored
            const std::vector<float> got = glogits.get();
            size_t nonzero_excluded = 0;
            for (size_t i = 0; i < got.size(); ++i) nonzero_excluded += excluded[i] && got[i] != 0.0f;
            EXPECT_EQ(nonzero_excluded, 0u) << "excluded classes must have a zero gradient";

            std::vector<float> ref_logits = logits, ref_grad(logits.size());
            float ref_loss = 0.0f;
            cpu_.softmax_cross_entropy(host_view(ref_logits, rows, cols), labels.data(), rows - 1, &ref_loss,
                                       host_view(ref_grad, rows, cols), 1.0f);
            ASSERT_TRUE(std::isfinite(ref_loss));
            const float loss = gloss.get()[0];
            EXPECT_LE(std::fabs(loss - ref_loss), 1e-5 * std::max(std::fabs(ref_loss), 0.1f))
                << "loss " << loss << " vs reference " << ref_loss;
            EXPECT_TRUE(close(got, ref_grad, tolerance(dtype))) << "gradient";
            EXPECT_TRUE(glogits.guards_intact());
            if (sh.scattered) continue;
            // The padded columns change nothing: the CPU over the valid columns alone.
            std::vector<float> valid_logits, valid_grad(static_cast<size_t>(rows * sh.valid));
            for (int64_t r = 0; r < rows; ++r)
                valid_logits.insert(valid_logits.end(), logits.begin() + r * cols, logits.begin() + r * cols + sh.valid);
            float valid_loss = 0.0f;
            cpu_.softmax_cross_entropy(host_view(valid_logits, rows, sh.valid), labels.data(), rows - 1,
                                       &valid_loss, host_view(valid_grad, rows, sh.valid), 1.0f);
            EXPECT_EQ(valid_loss, ref_loss);
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < sh.valid; ++c)
                    ASSERT_EQ(valid_grad[static_cast<size_t>(r * sh.valid + c)], ref_grad[static_cast<size_t>(r * cols + c)])
                        << r << "," << c;
        }
}

// No labelled row at all (a batch whose masked positions all fell elsewhere): loss 0 and
// a zero gradient, never 0/0.
TEST_F(TransformerOpsTest, SoftmaxCrossEntropyWithEveryRowIgnoredIsZero) {
    const int64_t rows = 5, cols = 1001;
    GpuArray logits(*gpu_, DType::bf16, rows, cols), grad(*gpu_, DType::bf16, rows, cols), loss(*gpu_, DType::f32, 1, 1);
    logits.set(rounded(values(static_cast<size_t>(rows * cols)), DType::bf16));
    DeviceBuffer labels = upload_ids(std::vector<int32_t>(static_cast<size_t>(rows), -100));
    gpu_->softmax_cross_entropy(logits.tensor, labels.as<int32_t>(), 0, loss.f32(), grad.tensor, 1.0f);
    EXPECT_EQ(loss.get()[0], 0.0f);
    for (float g : grad.get()) ASSERT_EQ(g, 0.0f);
}

}  // namespace
}  // namespace sb
