// The CPU backend of Ops: plain loops the compiler vectorises, fp32 only, one thread.
// GEMM is blocked and packed (BLIS/Goto layout): op(A) and op(B) are copied into
// contiguous micro-panels so a small register tile of C is accumulated with unit-stride
// loads whatever the transposes; every other op is a single pass over memory.
#include "models/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "models/checksum.h"
#include "models/dropout.h"
#include "base/errors.h"

namespace sb {
namespace {

[[noreturn]] void fail(const char* call, const std::string& message, int line) {
    throw_call_error("cpu", call, message, __FILE__, line);
}
#define SB_CPU_EXPECT(cond, call, message) \
    do {                                   \
        if (!(cond)) fail(call, message, __LINE__); \
    } while (0)

std::string shape(const Tensor& t) {
    return std::string(dtype_name(t.dtype)) + "[" + std::to_string(t.rows) + "x" + std::to_string(t.cols) + "]";
}

void expect_f32(const Tensor& t, const char* call, const char* what) {
    SB_CPU_EXPECT(t.dtype == DType::f32, call,
                  std::string(what) + " is " + shape(t) + "; the cpu backend computes in f32 only");
    SB_CPU_EXPECT(t.rows >= 0 && t.cols >= 0, call, std::string(what) + " has a negative shape " + shape(t));
    SB_CPU_EXPECT(t.numel() == 0 || t.data != nullptr, call, std::string(what) + " has no data");
}

void expect_same_shape(const Tensor& a, const Tensor& b, const char* call) {
    SB_CPU_EXPECT(a.rows == b.rows && a.cols == b.cols, call,
                  "shape mismatch: " + shape(a) + " vs " + shape(b));
}

const float* f32(const Tensor& t) { return static_cast<const float*>(t.data); }
float* f32_mut(const Tensor& t) { return static_cast<float*>(t.data); }

// Writes the updated master parameters into the compute copy (f32 on the CPU).
void write_weights_copy(const float* params, size_t n, const Tensor& copy, const char* call) {
    if (copy.data == nullptr) return;
    expect_f32(copy, call, "weights_copy");
    SB_CPU_EXPECT(static_cast<size_t>(copy.numel()) == n, call,
                  "weights_copy " + shape(copy) + " does not hold " + std::to_string(n) + " elements");
    if (copy.data != params) std::memcpy(copy.data, params, n * sizeof(float));
}

// ---- GEMM ------------------------------------------------------------------------
// Register tile MR x NR: 4 x 8 accumulators are 8 of the 16 SSE2 registers (4 with
// AVX), leaving room for the B row and the broadcast A value. Cache blocks: a KC x NR panel of
// B stays in L1, an MC x KC block of A in L2, a KC x NC block of B in L3.
constexpr int MR = 4;
constexpr int NR = 8;
constexpr int KC = 256;
constexpr int MC = 128;
constexpr int NC = 2048;

struct MatView {
    const float* p;
    int64_t ld;
    bool trans;
    // Element (r, c) of op(X).
    float at(int64_t r, int64_t c) const { return trans ? p[c * ld + r] : p[r * ld + c]; }
};

// Packs alpha * op(A)[i0:i0+mc, k0:k0+kc] as MR-row panels, k-major inside a panel:
// dst[panel][k][r]; rows past mc are zero so the micro-kernel never branches.
void pack_a(const MatView& a, int64_t i0, int64_t k0, int mc, int kc, float alpha, float* dst) {
    for (int ip = 0; ip < mc; ip += MR) {
        const int rows = std::min(MR, mc - ip);
        for (int k = 0; k < kc; ++k) {
            for (int r = 0; r < rows; ++r) dst[k * MR + r] = alpha * a.at(i0 + ip + r, k0 + k);
            for (int r = rows; r < MR; ++r) dst[k * MR + r] = 0.0f;
        }
        dst += static_cast<size_t>(kc) * MR;
    }
}

// Packs op(B)[k0:k0+kc, j0:j0+nc] as NR-column panels: dst[panel][k][j].
void pack_b(const MatView& b, int64_t k0, int64_t j0, int kc, int nc, float* dst) {
    for (int jp = 0; jp < nc; jp += NR) {
        const int cols = std::min(NR, nc - jp);
        for (int k = 0; k < kc; ++k) {
            float* row = dst + k * NR;
            if (!b.trans && cols == NR) {
                std::memcpy(row, b.p + (k0 + k) * b.ld + j0 + jp, NR * sizeof(float));
            } else {
                for (int j = 0; j < cols; ++j) row[j] = b.at(k0 + k, j0 + jp + j);
                for (int j = cols; j < NR; ++j) row[j] = 0.0f;
            }
        }
        dst += static_cast<size_t>(kc) * NR;
    }
}

// C[0:rows, 0:cols] += A_panel @ B_panel over kc, i-k-j order. The 4 x 8 accumulator
// is eight named 4-float vectors (GCC/Clang vector extension: one SSE/NEON register
// each), so it stays in registers; with an array, or with the auto-vectoriser alone,
// GCC 12 kept the tile on the stack and ran 3-5x slower.
typedef float Vec4 __attribute__((vector_size(4 * sizeof(float))));
static_assert(MR == 4 && NR == 8, "micro_kernel is written out for a 4 x 8 tile");

inline Vec4 load4(const float* p) {
    Vec4 v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}

void micro_kernel(int kc, const float* __restrict ap, const float* __restrict bp, float* __restrict c,
                  int64_t ldc, int rows, int cols) {
    Vec4 c00 = {}, c01 = {}, c10 = {}, c11 = {}, c20 = {}, c21 = {}, c30 = {}, c31 = {};
    for (int k = 0; k < kc; ++k) {
        const Vec4 b0 = load4(bp + k * NR), b1 = load4(bp + k * NR + 4);
        const float* a = ap + k * MR;
        c00 += a[0] * b0; c01 += a[0] * b1;
        c10 += a[1] * b0; c11 += a[1] * b1;
        c20 += a[2] * b0; c21 += a[2] * b1;
        c30 += a[3] * b0; c31 += a[3] * b1;
    }
    const Vec4 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
    float tile[MR][NR];
    std::memcpy(tile, acc, sizeof(tile));
    if (rows == MR && cols == NR) {
        for (int r = 0; r < MR; ++r)
            for (int j = 0; j < NR; ++j) c[r * ldc + j] += tile[r][j];
    } else {
        for (int r = 0; r < rows; ++r)
            for (int j = 0; j < cols; ++j) c[r * ldc + j] += tile[r][j];
    }
}

// ---- activations -----------------------------------------------------------------
// GELU is the tanh approximation, as PyTorch gelu(approximate='tanh') and GPT-2:
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluA = 0.044715f;

inline float gelu(float x) { return 0.5f * x * (1.0f + std::tanh(kGeluC * (x + kGeluA * x * x * x))); }
inline float gelu_grad(float x) {
    const float t = std::tanh(kGeluC * (x + kGeluA * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * x * x);
}

// Exact GELU (BERT, PyTorch's default): x Phi(x), Phi the standard normal CDF.
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;
inline float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2)); }
inline float gelu_erf_grad(float x) {
    return 0.5f * (1.0f + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5f * x * x);
}

}  // namespace

CpuOps::CpuOps(Precision p) : precision_(p) {
    if (p != Precision::fp32)
        throw UserError(std::string("the cpu backend supports precision fp32 only; got ") + precision_name(p));
}

// ---- memory ------------------------------------------------------------------------

void* CpuOps::alloc(size_t bytes) {
    // 64-byte alignment (a cache line, an AVX-512 vector); aligned_alloc wants a multiple.
    const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    SB_CPU_EXPECT(p != nullptr, "aligned_alloc", "out of host memory allocating " + std::to_string(bytes) + " bytes");
    count_alloc(p, bytes);
    return p;
}

void CpuOps::release(void* ptr) {
    count_release(ptr);
    std::free(ptr);
}

void CpuOps::upload(void* dst, const void* host_src, size_t bytes) {
    if (bytes) std::memcpy(dst, host_src, bytes);
}

void CpuOps::download(void* host_dst, const void* src, size_t bytes) {
    if (bytes) std::memcpy(host_dst, src, bytes);
}

void CpuOps::fill(const Tensor& t, float value) {
    expect_f32(t, "fill", "t");
    std::fill_n(f32_mut(t), t.numel(), value);
}

void CpuOps::cast(const Tensor& src, const Tensor& dst) {
    expect_f32(src, "cast", "src");
    expect_f32(dst, "cast", "dst");
    SB_CPU_EXPECT(src.numel() == dst.numel(), "cast", "numel mismatch: " + shape(src) + " -> " + shape(dst));
    if (src.data != dst.data && src.numel()) std::memmove(dst.data, src.data, src.bytes());
}

uint64_t CpuOps::checksum(const void* data, size_t bytes) { return checksum_host(data, bytes); }

// ---- GEMM --------------------------------------------------------------------------

void CpuOps::gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
                  const Tensor& c, const float* bias) {
    expect_f32(a, "gemm", "A");
    expect_f32(b, "gemm", "B");
    expect_f32(c, "gemm", "C");
    const int64_t m = trans_a ? a.cols : a.rows;
    const int64_t k = trans_a ? a.rows : a.cols;
    const int64_t n = trans_b ? b.rows : b.cols;
    const int64_t kb = trans_b ? b.cols : b.rows;
    SB_CPU_EXPECT(k == kb && c.rows == m && c.cols == n, "gemm",
                  std::string("shapes do not chain: op(A)=") + (trans_a ? "T " : "") + shape(a) + " op(B)=" +
                      (trans_b ? "T " : "") + shape(b) + " C=" + shape(c));
    float* cp = f32_mut(c);
    const int64_t mn = m * n;

    // C = beta * C first; beta == 0 overwrites without reading (C may hold NaN garbage).
    if (beta == 0.0f) {
        std::fill_n(cp, mn, 0.0f);
    } else if (beta != 1.0f) {
        for (int64_t i = 0; i < mn; ++i) cp[i] *= beta;
    }

    if (alpha != 0.0f && k > 0 && mn > 0) {
        const MatView av{f32(a), a.cols, trans_a};
        const MatView bv{f32(b), b.cols, trans_b};
        // Scratch for the largest blocks, padded to whole micro-panels.
        const int nc_max = static_cast<int>((std::min<int64_t>(NC, n) + NR - 1) / NR * NR);
        const int kc_max = static_cast<int>(std::min<int64_t>(KC, k));
        const int mc_max = static_cast<int>((std::min<int64_t>(MC, m) + MR - 1) / MR * MR);
        pack_b_.resize(static_cast<size_t>(kc_max) * nc_max);
        pack_a_.resize(static_cast<size_t>(kc_max) * mc_max);
        for (int64_t j0 = 0; j0 < n; j0 += NC) {
            const int nc = static_cast<int>(std::min<int64_t>(NC, n - j0));
            for (int64_t k0 = 0; k0 < k; k0 += KC) {
                const int kc = static_cast<int>(std::min<int64_t>(KC, k - k0));
                pack_b(bv, k0, j0, kc, nc, pack_b_.data());
                for (int64_t i0 = 0; i0 < m; i0 += MC) {
                    const int mc = static_cast<int>(std::min<int64_t>(MC, m - i0));
                    pack_a(av, i0, k0, mc, kc, alpha, pack_a_.data());
                    for (int jr = 0; jr < nc; jr += NR) {
                        const float* bp = pack_b_.data() + static_cast<size_t>(jr / NR) * kc * NR;
                        for (int ir = 0; ir < mc; ir += MR) {
                            const float* ap = pack_a_.data() + static_cast<size_t>(ir / MR) * kc * MR;
                            micro_kernel(kc, ap, bp, cp + (i0 + ir) * n + j0 + jr, n, std::min(MR, mc - ir),
                                         std::min(NR, nc - jr));
                        }
                    }
                }
            }
        }
    }

    if (bias) {
        for (int64_t i = 0; i < m; ++i) {
            float* row = cp + i * n;
            for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
        }
    }
}

// ---- elementwise and reductions -----------------------------------------------------

void CpuOps::activation_forward(Activation act, const Tensor& pre, const Tensor& out) {
    expect_f32(pre, "activation_forward", "pre");
    expect_f32(out, "activation_forward", "out");
    expect_same_shape(pre, out, "activation_forward");
    const float* x = f32(pre);
    float* y = f32_mut(out);
    const int64_t n = pre.numel();
    switch (act) {
        case Activation::none:
            if (x != y && n) std::memmove(y, x, n * sizeof(float));
            return;
        case Activation::relu:
            for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
            return;
        case Activation::gelu:
            for (int64_t i = 0; i < n; ++i) y[i] = gelu(x[i]);
            return;
        case Activation::gelu_erf:
            for (int64_t i = 0; i < n; ++i) y[i] = gelu_erf(x[i]);
            return;
        case Activation::tanh:
            for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
            return;
    }
    fail("activation_forward", "unknown activation " + std::to_string(static_cast<int>(act)), __LINE__);
}

void CpuOps::activation_backward(Activation act, const Tensor& pre, const Tensor& grad_out,
                                 const Tensor& grad_pre) {
    expect_f32(pre, "activation_backward", "pre");
    expect_f32(grad_out, "activation_backward", "grad_out");
    expect_f32(grad_pre, "activation_backward", "grad_pre");
    expect_same_shape(pre, grad_out, "activation_backward");
    expect_same_shape(pre, grad_pre, "activation_backward");
    const float* x = f32(pre);
    const float* g = f32(grad_out);
    float* d = f32_mut(grad_pre);  // may alias g: each element reads g[i] before writing d[i]
    const int64_t n = pre.numel();
    switch (act) {
        case Activation::none:
            if (g != d && n) std::memmove(d, g, n * sizeof(float));
            return;
        case Activation::relu:
            // Subgradient 0 at x == 0, as PyTorch.
            for (int64_t i = 0; i < n; ++i) d[i] = x[i] > 0.0f ? g[i] : 0.0f;
            return;
        case Activation::gelu:
            for (int64_t i = 0; i < n; ++i) d[i] = g[i] * gelu_grad(x[i]);
            return;
        case Activation::gelu_erf:
            for (int64_t i = 0; i < n; ++i) d[i] = g[i] * gelu_erf_grad(x[i]);
            return;
        case Activation::tanh:
            for (int64_t i = 0; i < n; ++i) {
                const float t = std::tanh(x[i]);
                d[i] = g[i] * (1.0f - t * t);
            }
            return;
    }
    fail("activation_backward", "unknown activation " + std::to_string(static_cast<int>(act)), __LINE__);
}

namespace {
// Column sums of grad's rows for which `take(row)`, row by row so the inner loop is
// unit-stride and vectorised.
template <class Take> void column_sums(const Tensor& grad, float* sums, Take&& take) {
    const float* g = f32(grad);
    const int64_t cols = grad.cols;
    std::fill_n(sums, cols, 0.0f);
    for (int64_t i = 0; i < grad.rows; ++i) {
        if (!take(i)) continue;
        const float* row = g + i * cols;
        for (int64_t j = 0; j < cols; ++j) sums[j] += row[j];
    }
}

// labelled_rows must be the number of labels >= 0 (ops.h): a wrong count would make the
// trace's byte model wrong without anything else noticing.
void expect_labelled_rows(const int32_t* labels, int64_t rows, int64_t labelled_rows, const char* call) {
    SB_CPU_EXPECT(rows == 0 || labels != nullptr, call, "no labels");
    const int64_t counted = std::count_if(labels, labels + rows, [](int32_t l) { return l >= 0; });
    SB_CPU_EXPECT(counted == labelled_rows, call,
                  "labelled_rows is " + std::to_string(labelled_rows) + " but " + std::to_string(counted) + " of " +
                      std::to_string(rows) + " labels are >= 0");
}
}  // namespace

void CpuOps::bias_grad(const Tensor& grad, float* bias_grad) {
    expect_f32(grad, "bias_grad", "grad");
    column_sums(grad, bias_grad, [](int64_t) { return true; });
}

void CpuOps::labelled_bias_grad(const Tensor& grad, const int32_t* labels, int64_t labelled_rows,
                                float* bias_grad) {
    expect_f32(grad, "labelled_bias_grad", "grad");
    expect_labelled_rows(labels, grad.rows, labelled_rows, "labelled_bias_grad");
    column_sums(grad, bias_grad, [&](int64_t i) { return labels[i] >= 0; });
}

void CpuOps::softmax_cross_entropy(const Tensor& logits, const int32_t* labels, int64_t labelled_rows, float* loss,
                                   const Tensor& grad_logits, float grad_scale) {
    expect_f32(logits, "softmax_cross_entropy", "logits");
    expect_f32(grad_logits, "softmax_cross_entropy", "grad_logits");
    expect_same_shape(logits, grad_logits, "softmax_cross_entropy");
    const int64_t rows = logits.rows;
    const int64_t cols = logits.cols;
    SB_CPU_EXPECT(rows > 0 && cols > 0, "softmax_cross_entropy", "empty logits " + shape(logits));
    const float* x = f32(logits);
    float* g = f32_mut(grad_logits);  // may alias logits
    for (int64_t i = 0; i < rows; ++i)
        SB_CPU_EXPECT(labels[i] < cols, "softmax_cross_entropy",
                      "label " + std::to_string(labels[i]) + " of row " + std::to_string(i) + " is outside [0, " +
                          std::to_string(cols) + ")");
    // Negative labels are not predicted: they neither count in the mean nor get a gradient.
    expect_labelled_rows(labels, rows, labelled_rows, "softmax_cross_entropy");
    const int64_t labelled = labelled_rows;
    const float scale = labelled ? grad_scale / static_cast<float>(labelled) : 0.0f;
    double total = 0.0;
    for (int64_t i = 0; i < rows; ++i) {
        const int32_t label = labels[i];
        const float* xr = x + i * cols;
        float* gr = g + i * cols;
        if (label < 0) {
            std::fill_n(gr, cols, 0.0f);
            continue;
        }
        // Max subtraction keeps exp() finite for any logit range.
        float mx = xr[0];
        for (int64_t j = 1; j < cols; ++j) mx = std::max(mx, xr[j]);
        double sum = 0.0;
        for (int64_t j = 0; j < cols; ++j) sum += std::exp(static_cast<double>(xr[j] - mx));
        const double log_sum = std::log(sum);
        total += log_sum - static_cast<double>(xr[label] - mx);
        const float inv_sum = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < cols; ++j) gr[j] = std::exp(xr[j] - mx) * inv_sum * scale;
        gr[label] -= scale;
    }
    *loss = labelled ? static_cast<float>(total / static_cast<double>(labelled)) : 0.0f;
}

// ---- transformer layers ----------------------------------------------------------------

void CpuOps::add(const Tensor& a, const Tensor& b, const Tensor& out) {
    expect_f32(a, "add", "a");
    expect_f32(b, "add", "b");
    expect_f32(out, "add", "out");
    expect_same_shape(a, b, "add");
    expect_same_shape(a, out, "add");
    const float* x = f32(a);
    const float* y = f32(b);
    float* z = f32_mut(out);
    for (int64_t i = 0; i < a.numel(); ++i) z[i] = x[i] + y[i];
}

void CpuOps::layernorm_forward(const Tensor& x, const float* gamma, const float* beta, float eps, const Tensor& out,
                               float* mean, float* rstd) {
    expect_f32(x, "layernorm_forward", "x");
    expect_f32(out, "layernorm_forward", "out");
    expect_same_shape(x, out, "layernorm_forward");
    SB_CPU_EXPECT(x.data != out.data, "layernorm_forward", "out must not alias x");
    const int64_t n = x.cols;
    for (int64_t i = 0; i < x.rows; ++i) {
        const float* xr = f32(x) + i * n;
        float* yr = f32_mut(out) + i * n;
        // Two passes in double: the variance does not lose digits to a large mean.
        double s = 0.0;
        for (int64_t j = 0; j < n; ++j) s += xr[j];
        const double mu = s / static_cast<double>(n);
        double v = 0.0;
        for (int64_t j = 0; j < n; ++j) v += (xr[j] - mu) * (xr[j] - mu);
        const float r = static_cast<float>(1.0 / std::sqrt(v / static_cast<double>(n) + eps));
        const float m = static_cast<float>(mu);
        for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - m) * r * gamma[j] + beta[j];
        mean[i] = m;
        rstd[i] = r;
    }
}

// With xhat = (x - mean) rstd and dxhat = grad_out * gamma:
// dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)).
void CpuOps::layernorm_backward(const Tensor& x, const Tensor& grad_out, const float* gamma, const float* mean,
                                const float* rstd, const Tensor& grad_x, float* grad_gamma, float* grad_beta) {
    expect_f32(x, "layernorm_backward", "x");
    expect_f32(grad_out, "layernorm_backward", "grad_out");
    expect_f32(grad_x, "layernorm_backward", "grad_x");
    expect_same_shape(x, grad_out, "layernorm_backward");
    expect_same_shape(x, grad_x, "layernorm_backward");
    const int64_t n = x.cols;
    std::fill_n(grad_gamma, n, 0.0f);
    std::fill_n(grad_beta, n, 0.0f);
    for (int64_t i = 0; i < x.rows; ++i) {
        const float* xr = f32(x) + i * n;
        const float* gr = f32(grad_out) + i * n;
        float* dr = f32_mut(grad_x) + i * n;  // may alias gr: gr is fully read before dr is written
        double sum_d = 0.0, sum_dx = 0.0;
        for (int64_t j = 0; j < n; ++j) {
            const float xhat = (xr[j] - mean[i]) * rstd[i];
            const float dxhat = gr[j] * gamma[j];
            grad_gamma[j] += gr[j] * xhat;
            grad_beta[j] += gr[j];
            sum_d += dxhat;
            sum_dx += dxhat * xhat;
        }
        const float mean_d = static_cast<float>(sum_d / static_cast<double>(n));
        const float mean_dx = static_cast<float>(sum_dx / static_cast<double>(n));
        for (int64_t j = 0; j < n; ++j) {
            const float xhat = (xr[j] - mean[i]) * rstd[i];
            dr[j] = rstd[i] * (gr[j] * gamma[j] - mean_d - xhat * mean_dx);
        }
    }
}

void CpuOps::embedding_forward(const int32_t* ids, const Tensor& table, const Tensor& out, bool accumulate) {
    expect_f32(table, "embedding_forward", "table");
    expect_f32(out, "embedding_forward", "out");
    SB_CPU_EXPECT(table.cols == out.cols, "embedding_forward", "width mismatch: " + shape(table) + " vs " + shape(out));
    const int64_t n = out.cols;
    for (int64_t i = 0; i < out.rows; ++i) {
        SB_CPU_EXPECT(ids[i] >= 0 && ids[i] < table.rows, "embedding_forward",
                      "id " + std::to_string(ids[i]) + " of row " + std::to_string(i) + " is outside [0, " +
                          std::to_string(table.rows) + ")");
        const float* src = f32(table) + static_cast<int64_t>(ids[i]) * n;
        float* dst = f32_mut(out) + i * n;
        if (accumulate) {
            for (int64_t j = 0; j < n; ++j) dst[j] += src[j];
        } else {
            std::memcpy(dst, src, n * sizeof(float));
        }
    }
}

void CpuOps::embedding_backward(const int32_t* ids, const Tensor& grad_out, float* grad_table, int64_t table_rows) {
    expect_f32(grad_out, "embedding_backward", "grad_out");
    const int64_t n = grad_out.cols;
    for (int64_t i = 0; i < grad_out.rows; ++i) {
        SB_CPU_EXPECT(ids[i] >= 0 && ids[i] < table_rows, "embedding_backward",
                      "id " + std::to_string(ids[i]) + " of row " + std::to_string(i) + " is outside [0, " +
                          std::to_string(table_rows) + ")");
        const float* src = f32(grad_out) + i * n;
        float* dst = grad_table + static_cast<int64_t>(ids[i]) * n;
        for (int64_t j = 0; j < n; ++j) dst[j] += src[j];
    }
}

void CpuOps::dropout(const Tensor& in, const Tensor& out, float p, uint64_t seed) {
    expect_f32(in, "dropout", "in");
    expect_f32(out, "dropout", "out");
    expect_same_shape(in, out, "dropout");
    SB_CPU_EXPECT(p >= 0.0f && p < 1.0f, "dropout", "p must be in [0, 1); got " + std::to_string(p));
    const float* x = f32(in);
    float* y = f32_mut(out);
    const int64_t n = in.numel();
    if (p == 0.0f) {
        if (x != y && n) std::memmove(y, x, n * sizeof(float));
        return;
    }
    const float scale = 1.0f / (1.0f - p);
    seed = dropout_seed_at(seed, dropout_generation_);
    for (int64_t i = 0; i < n; ++i) y[i] = dropout_keep(seed, static_cast<uint64_t>(i), p) ? x[i] * scale : 0.0f;
}

namespace {

void check_attention(const Ops::AttentionShape& s, const Tensor& qkv, const Tensor& out, const char* call) {
    expect_f32(qkv, call, "qkv");
    expect_f32(out, call, "out");
    SB_CPU_EXPECT(s.batch > 0 && s.seq > 0 && s.heads > 0 && s.head_dim > 0, call, "non-positive attention shape");
    SB_CPU_EXPECT(s.dropout_p >= 0.0f && s.dropout_p < 1.0f, call, "dropout_p must be in [0, 1)");
    const int64_t rows = static_cast<int64_t>(s.batch) * s.seq;
    const int64_t width = static_cast<int64_t>(s.heads) * s.head_dim;
    SB_CPU_EXPECT(qkv.rows == rows && qkv.cols == 3 * width, call, "qkv is " + shape(qkv) + ", want " +
                  std::to_string(rows) + "x" + std::to_string(3 * width));
    SB_CPU_EXPECT(out.rows == rows && out.cols == width, call, "out is " + shape(out) + ", want " +
                  std::to_string(rows) + "x" + std::to_string(width));
}

// Index of P[b, h, i, j] in the saved buffer and in the dropout counter.
inline int64_t prob_index(const Ops::AttentionShape& s, int b, int h, int i, int j) {
    return ((static_cast<int64_t>(b) * s.heads + h) * s.seq + i) * s.seq + j;
}

// Query i of (b, h) among the batch*heads*seq rows: the dropout mask's row.
inline uint64_t mask_row(const Ops::AttentionShape& s, int b, int h, int i) {
    return (static_cast<uint64_t>(b) * s.heads + h) * s.seq + i;
}

}  // namespace

size_t CpuOps::attention_saved_bytes(const AttentionShape& s) const {
    return static_cast<size_t>(s.batch) * s.heads * s.seq * s.seq * sizeof(float);
}

// Plain loops: the reference the CUDA kernels are checked against, not a fast path.
void CpuOps::attention_forward(const AttentionShape& s, const Tensor& qkv, const Tensor& out, void* saved,
                               uint64_t seed) {
    check_attention(s, qkv, out, "attention_forward");
    seed = dropout_seed_at(seed, dropout_generation_);
    const int64_t width = static_cast<int64_t>(s.heads) * s.head_dim, ld = 3 * width;
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    const float keep_scale = 1.0f / (1.0f - s.dropout_p);
    float* probs = static_cast<float*>(saved);
    const float* base = f32(qkv);
    std::vector<float> row(static_cast<size_t>(s.seq));
    for (int b = 0; b < s.batch; ++b)
        for (int h = 0; h < s.heads; ++h)
            for (int i = 0; i < s.seq; ++i) {
                const float* q = base + (static_cast<int64_t>(b) * s.seq + i) * ld + h * s.head_dim;
                const int last = s.causal ? i : s.seq - 1;  // keys after the query are masked out
                float mx = -INFINITY;
                for (int j = 0; j <= last; ++j) {
                    const float* k = base + (static_cast<int64_t>(b) * s.seq + j) * ld + width + h * s.head_dim;
                    float dot = 0.0f;
                    for (int d = 0; d < s.head_dim; ++d) dot += q[d] * k[d];
                    row[j] = dot * scale;
                    mx = std::max(mx, row[j]);
                }
                double sum = 0.0;
                for (int j = 0; j <= last; ++j) sum += std::exp(static_cast<double>(row[j] - mx));
                const float inv = static_cast<float>(1.0 / sum);
                float* p = probs + prob_index(s, b, h, i, 0);
                for (int j = 0; j < s.seq; ++j) p[j] = j <= last ? std::exp(row[j] - mx) * inv : 0.0f;
                float* o = f32_mut(out) + (static_cast<int64_t>(b) * s.seq + i) * width + h * s.head_dim;
                std::fill_n(o, s.head_dim, 0.0f);
                for (int j = 0; j <= last; ++j) {
                    float pj = p[j];
                    if (s.dropout_p > 0.0f)
                        pj = dropout_keep(seed, attention_dropout_index(mask_row(s, b, h, i), j, s.seq), s.dropout_p)
                                 ? pj * keep_scale : 0.0f;
                    const float* v = base + (static_cast<int64_t>(b) * s.seq + j) * ld + 2 * width + h * s.head_dim;
                    for (int d = 0; d < s.head_dim; ++d) o[d] += pj * v[d];
                }
            }
}

// With P' = dropout(P): dV = P'^T dO; dP' = dO V^T; dP = dropout(dP');
// dS = P (dP - rowsum(P dP)) / sqrt(d); dQ = dS K; dK = dS^T Q.
void CpuOps::attention_backward(const AttentionShape& s, const Tensor& qkv, const Tensor& out, const void* saved,
                                const Tensor& grad_out, const Tensor& grad_qkv, uint64_t seed) {
    check_attention(s, qkv, out, "attention_backward");
    check_attention(s, grad_qkv, grad_out, "attention_backward");
    seed = dropout_seed_at(seed, dropout_generation_);
    const int64_t width = static_cast<int64_t>(s.heads) * s.head_dim, ld = 3 * width;
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    const float keep_scale = 1.0f / (1.0f - s.dropout_p);
    const float* probs = static_cast<const float*>(saved);
    const float* base = f32(qkv);
    float* gbase = f32_mut(grad_qkv);
    std::fill_n(gbase, grad_qkv.numel(), 0.0f);
    std::vector<float> dp(static_cast<size_t>(s.seq));
    auto offset = [&](int b, int t, int part, int h) {
        return (static_cast<int64_t>(b) * s.seq + t) * ld + part * width + h * s.head_dim;
    };
    for (int b = 0; b < s.batch; ++b)
        for (int h = 0; h < s.heads; ++h)
            for (int i = 0; i < s.seq; ++i) {
                const float* go = f32(grad_out) + (static_cast<int64_t>(b) * s.seq + i) * width + h * s.head_dim;
                const float* p = probs + prob_index(s, b, h, i, 0);
                const int last = s.causal ? i : s.seq - 1;
                double rowsum = 0.0;
                for (int j = 0; j <= last; ++j) {
                    const bool keep = s.dropout_p == 0.0f ||
                        dropout_keep(seed, attention_dropout_index(mask_row(s, b, h, i), j, s.seq), s.dropout_p);
                    const float mask = keep ? (s.dropout_p > 0.0f ? keep_scale : 1.0f) : 0.0f;
                    const float* v = base + offset(b, j, 2, h);
                    float* gv = gbase + offset(b, j, 2, h);
                    float dot = 0.0f;
                    for (int d = 0; d < s.head_dim; ++d) {
                        gv[d] += p[j] * mask * go[d];
                        dot += go[d] * v[d];
                    }
                    dp[j] = dot * mask;
                    rowsum += static_cast<double>(dp[j]) * p[j];
                }
                const float* q = base + offset(b, i, 0, h);
                float* gq = gbase + offset(b, i, 0, h);
                for (int j = 0; j <= last; ++j) {
                    const float ds = p[j] * (dp[j] - static_cast<float>(rowsum)) * scale;
                    const float* k = base + offset(b, j, 1, h);
                    float* gk = gbase + offset(b, j, 1, h);
                    for (int d = 0; d < s.head_dim; ++d) {
                        gq[d] += ds * k[d];
                        gk[d] += ds * q[d];
                    }
                }
            }
}

// ---- convolutional layers ----------------------------------------------------------------

namespace {

void expect_conv_shape(const Ops::ConvShape& s, const char* call) {
    SB_CPU_EXPECT(s.valid(), call, "bad shape: " + s.describe());
}

void expect_rows_cols(const Tensor& t, int64_t rows, int64_t cols, const char* call, const char* what) {
    SB_CPU_EXPECT(t.rows == rows && t.cols == cols, call,
                  std::string(what) + " is " + shape(t) + ", expected " + std::to_string(rows) + "x" +
                      std::to_string(cols));
}

// Calls visit(out_row, in_row or -1 for padding, patch column of (ky, kx, 0)) for every
// window position of every output pixel: the one walk im2col, col2im and pooling share.
template <class Visit>
void for_each_window(const Ops::ConvShape& s, Visit&& visit) {
    const int oh = s.out_height(), ow = s.out_width();
    int64_t out_row = 0;
    for (int n = 0; n < s.batch; ++n)
        for (int oy = 0; oy < oh; ++oy)
            for (int ox = 0; ox < ow; ++ox, ++out_row)
                for (int ky = 0; ky < s.kernel; ++ky)
                    for (int kx = 0; kx < s.kernel; ++kx) {
                        const int y = oy * s.stride - s.padding + ky, x = ox * s.stride - s.padding + kx;
                        const bool inside = y >= 0 && y < s.height && x >= 0 && x < s.width;
                        const int64_t in_row = inside ? (static_cast<int64_t>(n) * s.height + y) * s.width + x : -1;
                        visit(out_row, in_row, static_cast<int64_t>(ky * s.kernel + kx) * s.channels);
                    }
}

}  // namespace

void CpuOps::im2col(const ConvShape& s, const Tensor& x, const Tensor& cols) {
    expect_conv_shape(s, "im2col");
    expect_f32(x, "im2col", "x");
    expect_f32(cols, "im2col", "cols");
    expect_rows_cols(x, s.in_rows(), s.channels, "im2col", "x");
    expect_rows_cols(cols, s.out_rows(), s.patch(), "im2col", "cols");
    const int64_t c = s.channels, k = s.patch();
    for_each_window(s, [&](int64_t out_row, int64_t in_row, int64_t col) {
        float* dst = f32_mut(cols) + out_row * k + col;
        if (in_row < 0) std::fill_n(dst, c, 0.0f);
        else std::memcpy(dst, f32(x) + in_row * c, static_cast<size_t>(c) * sizeof(float));
    });
}

void CpuOps::col2im(const ConvShape& s, const Tensor& grad_cols, const Tensor& grad_x) {
    expect_conv_shape(s, "col2im");
    expect_f32(grad_cols, "col2im", "grad_cols");
    expect_f32(grad_x, "col2im", "grad_x");
    expect_rows_cols(grad_cols, s.out_rows(), s.patch(), "col2im", "grad_cols");
    expect_rows_cols(grad_x, s.in_rows(), s.channels, "col2im", "grad_x");
    const int64_t c = s.channels, k = s.patch();
    std::fill_n(f32_mut(grad_x), grad_x.numel(), 0.0f);
    for_each_window(s, [&](int64_t out_row, int64_t in_row, int64_t col) {
        if (in_row < 0) return;
        const float* src = f32(grad_cols) + out_row * k + col;
        float* dst = f32_mut(grad_x) + in_row * c;
        for (int64_t j = 0; j < c; ++j) dst[j] += src[j];
    });
}

void CpuOps::batchnorm_forward(const Tensor& x, const float* gamma, const float* beta, float eps, const Tensor& out,
                               float* mean, float* rstd) {
    expect_f32(x, "batchnorm_forward", "x");
    expect_f32(out, "batchnorm_forward", "out");
    expect_same_shape(x, out, "batchnorm_forward");
    SB_CPU_EXPECT(x.data != out.data, "batchnorm_forward", "out must not alias x");
    SB_CPU_EXPECT(x.rows > 0, "batchnorm_forward", "no rows to take statistics over");
    const int64_t n = x.cols;
    // Two passes in double over the rows, as layernorm_forward over the columns.
    std::vector<double> sum(static_cast<size_t>(n), 0.0), var(static_cast<size_t>(n), 0.0);
    for (int64_t i = 0; i < x.rows; ++i)
        for (int64_t j = 0; j < n; ++j) sum[j] += f32(x)[i * n + j];
    for (int64_t j = 0; j < n; ++j) sum[j] /= static_cast<double>(x.rows);
    for (int64_t i = 0; i < x.rows; ++i)
        for (int64_t j = 0; j < n; ++j) {
            const double d = f32(x)[i * n + j] - sum[j];
            var[j] += d * d;
        }
    for (int64_t j = 0; j < n; ++j) {
        mean[j] = static_cast<float>(sum[j]);
        rstd[j] = static_cast<float>(1.0 / std::sqrt(var[j] / static_cast<double>(x.rows) + eps));
    }
    for (int64_t i = 0; i < x.rows; ++i)
        for (int64_t j = 0; j < n; ++j)
            f32_mut(out)[i * n + j] = (f32(x)[i * n + j] - mean[j]) * rstd[j] * gamma[j] + beta[j];
}

// Per channel over the m rows, with xhat = (x - mean) rstd:
// dbeta = sum(dy), dgamma = sum(dy xhat), dx = gamma rstd (dy - dbeta/m - xhat dgamma/m).
void CpuOps::batchnorm_backward(const Tensor& x, const Tensor& grad_out, const float* gamma, const float* mean,
                                const float* rstd, const Tensor& grad_x, float* grad_gamma, float* grad_beta) {
    expect_f32(x, "batchnorm_backward", "x");
    expect_f32(grad_out, "batchnorm_backward", "grad_out");
    expect_f32(grad_x, "batchnorm_backward", "grad_x");
    expect_same_shape(x, grad_out, "batchnorm_backward");
    expect_same_shape(x, grad_x, "batchnorm_backward");
    const int64_t n = x.cols;
    std::vector<double> sum_dy(static_cast<size_t>(n), 0.0), sum_dy_xhat(static_cast<size_t>(n), 0.0);
    for (int64_t i = 0; i < x.rows; ++i)
        for (int64_t j = 0; j < n; ++j) {
            const float dy = f32(grad_out)[i * n + j];
            sum_dy[j] += dy;
            sum_dy_xhat[j] += dy * (f32(x)[i * n + j] - mean[j]) * rstd[j];
        }
    const double rows = static_cast<double>(x.rows);
    for (int64_t j = 0; j < n; ++j) {
        grad_beta[j] = static_cast<float>(sum_dy[j]);
        grad_gamma[j] = static_cast<float>(sum_dy_xhat[j]);
    }
    for (int64_t i = 0; i < x.rows; ++i)
        for (int64_t j = 0; j < n; ++j) {  // grad_x may alias grad_out: each element read before written
            const float xhat = (f32(x)[i * n + j] - mean[j]) * rstd[j];
            f32_mut(grad_x)[i * n + j] =
                gamma[j] * rstd[j] *
                (f32(grad_out)[i * n + j] - static_cast<float>(sum_dy[j] / rows) -
                 xhat * static_cast<float>(sum_dy_xhat[j] / rows));
        }
}

void CpuOps::maxpool_forward(const ConvShape& s, const Tensor& x, const Tensor& out, uint8_t* argmax) {
    expect_conv_shape(s, "maxpool_forward");
    SB_CPU_EXPECT(s.kernel * s.kernel < kNoMaxpoolArgmax, "maxpool_forward",
                  "a window of " + std::to_string(s.kernel * s.kernel) + " positions does not fit a byte");
    SB_CPU_EXPECT(argmax != nullptr, "maxpool_forward", "argmax is null");
    expect_f32(x, "maxpool_forward", "x");
    expect_f32(out, "maxpool_forward", "out");
    expect_rows_cols(x, s.in_rows(), s.channels, "maxpool_forward", "x");
    expect_rows_cols(out, s.out_rows(), s.channels, "maxpool_forward", "out");
    const int64_t c = s.channels;
    std::fill_n(f32_mut(out), out.numel(), -std::numeric_limits<float>::infinity());
    std::fill_n(argmax, out.numel(), kNoMaxpoolArgmax);
    for_each_window(s, [&](int64_t out_row, int64_t in_row, int64_t col) {
        if (in_row < 0) return;
        const uint8_t k = static_cast<uint8_t>(col / c);
        const float* src = f32(x) + in_row * c;
        float* dst = f32_mut(out) + out_row * c;
        uint8_t* arg = argmax + out_row * c;
        for (int64_t j = 0; j < c; ++j)
            // A larger value, or the first non-NaN one (-inf included): NaN never wins.
            if (dst[j] < src[j] || (arg[j] == kNoMaxpoolArgmax && src[j] == dst[j])) {
                dst[j] = src[j];
                arg[j] = k;
            }
    });
}

void CpuOps::maxpool_backward(const ConvShape& s, const uint8_t* argmax, const Tensor& grad_out,
                              const Tensor& grad_x) {
    expect_conv_shape(s, "maxpool_backward");
    SB_CPU_EXPECT(argmax != nullptr, "maxpool_backward", "argmax is null");
    expect_f32(grad_out, "maxpool_backward", "grad_out");
    expect_f32(grad_x, "maxpool_backward", "grad_x");
    expect_rows_cols(grad_x, s.in_rows(), s.channels, "maxpool_backward", "grad_x");
    expect_rows_cols(grad_out, s.out_rows(), s.channels, "maxpool_backward", "grad_out");
    const int64_t c = s.channels;
    std::fill_n(f32_mut(grad_x), grad_x.numel(), 0.0f);
    for_each_window(s, [&](int64_t out_row, int64_t in_row, int64_t col) {
        if (in_row < 0) return;
        const uint8_t k = static_cast<uint8_t>(col / c);
        for (int64_t j = 0; j < c; ++j)
            if (argmax[out_row * c + j] == k) f32_mut(grad_x)[in_row * c + j] += f32(grad_out)[out_row * c + j];
    });
}

// The conv_* ops as the ResNet's im2col engine computes them: the reference the cuDNN
// convolutions are checked against.
void CpuOps::conv_forward(const ConvShape& s, const Tensor& x, const Tensor& weight, const Tensor& out) {
    expect_conv_shape(s, "conv_forward");
    expect_rows_cols(weight, out.cols, s.patch(), "conv_forward", "weight");
    conv_cols_.resize(static_cast<size_t>(s.out_rows() * s.patch()));
    const Tensor cols{conv_cols_.data(), DType::f32, s.out_rows(), s.patch()};
    im2col(s, x, cols);
    gemm(false, true, 1.0f, cols, weight, 0.0f, out);
}

void CpuOps::conv_backward_data(const ConvShape& s, const Tensor& grad_out, const Tensor& weight, float beta,
                                const Tensor& grad_x) {
    expect_conv_shape(s, "conv_backward_data");
    expect_f32(grad_x, "conv_backward_data", "grad_x");
    expect_rows_cols(grad_x, s.in_rows(), s.channels, "conv_backward_data", "grad_x");
    conv_cols_.resize(static_cast<size_t>(s.out_rows() * s.patch()));
    conv_tmp_.resize(static_cast<size_t>(grad_x.numel()));
    const Tensor cols{conv_cols_.data(), DType::f32, s.out_rows(), s.patch()};
    gemm(false, false, 1.0f, grad_out, weight, 0.0f, cols);
    col2im(s, cols, Tensor{conv_tmp_.data(), DType::f32, grad_x.rows, grad_x.cols});
    float* dx = f32_mut(grad_x);
    for (int64_t i = 0; i < grad_x.numel(); ++i)
        dx[i] = conv_tmp_[static_cast<size_t>(i)] + (beta != 0.0f ? beta * dx[i] : 0.0f);
}

void CpuOps::conv_backward_filter(const ConvShape& s, const Tensor& x, const Tensor& grad_out,
                                  const Tensor& grad_weight) {
    expect_conv_shape(s, "conv_backward_filter");
    conv_cols_.resize(static_cast<size_t>(s.out_rows() * s.patch()));
    const Tensor cols{conv_cols_.data(), DType::f32, s.out_rows(), s.patch()};
    im2col(s, x, cols);
    gemm(true, false, 1.0f, grad_out, cols, 0.0f, grad_weight);
}

void CpuOps::batchnorm_relu_forward(const Tensor& x, const float* gamma, const float* beta, float eps,
                                    const Tensor& residual, const Tensor& out, float* mean, float* rstd) {
    batchnorm_forward(x, gamma, beta, eps, out, mean, rstd);
    if (residual.data) {
        expect_f32(residual, "batchnorm_relu_forward", "residual");
        expect_same_shape(residual, out, "batchnorm_relu_forward");
        add(out, residual, out);
    }
    activation_forward(Activation::relu, out, out);
}

void CpuOps::batchnorm_relu_backward(const Tensor& x, const Tensor& grad_out, const float* gamma, const float* beta,
                                     const float* mean, const float* rstd, const Tensor& grad_x, float* grad_gamma,
                                     float* grad_beta) {
    expect_f32(x, "batchnorm_relu_backward", "x");
    expect_f32(grad_out, "batchnorm_relu_backward", "grad_out");
    expect_same_shape(x, grad_out, "batchnorm_relu_backward");
    const int64_t n = x.cols;
    conv_tmp_.resize(static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.rows; ++i)
        for (int64_t j = 0; j < n; ++j) {  // the forward's output, recomputed: relu' = (y > 0)
            const float y = (f32(x)[i * n + j] - mean[j]) * rstd[j] * gamma[j] + beta[j];
            conv_tmp_[static_cast<size_t>(i * n + j)] = y > 0.0f ? f32(grad_out)[i * n + j] : 0.0f;
        }
    batchnorm_backward(x, Tensor{conv_tmp_.data(), DType::f32, x.rows, x.cols}, gamma, mean, rstd, grad_x,
                       grad_gamma, grad_beta);
}

void CpuOps::avgpool_forward(int pixels, const Tensor& x, const Tensor& out) {
    expect_f32(x, "avgpool_forward", "x");
    expect_f32(out, "avgpool_forward", "out");
    SB_CPU_EXPECT(pixels > 0, "avgpool_forward", "pixels must be positive");
    expect_rows_cols(x, out.rows * pixels, out.cols, "avgpool_forward", "x");
    const int64_t c = out.cols;
    for (int64_t n = 0; n < out.rows; ++n)
        for (int64_t j = 0; j < c; ++j) {
            double sum = 0.0;
            for (int64_t p = 0; p < pixels; ++p) sum += f32(x)[(n * pixels + p) * c + j];
            f32_mut(out)[n * c + j] = static_cast<float>(sum / pixels);
        }
}

void CpuOps::avgpool_backward(int pixels, const Tensor& grad_out, const Tensor& grad_x) {
    expect_f32(grad_out, "avgpool_backward", "grad_out");
    expect_f32(grad_x, "avgpool_backward", "grad_x");
    SB_CPU_EXPECT(pixels > 0, "avgpool_backward", "pixels must be positive");
    expect_rows_cols(grad_x, grad_out.rows * pixels, grad_out.cols, "avgpool_backward", "grad_x");
    const int64_t c = grad_out.cols;
    for (int64_t n = 0; n < grad_out.rows; ++n)
        for (int64_t p = 0; p < pixels; ++p)
            for (int64_t j = 0; j < c; ++j)
                f32_mut(grad_x)[(n * pixels + p) * c + j] = f32(grad_out)[n * c + j] / static_cast<float>(pixels);
}

// ---- optimizer -----------------------------------------------------------------------

// torch.optim.SGD with dampening 0, nesterov off: g' = g + wd*p; buf = mu*buf + g';
// p -= lr*buf. PyTorch sets buf = g' on the first step; the caller zero-fills the
// buffer, and mu*0 + g' == g', so every step matches. mu == 0 needs no buffer.
void CpuOps::sgd_step(float* params, const float* grads, float* momentum, size_t n, const OptimizerConfig& cfg,
                      const Tensor& weights_copy) {
    const float lr = cfg.lr, mu = cfg.momentum, wd = cfg.weight_decay;
    if (mu != 0.0f) {
        SB_CPU_EXPECT(momentum != nullptr, "sgd_step", "momentum != 0 needs a momentum buffer");
        for (size_t i = 0; i < n; ++i) {
            const float g = grads[i] + wd * params[i];
            momentum[i] = mu * momentum[i] + g;
            params[i] -= lr * momentum[i];
        }
    } else {
        for (size_t i = 0; i < n; ++i) params[i] -= lr * (grads[i] + wd * params[i]);
    }
    write_weights_copy(params, n, weights_copy, "sgd_step");
}

// torch.optim.AdamW (amsgrad off): p *= 1 - lr*wd; m = b1 m + (1-b1) g;
// v = b2 v + (1-b2) g^2; p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps), with
// bc_i = 1 - beta_i^step and step counting from 1 — PyTorch's exact arrangement.
void CpuOps::adamw_step(float* params, const float* grads, float* m, float* v, size_t n, const OptimizerConfig& cfg,
                        int64_t step, const Tensor& weights_copy) {
    SB_CPU_EXPECT(step >= 1, "adamw_step", "step counts from 1; got " + std::to_string(step));
    const float lr = cfg.lr, b1 = cfg.beta1, b2 = cfg.beta2, eps = cfg.eps;
    const float decay = 1.0f - lr * cfg.weight_decay;
    const double bc1 = 1.0 - std::pow(static_cast<double>(b1), static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(static_cast<double>(b2), static_cast<double>(step));
    const float step_size = static_cast<float>(lr / bc1);
    const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    for (size_t i = 0; i < n; ++i) {
        const float g = grads[i];
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        const float denom = std::sqrt(v[i]) * inv_sqrt_bc2 + eps;
        params[i] = params[i] * decay - step_size * m[i] / denom;
    }
    write_weights_copy(params, n, weights_copy, "adamw_step");
}

bool CpuOps::unscale_and_check(float* grads, size_t n, float inv_scale) {
    bool finite = true;
    for (size_t i = 0; i < n; ++i) {
        grads[i] *= inv_scale;
        finite &= std::isfinite(grads[i]);
    }
    return finite;
}

// ---- timing ---------------------------------------------------------------------------

void CpuOps::record_marker(int slot) {
    SB_CPU_EXPECT(slot >= 0 && slot < kMaxMarkers, "record_marker", "slot " + std::to_string(slot) + " out of range");
    markers_[slot] = Clock::now();
    marker_set_[slot] = true;
}

double CpuOps::elapsed_ms(int from_slot, int to_slot) {
    SB_CPU_EXPECT(from_slot >= 0 && from_slot < kMaxMarkers && to_slot >= 0 && to_slot < kMaxMarkers, "elapsed_ms",
                  "slot out of range: " + std::to_string(from_slot) + ", " + std::to_string(to_slot));
    SB_CPU_EXPECT(marker_set_[from_slot] && marker_set_[to_slot], "elapsed_ms",
                  "marker " + std::to_string(marker_set_[from_slot] ? to_slot : from_slot) + " was never recorded");
    return std::chrono::duration<double, std::milli>(markers_[to_slot] - markers_[from_slot]).count();
}

}  // namespace sb
