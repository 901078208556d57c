// The transformer kernels of CudaOps (declared in kernels.cuh), each next to its launcher.
// Row kernels (LayerNorm, attention softmax) give one warp a row: lanes read it in
// 16-byte vectors when the row length and the pointers allow (else scalars) and reduce with
// shuffles. Rows of up to 1024 elements in vectors are held in registers where a kernel
// needs them again (the LayerNorm forward) or add into per-column registers (the backward);
// longer rows are read again from L1/L2 for each pass, so any row length works. Math is
// fp32 whatever the storage.
#include "models/cuda/kernels.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "models/cuda/cuda_check.h"
#include "models/cuda/kernel_util.cuh"
#include "models/dropout.h"

namespace sb::kernels {

using namespace detail;

namespace {

constexpr int kRowWarps = 8;  // rows (warps) per block of the row kernels

unsigned row_grid(const Context& ctx, int64_t rows) {
    const int64_t blocks = (rows + kRowWarps - 1) / kRowWarps;
    return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, int64_t{ctx.sm_count} * 64)));
}

// The warp's first row and the stride between its rows.
__device__ __forceinline__ int64_t warp_row() {
    return static_cast<int64_t>(blockIdx.x) * kRowWarps + (threadIdx.x >> 5);
}
__device__ __forceinline__ int64_t warp_row_stride() { return static_cast<int64_t>(gridDim.x) * kRowWarps; }

// Rows of at most 32 * kMaxLaneElems elements in 16-byte vectors take the fused paths: a lane
// owns kLaneVecs vectors of a row (kLaneVecs * V <= kMaxLaneElems) and keeps them in registers.
constexpr int kMaxLaneElems = 32;

// When rows of nv 16-byte vectors of T fit the fused paths, calls f(integral_constant<int, N>)
// with N the vectors per lane (N * V = 8, 16, 24 or 32 elements: few kernels, registers
// bounded) and returns true.
template <class T, class F> bool dispatch_lane_vectors(int64_t nv, F&& f) {
    constexpr int V = kVec16<T>;
    static_assert(kMaxLaneElems == 32 && 8 % V == 0, "the cases below");
    const int64_t elems = (nv + 31) / 32 * V;
    if (elems <= 8)
        f(std::integral_constant<int, 8 / V>{});
    else if (elems <= 16)
        f(std::integral_constant<int, 16 / V>{});
    else if (elems <= 24)
        f(std::integral_constant<int, 24 / V>{});
    else if (elems <= 32)
        f(std::integral_constant<int, 32 / V>{});
    else
        return false;
    return true;
}

}  // namespace

// Calls f(j, k) for the vectors k = lane + 32 j < nv of this lane's row: with kLaneVecs > 0
// (rows of at most 32 * kLaneVecs vectors) unrolled, so j is a constant that can index
// registers; with 0 a loop over any row length (j = 0), not unrolled (fewer registers).
template <int kLaneVecs, class F> __device__ __forceinline__ void for_lane_vectors(int64_t nv, F&& f) {
    const int lane = threadIdx.x & 31;
    if constexpr (kLaneVecs > 0) {
#pragma unroll
        for (int j = 0; j < kLaneVecs; ++j)
            if (lane + 32 * j < nv) f(j, static_cast<int64_t>(lane + 32 * j));
    } else {
#pragma unroll 1
        for (int64_t k = lane; k < nv; k += 32) f(0, k);
    }
}

// p[0, V) into out (gamma, beta): as float4 loads when V is a multiple of 4 (p then 16-byte aligned).
template <int V> __device__ __forceinline__ void load_floats(const float* __restrict__ p, float (&out)[V]) {
    if constexpr (V % 4 == 0) {
#pragma unroll
        for (int q = 0; q < V / 4; ++q) {
            const float4 f = reinterpret_cast<const float4*>(p)[q];
            out[4 * q] = f.x;
            out[4 * q + 1] = f.y;
            out[4 * q + 2] = f.z;
            out[4 * q + 3] = f.w;
        }
    } else {
#pragma unroll
        for (int e = 0; e < V; ++e) out[e] = p[e];
    }
}

// Bit e says element first + e survives dropout (threshold 0: all do). With V a multiple of 4
// (first is then too) one hash decides four elements, as models/dropout.h lays the mask out.
template <int V>
__device__ __forceinline__ uint32_t dropout_keep_bits(uint64_t seed, uint64_t first, uint32_t threshold) {
    static_assert(V <= 8, "one bit per element of a 16-byte vector");
    if (threshold == 0) return (1u << V) - 1;
    uint32_t bits = 0;
    if constexpr (V % 4 == 0) {
#pragma unroll
        for (int q = 0; q < V / 4; ++q) bits |= dropout_keep_nibble(seed, (first >> 2) + q, threshold) << (4 * q);
    } else {
#pragma unroll
        for (int e = 0; e < V; ++e) bits |= static_cast<uint32_t>(dropout_keep_above(seed, first + e, threshold)) << e;
    }
    return bits;
}

// ---- LayerNorm forward: a warp per row; pass 1 the mean, pass 2 the variance around it
// (two-pass: no cancellation of E[x^2] - E[x]^2), pass 3 normalizes with fp32 gamma/beta.
// Rows that fit (kLaneVecs > 0) are loaded into registers at once, so a warp waits on DRAM
// once per row and the passes read registers; longer rows are read again from L1/L2 for each
// pass. Either way a lane adds its vectors k = lane + 32 j in order, then warp_reduce's tree.

// A 16-byte vector held as four 32-bit words: 16-bit elements stay two to a register (a VecN
// of them is unpacked into a register per element, which doubles a held row's registers).
// Element e lies where memory has it: word e / 2, the low half first.
template <class T> __device__ __forceinline__ float elem_f32(const uint4& a, int e) {
    constexpr int kPerWord = 4 / sizeof(T);
    const int i = e / kPerWord;
    const uint32_t w = i == 0 ? a.x : i == 1 ? a.y : i == 2 ? a.z : a.w;
    if constexpr (std::is_same_v<T, float>) {
        return __uint_as_float(w);
    } else {
        const auto h = static_cast<unsigned short>(w >> (16 * (e % kPerWord)));
        if constexpr (std::is_same_v<T, __half>)
            return to_f32(__ushort_as_half(h));
        else
            return to_f32(__ushort_as_bfloat16(h));
    }
}
template <class T, int V> __device__ __forceinline__ float elem_f32(const VecN<T, V>& a, int e) {
    return to_f32(a.v[e]);
}

template <class T, int V> __device__ __forceinline__ uint4 as_words(const VecN<T, V>& a) {
    static_assert(sizeof(a) == sizeof(uint4), "a 16-byte vector");
    uint4 w;
    memcpy(&w, &a, sizeof(w));
    return w;
}

// This lane's vectors of a row: held in registers (kLaneVecs > 0, vector lane + 32 j at j, as
// words) or read from mem for each walk.
template <class T, int V, int kLaneVecs> struct LaneRow {
    using VT = VecN<T, V>;
    const VT* mem;
    int64_t nv;
    uint4 held[kLaneVecs > 0 ? kLaneVecs : 1];

    // Calls f(k, vector k) for this lane's vectors in order (read its elements with elem_f32<T>).
    template <class F> __device__ __forceinline__ void walk(F&& f) const {
        if constexpr (kLaneVecs > 0) {
            for_lane_vectors<kLaneVecs>(nv, [&](int j, int64_t k) { f(k, held[j]); });
        } else {
            for (int64_t k = threadIdx.x & 31; k < nv; k += 32) f(k, mem[k]);
        }
    }
};

// One warp's row of a LayerNorm given this lane's sum of its elements (in walk order): the
// mean, the variance around it in a second walk, out = (x - mean) * rstd * gamma + beta with
// fp32 gamma/beta, and lane 0 saves mean and rstd.
template <class T, int V, int kLaneVecs>
__device__ __forceinline__ void normalize_row(const LaneRow<T, V, kLaneVecs>& x, float lane_sum, float inv_cols,
                                              float eps, const float* __restrict__ gamma,
                                              const float* __restrict__ beta, VecN<T, V>* orow, float* mean,
                                              float* rstd) {
    using VT = VecN<T, V>;
    const float mu = warp_reduce(lane_sum, SumOp{}) * inv_cols;
    float sq = 0.0f;
    x.walk([&](int64_t, const auto& a) {
#pragma unroll
        for (int e = 0; e < V; ++e) {
            const float d = elem_f32<T>(a, e) - mu;
            sq += d * d;
        }
    });
    const float rs = rsqrtf(warp_reduce(sq, SumOp{}) * inv_cols + eps);
    x.walk([&](int64_t k, const auto& a) {
        float gam[V], bet[V];
        load_floats<V>(gamma + k * V, gam);
        load_floats<V>(beta + k * V, bet);
        VT r;
#pragma unroll
        for (int e = 0; e < V; ++e) r.v[e] = from_f32<T>((elem_f32<T>(a, e) - mu) * rs * gam[e] + bet[e]);
        orow[k] = r;
    });
    if ((threadIdx.x & 31) == 0) {
        *mean = mu;
        *rstd = rs;
    }
}

// Launch bounds: 4 blocks of 8 warps per SM (64 registers) hold a row of up to 1024
// elements without spilling.
template <class T, int V, int kLaneVecs>
__global__ void __launch_bounds__(kRowWarps * 32, 4)
    layernorm_forward_kernel(const T* __restrict__ x, const float* __restrict__ gamma,
                             const float* __restrict__ beta, float eps, int64_t rows, int64_t cols,
                             T* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd) {
    using VT = VecN<T, V>;
    const int64_t nv = cols / V;
    const float inv_cols = 1.0f / static_cast<float>(cols);
    for (int64_t row = warp_row(); row < rows; row += warp_row_stride()) {
        LaneRow<T, V, kLaneVecs> xr{reinterpret_cast<const VT*>(x + row * cols), nv};
        if constexpr (kLaneVecs > 0)
            for_lane_vectors<kLaneVecs>(nv, [&](int j, int64_t k) {
                xr.held[j] = reinterpret_cast<const uint4*>(xr.mem)[k];
            });
        float sum = 0.0f;
        xr.walk([&](int64_t, const auto& a) {
#pragma unroll
            for (int e = 0; e < V; ++e) sum += elem_f32<T>(a, e);
        });
        normalize_row(xr, sum, inv_cols, eps, gamma, beta, reinterpret_cast<VT*>(out + row * cols), mean + row,
                      rstd + row);
    }
}

namespace {

// Calls launch(V, kLaneVecs) as integral constants: the register-held kernel when rows of cols
// elements come in 16-byte vectors (vec, as row_vec chose) and fit, else the loop with V = vec.
template <class T, class Launch> void launch_row_forward(int64_t cols, int vec, Launch&& launch) {
    const auto v16 = std::integral_constant<int, kVec16<T>>{};
    if (vec == kVec16<T> && dispatch_lane_vectors<T>(cols / vec, [&](auto lane_vecs) { launch(v16, lane_vecs); }))
        return;
    dispatch_vec<T>(vec, [&](auto v) { launch(v, std::integral_constant<int, 0>{}); });
}

}  // namespace

void layernorm_forward(const Context& ctx, DType dtype, const void* x, const float* gamma, const float* beta,
                       float eps, int64_t rows, int64_t cols, void* out, float* mean, float* rstd) {
    if (rows <= 0) return;
    SB_REQUIRE(cols > 0, "layernorm_forward: empty rows");
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        launch_row_forward<T>(cols, row_vec<T>(cols, {x, out, gamma, beta}), [&](auto v, auto lane_vecs) {
            layernorm_forward_kernel<T, decltype(v)::value, decltype(lane_vecs)::value>
                <<<row_grid(ctx, rows), kRowWarps * 32, 0, ctx.stream>>>(static_cast<const T*>(x), gamma, beta, eps,
                                                                         rows, cols, static_cast<T*>(out), mean, rstd);
            SB_CHECK_LAUNCH();
        });
    });
}

// ---- LayerNorm backward, plain (layernorm_backward) and after the residual junction
// (residual_layernorm_backward), one kernel for both: a warp per row, with g = grad_out
// (+ grad_out_residual, rounded to T as add() rounds), pass 1 the row sums of g*gamma and
// g*gamma*xhat, pass 2 grad_x = rstd * (g*gamma - mean(g*gamma) - xhat * mean(g*gamma*xhat))
// (+ grad_sum_residual, rounded again) into grad_sum and, through the forward's dropout mask,
// into grad_branch when there is one. grad_gamma = sum_rows g*xhat and grad_beta = sum_rows g
// come in fixed-order sums (no float atomics: bitwise reproducible for a given GPU), one of
// two ways:
// - fused, rows of at most 32 * kMaxLaneElems elements read as 16-byte vectors: lane l owns
//   the vectors l + 32 j of every row, so pass 1 adds its rows' g*xhat and g into registers;
//   the 8 warps of a block add theirs by a fixed tree in shared memory, each block writes one
//   row of partials and layernorm_param_sum_kernel adds the blocks' rows. The rows come from
//   DRAM once (pass 2 reads them again from L1).
// - otherwise layernorm_param_grad_kernel first, which reads the rows once more (it must run
//   before grad_x overwrites grad_out): a 32 x 16 block owns 32 columns (coalesced reads) and
//   a chunk of rows (param_grad_chunks), a fixed tree adds the 16 partial sums, and
//   sum_partials adds the chunks in order.

constexpr int kLnCols = 32;
constexpr int kLnRows = 16;
constexpr int kFusedBlocksPerSm = 2;  // the fused grid: one wave of 2 blocks per SM at most,
constexpr int64_t kFusedMinWarpRows = 2;  // fewer when a warp would get under 2 rows

namespace {
// Row chunks of layernorm_param_grad_kernel: four 32 x 16 blocks per SM.
int64_t param_grad_chunks(const Context& ctx, int64_t rows, int64_t cols) {
    return column_sum_chunks(ctx, rows, cols, kLnCols, 4);
}
}  // namespace

// Adds the kLnRows rows of s column by column by a fixed tree into row 0 (all threads of the
// kLnCols x kLnRows block call it).
__device__ __forceinline__ void add_block_rows(float (*s)[kLnCols + 1]) {
    const int tx = threadIdx.x, ty = threadIdx.y;
    __syncthreads();
#pragma unroll
    for (int half = kLnRows / 2; half > 0; half /= 2) {
        if (ty < half) s[ty][tx] += s[ty + half][tx];
        __syncthreads();
    }
}

// g2 (may be nullptr) is added to g, rounded to T as add() rounds: the residual gradient
// that residual_layernorm_backward folds in.
template <class T>
__global__ void layernorm_param_grad_kernel(const T* __restrict__ x, const T* __restrict__ g,
                                            const T* __restrict__ g2, const float* __restrict__ mean,
                                            const float* __restrict__ rstd, int64_t rows, int64_t cols,
                                            int64_t rows_per_chunk, float* __restrict__ out_gamma,
                                            float* __restrict__ out_beta) {
    __shared__ float sg[kLnRows][kLnCols + 1];
    __shared__ float sb[kLnRows][kLnCols + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t col = static_cast<int64_t>(blockIdx.x) * kLnCols + tx;
    const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
    const int64_t r1 = min(rows, r0 + rows_per_chunk);
    float acc_g = 0.0f, acc_b = 0.0f;
    if (col < cols)
        for (int64_t r = r0 + ty; r < r1; r += kLnRows) {
            float gv = to_f32(g[r * cols + col]);
            if (g2) gv = to_f32(from_f32<T>(gv + to_f32(g2[r * cols + col])));
            acc_g += gv * (to_f32(x[r * cols + col]) - mean[r]) * rstd[r];
            acc_b += gv;
        }
    sg[ty][tx] = acc_g;
    sb[ty][tx] = acc_b;
    add_block_rows(sg);
    add_block_rows(sb);
    if (ty == 0 && col < cols) {
        out_gamma[static_cast<int64_t>(blockIdx.y) * cols + col] = sg[0][tx];
        out_beta[static_cast<int64_t>(blockIdx.y) * cols + col] = sb[0][tx];
    }
}

// The fused path's second stage: grad_gamma (blockIdx.y 0) or grad_beta (1) = the column sums
// of its `blocks` x cols matrix of partials, a 32 x 16 block per 32 columns, each thread adding
// every 16th row in order and add_block_rows the 16 sums. (sum_partials' thread per column
// would add a few hundred rows one L2 round trip after another.)
__global__ void layernorm_param_sum_kernel(const float* __restrict__ partials, int64_t blocks, int64_t cols,
                                           float* __restrict__ grad_gamma, float* __restrict__ grad_beta) {
    __shared__ float s[kLnRows][kLnCols + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t col = static_cast<int64_t>(blockIdx.x) * kLnCols + tx;
    const float* part = partials + static_cast<int64_t>(blockIdx.y) * blocks * cols;
    float acc = 0.0f;
    if (col < cols) {
#pragma unroll 4
        for (int64_t b = ty; b < blocks; b += kLnRows) acc += part[b * cols + col];
    }
    s[ty][tx] = acc;
    add_block_rows(s);
    if (ty == 0 && col < cols) (blockIdx.y == 0 ? grad_gamma : grad_beta)[col] = s[0][tx];
}

// kLaneVecs > 0: the fused path, rows of at most 32 * kLaneVecs vectors; block b writes its
// column sums of g*xhat and g to part_gamma and part_beta + b * cols (the outputs themselves
// when the grid is one block). kLaneVecs == 0: any row length, no parameter gradients.
// Launch bounds: the fused path within 128 registers (2 blocks of 8 warps per SM), the other
// within 64 (4 blocks). The fused path's 2 * kLaneVecs * V accumulators (64 registers at 1024
// columns) leave no room to hold the row between the passes, so pass 2 reads x and g again
// from L1; g_sum_res, which pass 1 does not read, is copied to shared memory by cp.async as
// pass 1 loads (no registers), so a row costs one DRAM round trip, not one per vector.
// No __restrict__ on the gradients: grad_out may be grad_branch or grad_sum, and grad_sum
// either residual gradient; pass 1 (ending in a shuffle) reads before pass 2 writes, g_sum_res
// is copied before pass 2 writes, and in pass 2 each lane reads a vector of all of them before
// it writes that vector.
template <class T, int V, int kLaneVecs>
__global__ void __launch_bounds__(kRowWarps * 32, kLaneVecs > 0 ? kFusedBlocksPerSm : 4)
    layernorm_grad_kernel(const T* __restrict__ x, const T* g, const T* g_out_res, const T* g_sum_res,
                          const float* __restrict__ gamma, const float* __restrict__ mean,
                          const float* __restrict__ rstd, int64_t rows, int64_t cols, float scale,
                          uint32_t threshold, uint64_t seed, const uint64_t* __restrict__ generation, T* grad_sum,
                          T* grad_branch, float* __restrict__ part_gamma, float* __restrict__ part_beta) {
    using VT = VecN<T, V>;
    constexpr int kAccs = kLaneVecs > 0 ? kLaneVecs * V : 1;
    // Fused: while rows are processed, each warp's staged g_sum_res row (vector lane + 32 j at
    // [warp][j][lane]); after them, the block tree's slots (warps [half, 2 half) hand their
    // sums to warps [0, half) through slot warp - half).
    constexpr int kStageVecs = kRowWarps * kLaneVecs * 32;
    constexpr int kSlotFloats = kRowWarps / 2 * 2 * kAccs * 32;
    constexpr int kSharedVecs = kLaneVecs > 0 ? std::max<int>(kStageVecs, kSlotFloats / 4) : 1;
    __shared__ float4 shared[kSharedVecs];
    VT* stage = nullptr;  // this lane's first staged vector
    if constexpr (kLaneVecs > 0)
        stage = reinterpret_cast<VT*>(shared) + (threadIdx.x >> 5) * kLaneVecs * 32 + (threadIdx.x & 31);
    seed = dropout_seed_at(seed, *generation);
    const int lane = threadIdx.x & 31;
    const int64_t nv = cols / V;
    const float inv_cols = 1.0f / static_cast<float>(cols);
    float acc_g[kAccs] = {}, acc_b[kAccs] = {};  // fused: this lane's columns' sums of g*xhat and g
    for (int64_t row = warp_row(); row < rows; row += warp_row_stride()) {
        const int64_t base = row * cols;
        const VT* xr = reinterpret_cast<const VT*>(x + base);
        const VT* gr = reinterpret_cast<const VT*>(g + base);
        const VT* gor = reinterpret_cast<const VT*>(g_out_res + base);  // dereferenced only when given
        const VT* gsr = reinterpret_cast<const VT*>(g_sum_res + base);
        if constexpr (kLaneVecs > 0) {
            if (g_sum_res) {
                for_lane_vectors<kLaneVecs>(nv, [&](int j, int64_t k) {
                    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(stage + 32 * j));
                    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gsr + k) : "memory");
                });
                asm volatile("cp.async.commit_group;\n" ::: "memory");
            }
        }
        const float mu = mean[row], rs = rstd[row];
        // grad_out + grad_out_residual, rounded as add() stores it.
        const auto load_g = [&](int64_t k) {
            VT b = gr[k];
            if (g_out_res) {
                const VT c = gor[k];
#pragma unroll
                for (int e = 0; e < V; ++e) b.v[e] = from_f32<T>(to_f32(b.v[e]) + to_f32(c.v[e]));
            }
            return b;
        };
        float s1 = 0.0f, s2 = 0.0f;
        for_lane_vectors<kLaneVecs>(nv, [&](int j, int64_t k) {
            const VT a = xr[k], b = load_g(k);
            float gam[V];
            load_floats<V>(gamma + k * V, gam);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const float gv = to_f32(b.v[e]), d = to_f32(a.v[e]) - mu;
                const float gg = gv * gam[e];
                s1 += gg;
                s2 += gg * d * rs;
                if constexpr (kLaneVecs > 0) {
                    acc_g[j * V + e] += gv * d * rs;
                    acc_b[j * V + e] += gv;
                }
            }
        });
        s1 = warp_reduce(s1, SumOp{}) * inv_cols;
        s2 = warp_reduce(s2, SumOp{}) * inv_cols;
        if constexpr (kLaneVecs > 0)
            if (g_sum_res) asm volatile("cp.async.wait_all;\n" ::: "memory");  // this lane's copies, read by it
        VT* out_sum = reinterpret_cast<VT*>(grad_sum + base);
        VT* out_branch = reinterpret_cast<VT*>(grad_branch + base);
        // A loop, not unrolled as pass 1: unrolled, 1024 columns of 16 bits spilled registers.
#pragma unroll 1
        for (int64_t k = lane, j = 0; k < nv; k += 32, ++j) {
            const VT a = xr[k], b = load_g(k);
            VT d{};
            if (g_sum_res) {
                if constexpr (kLaneVecs > 0)
                    d = stage[32 * j];
                else
                    d = gsr[k];
            }
            float gam[V];
            load_floats<V>(gamma + k * V, gam);
            const uint32_t keep = dropout_keep_bits<V>(seed, static_cast<uint64_t>(base + k * V), threshold);
            VT rsum, rbranch;
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const float gg = to_f32(b.v[e]) * gam[e];
                const float xhat = (to_f32(a.v[e]) - mu) * rs;
                float dx = to_f32(from_f32<T>(rs * (gg - s1 - xhat * s2)));
                if (g_sum_res) dx = to_f32(from_f32<T>(dx + to_f32(d.v[e])));
                rsum.v[e] = from_f32<T>(dx);
                rbranch.v[e] = from_f32<T>((keep >> e) & 1u ? dx * scale : 0.0f);
            }
            out_sum[k] = rsum;
            if (grad_branch) out_branch[k] = rbranch;
        }
    }
    if constexpr (kLaneVecs > 0) {
        // Warp 0 ends with ((w0 + w4) + (w2 + w6)) + ((w1 + w5) + (w3 + w7)).
        auto slots = reinterpret_cast<float (*)[2][kAccs][32]>(shared);
        const int warp = threadIdx.x >> 5;
        __syncthreads();  // every warp is done with its staged rows
#pragma unroll
        for (int half = kRowWarps / 2; half > 0; half /= 2) {
            if (warp >= half && warp < 2 * half)
#pragma unroll
                for (int i = 0; i < kAccs; ++i) {
                    slots[warp - half][0][i][lane] = acc_g[i];
                    slots[warp - half][1][i][lane] = acc_b[i];
                }
            __syncthreads();
            if (warp < half)
#pragma unroll
                for (int i = 0; i < kAccs; ++i) {
                    acc_g[i] += slots[warp][0][i][lane];
                    acc_b[i] += slots[warp][1][i][lane];
                }
            __syncthreads();  // before the next level writes slots this one read
        }
        if (warp == 0) {
            const int64_t out = static_cast<int64_t>(blockIdx.x) * cols;
            for_lane_vectors<kLaneVecs>(nv, [&](int j, int64_t k) {
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    part_gamma[out + k * V + e] = acc_g[j * V + e];
                    part_beta[out + k * V + e] = acc_b[j * V + e];
                }
            });
        }
    }
}

namespace {

// grad_gamma and grad_beta of g (+ g2) over rows > 0, in param_grad_chunks' chunks.
template <class T>
void layernorm_param_grads(const Context& ctx, const T* x, const T* g, const T* g2, const float* mean,
                           const float* rstd, int64_t rows, int64_t cols, float* grad_gamma, float* grad_beta,
                           float* partials) {
    const int64_t chunks = param_grad_chunks(ctx, rows, cols);
    const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
    SB_REQUIRE(chunks == 1 || partials != nullptr, "layernorm_backward needs a partials buffer");
    float* stage_g = chunks == 1 ? grad_gamma : partials;
    float* stage_b = chunks == 1 ? grad_beta : partials + chunks * cols;
    dim3 grid(static_cast<unsigned>((cols + kLnCols - 1) / kLnCols), static_cast<unsigned>(chunks));
    layernorm_param_grad_kernel<T><<<grid, dim3(kLnCols, kLnRows), 0, ctx.stream>>>(x, g, g2, mean, rstd, rows, cols,
                                                                                   rows_per_chunk, stage_g, stage_b);
    SB_CHECK_LAUNCH();
    if (chunks > 1) {
        sum_partials(ctx, stage_g, chunks, cols, grad_gamma);
        sum_partials(ctx, stage_b, chunks, cols, grad_beta);
    }
}

// Blocks of the fused path for `rows` rows (each writes a row of partials).
int64_t fused_blocks(const Context& ctx, int64_t rows) {
    const int64_t by_rows = (rows + kRowWarps * kFusedMinWarpRows - 1) / (kRowWarps * kFusedMinWarpRows);
    return std::max<int64_t>(1, std::min<int64_t>(by_rows, int64_t{std::max(ctx.sm_count, 1)} * kFusedBlocksPerSm));
}

// The backward of both ops over rows > 0 (residual gradients and grad_branch may be nullptr).
template <class T>
void layernorm_grads(const Context& ctx, const T* x, const T* g, const T* g_out_res, const T* g_sum_res,
                     const float* gamma, const float* mean, const float* rstd, int64_t rows, int64_t cols, float p,
                     uint64_t seed, T* grad_sum, T* grad_branch, float* grad_gamma, float* grad_beta,
                     float* partials) {
    const int vec = row_vec<T>(cols, {x, g, g_out_res, g_sum_res, grad_sum, grad_branch, gamma});
    const auto launch = [&](auto v, auto lane_vecs, int64_t blocks, float* part_gamma, float* part_beta) {
        layernorm_grad_kernel<T, decltype(v)::value, decltype(lane_vecs)::value>
            <<<static_cast<unsigned>(blocks), kRowWarps * 32, 0, ctx.stream>>>(
                x, g, g_out_res, g_sum_res, gamma, mean, rstd, rows, cols, 1.0f / (1.0f - p), dropout_threshold(p),
                seed, ctx.dropout_generation, grad_sum, grad_branch, part_gamma, part_beta);
        SB_CHECK_LAUNCH();
    };
    const auto fused = [&](auto lane_vecs) {
        const int64_t blocks = fused_blocks(ctx, rows);
        SB_REQUIRE(blocks == 1 || partials != nullptr, "layernorm_backward needs a partials buffer");
        const auto v = std::integral_constant<int, kVec16<T>>{};
        if (blocks == 1) {
            launch(v, lane_vecs, 1, grad_gamma, grad_beta);
            return;
        }
        launch(v, lane_vecs, blocks, partials, partials + blocks * cols);
        layernorm_param_sum_kernel<<<dim3(static_cast<unsigned>((cols + kLnCols - 1) / kLnCols), 2),
                                     dim3(kLnCols, kLnRows), 0, ctx.stream>>>(partials, blocks, cols, grad_gamma,
                                                                              grad_beta);
        SB_CHECK_LAUNCH();
    };
    if (vec == kVec16<T> && dispatch_lane_vectors<T>(cols / vec, fused)) return;
    layernorm_param_grads<T>(ctx, x, g, g_out_res, mean, rstd, rows, cols, grad_gamma, grad_beta, partials);
    dispatch_vec<T>(vec, [&](auto v) {
        launch(v, std::integral_constant<int, 0>{}, row_grid(ctx, rows), nullptr, nullptr);
    });
}

// Zero parameter gradients of an empty batch; true when rows <= 0.
bool no_rows(const Context& ctx, int64_t rows, int64_t cols, float* grad_gamma, float* grad_beta) {
    if (rows > 0) return false;
    SB_CHECK_CUDA(cudaMemsetAsync(grad_gamma, 0, static_cast<size_t>(cols) * sizeof(float), ctx.stream));
    SB_CHECK_CUDA(cudaMemsetAsync(grad_beta, 0, static_cast<size_t>(cols) * sizeof(float), ctx.stream));
    return true;
}

}  // namespace

int64_t layernorm_partials_floats(const Context& ctx, int64_t rows, int64_t cols) {
    const int64_t rows_of_partials = std::max(param_grad_chunks(ctx, rows, cols), fused_blocks(ctx, rows));
    return rows_of_partials > 1 ? 2 * rows_of_partials * cols : 0;
}

void layernorm_backward(const Context& ctx, DType dtype, const void* x, const void* grad_out, const float* gamma,
                        const float* mean, const float* rstd, int64_t rows, int64_t cols, void* grad_x,
                        float* grad_gamma, float* grad_beta, float* partials) {
    SB_REQUIRE(cols > 0, "layernorm_backward: empty rows");
    if (no_rows(ctx, rows, cols, grad_gamma, grad_beta)) return;
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        layernorm_grads<T>(ctx, static_cast<const T*>(x), static_cast<const T*>(grad_out), nullptr, nullptr, gamma,
                           mean, rstd, rows, cols, 0.0f, 0, static_cast<T*>(grad_x), nullptr, grad_gamma, grad_beta,
                           partials);
    });
}

// ---- Residual add, dropout and LayerNorm fused (Ops::residual_layernorm_*): the junction
// after each transformer sub-layer in one pass over the rows instead of three ops. Values
// are rounded to T where dropout, add and LayerNorm would store them, so the fused op
// computes what the three compute; the dropout mask is models/dropout.h's at the element's
// index in the rows x cols tensor.

// Forward: pass 1 forms sum = residual + dropout(branch), writes it and adds it up; passes
// 2 and 3 are layernorm_forward's over the sum, held in registers when the row fits (all of
// a row's loads issued before its first store: one DRAM wait per row), else read back from
// L1/L2 (this lane's own writes). residual may alias sum: each lane reads a vector before
// writing it. Launch bounds: 3 blocks of 8 warps per SM (80 registers) hold 64 bytes of a
// row a lane, the loaded branch and residual and the sum, without spilling; 2 (128) for the
// 96 and 128 bytes of fp32 rows over 512 elements.
template <class T, int V, int kLaneVecs>
__global__ void __launch_bounds__(kRowWarps * 32, kLaneVecs > 4 ? 2 : 3)
    residual_layernorm_forward_kernel(const T* __restrict__ branch, const T* residual, float scale,
                                      uint32_t threshold, uint64_t seed, const uint64_t* __restrict__ generation,
                                      const float* __restrict__ gamma, const float* __restrict__ beta, float eps,
                                      int64_t rows, int64_t cols, T* sum, T* __restrict__ out,
                                      float* __restrict__ mean, float* __restrict__ rstd) {
    using VT = VecN<T, V>;
    seed = dropout_seed_at(seed, *generation);
    const int64_t nv = cols / V;
    const float inv_cols = 1.0f / static_cast<float>(cols);
    for (int64_t row = warp_row(); row < rows; row += warp_row_stride()) {
        const int64_t base = row * cols;
        const VT* br = reinterpret_cast<const VT*>(branch + base);
        const VT* rr = reinterpret_cast<const VT*>(residual + base);
        VT* sr = reinterpret_cast<VT*>(sum + base);
        float total = 0.0f;
        // The sum of vectors b and r, rounded as dropout and add store it (bit e of keep: b's
        // element e survives), added into total.
        const auto add_vector = [&](const auto& b, const auto& r, uint32_t keep) {
            VT o;
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const float kept = elem_f32<T>(b, e) * scale;  // formed either way: a select, not a branch
                const float dropped = to_f32(from_f32<T>((keep >> e) & 1u ? kept : 0.0f));
                o.v[e] = from_f32<T>(dropped + elem_f32<T>(r, e));
                total += to_f32(o.v[e]);
            }
            return o;
        };
        const auto keep_bits = [&](int64_t k) {
            return dropout_keep_bits<V>(seed, static_cast<uint64_t>(base + k * V), threshold);
        };
        LaneRow<T, V, kLaneVecs> s{sr, nv};
        if constexpr (kLaneVecs > 0) {
            // The row's loads first; the mask (bit j * V + e for element e of vector j, one
            // register) is hashed while they are in flight.
            static_assert(kLaneVecs * V <= 32, "one mask bit per element of the lane's row");
            uint4 b[kLaneVecs], r[kLaneVecs];
            for_lane_vectors<kLaneVecs>(nv, [&](int j, int64_t k) {
                b[j] = reinterpret_cast<const uint4*>(br)[k];
                r[j] = reinterpret_cast<const uint4*>(rr)[k];
            });
            uint32_t keep = 0;
            for_lane_vectors<kLaneVecs>(nv, [&](int j, int64_t k) { keep |= keep_bits(k) << (j * V); });
            for_lane_vectors<kLaneVecs>(nv, [&](int j, int64_t k) {
                s.held[j] = as_words(add_vector(b[j], r[j], keep >> (j * V)));
                reinterpret_cast<uint4*>(sr)[k] = s.held[j];
            });
        } else {
            for (int64_t k = threadIdx.x & 31; k < nv; k += 32) sr[k] = add_vector(br[k], rr[k], keep_bits(k));
        }
        normalize_row(s, total, inv_cols, eps, gamma, beta, reinterpret_cast<VT*>(out + base), mean + row,
                      rstd + row);
    }
}

void residual_layernorm_forward(const Context& ctx, DType dtype, const void* branch, const void* residual, float p,
                                uint64_t seed, const float* gamma, const float* beta, float eps, int64_t rows,
                                int64_t cols, void* sum, void* out, float* mean, float* rstd) {
    if (rows <= 0) return;
    SB_REQUIRE(cols > 0, "residual_layernorm_forward: empty rows");
    SB_REQUIRE(p >= 0.0f && p < 1.0f, "residual_layernorm_forward: dropout must be in [0, 1)");
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        const int vec = row_vec<T>(cols, {branch, residual, sum, out, gamma, beta});
        launch_row_forward<T>(cols, vec, [&](auto v, auto lane_vecs) {
            residual_layernorm_forward_kernel<T, decltype(v)::value, decltype(lane_vecs)::value>
                <<<row_grid(ctx, rows), kRowWarps * 32, 0, ctx.stream>>>(
                    static_cast<const T*>(branch), static_cast<const T*>(residual), 1.0f / (1.0f - p),
                    dropout_threshold(p), seed, ctx.dropout_generation, gamma, beta, eps, rows, cols,
                    static_cast<T*>(sum), static_cast<T*>(out), mean, rstd);
            SB_CHECK_LAUNCH();
        });
    });
}

// Backward: layernorm_grads with the residual gradients, the dropout and grad_branch.
void residual_layernorm_backward(const Context& ctx, DType dtype, const void* sum, const void* grad_out,
                                 const void* grad_out_residual, const void* grad_sum_residual, const float* gamma,
                                 const float* mean, const float* rstd, int64_t rows, int64_t cols, float p,
                                 uint64_t seed, void* grad_sum, void* grad_branch, float* grad_gamma,
                                 float* grad_beta, float* partials) {
    SB_REQUIRE(cols > 0, "residual_layernorm_backward: empty rows");
    SB_REQUIRE(p >= 0.0f && p < 1.0f, "residual_layernorm_backward: dropout must be in [0, 1)");
    if (no_rows(ctx, rows, cols, grad_gamma, grad_beta)) return;
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        layernorm_grads<T>(ctx, static_cast<const T*>(sum), static_cast<const T*>(grad_out),
                           static_cast<const T*>(grad_out_residual), static_cast<const T*>(grad_sum_residual), gamma,
                           mean, rstd, rows, cols, p, seed, static_cast<T*>(grad_sum), static_cast<T*>(grad_branch),
                           grad_gamma, grad_beta, partials);
    });
}

// ---- embeddings. Forward: one thread per vector of an output row (a gather, coalesced
// along the row). Backward: the same walk adding into the fp32 table gradient with
// atomics, since several rows may share an id (positions always do); on Hopper a 16-byte
// float4 atomic where the gradient is aligned for it.

template <class T, int V>
__global__ void embedding_forward_kernel(const int32_t* __restrict__ ids, const T* __restrict__ table,
                                         int64_t table_rows, int64_t rows, int64_t cols, T* __restrict__ out,
                                         bool accumulate) {
    using VT = VecN<T, V>;
    const int64_t vpr = cols / V, total = rows * vpr;
    const VT* tv = reinterpret_cast<const VT*>(table);
    VT* ov = reinterpret_cast<VT*>(out);
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t r = i / vpr, c = i - r * vpr;
        const int32_t id = ids[r];
        VT t;
        if (id >= 0 && id < table_rows) {
            t = tv[id * vpr + c];
        } else {
#pragma unroll
            for (int e = 0; e < V; ++e) t.v[e] = from_f32<T>(NAN);
        }
        if (accumulate) {
            const VT o = ov[i];
#pragma unroll
            for (int e = 0; e < V; ++e) t.v[e] = from_f32<T>(to_f32(o.v[e]) + to_f32(t.v[e]));
        }
        ov[i] = t;
    }
}

void embedding_forward(const Context& ctx, DType dtype, const int32_t* ids, const void* table, int64_t table_rows,
                       int64_t rows, int64_t cols, void* out, bool accumulate) {
    if (rows <= 0 || cols <= 0) return;
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        dispatch_vec<T>(row_vec<T>(cols, {table, out}), [&](auto vec) {
            constexpr int V = decltype(vec)::value;
            embedding_forward_kernel<T, V><<<grid_for(ctx, static_cast<size_t>(rows * (cols / V))), kThreads, 0,
                                             ctx.stream>>>(ids, static_cast<const T*>(table), table_rows, rows,
                                                           cols, static_cast<T*>(out), accumulate);
            SB_CHECK_LAUNCH();
        });
    });
}

// Adds v[0..V) to dst[0..V): float4 atomics when allowed (sm_90, 16-byte aligned), else scalar.
template <int V> __device__ __forceinline__ void atomic_add_vec(float* dst, const float (&v)[V], bool vec4) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (V % 4 == 0) {
        if (vec4) {
#pragma unroll
            for (int q = 0; q < V / 4; ++q)
                atomicAdd(reinterpret_cast<float4*>(dst) + q,
                          make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]));
            return;
        }
    }
#endif
#pragma unroll
    for (int e = 0; e < V; ++e) atomicAdd(dst + e, v[e]);
}

template <class T, int V>
__global__ void embedding_backward_kernel(const int32_t* __restrict__ ids, const T* __restrict__ grad_out,
                                          int64_t rows, int64_t cols, float* __restrict__ grad_table,
                                          int64_t table_rows, bool vec4) {
    using VT = VecN<T, V>;
    const int64_t vpr = cols / V, total = rows * vpr;
    const VT* gv = reinterpret_cast<const VT*>(grad_out);
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t r = i / vpr, c = i - r * vpr;
        const int32_t id = ids[r];
        if (id < 0 || id >= table_rows) continue;
        const VT a = gv[i];
        float v[V];
#pragma unroll
        for (int e = 0; e < V; ++e) v[e] = to_f32(a.v[e]);
        atomic_add_vec<V>(grad_table + id * cols + c * V, v, vec4);
    }
}

void embedding_backward(const Context& ctx, DType dtype, const int32_t* ids, const void* grad_out, int64_t rows,
                        int64_t cols, float* grad_table, int64_t table_rows) {
    if (rows <= 0 || cols <= 0) return;
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        dispatch_vec<T>(row_vec<T>(cols, {grad_out}), [&](auto vec) {
            constexpr int V = decltype(vec)::value;
            const bool vec4 = V % 4 == 0 && aligned16(grad_table) && cols % 4 == 0;
            embedding_backward_kernel<T, V><<<grid_for(ctx, static_cast<size_t>(rows * (cols / V))), kThreads, 0,
                                              ctx.stream>>>(ids, static_cast<const T*>(grad_out), rows, cols,
                                                            grad_table, table_rows, vec4);
            SB_CHECK_LAUNCH();
        });
    });
}

// ---- dropout: out[i] = keep(seed at the generation, i) ? in[i] / (1 - p) : 0, the mask of models/dropout.h
// recomputed from the element index (nothing stored; a vector's by dropout_keep_bits, one hash
// per four elements). 8-element vectors, scalar tail; a thread reads each vector before writing
// it, so out may alias in.

template <class T>
__global__ void dropout_kernel(const T* in, T* out, size_t n, size_t n_vec, uint32_t threshold, float scale,
                               uint64_t seed, const uint64_t* generation) {
    seed = dropout_seed_at(seed, *generation);
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const Vec<T>* in_v = reinterpret_cast<const Vec<T>*>(in);
    Vec<T>* out_v = reinterpret_cast<Vec<T>*>(out);
    for (size_t i = tid; i < n_vec; i += stride) {
        const Vec<T> a = in_v[i];
        const uint32_t keep = dropout_keep_bits<kVec>(seed, static_cast<uint64_t>(i) * kVec, threshold);
        Vec<T> r;
#pragma unroll
        for (int e = 0; e < kVec; ++e) r.v[e] = from_f32<T>((keep >> e) & 1u ? to_f32(a.v[e]) * scale : 0.0f);
        out_v[i] = r;
    }
    for (size_t i = n_vec * kVec + tid; i < n; i += stride)
        out[i] = from_f32<T>(dropout_keep_above(seed, i, threshold) ? to_f32(in[i]) * scale : 0.0f);
}

void dropout(const Context& ctx, DType dtype, const void* in, void* out, size_t n, float p, uint64_t seed) {
    if (n == 0) return;
    SB_REQUIRE(p >= 0.0f && p < 1.0f, "dropout: p must be in [0, 1)");
    if (p == 0.0f) {
        if (in != out)
            SB_CHECK_CUDA(cudaMemcpyAsync(out, in, n * dtype_size(dtype), cudaMemcpyDeviceToDevice, ctx.stream));
        return;
    }
    const float scale = 1.0f / (1.0f - p);
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        const size_t n_vec = vec_aligned<T>(in) && vec_aligned<T>(out) ? n / kVec : 0;
        dropout_kernel<T><<<grid_for(ctx, std::max<size_t>(n_vec, (n + kVec - 1) / kVec)), kThreads, 0, ctx.stream>>>(
            static_cast<const T*>(in), static_cast<T*>(out), n, n_vec, dropout_threshold(p), scale, seed,
            ctx.dropout_generation);
        SB_CHECK_LAUNCH();
    });
}

// ---- attention layouts: a block per packed row (b, s); its threads walk the row's
// vectors (coalesced) and each lands in its (part, head) array at ((b*H + h)*S + s)*D.
// Only 32-bit index math per element.

template <class T, int V, bool kToHeads>
__global__ void attention_permute_kernel(T* rows, T* h0, T* h1, T* h2, int parts, int seq, int nheads,
                                         int head_dim) {
    using VT = VecN<T, V>;
    const int64_t row = blockIdx.x;  // b * seq + s
    const int64_t b = row / seq, s = row - b * seq;
    const unsigned dv = static_cast<unsigned>(head_dim / V);
    const unsigned per_row = static_cast<unsigned>(parts * nheads) * dv;
    VT* rv = reinterpret_cast<VT*>(rows) + row * per_row;
    for (unsigned j = threadIdx.x; j < per_row; j += blockDim.x) {
        const unsigned c = j % dv, ph = j / dv;
        const unsigned h = ph % static_cast<unsigned>(nheads), part = ph / static_cast<unsigned>(nheads);
        T* base = part == 0 ? h0 : part == 1 ? h1 : h2;
        VT* hv = reinterpret_cast<VT*>(base) + ((b * nheads + h) * seq + s) * dv + c;
        if (kToHeads)
            *hv = rv[j];
        else
            rv[j] = *hv;
    }
}

void attention_permute(const Context& ctx, DType dtype, void* rows, void* const* heads, int parts, int batch,
                       int seq, int nheads, int head_dim, bool to_heads) {
    SB_REQUIRE(parts == 1 || parts == 3, "attention_permute: parts must be 1 or 3");
    if (batch <= 0 || seq <= 0) return;
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        int vec = row_vec<T>(head_dim, {rows});
        for (int i = 0; i < parts; ++i)
            if (!aligned16(heads[i])) vec = 1;
        T* h[3];
        for (int i = 0; i < 3; ++i) h[i] = static_cast<T*>(heads[std::min(i, parts - 1)]);
        dispatch_vec<T>(vec, [&](auto v) {
            constexpr int V = decltype(v)::value;
            const int per_row = parts * nheads * (head_dim / V);
            const int threads = std::min(256, std::max(32, (per_row + 31) / 32 * 32));
            const unsigned grid = static_cast<unsigned>(int64_t{batch} * seq);
            if (to_heads)
                attention_permute_kernel<T, V, true><<<grid, threads, 0, ctx.stream>>>(
                    static_cast<T*>(rows), h[0], h[1], h[2], parts, seq, nheads, head_dim);
            else
                attention_permute_kernel<T, V, false><<<grid, threads, 0, ctx.stream>>>(
                    static_cast<T*>(rows), h[0], h[1], h[2], parts, seq, nheads, head_dim);
            SB_CHECK_LAUNCH();
        });
    });
}

// ---- attention softmax, forward and backward: kLanes lanes per score row (b, h, i), so a
// short row (seq 128 in bf16 is 16 vectors) still keeps the whole warp loading: 32 / kLanes
// rows per warp. Every lane runs the same number of loop trips (the shuffles need the
// whole warp); a lane whose row is past the end computes but writes nothing.

namespace {

// kLanes for rows of nv vectors: 16 when a row has at most 16 vectors, else 32.
int row_lanes(int nv) { return nv <= 16 ? 16 : 32; }

template <class F> void dispatch_lanes(int lanes, F&& f) {
    if (lanes == 16)
        f(std::integral_constant<int, 16>{});
    else
        f(std::integral_constant<int, 32>{});
}

unsigned sub_row_grid(const Context& ctx, int64_t rows, int lanes) {
    return row_grid(ctx, (rows * lanes + 31) / 32);
}

}  // namespace

// Forward: columns j > i are masked when causal (never read, written as 0). Pass 1 keeps a
// running (max, sum of exp) per lane, combined by shuffles; pass 2 writes P over the scores
// and, with dropout, the kept entries of P / (1 - p) to pdrop, the mask drawn at index
// row * seq + j.
template <class T, int V, int kLanes>
__global__ void attention_softmax_forward_kernel(T* scores, T* pdrop, int64_t rows, int seq, bool causal,
                                                 float p_drop, float inv_keep, uint64_t seed,
                                                 const uint64_t* generation) {
    seed = dropout_seed_at(seed, *generation);
    using VT = VecN<T, V>;
    constexpr int kRowsPerWarp = 32 / kLanes;
    const int lane = threadIdx.x & (kLanes - 1);
    const int nv = seq / V;
    for (int64_t base = warp_row() * kRowsPerWarp; base < rows; base += warp_row_stride() * kRowsPerWarp) {
        const int64_t row = base + ((threadIdx.x & 31) / kLanes);
        const bool active = row < rows;
        const int i = static_cast<int>(row % seq);
        const int valid = !active ? 0 : causal ? i + 1 : seq;
        const int nv_valid = (valid + V - 1) / V;
        VT* sr = reinterpret_cast<VT*>(scores + row * seq);
        float m = -INFINITY, s = 0.0f;
        for (int k = lane; k < nv_valid; k += kLanes) {
            const VT a = sr[k];
            float v[V], lm = -INFINITY;
#pragma unroll
            for (int e = 0; e < V; ++e) {
                v[e] = k * V + e < valid ? to_f32(a.v[e]) : -INFINITY;
                lm = fmaxf(lm, v[e]);
            }
            if (lm > m) {
                s *= expf(m - lm);
                m = lm;
            }
#pragma unroll
            for (int e = 0; e < V; ++e) s += expf(v[e] - m);  // masked: exp(-inf) = 0
        }
        const float mx = warp_reduce<MaxOp, kLanes>(m, MaxOp{});
        const float sum = warp_reduce<SumOp, kLanes>(m == -INFINITY ? 0.0f : s * expf(m - mx), SumOp{});
        if (!active) continue;  // after the last shuffle of this trip
        const float inv_sum = 1.0f / sum;
        VT* dr = pdrop ? reinterpret_cast<VT*>(pdrop + row * seq) : nullptr;
        for (int k = lane; k < nv; k += kLanes) {
            VT a;
            if (k < nv_valid) a = sr[k];
            VT r, d;
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const int j = k * V + e;
                const float p = j < valid ? expf(to_f32(a.v[e]) - mx) * inv_sum : 0.0f;
                r.v[e] = from_f32<T>(p);
                if (dr) {
                    const bool keep = dropout_keep(seed, attention_dropout_index(static_cast<uint64_t>(row), j, seq), p_drop);
                    d.v[e] = from_f32<T>(keep ? p * inv_keep : 0.0f);
                }
            }
            sr[k] = r;
            if (dr) dr[k] = d;
        }
    }
}

void attention_softmax_forward(const Context& ctx, DType dtype, void* scores, void* pdrop, int64_t rows, int seq,
                               bool causal, float p_drop, uint64_t seed) {
    if (rows <= 0) return;
    SB_REQUIRE(p_drop >= 0.0f && p_drop < 1.0f, "attention: dropout must be in [0, 1)");
    SB_REQUIRE((p_drop > 0.0f) == (pdrop != nullptr), "attention_softmax_forward: pdrop iff dropout");
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        const int vec = row_vec<T>(seq, {scores, pdrop ? pdrop : scores});
        dispatch_vec<T>(vec, [&](auto v) {
            constexpr int V = decltype(v)::value;
            const int lanes = row_lanes(seq / V);
            dispatch_lanes(lanes, [&](auto l) {
                attention_softmax_forward_kernel<T, V, decltype(l)::value>
                    <<<sub_row_grid(ctx, rows, lanes), kRowWarps * 32, 0, ctx.stream>>>(
                        static_cast<T*>(scores), static_cast<T*>(pdrop), rows, seq, causal, p_drop,
                        1.0f / (1.0f - p_drop), seed, ctx.dropout_generation);
                SB_CHECK_LAUNCH();
            });
        });
    });
}

// Backward, fused with dropout's: dP = mask * dP' / (1 - p) (the mask recomputed) from the
// fp32 dP' of the GEMM, pass 1 the row sum of P * dP, pass 2 dS = P * (dP - sum) in the
// compute dtype. dP' stays fp32 because dS is a small difference of large terms: rounded
// to bf16 first, the query and key gradients of deep layers lost most of their digits
// (seen against PyTorch on bert-base). For the same reason the row sum is taken over the
// stored P renormalised: P rounded to bf16 sums to 1 + e, and a dP that is nearly the same
// along the row (c) would leave a spurious dS = -P c e that swamps the true one. Masked
// (causal) entries have P = 0, so dS = 0 there. ds may alias dprobs when T is float (each
// element is read before it is written).
template <class T, int V, int kLanes>
__global__ void attention_softmax_backward_kernel(const T* probs, const float* dprobs, T* ds, int64_t rows, int seq,
                                                  float p_drop, float inv_keep, uint64_t seed,
                                                  const uint64_t* generation) {
    seed = dropout_seed_at(seed, *generation);
    using VT = VecN<T, V>;
    using VF = VecN<float, V>;
    constexpr int kRowsPerWarp = 32 / kLanes;
    const int lane = threadIdx.x & (kLanes - 1);
    const bool drop = p_drop > 0.0f;
    for (int64_t base = warp_row() * kRowsPerWarp; base < rows; base += warp_row_stride() * kRowsPerWarp) {
        const int64_t row = base + ((threadIdx.x & 31) / kLanes);
        const bool active = row < rows;
        const int nv = active ? seq / V : 0;
        const VT* pr = reinterpret_cast<const VT*>(probs + row * seq);
        const VF* gr = reinterpret_cast<const VF*>(dprobs + row * seq);
        VT* sr = reinterpret_cast<VT*>(ds + row * seq);
        auto dp_of = [&](float g, int j) {
            if (!drop) return g;
            return dropout_keep(seed, attention_dropout_index(static_cast<uint64_t>(row), j, seq), p_drop) ? g * inv_keep
                                                                                                         : 0.0f;
        };
        float dot = 0.0f, psum = 0.0f;
        for (int k = lane; k < nv; k += kLanes) {
            const VT a = pr[k];
            const VF b = gr[k];
#pragma unroll
            for (int e = 0; e < V; ++e) {
                dot += to_f32(a.v[e]) * dp_of(b.v[e], k * V + e);
                psum += to_f32(a.v[e]);
            }
        }
        dot = warp_reduce<SumOp, kLanes>(dot, SumOp{});
        psum = warp_reduce<SumOp, kLanes>(psum, SumOp{});
        if (psum > 0.0f) dot /= psum;
        for (int k = lane; k < nv; k += kLanes) {
            const VT a = pr[k];
            const VF b = gr[k];
            VT r;
#pragma unroll
            for (int e = 0; e < V; ++e) r.v[e] = from_f32<T>(to_f32(a.v[e]) * (dp_of(b.v[e], k * V + e) - dot));
            sr[k] = r;
        }
    }
}

void attention_softmax_backward(const Context& ctx, DType dtype, const void* probs, const float* dprobs, void* ds,
                                int64_t rows, int seq, float p_drop, uint64_t seed) {
    if (rows <= 0) return;
    SB_REQUIRE(p_drop >= 0.0f && p_drop < 1.0f, "attention: dropout must be in [0, 1)");
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        // The fp32 rows are read V floats at a time: they need V * 4-byte alignment.
        int vec = row_vec<T>(seq, {probs, ds});
        if (reinterpret_cast<uintptr_t>(dprobs) % (sizeof(float) * kVec16<T>) != 0) vec = 1;
        dispatch_vec<T>(vec, [&](auto v) {
            constexpr int V = decltype(v)::value;
            const int lanes = row_lanes(seq / V);
            dispatch_lanes(lanes, [&](auto l) {
                attention_softmax_backward_kernel<T, V, decltype(l)::value>
                    <<<sub_row_grid(ctx, rows, lanes), kRowWarps * 32, 0, ctx.stream>>>(
                        static_cast<const T*>(probs), dprobs, static_cast<T*>(ds), rows, seq, p_drop,
                        1.0f / (1.0f - p_drop), seed, ctx.dropout_generation);
                SB_CHECK_LAUNCH();
            });
        });
    });
}

}  // namespace sb::kernels
