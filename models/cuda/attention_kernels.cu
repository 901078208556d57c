// Fused attention (FlashAttention-2's scheme) for bf16/fp16 with fp32 accumulation on the
// tensor cores (mma.sync m16n8k16), reading Q, K, V straight from the packed QKV rows and
// writing heads-concatenated rows: the seq x seq scores and probabilities never reach
// device memory. The math is CpuOps::attention_* (models/cpu/cpu_ops.cpp), the dropout
// mask models/dropout.h's at attention_dropout_index((b*heads + h)*seq + i, j, seq), i the
// query, j the key.
//
// The forward and, beyond seq 128, the backward's three kernels share one skeleton: a block of
// 4 warps owns 64 rows of one (batch, head), each warp 16 rows held in the mma accumulator
// layout, and walks tiles of the other side through shared memory (cp.async, zero-filled past
// the sequence end).
// - forward: rows are queries; per key tile S = Q K^T, an online softmax (running max and
//   sum in the log2 domain), O += dropout(P) V. Saves the per-row log2-sum-exp.
// - backward dQ: rows are queries; P recomputed from the saved LSE, dP = dO V^T,
//   dS = P (dropout(dP) - Dsum), dQ += dS K. Dsum = rowsum(dO * O) (= rowsum(P * dP)) comes
//   from a small kernel first.
// - backward dK/dV: rows are keys, tiles are queries; it computes the transposes S^T = K Q^T
//   and dP^T = V dO^T, so P^T and dS^T are already in the A-operand layout of
//   dV += dropout(P)^T dO and dK += dS^T Q.
// Two backward kernels instead of one with atomics on dQ: no float atomics, so gradients are
// bitwise reproducible, at the price of recomputing S and dP once more (7 products, not 5).
// Up to seq 128 (Ops::kAttentionOneBlockSeq) one block of 8 warps per (batch, head) holds all
// of its queries and keys instead and runs the whole backward: Dsum, the dK/dV kernel's
// transposed products with dS^T kept in shared memory, then dQ = dS K from it (5 products,
// still no atomics; attention_backward_short_kernel).
#include "models/cuda/kernels.cuh"

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "models/cuda/cuda_check.h"
#include "models/cuda/kernel_util.cuh"
#include "models/dropout.h"

namespace sb::kernels {

using namespace detail;

namespace {

// The geometry the launch plans of models/device_limits.h compute shared memory from.
constexpr int kWarps = attention_plan::kWarps;
constexpr int kRows = attention_plan::kRows;  // rows a block owns
constexpr int kPad = attention_plan::kPad;    // elements of padding per shared row: conflict-free fragment loads
constexpr float kLog2e = 1.4426950408889634f;

// ---- tensor-core primitives. Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4):
// A (16x16, row-major) regs {a0..a3} = rows {g, g+8, g, g+8}, cols {2t, 2t, 2t+8, 2t+8} (+0, +1);
// B (16x8) regs {b0, b1} = k rows {2t, 2t+8} (+0, +1), col g;
// C (16x8, fp32) {c0, c1} = row g, cols 2t, 2t+1; {c2, c3} = row g+8.

template <class T> __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                       uint32_t b1) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <class T> __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<const uint32_t*>(&v);
    } else {
        const __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<const uint32_t*>(&v);
    }
}

template <class T> __device__ __forceinline__ uint32_t lds32(const T* p) {
    return *reinterpret_cast<const uint32_t*>(p);
}

// The A fragment of rows r0..r0+15, k columns k0..k0+15 of a row-major shared tile.
template <class T> __device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* tile, int ld, int r0, int k0) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const T* p = tile + (r0 + g) * ld + k0 + 2 * t;
    a[0] = lds32(p);
    a[1] = lds32(p + 8 * ld);
    a[2] = lds32(p + 8);
    a[3] = lds32(p + 8 * ld + 8);
}

// The B fragment (k0..k0+15) x (n0..n0+7) of B = X^T, X a row-major shared tile [n][k]:
// B's columns are X's rows, so both registers are plain 32-bit loads.
template <class T> __device__ __forceinline__ void load_b_rows(uint32_t& b0, uint32_t& b1, const T* tile, int ld,
                                                               int n0, int k0) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const T* p = tile + (n0 + g) * ld + k0 + 2 * t;
    b0 = lds32(p);
    b1 = lds32(p + 8);
}

// The B fragments (k0..k0+15) x (n0..n0+15), two n-tiles, of B = X, X a row-major shared
// tile [k][n]: ldmatrix.trans turns its rows into B's k pairs. r[0..1] is the n-tile n0,
// r[2..3] the n-tile n0 + 8.
template <class T> __device__ __forceinline__ void load_b_trans(uint32_t (&r)[4], const T* tile, int ld, int k0,
                                                                int n0) {
    const int lane = threadIdx.x & 31, m = lane >> 3;
    const T* p = tile + (k0 + (m & 1) * 8 + (lane & 7)) * ld + n0 + (m >> 1) * 8;
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// The A fragment of rows r0..r0+15, k columns k0..k0+15 of A = X^T, X a row-major shared
// tile [k][r]: ldmatrix.trans hands lane (g, t) X's rows 2t, 2t + 1 of column g, that is A's
// row g, columns 2t, 2t + 1. Matrix m = lane / 8 is a[m]: k offset 8 (m / 2), row offset 8 (m % 2).
template <class T> __device__ __forceinline__ void load_a_trans(uint32_t (&a)[4], const T* tile, int ld, int r0,
                                                                int k0) {
    const int lane = threadIdx.x & 31, m = lane >> 3;
    const T* p = tile + (k0 + (m >> 1) * 8 + (lane & 7)) * ld + r0 + (m & 1) * 8;
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(addr));
}

// Rows [r0, r0 + kTileRows) of a head's D columns (row stride ld elements) into a shared tile
// of row stride D + kPad; rows at or past `valid` are zero-filled (nothing read). Each thread
// copies the same 16-byte column of every pass's rows, so its addresses step by a constant.
template <class T, int D, int kTileRows, int kBlockThreads = kWarps * 32>
__device__ __forceinline__ void load_tile(T* tile, const T* src, int64_t ld, int r0, int valid) {
    constexpr int kChunks = D / 8;                         // 16-byte chunks per row
    constexpr int kPassRows = kBlockThreads / kChunks;     // rows one pass of the block copies
    static_assert(kTileRows % kPassRows == 0, "a tile is whole passes");
    const int r = static_cast<int>(threadIdx.x) / kChunks, col = (static_cast<int>(threadIdx.x) % kChunks) * 8;
    const T* g = src + (r0 + r) * ld + col;
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(tile + r * (D + kPad) + col));
#pragma unroll
    for (int pass = 0; pass < kTileRows / kPassRows; ++pass) {
        const bool in = r0 + r + pass * kPassRows < valid;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                         s + static_cast<unsigned>(pass * kPassRows * (D + kPad) * sizeof(T))),
                     "l"(in ? g + pass * kPassRows * ld : src), "r"(in ? 16 : 0));
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

// 2^x on the multi-function unit alone (subnormal results flush to zero: a probability below
// 2^-126 adds nothing a 16-bit P could hold).
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

template <int N> __device__ __forceinline__ void wait_tiles() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
    __syncthreads();
}

// What every kernel needs of one launch.
struct Geometry {
    int batch, seq, heads;
    float scale_log2;     // log2(e) / sqrt(head_dim)
    float scale;          // 1 / sqrt(head_dim)
    bool causal;
    uint32_t threshold;   // dropout_threshold(p); 0 without dropout (every element kept)
    float inv_keep;       // 1 / (1 - p)
    uint64_t seed;
    uint64_t mask_stride;  // keys per dropout-mask row: seq rounded up to 4 (attention_dropout_index)
};

// Dropout's keep bits of one C fragment, bit e for c[e] (models/dropout.h: one hash decides
// four consecutive keys of a query). Rows are queries (forward, dQ): lanes t and t^1 hold the
// same four keys (col0 + 4 (t / 2) ..) of the rows g and g + 8; each hashes one of the rows
// and they swap the nibbles. base0/base1: the mask index of key 0 of the rows g and g + 8
// (attention_dropout_index); col0 is the fragment's first key, a multiple of 8.
__device__ __forceinline__ uint32_t keep_query_rows(const Geometry& geo, uint64_t seed, uint64_t base0,
                                                    uint64_t base1, int col0) {
    const int t = threadIdx.x & 3, odd = t & 1;
    const uint64_t quad = ((odd ? base1 : base0) + static_cast<uint64_t>(col0 + 4 * (t >> 1))) >> 2;
    const uint32_t mine = dropout_keep_nibble(seed, quad, geo.threshold);
    const uint32_t other = __shfl_xor_sync(0xffffffffu, mine, 1);
    const uint32_t row0 = odd ? other : mine, row1 = odd ? mine : other;
    const int at = 2 * odd;  // columns 2t, 2t + 1 within their quad
    return ((row0 >> at) & 3u) | (((row1 >> at) & 3u) << 2);
}

// The same for the transposed fragment of the dK/dV kernel, whose rows are keys (key0 + g,
// key0 + g + 8; key0 a multiple of 16) and columns queries (q0 + 2t, + 1; base_q0 the mask
// index of q0's key 0). The four lanes with the same t and g / 4 need the same four hashes
// (two queries x two key quads): lane j = g % 4 computes hash j, and two butterflies give
// every lane all four nibbles.
__device__ __forceinline__ uint32_t keep_key_rows(const Geometry& geo, uint64_t seed, uint64_t base_q0, int key0) {
    const int lane = threadIdx.x & 31, g = lane >> 2, j = g & 3;
    const int key = key0 + (g & ~3) + 8 * (j >> 1);  // the first key of hash j's quad
    const uint64_t quad = (base_q0 + (j & 1) * geo.mask_stride + static_cast<uint64_t>(key)) >> 2;
    uint32_t v = dropout_keep_nibble(seed, quad, geo.threshold) << (4 * j);
    v |= __shfl_xor_sync(0xffffffffu, v, 4);
    v |= __shfl_xor_sync(0xffffffffu, v, 8);
    // Element e (key row e / 2, query e % 2) is hash e's bit for this lane's key, g % 4.
    v >>= j;
    return (v & 1u) | ((v >> 3) & 2u) | ((v >> 6) & 4u) | ((v >> 9) & 8u);
}

// Row tiles are issued longest-first for causal masks (the last query tiles see most keys).
__device__ __forceinline__ int row_tile(const Geometry& g) {
    return g.causal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
}

// The two products both backward kernels recompute for one warp's 16 rows of a tile pair,
// over the head dimension: s = A B^T (the scores S, or S^T) and dp = A2 B2^T (dP = dO V^T,
// or its transpose), with A, A2 the tiles of kRows rows and B, B2 of kCols.
template <class T, int D, int kCols>
__device__ __forceinline__ void recompute_scores(float (&s)[kCols / 8][4], float (&dp)[kCols / 8][4], const T* a,
                                                 const T* b, const T* a2, const T* b2, int row0) {
    constexpr int ld = D + kPad;
#pragma unroll
    for (int kk = 0; kk < D; kk += 16) {
        uint32_t fa[4], fa2[4];
        load_a(fa, a, ld, row0, kk);
        load_a(fa2, a2, ld, row0, kk);
#pragma unroll
        for (int nt = 0; nt < kCols / 8; ++nt) {
            uint32_t b0, b1;
            load_b_rows(b0, b1, b, ld, nt * 8, kk);
            mma<T>(s[nt], fa, b0, b1);
            load_b_rows(b0, b1, b2, ld, nt * 8, kk);
            mma<T>(dp[nt], fa2, b0, b1);
        }
    }
}

// ---- forward

template <class T, int D, int kCols>
__global__ void __launch_bounds__(kWarps * 32) attention_forward_kernel(Geometry geo, const T* __restrict__ qkv,
                                                                         T* __restrict__ out,
                                                                         float* __restrict__ lse,
                                                                         const uint64_t* generation) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    constexpr int ld = D + kPad;
    T* sq = reinterpret_cast<T*>(smem_raw);
    T* sk = sq + kRows * ld;
    T* sv = sk + kCols * ld;
    const uint64_t seed = dropout_seed_at(geo.seed, *generation);
    const int S = geo.seq, H = geo.heads, width = H * D;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int q0 = row_tile(geo) * kRows;
    const int64_t ldg = 3 * int64_t{width};
    const T* qbase = qkv + int64_t{b} * S * ldg + h * D;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;

    load_tile<T, D, kRows>(sq, qbase, ldg, q0, S);
    const int rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    const uint64_t mask_base[2] = {attention_dropout_index(static_cast<uint64_t>(bh) * S + rows[0], 0, S),
                                   attention_dropout_index(static_cast<uint64_t>(bh) * S + rows[1], 0, S)};
    float o[D / 8][4] = {};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const int kv_end = geo.causal ? min(S, q0 + kRows) : S;
    for (int n0 = 0; n0 < kv_end; n0 += kCols) {
        __syncthreads();  // the previous tile's readers are done
        load_tile<T, D, kCols>(sk, qbase + width, ldg, n0, S);
        load_tile<T, D, kCols>(sv, qbase + 2 * width, ldg, n0, S);
        wait_tiles<1>();  // Q and K landed; V may still be in flight
        float s[kCols / 8][4] = {};
#pragma unroll
        for (int kk = 0; kk < D; kk += 16) {
            uint32_t a[4];
            load_a(a, sq, ld, warp * 16, kk);
#pragma unroll
            for (int nt = 0; nt < kCols / 8; ++nt) {
                uint32_t b0, b1;
                load_b_rows(b0, b1, sk, ld, nt * 8, kk);
                mma<T>(s[nt], a, b0, b1);
            }
        }
        // Mask (only a tile that crosses the diagonal or the sequence's end has masked
        // elements), scale to the log2 domain, and the new running max.
        const bool edge = n0 + kCols > S || (geo.causal && n0 + kCols - 1 > q0);
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int nt = 0; nt < kCols / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int col = n0 + nt * 8 + 2 * t + (e & 1), r = e >> 1;
                const bool masked = edge && (col >= S || (geo.causal && col > rows[r]));
                s[nt][e] = masked ? -INFINITY : s[nt][e] * geo.scale_log2;
                mx[r] = fmaxf(mx[r], s[nt][e]);
            }
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            // m = -inf at the first tile: alpha 0 (mx is finite: key 0 is never masked).
            alpha[r] = fast_exp2(m[r] - mx[r]);
            m[r] = mx[r];
            l[r] *= alpha[r];
        }
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            o[dt][0] *= alpha[0];
            o[dt][1] *= alpha[0];
            o[dt][2] *= alpha[1];
            o[dt][3] *= alpha[1];
        }
        // P (the softmax numerator) into the sums, dropout(P) into the A fragments of P V.
        uint32_t pa[kCols / 16][4];
#pragma unroll
        for (int nt = 0; nt < kCols / 8; ++nt) {
            const uint32_t kept = geo.threshold != 0
                                      ? keep_query_rows(geo, seed, mask_base[0], mask_base[1], n0 + nt * 8)
                                      : 0xfu;
            float p[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = e >> 1;
                p[e] = fast_exp2(s[nt][e] - m[r]);
                l[r] += p[e];
                if (!((kept >> e) & 1u)) p[e] = 0.0f;
            }
            pa[nt / 2][(nt & 1) * 2 + 0] = pack<T>(p[0], p[1]);
            pa[nt / 2][(nt & 1) * 2 + 1] = pack<T>(p[2], p[3]);
        }
        wait_tiles<0>();  // V landed
#pragma unroll
        for (int kk = 0; kk < kCols / 16; ++kk)
#pragma unroll
            for (int dt = 0; dt < D / 8; dt += 2) {
                uint32_t bv[4];
                load_b_trans(bv, sv, ld, kk * 16, dt * 8);
                mma<T>(o[dt], pa[kk], bv[0], bv[1]);
                mma<T>(o[dt + 1], pa[kk], bv[2], bv[3]);
            }
    }
    // Finish the row sums across the quad, normalize, write O and the log2-sum-exp.
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        inv[r] = (geo.threshold != 0 ? geo.inv_keep : 1.0f) / l[r];
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (rows[r] >= S) continue;
        T* orow = out + (int64_t{b} * S + rows[r]) * width + h * D;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
            *reinterpret_cast<uint32_t*>(orow + dt * 8 + 2 * t) =
                pack<T>(o[dt][2 * r] * inv[r], o[dt][2 * r + 1] * inv[r]);
        if (t == 0) lse[int64_t{bh} * S + rows[r]] = m[r] + log2f(l[r]);
    }
}

// ---- backward: Dsum[bh*S + i] = sum_d dO[i, d] * O[i, d], one thread per (row, head).

template <class T, int D>
__global__ void attention_dsum_kernel(const T* __restrict__ grad_out, const T* __restrict__ out, int64_t rows,
                                      int seq, int heads, float* __restrict__ dsum) {
    const int64_t n = rows * heads;
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
        const int64_t row = i / heads;  // b * seq + s
        const int h = static_cast<int>(i % heads);
        const VecN<T, 8>* go = reinterpret_cast<const VecN<T, 8>*>(grad_out + row * heads * D + h * D);
        const VecN<T, 8>* o = reinterpret_cast<const VecN<T, 8>*>(out + row * heads * D + h * D);
        float acc = 0.0f;
#pragma unroll
        for (int c = 0; c < D / 8; ++c) {
            const VecN<T, 8> x = go[c], y = o[c];
#pragma unroll
            for (int e = 0; e < 8; ++e) acc += to_f32(x.v[e]) * to_f32(y.v[e]);
        }
        const int64_t b = row / seq, s = row % seq;
        dsum[(b * heads + h) * seq + s] = acc;
    }
}

// dQ: rows are queries, tiles are keys.
template <class T, int D, int kCols>
__global__ void __launch_bounds__(kWarps * 32) attention_backward_dq_kernel(
    Geometry geo, const T* __restrict__ qkv, const T* __restrict__ grad_out, const float* __restrict__ lse,
    const float* __restrict__ dsum, T* __restrict__ grad_qkv, const uint64_t* generation) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    constexpr int ld = D + kPad;
    T* sq = reinterpret_cast<T*>(smem_raw);
    T* sdo = sq + kRows * ld;
    T* sk = sdo + kRows * ld;
    T* sv = sk + kCols * ld;
    const uint64_t seed = dropout_seed_at(geo.seed, *generation);
    const int S = geo.seq, H = geo.heads, width = H * D;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int q0 = row_tile(geo) * kRows;
    const int64_t ldg = 3 * int64_t{width};
    const T* qbase = qkv + int64_t{b} * S * ldg + h * D;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;

    load_tile<T, D, kRows>(sq, qbase, ldg, q0, S);
    load_tile<T, D, kRows>(sdo, grad_out + int64_t{b} * S * width + h * D, width, q0, S);
    const int rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    const uint64_t mask_base[2] = {attention_dropout_index(static_cast<uint64_t>(bh) * S + rows[0], 0, S),
                                   attention_dropout_index(static_cast<uint64_t>(bh) * S + rows[1], 0, S)};
    float row_lse[2], row_dsum[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const bool in = rows[r] < S;
        row_lse[r] = in ? lse[int64_t{bh} * S + rows[r]] : 0.0f;
        row_dsum[r] = in ? dsum[int64_t{bh} * S + rows[r]] : 0.0f;
    }
    float dq[D / 8][4] = {};
    const int kv_end = geo.causal ? min(S, q0 + kRows) : S;
    for (int n0 = 0; n0 < kv_end; n0 += kCols) {
        __syncthreads();
        load_tile<T, D, kCols>(sk, qbase + width, ldg, n0, S);
        load_tile<T, D, kCols>(sv, qbase + 2 * width, ldg, n0, S);
        wait_tiles<0>();
        float s[kCols / 8][4] = {}, dp[kCols / 8][4] = {};
        recompute_scores<T, D, kCols>(s, dp, sq, sk, sdo, sv, warp * 16);
        const bool edge = n0 + kCols > S || q0 + kRows > S || (geo.causal && n0 + kCols - 1 > q0);
        uint32_t dsa[kCols / 16][4];
#pragma unroll
        for (int nt = 0; nt < kCols / 8; ++nt) {
            const uint32_t kept = geo.threshold != 0
                                      ? keep_query_rows(geo, seed, mask_base[0], mask_base[1], n0 + nt * 8)
                                      : 0xfu;
            float ds[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int col = n0 + nt * 8 + 2 * t + (e & 1), r = e >> 1;
                const bool masked = edge && (col >= S || rows[r] >= S || (geo.causal && col > rows[r]));
                const float p = masked ? 0.0f : fast_exp2(s[nt][e] * geo.scale_log2 - row_lse[r]);
                float d = dp[nt][e];
                if (geo.threshold != 0) d = (kept >> e) & 1u ? d * geo.inv_keep : 0.0f;
                ds[e] = p * (d - row_dsum[r]);
            }
            dsa[nt / 2][(nt & 1) * 2 + 0] = pack<T>(ds[0], ds[1]);
            dsa[nt / 2][(nt & 1) * 2 + 1] = pack<T>(ds[2], ds[3]);
        }
#pragma unroll
        for (int kk = 0; kk < kCols / 16; ++kk)
#pragma unroll
            for (int dt = 0; dt < D / 8; dt += 2) {
                uint32_t bk[4];
                load_b_trans(bk, sk, ld, kk * 16, dt * 8);
                mma<T>(dq[dt], dsa[kk], bk[0], bk[1]);
                mma<T>(dq[dt + 1], dsa[kk], bk[2], bk[3]);
            }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (rows[r] >= S) continue;
        T* grow = grad_qkv + (int64_t{b} * S + rows[r]) * ldg + h * D;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
            *reinterpret_cast<uint32_t*>(grow + dt * 8 + 2 * t) =
                pack<T>(dq[dt][2 * r] * geo.scale, dq[dt][2 * r + 1] * geo.scale);
    }
}

// dK, dV: rows are keys, tiles are queries; everything in transposed form (see the top).
template <class T, int D, int kCols>
__global__ void __launch_bounds__(kWarps * 32) attention_backward_dkdv_kernel(
    Geometry geo, const T* __restrict__ qkv, const T* __restrict__ grad_out, const float* __restrict__ lse,
    const float* __restrict__ dsum, T* __restrict__ grad_qkv, const uint64_t* generation) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    constexpr int ld = D + kPad;
    T* sk = reinterpret_cast<T*>(smem_raw);
    T* sv = sk + kRows * ld;
    T* sq = sv + kRows * ld;
    T* sdo = sq + kCols * ld;
    float* slse = reinterpret_cast<float*>(sdo + kCols * ld);
    float* sdsum = slse + kCols;
    const uint64_t seed = dropout_seed_at(geo.seed, *generation);
    const int S = geo.seq, H = geo.heads, width = H * D;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int k0 = static_cast<int>(blockIdx.x) * kRows;  // causal: the first key tiles see the most queries
    const int64_t ldg = 3 * int64_t{width};
    const T* qbase = qkv + int64_t{b} * S * ldg + h * D;
    const T* obase = grad_out + int64_t{b} * S * width + h * D;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;

    load_tile<T, D, kRows>(sk, qbase + width, ldg, k0, S);
    load_tile<T, D, kRows>(sv, qbase + 2 * width, ldg, k0, S);
    const int keys[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
    float dk[D / 8][4] = {}, dv[D / 8][4] = {};
    const int q_begin = geo.causal ? k0 / kCols * kCols : 0;
    for (int i0 = q_begin; i0 < S; i0 += kCols) {
        __syncthreads();
        load_tile<T, D, kCols>(sq, qbase, ldg, i0, S);
        load_tile<T, D, kCols>(sdo, obase, width, i0, S);
        for (int c = threadIdx.x; c < kCols; c += kWarps * 32) {
            const bool in = i0 + c < S;
            slse[c] = in ? lse[int64_t{bh} * S + i0 + c] : 0.0f;
            sdsum[c] = in ? dsum[int64_t{bh} * S + i0 + c] : 0.0f;
        }
        wait_tiles<0>();
        float st[kCols / 8][4] = {}, dpt[kCols / 8][4] = {};
        recompute_scores<T, D, kCols>(st, dpt, sk, sq, sv, sdo, warp * 16);
        const bool edge = i0 + kCols > S || k0 + kRows > S || (geo.causal && k0 + kRows - 1 > i0);
        uint32_t pa[kCols / 16][4], dsa[kCols / 16][4];
#pragma unroll
        for (int nt = 0; nt < kCols / 8; ++nt) {
            const uint64_t q_base = attention_dropout_index(static_cast<uint64_t>(bh) * S + i0 + nt * 8 + 2 * t, 0, S);
            const uint32_t kept = geo.threshold != 0 ? keep_key_rows(geo, seed, q_base, k0 + warp * 16) : 0xfu;
            float pd[4], ds[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int c = nt * 8 + 2 * t + (e & 1), q = i0 + c, r = e >> 1;
                const bool masked = edge && (q >= S || keys[r] >= S || (geo.causal && keys[r] > q));
                const float p = masked ? 0.0f : fast_exp2(st[nt][e] * geo.scale_log2 - slse[c]);
                float mask = 1.0f;
                if (geo.threshold != 0) mask = (kept >> e) & 1u ? geo.inv_keep : 0.0f;
                pd[e] = p * mask;
                ds[e] = p * (dpt[nt][e] * mask - sdsum[c]);
            }
            pa[nt / 2][(nt & 1) * 2 + 0] = pack<T>(pd[0], pd[1]);
            pa[nt / 2][(nt & 1) * 2 + 1] = pack<T>(pd[2], pd[3]);
            dsa[nt / 2][(nt & 1) * 2 + 0] = pack<T>(ds[0], ds[1]);
            dsa[nt / 2][(nt & 1) * 2 + 1] = pack<T>(ds[2], ds[3]);
        }
#pragma unroll
        for (int kk = 0; kk < kCols / 16; ++kk)
#pragma unroll
            for (int dt = 0; dt < D / 8; dt += 2) {
                uint32_t bo[4], bq[4];
                load_b_trans(bo, sdo, ld, kk * 16, dt * 8);
                mma<T>(dv[dt], pa[kk], bo[0], bo[1]);
                mma<T>(dv[dt + 1], pa[kk], bo[2], bo[3]);
                load_b_trans(bq, sq, ld, kk * 16, dt * 8);
                mma<T>(dk[dt], dsa[kk], bq[0], bq[1]);
                mma<T>(dk[dt + 1], dsa[kk], bq[2], bq[3]);
            }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (keys[r] >= S) continue;
        T* grow = grad_qkv + (int64_t{b} * S + keys[r]) * ldg + h * D;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            *reinterpret_cast<uint32_t*>(grow + width + dt * 8 + 2 * t) =
                pack<T>(dk[dt][2 * r] * geo.scale, dk[dt][2 * r + 1] * geo.scale);
            *reinterpret_cast<uint32_t*>(grow + 2 * width + dt * 8 + 2 * t) = pack<T>(dv[dt][2 * r], dv[dt][2 * r + 1]);
        }
    }
}

// ---- backward of a whole short sequence (seq <= kShortSeq) in one block per (batch, head):
// 8 warps hold Q, K, V, dO (and O, for Dsum) of every position in shared memory. Phase 1,
// rows = keys (warp w: keys 16w..16w+15), walks the queries kCols at a time as the dK/dV
// kernel does: S^T, dP^T, dV += dropout(P)^T dO, and each chunk's dS^T into shared memory.
// Then dK = dS^T Q with dS^T read back (the warp's own rows), and after a barrier, rows =
// queries (warp w: queries 16w..16w+15), dQ = dS K with dS read by ldmatrix.trans out of
// dS^T. Five products, nothing recomputed, every sum in a fixed order. Phase 1 keeps dV
// and a 32-query chunk of S^T and dP^T live, dK comes after it: at head_dim 64 that fits
// 128 registers, so with 107 KB of shared memory two blocks (16 warps) share an SM of sm_90
// (one of sm_80); at 128, 171 KB, one block of sm_90. Where the device grants a block less
// (sm_86/sm_89: 99 KB; sm_80 at 128: 163 KB) the backward takes the tiled kernels instead
// (attention_plan::backward_variant).

constexpr int kShortSeq = attention_plan::kShortSeq;  // the longest sequence one block owns
constexpr int kShortWarps = kShortSeq / 16;
constexpr int kShortThreads = attention_plan::kShortThreads;
static_assert(kShortThreads == kShortWarps * 32, "one warp per 16 rows");

template <class T, int D, int kCols>
__global__ void __launch_bounds__(kShortThreads, D == 64 ? 2 : 1) attention_backward_short_kernel(
    Geometry geo, const T* __restrict__ qkv, const T* __restrict__ out, const T* __restrict__ grad_out,
    const float* __restrict__ lse, T* __restrict__ grad_qkv, const uint64_t* generation) {
    static_assert(kShortSeq % kCols == 0 && kCols % 16 == 0, "query chunks tile the sequence");
    static_assert(kShortThreads == 2 * kShortSeq, "Dsum takes two threads a query");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    constexpr int ld = D + kPad, lds = kShortSeq + kPad;
    T* sq = reinterpret_cast<T*>(smem_raw);
    T* sk = sq + kShortSeq * ld;
    T* sv = sk + kShortSeq * ld;
    T* sdo = sv + kShortSeq * ld;
    T* sds = sdo + kShortSeq * ld;  // dS^T [key][query]; first O, until Dsum is taken
    float* slse = reinterpret_cast<float*>(sds + kShortSeq * lds);
    float* sdsum = slse + kShortSeq;
    const uint64_t seed = dropout_seed_at(geo.seed, *generation);
    const int S = geo.seq, H = geo.heads, width = H * D;
    const int bh = blockIdx.x, b = bh / H, h = bh % H;
    const int64_t ldg = 3 * int64_t{width};
    const T* qbase = qkv + int64_t{b} * S * ldg + h * D;
    const int64_t obase = int64_t{b} * S * width + h * D;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;

    load_tile<T, D, kShortSeq, kShortThreads>(sq, qbase, ldg, 0, S);
    load_tile<T, D, kShortSeq, kShortThreads>(sk, qbase + width, ldg, 0, S);
    load_tile<T, D, kShortSeq, kShortThreads>(sv, qbase + 2 * width, ldg, 0, S);
    load_tile<T, D, kShortSeq, kShortThreads>(sdo, grad_out + obase, width, 0, S);
    load_tile<T, D, kShortSeq, kShortThreads>(sds, out + obase, width, 0, S);
    if (threadIdx.x < kShortSeq)
        slse[threadIdx.x] = static_cast<int>(threadIdx.x) < S ? lse[int64_t{bh} * S + threadIdx.x] : 0.0f;
    wait_tiles<0>();
    {  // Dsum = rowsum(dO * O): two threads a query, half the head each, then their sum.
        const int q = static_cast<int>(threadIdx.x) >> 1, half = threadIdx.x & 1;
        const VecN<T, 8>* x = reinterpret_cast<const VecN<T, 8>*>(sdo + q * ld + half * (D / 2));
        const VecN<T, 8>* y = reinterpret_cast<const VecN<T, 8>*>(sds + q * ld + half * (D / 2));
        float acc = 0.0f;
#pragma unroll
        for (int c = 0; c < D / 16; ++c) {
            const VecN<T, 8> u = x[c], v = y[c];
#pragma unroll
            for (int e = 0; e < 8; ++e) acc += to_f32(u.v[e]) * to_f32(v.v[e]);
        }
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);
        if (half == 0) sdsum[q] = acc;  // 0 past the sequence: dO is zero-filled there
    }
    __syncthreads();  // O is read: dS^T may overwrite it

    // Phase 1: rows are keys. Causal: queries before the warp's first chunk see none of its keys.
    const int key0 = warp * 16;
    const int q_begin = geo.causal ? key0 / kCols * kCols : 0;
    const int q_end = (S + kCols - 1) / kCols * kCols;
    if (key0 < S) {
        const int keys[2] = {key0 + g, key0 + g + 8};
        float dv[D / 8][4] = {};
        for (int c0 = q_begin; c0 < q_end; c0 += kCols) {
            float st[kCols / 8][4] = {}, dpt[kCols / 8][4] = {};
            recompute_scores<T, D, kCols>(st, dpt, sk, sq + c0 * ld, sv, sdo + c0 * ld, key0);
            const bool edge = c0 + kCols > S || key0 + 16 > S || (geo.causal && key0 + 15 > c0);
            uint32_t pa[kCols / 16][4];
#pragma unroll
            for (int nt = 0; nt < kCols / 8; ++nt) {
                const int c = c0 + nt * 8 + 2 * t;  // this lane's first query
                const uint64_t q_base = attention_dropout_index(static_cast<uint64_t>(bh) * S + c, 0, S);
                const uint32_t kept = geo.threshold != 0 ? keep_key_rows(geo, seed, q_base, key0) : 0xfu;
                float pd[4], ds[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int q = c + (e & 1), r = e >> 1;
                    const bool masked = edge && (q >= S || keys[r] >= S || (geo.causal && keys[r] > q));
                    const float p = masked ? 0.0f : fast_exp2(st[nt][e] * geo.scale_log2 - slse[q]);
                    float mask = 1.0f;
                    if (geo.threshold != 0) mask = (kept >> e) & 1u ? geo.inv_keep : 0.0f;
                    pd[e] = p * mask;
                    ds[e] = p * (dpt[nt][e] * mask - sdsum[q]);
                }
                pa[nt / 2][(nt & 1) * 2 + 0] = pack<T>(pd[0], pd[1]);
                pa[nt / 2][(nt & 1) * 2 + 1] = pack<T>(pd[2], pd[3]);
                *reinterpret_cast<uint32_t*>(sds + keys[0] * lds + c) = pack<T>(ds[0], ds[1]);
                *reinterpret_cast<uint32_t*>(sds + keys[1] * lds + c) = pack<T>(ds[2], ds[3]);
            }
#pragma unroll
            for (int kk = 0; kk < kCols / 16; ++kk)
#pragma unroll
                for (int dt = 0; dt < D / 8; dt += 2) {
                    uint32_t bo[4];
                    load_b_trans(bo, sdo, ld, c0 + kk * 16, dt * 8);
                    mma<T>(dv[dt], pa[kk], bo[0], bo[1]);
                    mma<T>(dv[dt + 1], pa[kk], bo[2], bo[3]);
                }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            if (keys[r] >= S) continue;
            T* grow = grad_qkv + (int64_t{b} * S + keys[r]) * ldg + h * D + 2 * width;
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt)
                *reinterpret_cast<uint32_t*>(grow + dt * 8 + 2 * t) = pack<T>(dv[dt][2 * r], dv[dt][2 * r + 1]);
        }
        __syncwarp();  // the warp's dS^T rows are written
        float dk[D / 8][4] = {};
        for (int kk = q_begin; kk < q_end; kk += 16) {
            uint32_t a[4];
            load_a(a, sds, lds, key0, kk);
#pragma unroll
            for (int dt = 0; dt < D / 8; dt += 2) {
                uint32_t bq[4];
                load_b_trans(bq, sq, ld, kk, dt * 8);
                mma<T>(dk[dt], a, bq[0], bq[1]);
                mma<T>(dk[dt + 1], a, bq[2], bq[3]);
            }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            if (keys[r] >= S) continue;
            T* grow = grad_qkv + (int64_t{b} * S + keys[r]) * ldg + h * D + width;
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt)
                *reinterpret_cast<uint32_t*>(grow + dt * 8 + 2 * t) =
                    pack<T>(dk[dt][2 * r] * geo.scale, dk[dt][2 * r + 1] * geo.scale);
        }
    }
    __syncthreads();  // every warp's dS^T rows are written

    // Phase 2: rows are queries, dQ = dS K over the key tiles the queries see. Every key tile
    // below the sequence's end belongs to a warp that ran phase 1 over these queries.
    const int q0 = warp * 16;
    if (q0 < S) {
        const int key_end = geo.causal ? q0 + 16 : (S + 15) / 16 * 16;
        float dq[D / 8][4] = {};
        for (int j0 = 0; j0 < key_end; j0 += 16) {
            uint32_t a[4];
            load_a_trans(a, sds, lds, q0, j0);
#pragma unroll
            for (int dt = 0; dt < D / 8; dt += 2) {
                uint32_t bk[4];
                load_b_trans(bk, sk, ld, j0, dt * 8);
                mma<T>(dq[dt], a, bk[0], bk[1]);
                mma<T>(dq[dt + 1], a, bk[2], bk[3]);
            }
        }
        const int rows[2] = {q0 + g, q0 + g + 8};
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            if (rows[r] >= S) continue;
            T* grow = grad_qkv + (int64_t{b} * S + rows[r]) * ldg + h * D;
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt)
                *reinterpret_cast<uint32_t*>(grow + dt * 8 + 2 * t) =
                    pack<T>(dq[dt][2 * r] * geo.scale, dq[dt][2 * r + 1] * geo.scale);
        }
    }
}

Geometry geometry(const Ops::AttentionShape& s, uint64_t seed) {
    Geometry g{};
    g.batch = s.batch;
    g.seq = s.seq;
    g.heads = s.heads;
    g.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    g.scale_log2 = g.scale * kLog2e;
    g.causal = s.causal;
    g.threshold = s.dropout_p > 0.0f ? dropout_threshold(s.dropout_p) : 0;
    g.inv_keep = 1.0f / (1.0f - s.dropout_p);
    g.seed = seed;
    g.mask_stride = attention_dropout_index(1, 0, s.seq);
    return g;
}

// Key/query tile of the kernels: 64, or 32 where 128-wide heads would spill registers.
template <int D> constexpr int kForwardCols = attention_plan::forward_cols(D);
template <int D> constexpr int kBackwardCols = attention_plan::backward_cols(D);
template <int D> constexpr int kShortCols = attention_plan::kShortCols;  // queries per step of phase 1

// Launches with `smem` bytes of dynamic shared memory, which the variant choice has held
// against ctx.limits; a request beyond them is a planning error, stopped here rather than
// by the driver. `carveout`: percent of the SM's memory as shared memory, or
// cudaSharedmemCarveoutDefault (left as it is); under emulated limits the emulated SM's
// (ctx.carveout_percent) for every launch.
template <int kBlockThreads = kWarps * 32, class K, class... Args>
void launch(K kernel, const char* name, dim3 grid, size_t smem, int carveout, const Context& ctx, Args... args) {
    SB_REQUIRE(static_cast<int64_t>(smem) <= ctx.limits.smem_per_block_optin,
               std::string(name) + " asks for " + std::to_string(smem) + " bytes of shared memory, " +
                   ctx.limits.arch + " limits grant a block " + std::to_string(ctx.limits.smem_per_block_optin));
    SB_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    const int percent = ctx.carveout_percent >= 0 ? ctx.carveout_percent : carveout;
    if (percent != cudaSharedmemCarveoutDefault)
        SB_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent));
    kernel<<<grid, kBlockThreads, smem, ctx.stream>>>(args...);
    SB_CHECK_LAUNCH();
}

// Records which variant a limit-dependent kernel ran, by kernel and shape class.
void note_variant(const Context& ctx, const std::string& kernel, const char* variant) {
    if (ctx.variants) (*ctx.variants)[kernel] = variant;
}

template <class T> const char* dtype_label() { return std::is_same_v<T, __nv_bfloat16> ? "bf16" : "fp16"; }

template <class F> void dispatch_attention(DType dtype, int head_dim, F&& f) {
    SB_REQUIRE(Ops::attention_fused(dtype, head_dim), "fused attention: bf16/fp16 with head_dim 64 or 128 only");
    auto by_dim = [&](auto tag) {
        if (head_dim == 64)
            f(tag, std::integral_constant<int, 64>{});
        else
            f(tag, std::integral_constant<int, 128>{});
    };
    if (dtype == DType::bf16)
        by_dim(__nv_bfloat16{});
    else
        by_dim(__half{});
}

// x: row tiles of 64; y: (batch, head) pairs, at most 65535 (a CUDA grid's y limit).
dim3 tiles(const Ops::AttentionShape& s) {
    SB_REQUIRE(int64_t{s.batch} * s.heads <= 65535, "fused attention: batch * heads must be at most 65535, is " +
                                                        std::to_string(int64_t{s.batch} * s.heads));
    return dim3(static_cast<unsigned>((s.seq + kRows - 1) / kRows), static_cast<unsigned>(s.batch * s.heads));
}

}  // namespace

void fused_attention_forward(const Context& ctx, DType dtype, const Ops::AttentionShape& shape, const void* qkv,
                             void* out, float* lse, uint64_t seed) {
    const Geometry geo = geometry(shape, seed);
    dispatch_attention(dtype, shape.head_dim, [&](auto tag, auto dim) {
        using T = decltype(tag);
        constexpr int D = decltype(dim)::value, C = kForwardCols<D>;
        const size_t smem = attention_plan::forward_smem(sizeof(T), D);
        note_variant(ctx, std::string("attention_forward ") + dtype_label<T>() + " head_dim " + std::to_string(D),
                     attention_plan::kTiled);
        launch(attention_forward_kernel<T, D, C>, "attention_forward_kernel", tiles(shape), smem,
               cudaSharedmemCarveoutDefault, ctx, geo, static_cast<const T*>(qkv), static_cast<T*>(out), lse,
               static_cast<const uint64_t*>(ctx.dropout_generation));
    });
}

void fused_attention_backward(const Context& ctx, DType dtype, const Ops::AttentionShape& shape, const void* qkv,
                              const void* out, const float* lse, const void* grad_out, void* grad_qkv, float* dsum,
                              uint64_t seed) {
    const Geometry geo = geometry(shape, seed);
    dispatch_attention(dtype, shape.head_dim, [&](auto tag, auto dim) {
        using T = decltype(tag);
        constexpr int D = decltype(dim)::value, C = kBackwardCols<D>;
        const char* variant = attention_plan::backward_variant(ctx.limits, dtype, shape);
        note_variant(ctx,
                     std::string("attention_backward ") + dtype_label<T>() + " head_dim " + std::to_string(D) +
                         (shape.seq <= kShortSeq ? " seq <= " : " seq > ") + std::to_string(kShortSeq),
                     variant);
        if (std::string_view(variant) == attention_plan::kOneBlock) {
            // Two 107 KB blocks per SM at head_dim 64 need the largest shared-memory carveout.
            launch<kShortThreads>(attention_backward_short_kernel<T, D, kShortCols<D>>,
                                  "attention_backward_short_kernel", dim3(static_cast<unsigned>(shape.batch * shape.heads)),
                                  attention_plan::backward_short_smem(sizeof(T), D), cudaSharedmemCarveoutMaxShared, ctx,
                                  geo, static_cast<const T*>(qkv), static_cast<const T*>(out),
                                  static_cast<const T*>(grad_out), lse, static_cast<T*>(grad_qkv),
                                  static_cast<const uint64_t*>(ctx.dropout_generation));
            return;
        }
        const int64_t rows = int64_t{shape.batch} * shape.seq;
        attention_dsum_kernel<T, D><<<grid_for(ctx, static_cast<size_t>(rows * shape.heads)), kThreads, 0,
                                      ctx.stream>>>(static_cast<const T*>(grad_out), static_cast<const T*>(out), rows,
                                                    shape.seq, shape.heads, dsum);
        SB_CHECK_LAUNCH();
        launch(attention_backward_dq_kernel<T, D, C>, "attention_backward_dq_kernel", tiles(shape),
               attention_plan::backward_dq_smem(sizeof(T), D), cudaSharedmemCarveoutDefault, ctx, geo,
               static_cast<const T*>(qkv), static_cast<const T*>(grad_out), lse, static_cast<const float*>(dsum),
               static_cast<T*>(grad_qkv), static_cast<const uint64_t*>(ctx.dropout_generation));
        launch(attention_backward_dkdv_kernel<T, D, C>, "attention_backward_dkdv_kernel", tiles(shape),
               attention_plan::backward_dkdv_smem(sizeof(T), D), cudaSharedmemCarveoutDefault, ctx, geo,
               static_cast<const T*>(qkv), static_cast<const T*>(grad_out), lse, static_cast<const float*>(dsum),
               static_cast<T*>(grad_qkv), static_cast<const uint64_t*>(ctx.dropout_generation));
    });
}

}  // namespace sb::kernels
