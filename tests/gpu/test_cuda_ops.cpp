// CudaOps against the fp32 CPU backend (CpuOps) on fresh random inputs: every op, every
// dtype, GEMM in all transpose combinations with odd sizes, alpha/beta, fused bias and
// pointers offset from their allocations. Outputs are poisoned with NaN first and guarded
// on both sides, so unwritten or overrun elements fail. bf16/f16/tf32 inputs are rounded
// on the host and the CPU is given exactly those values. Tolerances on ‖out−ref‖/‖ref‖:
// fp32 1e-5, tf32 1e-3, bf16/fp16 1e-2. Without a visible GPU every test is skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "models/checksum.h"
#include "models/cpu/cpu_ops.h"
#include "models/cuda/cuda_ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace sb {
namespace {

using gpu_test::close;
using gpu_test::GpuArray;
using gpu_test::random_values;
using gpu_test::rounded;
using gpu_test::tolerance;

const DType kDTypes[] = {DType::f32, DType::bf16, DType::f16};
const Activation kActivations[] = {Activation::none, Activation::relu, Activation::gelu, Activation::tanh,
                                   Activation::gelu_erf};

using gpu_test::host_view;

class CudaOpsTest : public gpu_test::CudaOpsFixture {};

// ---------------------------------------------------------------------------- GEMM

struct GemmDTypes {
    DType ab, c;
    Precision precision;
};
const GemmDTypes kGemmDTypes[] = {
    {DType::f32, DType::f32, Precision::fp32}, {DType::f32, DType::f32, Precision::tf32},
    {DType::bf16, DType::bf16, Precision::bf16}, {DType::bf16, DType::f32, Precision::bf16},
    {DType::f16, DType::f16, Precision::fp16}, {DType::f16, DType::f32, Precision::fp16},
};

double gemm_tolerance(const GemmDTypes& d) {
    if (d.ab == DType::f32) return d.precision == Precision::tf32 ? 1e-3 : 1e-5;
    return 1e-2;
}

struct GemmShape {
    int64_t m, n, k;
};

// Inputs in the GEMM's input rounding: the dtype's, and TF32's when the GEMM uses it.
std::vector<float> gemm_inputs(std::mt19937_64& rng, size_t n, const GemmDTypes& d) {
    std::vector<float> v = rounded(random_values(rng, n), d.ab);
    if (d.precision == Precision::tf32)
        for (float& x : v) x = gpu_test::round_tf32(x);
    return v;
}

// One GEMM on the GPU (views at the given element offsets) against the CPU; returns the
// GPU result so callers can compare runs.
std::vector<float> check_gemm(CudaOps& gpu, CpuOps& cpu, std::mt19937_64& rng, const GemmDTypes& d, bool ta,
                              bool tb, GemmShape s, float alpha, float beta, bool with_bias, int64_t offset = 0) {
    SCOPED_TRACE(testing::Message() << "gemm " << (ta ? "T" : "N") << (tb ? "T" : "N") << " m=" << s.m << " n=" << s.n
                                    << " k=" << s.k << " alpha=" << alpha << " beta=" << beta << " bias=" << with_bias
                                    << " offset=" << offset << " " << dtype_name(d.ab) << "->" << dtype_name(d.c)
                                    << " " << precision_name(d.precision));
    const int64_t a_rows = ta ? s.k : s.m, a_cols = ta ? s.m : s.k;
    const int64_t b_rows = tb ? s.n : s.k, b_cols = tb ? s.k : s.n;
    std::vector<float> a = gemm_inputs(rng, static_cast<size_t>(s.m * s.k), d);
    std::vector<float> b = gemm_inputs(rng, static_cast<size_t>(s.k * s.n), d);
    // The fused bias is added in C's dtype (cuda_ops.cu: rounded_bias), so the bias is drawn in
    // it: a 1x1 product whose terms cancel would otherwise show the bias's rounding as its error.
    std::vector<float> bias = rounded(random_values(rng, static_cast<size_t>(s.n)), d.c);
    // beta == 0: C starts as NaN on both sides; a GEMM that reads it fails.
    std::vector<float> c0 = beta != 0.0f ? rounded(random_values(rng, static_cast<size_t>(s.m * s.n)), d.c)
                                         : std::vector<float>(static_cast<size_t>(s.m * s.n),
                                                              std::numeric_limits<float>::quiet_NaN());

    GpuArray ga(gpu, d.ab, a_rows, a_cols, offset), gb(gpu, d.ab, b_rows, b_cols, offset);
    GpuArray gc(gpu, d.c, s.m, s.n, offset), gbias(gpu, DType::f32, 1, s.n, offset);
    ga.set(a);
    gb.set(b);
    if (beta != 0.0f) gc.set(c0);
    gbias.set(bias);
    gpu.gemm(ta, tb, alpha, ga.tensor, gb.tensor, beta, gc.tensor, with_bias ? gbias.f32() : nullptr);
    std::vector<float> out = gc.get();
    EXPECT_TRUE(gc.guards_intact()) << "GEMM wrote outside C";

    std::vector<float> ref = c0;
    cpu.gemm(ta, tb, alpha, host_view(a, a_rows, a_cols), host_view(b, b_rows, b_cols), beta,
             host_view(ref, s.m, s.n), with_bias ? bias.data() : nullptr);
    EXPECT_TRUE(close(out, ref, gemm_tolerance(d)));
    return out;
}

class GemmTest : public CudaOpsTest, public ::testing::WithParamInterface<std::tuple<int, bool, bool>> {};

TEST_P(GemmTest, MatchesCpuForOddShapesAlphaBetaAndBias) {
    const GemmDTypes d = kGemmDTypes[std::get<0>(GetParam())];
    const bool ta = std::get<1>(GetParam()), tb = std::get<2>(GetParam());
    CudaOps gpu(d.precision, 0);
    const GemmShape shapes[] = {{1, 1, 1}, {17, 33, 65}, {256, 512, 384}};
    struct Variant {
        float alpha, beta;
        bool bias;
    };
    const Variant variants[] = {{1.0f, 0.0f, false}, {0.75f, 0.5f, true}, {-1.25f, 0.0f, true}, {1.0f, 1.0f, false}};
    for (const GemmShape& s : shapes)
        for (const Variant& v : variants) check_gemm(gpu, cpu_, rng_, d, ta, tb, s, v.alpha, v.beta, v.bias);
    // Which bias path cuBLASLt allowed (both are checked above; this is for the log).
    std::printf("[   info   ] %zu of %zu GEMM plans have a bias cuBLASLt could not fuse\n",
                gpu.matmul_unfused_epilogue_plan_count(), gpu.matmul_plan_count());

    // The second call of a shape reuses its plan: no new heuristic query, same bits.
    const size_t plans = gpu.matmul_plan_count();
    std::mt19937_64 rng_a(seed_), rng_b(seed_);
    std::vector<float> first = check_gemm(gpu, cpu_, rng_a, d, ta, tb, shapes[2], 0.75f, 0.5f, true);
    std::vector<float> second = check_gemm(gpu, cpu_, rng_b, d, ta, tb, shapes[2], 0.75f, 0.5f, true);
    EXPECT_EQ(gpu.matmul_plan_count(), plans);
    EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0);
}

// A GEMM's algorithm is timed once per process (cuda_ops.cu: choose_algorithm): a second
// CudaOps computes the same problem with the same bits, against the CPU as every GEMM. The
// shape is an attention projection's weight gradient (few output tiles, long k), where
// cuBLASLt's candidates differ most.
TEST_F(CudaOpsTest, GemmAlgorithmIsOneChoicePerProcess) {
    const GemmShape s{768, 768, 2048};
    for (const GemmDTypes& d : kGemmDTypes) {
        CudaOps first_ops(d.precision, 0), second_ops(d.precision, 0);
        std::mt19937_64 rng_a(seed_), rng_b(seed_);
        const std::vector<float> first = check_gemm(first_ops, cpu_, rng_a, d, true, false, s, 1.0f, 0.0f, false);
        const std::vector<float> second = check_gemm(second_ops, cpu_, rng_b, d, true, false, s, 1.0f, 0.0f, false);
        EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0)
            << dtype_name(d.ab) << "->" << dtype_name(d.c) << " " << precision_name(d.precision);
    }
}

std::string gemm_name(const ::testing::TestParamInfo<std::tuple<int, bool, bool>>& info) {
    const GemmDTypes& d = kGemmDTypes[std::get<0>(info.param)];
    return std::string(dtype_name(d.ab)) + "_to_" + dtype_name(d.c) + "_" + precision_name(d.precision) + "_" +
           (std::get<1>(info.param) ? "T" : "N") + (std::get<2>(info.param) ? "T" : "N");
}

INSTANTIATE_TEST_SUITE_P(AllDTypesAndTransposes, GemmTest,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kGemmDTypes))),
                                            ::testing::Bool(), ::testing::Bool()),
                         gemm_name);

// Model tensors are offsets into flat buffers: A, B, C and the bias may be only 2- or
// 4-byte aligned, and the same shape may come at several alignments.
TEST_F(CudaOpsTest, GemmOnOffsetViewsOfEveryAlignment) {
    for (const GemmDTypes& d : {kGemmDTypes[0], kGemmDTypes[2], kGemmDTypes[3], kGemmDTypes[4]}) {
        CudaOps gpu(d.precision, 0);
        for (int64_t offset : {0, 1, 2, 3, 8, 0})
            for (bool ta : {false, true})
                check_gemm(gpu, cpu_, rng_, d, ta, !ta, {48, 40, 72}, 1.0f, 0.25f, true, offset);
        std::printf("[   info   ] %s->%s: %zu of %zu offset-view plans run the bias unfused\n", dtype_name(d.ab),
                    dtype_name(d.c), gpu.matmul_unfused_epilogue_plan_count(), gpu.matmul_plan_count());
    }
}

// ---------------------------------------------------------------------------- Linear epilogues

Precision precision_of(DType dtype) {
    return dtype == DType::f32 ? Precision::fp32 : dtype == DType::bf16 ? Precision::bf16 : Precision::fp16;
}

// linear_activation_forward/backward and linear_weight_grad against the CPU's composition,
// every dtype, both GELUs: cuBLASLt's epilogues where gemm_fuses_*() says CUDA fuses them
// (16-bit, the tanh GELU; the bias gradient), the composed ops elsewhere. The fused forward
// rounds x w^T + bias once where the composed one rounds the product and the bias apart:
// both within the 16-bit tolerance. Weights scaled by 1/sqrt(in) keep the pre-activations
// where GELU curves.
TEST_F(CudaOpsTest, LinearEpiloguesMatchCpu) {
    struct Shape {
        int64_t rows, in, out;
    };
    const Shape shapes[] = {{8, 64, 128}, {37, 40, 72}, {512, 768, 3072}};
    for (DType dtype : kDTypes) {
        CudaOps gpu(precision_of(dtype), 0);
        for (Activation act : {Activation::gelu, Activation::gelu_erf})
            for (const Shape& s : shapes) {
                SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << activation_name(act) << " rows="
                                                << s.rows << " in=" << s.in << " out=" << s.out);
                const float scale = 1.0f / std::sqrt(static_cast<float>(s.in));
                std::vector<float> x = rounded(values(static_cast<size_t>(s.rows * s.in)), dtype);
                std::vector<float> w =
                    rounded(values(static_cast<size_t>(s.out * s.in), 0.1f * scale, scale), dtype);
                std::vector<float> bias = values(static_cast<size_t>(s.out));
                std::vector<float> dy = rounded(values(static_cast<size_t>(s.rows * s.out)), dtype);
                GpuArray gx(gpu, dtype, s.rows, s.in), gw(gpu, dtype, s.out, s.in), gbias(gpu, DType::f32, 1, s.out);
                GpuArray gpre(gpu, dtype, s.rows, s.out), gout(gpu, dtype, s.rows, s.out);
                GpuArray gdy(gpu, dtype, s.rows, s.out), gpre_in(gpu, dtype, s.rows, s.in), gdpre(gpu, dtype, s.rows, s.in);
                GpuArray gdw(gpu, DType::f32, s.out, s.in), gdb(gpu, DType::f32, 1, s.out);
                gx.set(x);
                gw.set(w);
                gbias.set(bias);
                gdy.set(dy);

                gpu.linear_activation_forward(gx.tensor, gw.tensor, gbias.f32(), act, gpre.tensor, gout.tensor);
                std::vector<float> pre(dy.size()), out(dy.size());
                cpu_.linear_activation_forward(host_view(x, s.rows, s.in), host_view(w, s.out, s.in), bias.data(),
                                               act, host_view(pre, s.rows, s.out), host_view(out, s.rows, s.out));
                EXPECT_TRUE(close(gpre.get(), pre, tolerance(dtype))) << "pre-activation";
                EXPECT_TRUE(close(gout.get(), out, tolerance(dtype))) << "activation";

                // The data gradient goes through the activation below this Linear: its
                // pre-activation has the input's shape (rows x in), around where GELU curves.
                std::vector<float> pre_in = rounded(values(static_cast<size_t>(s.rows * s.in), 0.05f, 2.0f), dtype);
                gpre_in.set(pre_in);
                gpu.linear_activation_backward(gdy.tensor, gw.tensor, act, gpre_in.tensor, gdpre.tensor);
                std::vector<float> dpre(pre_in.size());
                cpu_.linear_activation_backward(host_view(dy, s.rows, s.out), host_view(w, s.out, s.in), act,
                                                host_view(pre_in, s.rows, s.in), host_view(dpre, s.rows, s.in));
                EXPECT_TRUE(close(gdpre.get(), dpre, tolerance(dtype))) << "data gradient";

                gpu.linear_weight_grad(gdy.tensor, gx.tensor, gdw.tensor, gdb.f32());
                std::vector<float> dw(static_cast<size_t>(s.out * s.in)), db(static_cast<size_t>(s.out));
                cpu_.linear_weight_grad(host_view(dy, s.rows, s.out), host_view(x, s.rows, s.in),
                                        host_view(dw, s.out, s.in), db.data());
                EXPECT_TRUE(close(gdw.get(), dw, tolerance(dtype))) << "weight gradient";
                EXPECT_TRUE(close(gdb.get(), db, tolerance(dtype))) << "bias gradient";
                for (const GpuArray* g : {&gpre, &gout, &gdpre, &gdw, &gdb}) EXPECT_TRUE(g->guards_intact());
            }
        // Which ran fused (both paths are checked above; this is for the log).
        std::printf("[   info   ] %s: %zu of %zu GEMM plans have an epilogue cuBLASLt could not fuse\n",
                    dtype_name(dtype), gpu.matmul_unfused_epilogue_plan_count(), gpu.matmul_plan_count());
    }
}

TEST_F(CudaOpsTest, GemmRejectsShapesThatDoNotChain) {
    GpuArray a(*gpu_, DType::f32, 4, 5), b(*gpu_, DType::f32, 6, 3), c(*gpu_, DType::f32, 4, 3);
    EXPECT_THROW(gpu_->gemm(false, false, 1.0f, a.tensor, b.tensor, 0.0f, c.tensor), std::exception);
    GpuArray b16(*gpu_, DType::bf16, 5, 3);
    EXPECT_THROW(gpu_->gemm(false, false, 1.0f, a.tensor, b16.tensor, 0.0f, c.tensor), std::exception);
}

// ---------------------------------------------------------------------------- memory

TEST_F(CudaOpsTest, UploadDownloadRoundTripAndBackendFacts) {
    EXPECT_EQ(gpu_->name(), "cuda");
    EXPECT_EQ(gpu_->precision(), Precision::fp32);
    EXPECT_EQ(gpu_->stream(), static_cast<void*>(gpu_->cuda_stream()));
    EXPECT_EQ(gpu_->alloc(0), nullptr);
    std::vector<float> v = values(1000);
    DeviceBuffer buf(*gpu_, v.size() * sizeof(float));
    gpu_->upload(buf.get(), v.data(), buf.bytes());
    std::vector<float> back(v.size());
    gpu_->download(back.data(), buf.get(), buf.bytes());
    EXPECT_EQ(std::memcmp(v.data(), back.data(), buf.bytes()), 0);
}

TEST_F(CudaOpsTest, FillEveryDTypeAndStaysInItsView) {
    for (DType dtype : kDTypes)
        for (int64_t n : {1, 7, 1000, (1 << 20) + 3})
            for (int64_t offset : {0, 1}) {
                SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " n=" << n << " offset=" << offset);
                const float value = values(1)[0] * 3.0f;
                GpuArray t(*gpu_, dtype, 1, n, offset);
                gpu_->fill(t.tensor, value);
                const float expected = rounded({value}, dtype)[0];
                std::vector<float> out = t.get();
                size_t wrong = 0;
                for (float x : out) wrong += x != expected;
                EXPECT_EQ(wrong, 0u) << "expected " << expected;
                EXPECT_TRUE(t.guards_intact());
            }
}

// Casts round to nearest even, as the host conversions: bitwise equal.
TEST_F(CudaOpsTest, CastBetweenEveryPairOfDTypes) {
    for (DType from : kDTypes)
        for (DType to : kDTypes)
            for (int64_t offset : {0, 1}) {
                SCOPED_TRACE(testing::Message() << dtype_name(from) << " -> " << dtype_name(to) << " offset=" << offset);
                const int64_t rows = 37, cols = 1029;
                // Log-uniform magnitudes 1e-7 .. 2e5: f16 subnormals and overflow to inf included.
                std::vector<float> v = values(static_cast<size_t>(rows * cols));
                std::uniform_real_distribution<float> exponent(-7.0f, 5.3f);
                for (float& x : v) x = std::copysign(std::pow(10.0f, exponent(rng_)), x);
                v = rounded(v, from);
                GpuArray src(*gpu_, from, rows, cols, offset), dst(*gpu_, to, rows, cols, offset);
                src.set(v);
                gpu_->cast(src.tensor, dst.tensor);
                std::vector<uint8_t> expected = gpu_test::encode(v, to);
                EXPECT_EQ(dst.get_bytes(), expected);
                EXPECT_TRUE(dst.guards_intact());
            }
}

// ---------------------------------------------------------------------------- activations

class ActivationTest : public CudaOpsTest, public ::testing::WithParamInterface<std::tuple<DType, Activation>> {};

TEST_P(ActivationTest, ForwardMatchesCpu) {
    const DType dtype = std::get<0>(GetParam());
    const Activation act = std::get<1>(GetParam());
    const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {37, 129}, {1024, 1027}};
    for (auto [rows, cols] : shapes)
        for (int64_t offset : {0, 1}) {
            SCOPED_TRACE(testing::Message() << rows << "x" << cols << " offset=" << offset);
            // GELU-erf within |pre| <= 2: below -2, 1 + erf(x / sqrt 2) cancels, and an ulp of erf (CPU
            // against GPU) becomes a relative error above 1e-5 in a single element (seen at x = -3.4).
            const float max_abs = act == Activation::gelu_erf ? 2.0f : 4.0f;
            std::vector<float> pre = rounded(values(static_cast<size_t>(rows * cols), 0.05f, max_abs), dtype);
            GpuArray gpre(*gpu_, dtype, rows, cols, offset), gout(*gpu_, dtype, rows, cols, offset);
            gpre.set(pre);
            gpu_->activation_forward(act, gpre.tensor, gout.tensor);
            std::vector<float> ref(pre.size());
            cpu_.activation_forward(act, host_view(pre, rows, cols), host_view(ref, rows, cols));
            EXPECT_TRUE(close(gout.get(), ref, tolerance(dtype)));
            EXPECT_TRUE(gout.guards_intact());
        }
}

TEST_P(ActivationTest, BackwardMatchesCpuAlsoInPlace) {
    const DType dtype = std::get<0>(GetParam());
    const Activation act = std::get<1>(GetParam());
    const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {37, 129}, {1024, 1027}};
    for (auto [rows, cols] : shapes)
        for (int64_t offset : {0, 1})
            for (bool in_place : {false, true}) {
                SCOPED_TRACE(testing::Message() << rows << "x" << cols << " offset=" << offset
                                                << " in_place=" << in_place);
                const size_t n = static_cast<size_t>(rows * cols);
                // |pre| <= 2: beyond it 1 - tanh^2 cancels, and one ulp of tanh (CPU vs GPU)
                // becomes a relative error above 1e-5 in a single element.
                std::vector<float> pre = rounded(values(n, 0.05f, 2.0f), dtype);
                std::vector<float> grad = rounded(values(n), dtype);
                GpuArray gpre(*gpu_, dtype, rows, cols, offset), ggrad(*gpu_, dtype, rows, cols, offset);
                GpuArray gout(*gpu_, dtype, rows, cols, offset);
                gpre.set(pre);
                ggrad.set(grad);
                GpuArray& result = in_place ? ggrad : gout;
                gpu_->activation_backward(act, gpre.tensor, ggrad.tensor, result.tensor);
                std::vector<float> ref(n);
                cpu_.activation_backward(act, host_view(pre, rows, cols), host_view(grad, rows, cols),
                                         host_view(ref, rows, cols));
                if (n > 1) {
                    EXPECT_TRUE(close(result.get(), ref, tolerance(dtype)));
                } else {
                    // One element is held relative to its incoming gradient: GELU's derivative crosses zero
                    // near x = -0.75, where the element's own relative error is unbounded.
                    const double got = result.get()[0];
                    EXPECT_LE(std::fabs(got - ref[0]), tolerance(dtype) * std::fabs(grad[0])) << got << " vs " << ref[0];
                }
                EXPECT_TRUE(result.guards_intact());
            }
}

std::string activation_test_name(const ::testing::TestParamInfo<std::tuple<DType, Activation>>& info) {
    return std::string(dtype_name(std::get<0>(info.param))) + "_" + activation_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(EveryDTypeAndActivation, ActivationTest,
                         ::testing::Combine(::testing::ValuesIn(kDTypes), ::testing::ValuesIn(kActivations)),
                         activation_test_name);

// ---------------------------------------------------------------------------- bias_grad

// Output is fp32 and the inputs are identical, so only summation order differs: 1e-5
// for every input dtype. Two runs give the same bits.
TEST_F(CudaOpsTest, BiasGradMatchesCpuAndIsBitwiseReproducible) {
    const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {37, 129}, {4096, 10}, {3, 5000}, {1000, 1000}, {4096, 768}};
    for (DType dtype : kDTypes)
        for (auto [rows, cols] : shapes) {
            SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << rows << "x" << cols);
            std::vector<float> grad = rounded(values(static_cast<size_t>(rows * cols)), dtype);
            GpuArray ggrad(*gpu_, dtype, rows, cols), gout(*gpu_, DType::f32, 1, cols, 1);
            ggrad.set(grad);
            gpu_->bias_grad(ggrad.tensor, gout.f32());
            std::vector<uint8_t> first = gout.get_bytes();
            EXPECT_TRUE(gout.guards_intact());
            gout.poison();
            gpu_->bias_grad(ggrad.tensor, gout.f32());
            EXPECT_EQ(gout.get_bytes(), first) << "bias_grad differs between two runs";

            std::vector<float> ref(static_cast<size_t>(cols));
            cpu_.bias_grad(host_view(grad, rows, cols), ref.data());
            EXPECT_TRUE(close(gpu_test::decode(first, DType::f32), ref, 1e-5));
        }
}

// A loss's gradient with most rows unlabelled: the rows whose label is negative are not read
// (junk there, NaN and inf, changes nothing), and the sums are bitwise those of the plain
// bias_grad over the matrix with such rows zeroed (the same chunks, the same order; the
// skipped rows add +0), within 1e-5 of the CPU's. The shapes take both the 16-byte-vector
// path (768; 30592, BERT's padded vocabulary) and the scalar one (129; 30522, not a multiple
// of 4), one chunk of rows (37) and several with partial tiles of rows (300, 1000). Every row
// unlabelled: zeros.
TEST_F(CudaOpsTest, LabelledBiasGradReadsOnlyLabelledRows) {
    const std::pair<int64_t, int64_t> shapes[] = {{1, 1},      {37, 129},    {1000, 1000},
                                                  {4096, 768}, {512, 30592}, {300, 30522}};
    for (DType dtype : kDTypes)
        for (auto [rows, cols] : shapes)
            for (double share : {0.15, 0.0}) {
                SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << rows << "x" << cols << " labelled "
                                                << share);
                std::vector<int32_t> labels(static_cast<size_t>(rows));
                std::bernoulli_distribution labelled(share);
                for (int32_t& l : labels) l = labelled(rng_) ? 0 : -100;
                if (share > 0) labels[0] = 1;            // at least one labelled row
                if (share > 0 && rows > 1) labels[1] = -1;  // and one not
                const int64_t labelled_rows =
                    std::count_if(labels.begin(), labels.end(), [](int32_t l) { return l >= 0; });
                std::vector<float> grad = rounded(values(static_cast<size_t>(rows * cols)), dtype);
                std::vector<float> zeroed = grad;
                for (int64_t r = 0; r < rows; ++r)
                    if (labels[static_cast<size_t>(r)] < 0)
                        for (int64_t c = 0; c < cols; ++c) {
                            const size_t i = static_cast<size_t>(r * cols + c);
                            grad[i] = c % 2 ? NAN : INFINITY;
                            zeroed[i] = 0.0f;
                        }
                GpuArray ggrad(*gpu_, dtype, rows, cols), gzeroed(*gpu_, dtype, rows, cols);
                GpuArray gout(*gpu_, DType::f32, 1, cols, 1), gplain(*gpu_, DType::f32, 1, cols, 1);
                ggrad.set(grad);
                gzeroed.set(zeroed);
                DeviceBuffer glabels(*gpu_, labels.size() * sizeof(int32_t));
                gpu_->upload(glabels.get(), labels.data(), glabels.bytes());
                gpu_->labelled_bias_grad(ggrad.tensor, glabels.as<int32_t>(), labelled_rows, gout.f32());
                gpu_->bias_grad(gzeroed.tensor, gplain.f32());
                const std::vector<uint8_t> got = gout.get_bytes();
                EXPECT_EQ(got, gplain.get_bytes()) << "not bitwise the plain bias_grad of the zeroed matrix";
                EXPECT_TRUE(gout.guards_intact());

                std::vector<float> ref(static_cast<size_t>(cols));
                cpu_.labelled_bias_grad(host_view(grad, rows, cols), labels.data(), labelled_rows, ref.data());
                EXPECT_TRUE(close(gpu_test::decode(got, DType::f32), ref, 1e-5));
                if (share == 0)
                    for (float v : gpu_test::decode(got, DType::f32)) ASSERT_EQ(v, 0.0f);
            }
}

// ---------------------------------------------------------------------------- loss

struct LossRun {
    float loss;
    std::vector<uint8_t> grad;
};

TEST_F(CudaOpsTest, SoftmaxCrossEntropyMatchesCpuIsStableAndReproducible) {
    const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {1, 2}, {37, 10}, {256, 1000}, {5, 50000}};
    for (DType dtype : kDTypes)
        for (auto [rows, cols] : shapes)
            for (float shift : {0.0f, 90.0f})  // exp(90) overflows fp32: only a max-shifted softmax survives
                for (float grad_scale : {1.0f, 1024.0f})
                    for (bool in_place : {false, true}) {
                        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << rows << "x" << cols
                                                        << " shift=" << shift << " grad_scale=" << grad_scale
                                                        << " in_place=" << in_place);
                        // Logits within +-2 (+ shift) keep every softmax entry >= e^-4 / cols, so the
                        // fp32 result is well conditioned and 1e-5 is a fair bound.
                        std::vector<float> logits = values(static_cast<size_t>(rows * cols), 0.05f, 2.0f);
                        for (float& x : logits) x += shift;
                        logits = rounded(logits, dtype);
                        std::vector<int32_t> labels(static_cast<size_t>(rows));
                        std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(cols - 1));
                        for (int32_t& l : labels) l = pick(rng_);

                        GpuArray glogits(*gpu_, dtype, rows, cols), ggrad(*gpu_, dtype, rows, cols);
                        GpuArray gloss(*gpu_, DType::f32, 1, 1);
                        DeviceBuffer glabels(*gpu_, labels.size() * sizeof(int32_t));
                        gpu_->upload(glabels.get(), labels.data(), glabels.bytes());
                        GpuArray& grad = in_place ? glogits : ggrad;
                        auto run = [&] {
                            glogits.set(logits);
                            gloss.poison();
                            if (!in_place) ggrad.poison();
                            gpu_->softmax_cross_entropy(glogits.tensor, glabels.as<int32_t>(), rows,
                                                        gloss.f32(), grad.tensor, grad_scale);
                            return LossRun{gloss.get()[0], grad.get_bytes()};
                        };
                        const LossRun first = run();
                        const LossRun second = run();
                        EXPECT_EQ(std::memcmp(&first.loss, &second.loss, sizeof(float)), 0)
                            << "loss differs between two runs: " << first.loss << " vs " << second.loss;
                        EXPECT_EQ(first.grad, second.grad) << "gradient differs between two runs";
                        EXPECT_TRUE(grad.guards_intact());

                        std::vector<float> ref_logits = logits;
                        std::vector<float> ref_grad(logits.size());
                        float ref_loss = 0.0f;
                        cpu_.softmax_cross_entropy(host_view(ref_logits, rows, cols), labels.data(), rows,
                                                   &ref_loss, host_view(ref_grad, rows, cols), grad_scale);
                        // Relative to max(|loss|, 0.1): a loss near 0 carries fp32 log(sum)
                        // rounding of ~1e-7 absolute, which no fp32 kernel can beat.
                        EXPECT_LE(std::fabs(first.loss - ref_loss), 1e-5 * std::max(std::fabs(ref_loss), 0.1f))
                            << "loss " << first.loss << " vs reference " << ref_loss;
                        EXPECT_TRUE(std::isfinite(first.loss));
                        EXPECT_TRUE(close(gpu_test::decode(first.grad, dtype), ref_grad, tolerance(dtype)))
                            << "gradient";
                    }
}

// The CPU throws on a label >= cols; the GPU cannot, so it must make it loud. (A negative
// label is an ignored row: test_cuda_transformer_ops.cpp.)
TEST_F(CudaOpsTest, SoftmaxCrossEntropyOutOfRangeLabelGivesNaNLoss) {
    const int64_t rows = 4, cols = 7;
    GpuArray logits(*gpu_, DType::f32, rows, cols), grad(*gpu_, DType::f32, rows, cols), loss(*gpu_, DType::f32, 1, 1);
    logits.set(values(static_cast<size_t>(rows * cols)));
    for (int32_t bad : {static_cast<int32_t>(cols), static_cast<int32_t>(cols) + 1000}) {
        std::vector<int32_t> labels = {0, bad, 3, 6};
        DeviceBuffer glabels(*gpu_, labels.size() * sizeof(int32_t));
        gpu_->upload(glabels.get(), labels.data(), glabels.bytes());
        gpu_->softmax_cross_entropy(logits.tensor, glabels.as<int32_t>(), rows, loss.f32(), grad.tensor, 1.0f);
        EXPECT_TRUE(std::isnan(loss.get()[0])) << "label " << bad;
    }
}

// ---------------------------------------------------------------------------- optimizers

struct CopyCase {
    const char* name;
    bool present;
    DType dtype;
    bool aliases_params;
};
const CopyCase kCopies[] = {{"none", false, DType::f32, false},
                            {"f32", true, DType::f32, false},
                            {"bf16", true, DType::bf16, false},
                            {"f16", true, DType::f16, false},
                            {"params_itself", true, DType::f32, true}};

// The compute copy must be exactly the updated fp32 params in its dtype.
void expect_copy_matches(const GpuArray* copy, const CopyCase& cc, const std::vector<float>& gpu_params) {
    if (!cc.present || cc.aliases_params) return;
    EXPECT_EQ(copy->get_bytes(), gpu_test::encode(gpu_params, cc.dtype)) << "weights_copy (" << cc.name << ")";
    EXPECT_TRUE(copy->guards_intact());
}

TEST_F(CudaOpsTest, SgdThreeStepsMatchCpuWithEveryWeightsCopy) {
    for (size_t n : {size_t{1}, size_t{1027}, (size_t{1} << 20) + 5})
        for (int64_t offset : {0, 1})
            for (float mu : {0.9f, 0.0f})
                for (const CopyCase& cc : kCopies) {
                    SCOPED_TRACE(testing::Message() << "n=" << n << " offset=" << offset << " momentum=" << mu
                                                    << " copy=" << cc.name);
                    OptimizerConfig cfg;
                    cfg.kind = OptimizerConfig::Kind::sgd;
                    // lr small enough that no |p0| >= 0.1 crosses zero in 3 steps: the params
                    // stay well away from the cancellation a single element cannot average out.
                    cfg.lr = 0.01f;
                    cfg.momentum = mu;
                    cfg.weight_decay = 0.01f;
                    const int64_t ni = static_cast<int64_t>(n);
                    std::vector<float> params = values(n), buf(n, 0.0f);
                    GpuArray gp(*gpu_, DType::f32, 1, ni, offset), gg(*gpu_, DType::f32, 1, ni, offset);
                    GpuArray gbuf(*gpu_, DType::f32, 1, ni, offset);
                    std::unique_ptr<GpuArray> gcopy;
                    if (cc.present && !cc.aliases_params)
                        gcopy = std::make_unique<GpuArray>(*gpu_, cc.dtype, 1, ni, offset);
                    Tensor copy_t = !cc.present ? Tensor{} : cc.aliases_params ? gp.tensor : gcopy->tensor;
                    gp.set(params);
                    gbuf.set(buf);
                    for (int step = 1; step <= 3; ++step) {
                        std::vector<float> grads = values(n);
                        gg.set(grads);
                        gpu_->sgd_step(gp.f32(), gg.f32(), mu != 0.0f ? gbuf.f32() : nullptr, n, cfg, copy_t);
                        cpu_.sgd_step(params.data(), grads.data(), mu != 0.0f ? buf.data() : nullptr, n, cfg, Tensor{});
                    }
                    std::vector<float> gpu_params = gp.get();
                    EXPECT_TRUE(close(gpu_params, params, 1e-5)) << "params";
                    EXPECT_TRUE(gp.guards_intact());
                    if (mu != 0.0f) {
                        EXPECT_TRUE(close(gbuf.get(), buf, 1e-5)) << "momentum";
                    }
                    expect_copy_matches(gcopy.get(), cc, gpu_params);
                }
}

TEST_F(CudaOpsTest, AdamwThreeStepsMatchCpuWithEveryWeightsCopy) {
    for (size_t n : {size_t{1}, size_t{1027}, (size_t{1} << 20) + 5})
        for (int64_t offset : {0, 1})
            for (const CopyCase& cc : kCopies) {
                SCOPED_TRACE(testing::Message() << "n=" << n << " offset=" << offset << " copy=" << cc.name);
                OptimizerConfig cfg;
                cfg.kind = OptimizerConfig::Kind::adamw;
                cfg.lr = 1e-2f;
                cfg.weight_decay = 0.1f;
                const int64_t ni = static_cast<int64_t>(n);
                std::vector<float> params = values(n), m(n, 0.0f), v(n, 0.0f);
                GpuArray gp(*gpu_, DType::f32, 1, ni, offset), gg(*gpu_, DType::f32, 1, ni, offset);
                GpuArray gm(*gpu_, DType::f32, 1, ni, offset), gv(*gpu_, DType::f32, 1, ni, offset);
                std::unique_ptr<GpuArray> gcopy;
                if (cc.present && !cc.aliases_params) gcopy = std::make_unique<GpuArray>(*gpu_, cc.dtype, 1, ni, offset);
                Tensor copy_t = !cc.present ? Tensor{} : cc.aliases_params ? gp.tensor : gcopy->tensor;
                gp.set(params);
                gm.set(m);
                gv.set(v);
                for (int64_t step = 1; step <= 3; ++step) {
                    std::vector<float> grads = values(n);
                    gg.set(grads);
                    gpu_->adamw_step(gp.f32(), gg.f32(), gm.f32(), gv.f32(), n, cfg, step, copy_t);
                    cpu_.adamw_step(params.data(), grads.data(), m.data(), v.data(), n, cfg, step, Tensor{});
                }
                std::vector<float> gpu_params = gp.get();
                EXPECT_TRUE(close(gpu_params, params, 1e-5)) << "params";
                EXPECT_TRUE(close(gm.get(), m, 1e-5)) << "m";
                EXPECT_TRUE(close(gv.get(), v, 1e-5)) << "v";
                EXPECT_TRUE(gp.guards_intact() && gm.guards_intact() && gv.guards_intact());
                expect_copy_matches(gcopy.get(), cc, gpu_params);
            }
}

// A power-of-two inv_scale is exact, so finite results equal the CPU's bitwise.
TEST_F(CudaOpsTest, UnscaleAndCheckScalesAndFindsPlantedInfAndNaN) {
    const float inv_scale = 1.0f / 1024.0f;
    for (size_t n : {size_t{1}, size_t{1027}, (size_t{1} << 20) + 3})
        for (int64_t offset : {0, 1}) {
            SCOPED_TRACE(testing::Message() << "n=" << n << " offset=" << offset);
            const int64_t ni = static_cast<int64_t>(n);
            GpuArray g(*gpu_, DType::f32, 1, ni, offset);
            std::vector<float> grads = values(n, 1.0f, 1000.0f);
            g.set(grads);
            EXPECT_TRUE(gpu_->unscale_and_check(g.f32(), n, inv_scale));
            std::vector<float> ref = grads;
            EXPECT_TRUE(cpu_.unscale_and_check(ref.data(), n, inv_scale));
            EXPECT_EQ(g.get_bytes(), gpu_test::encode(ref, DType::f32));
            EXPECT_TRUE(g.guards_intact());
            // One bad value, in the vectorised body and in the scalar tail.
            for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN()})
                for (size_t at : {n / 2, n - 1}) {
                    std::vector<float> planted = grads;
                    planted[at] = bad;
                    g.set(planted);
                    EXPECT_FALSE(gpu_->unscale_and_check(g.f32(), n, inv_scale)) << bad << " at " << at;
                }
            // Overflow by the scaling itself is caught as well.
            g.set(std::vector<float>(n, 3e38f));
            EXPECT_FALSE(gpu_->unscale_and_check(g.f32(), n, 4.0f));
            g.set(grads);
            EXPECT_TRUE(gpu_->unscale_and_check(g.f32(), n, inv_scale)) << "the flag is cleared between calls";
        }
}

// ---------------------------------------------------------------------------- timing

TEST_F(CudaOpsTest, MarkersTimeARealGemm) {
    const int64_t n = 2048;
    GpuArray a(*gpu_, DType::f32, n, n), b(*gpu_, DType::f32, n, n), c(*gpu_, DType::f32, n, n);
    a.set(values(static_cast<size_t>(n * n)));
    b.set(values(static_cast<size_t>(n * n)));
    gpu_->gemm(false, false, 1.0f, a.tensor, b.tensor, 0.0f, c.tensor);  // plan + warm-up
    gpu_->record_marker(3);
    for (int i = 0; i < 5; ++i) gpu_->gemm(false, false, 1.0f, a.tensor, b.tensor, 0.0f, c.tensor);
    gpu_->record_marker(7);
    const double ms = gpu_->elapsed_ms(3, 7);
    // 5 x 17 GFLOP: well above zero, well below a minute on any GPU.
    EXPECT_GT(ms, 0.0);
    EXPECT_LT(ms, 60000.0);
    EXPECT_THROW(gpu_->record_marker(Ops::kMaxMarkers), std::exception);
    EXPECT_THROW(gpu_->elapsed_ms(-1, 3), std::exception);
}

// The replica checksum on the GPU gives the CPU's bits for every length (tails of 1-7
// bytes) and alignment, and a flipped bit changes it.
TEST_F(CudaOpsTest, ChecksumMatchesTheHostsAndSeesOneFlippedBit) {
    const size_t kMax = (size_t{1} << 22) + 13;
    std::vector<unsigned char> host(kMax + 8);
    for (auto& b : host) b = static_cast<unsigned char>(rng_());
    DeviceBuffer buf(*gpu_, host.size());
    gpu_->upload(buf.get(), host.data(), host.size());
    for (size_t offset : {size_t{0}, size_t{1}, size_t{4}}) {
        for (size_t bytes : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{4100}, kMax}) {
            const auto* device = static_cast<const unsigned char*>(buf.get()) + offset;
            EXPECT_EQ(gpu_->checksum(device, bytes), checksum_host(host.data() + offset, bytes))
                << bytes << " bytes at offset " << offset;
        }
    }
    const uint64_t before = gpu_->checksum(buf.get(), kMax);
    const size_t where = kMax / 3;
    host[where] ^= 0x10;
    gpu_->upload(buf.get(), host.data(), host.size());
    const uint64_t after = gpu_->checksum(buf.get(), kMax);
    EXPECT_NE(after, before);
    EXPECT_EQ(after, checksum_host(host.data(), kMax));
}

}  // namespace
}  // namespace sb
