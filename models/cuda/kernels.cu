// The CUDA kernels of CudaOps, each next to its launcher (declared in kernels.cuh).
// Storage is f32, bf16 or f16; math is always fp32. Elementwise kernels are grid-stride
// loops over 8-element vectors when every pointer is aligned for it, with a scalar tail.
// Reductions use fixed thread-to-data assignments and fixed-order trees (no float
// atomics), so their results are bitwise reproducible run to run.
#include "models/cuda/kernels.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "models/checksum.h"
#include "models/cuda/cuda_check.h"
#include "models/cuda/kernel_util.cuh"

namespace sb::kernels {

using namespace detail;

namespace {

// ---- activations (gelu: the tanh approximation; gelu_erf: the exact erf form)

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoef = 0.044715f;

template <Activation A> struct Act;
template <> struct Act<Activation::none> {
    __device__ static float fwd(float x) { return x; }
    __device__ static float bwd(float, float g) { return g; }
};
template <> struct Act<Activation::relu> {
    __device__ static float fwd(float x) { return x > 0.0f ? x : 0.0f; }
    __device__ static float bwd(float x, float g) { return x > 0.0f ? g : 0.0f; }
};
template <> struct Act<Activation::gelu> {
    __device__ static float fwd(float x) {
        float u = kSqrt2OverPi * (x + kGeluCoef * x * x * x);
        return 0.5f * x * (1.0f + tanhf(u));
    }
    __device__ static float bwd(float x, float g) {
        float x2 = x * x;
        float t = tanhf(kSqrt2OverPi * (x + kGeluCoef * x2 * x));
        float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoef * x2);
        return g * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
    }
};
// 0.5 x (1 + erf(x / sqrt 2)); derivative Phi(x) + x phi(x). The backward is as much ALU work as
// memory traffic at BERT's shapes, so phi's exponential is the hardware's (__expf, within a few ulp)
// rather than expf's range reduction.
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;
template <> struct Act<Activation::gelu_erf> {
    __device__ static float fwd(float x) { return 0.5f * x * (1.0f + erff(x * kInvSqrt2)); }
    __device__ static float bwd(float x, float g) {
        const float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
        const float pdf = kInvSqrt2Pi * __expf(-0.5f * x * x);
        return g * (cdf + x * pdf);
    }
};
template <> struct Act<Activation::tanh> {
    __device__ static float fwd(float x) { return tanhf(x); }
    __device__ static float bwd(float x, float g) {
        float t = tanhf(x);
        return g * (1.0f - t * t);
    }
};

struct Identity {
    __device__ float operator()(float x) const { return x; }
};
template <Activation A> struct ActForward {
    __device__ float operator()(float x) const { return Act<A>::fwd(x); }
};
template <Activation A> struct ActBackward {
    __device__ float operator()(float x, float g) const { return Act<A>::bwd(x, g); }
};
struct AddOp {
    __device__ float operator()(float a, float b) const { return a + b; }
};

// Calls f(std::integral_constant<Activation, act>{}).
template <class F> void dispatch_activation(Activation act, F&& f) {
    switch (act) {
        case Activation::none: f(std::integral_constant<Activation, Activation::none>{}); return;
        case Activation::relu: f(std::integral_constant<Activation, Activation::relu>{}); return;
        case Activation::gelu: f(std::integral_constant<Activation, Activation::gelu>{}); return;
        case Activation::tanh: f(std::integral_constant<Activation, Activation::tanh>{}); return;
        case Activation::gelu_erf: f(std::integral_constant<Activation, Activation::gelu_erf>{}); return;
    }
    SB_REQUIRE(false, "unknown activation");
}

}  // namespace

// ---- fill: out[i] = value, vector stores over the aligned body.

template <class T> __global__ void fill_kernel(T* out, size_t n, size_t n_vec, float value) {
    const T x = from_f32<T>(value);
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    Vec<T> pack;
#pragma unroll
    for (int j = 0; j < kVec; ++j) pack.v[j] = x;
    Vec<T>* out_v = reinterpret_cast<Vec<T>*>(out);
    for (size_t i = tid; i < n_vec; i += stride) out_v[i] = pack;
    for (size_t i = n_vec * kVec + tid; i < n; i += stride) out[i] = x;
}

__global__ void increment_kernel(uint64_t* counter) { ++*counter; }

cudaError_t kernel_image_status() {
    cudaFuncAttributes attributes{};
    const cudaError_t rc = cudaFuncGetAttributes(&attributes, increment_kernel);
    cudaGetLastError();  // not sticky: clear it, the caller reports it
    return rc;
}

void increment(const Context& ctx, uint64_t* counter) {
    increment_kernel<<<1, 1, 0, ctx.stream>>>(counter);
    SB_CHECK_LAUNCH();
}

void fill(const Context& ctx, void* data, DType dtype, size_t n, float value) {
    if (n == 0) return;
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        T* out = static_cast<T*>(data);
        size_t n_vec = vec_aligned<T>(out) ? n / kVec : 0;
        fill_kernel<T><<<grid_for(ctx, std::max<size_t>(n_vec, (n + kVec - 1) / kVec)), kThreads, 0, ctx.stream>>>(
            out, n, n_vec, value);
        SB_CHECK_LAUNCH();
    });
}

// ---- unary map: out[i] = f(in[i]) with conversion; serves cast and activation_forward.

template <class TIn, class TOut, class F>
__global__ void map_unary_kernel(const TIn* in, TOut* out, size_t n, size_t n_vec, F f) {
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const Vec<TIn>* in_v = reinterpret_cast<const Vec<TIn>*>(in);
    Vec<TOut>* out_v = reinterpret_cast<Vec<TOut>*>(out);
    for (size_t i = tid; i < n_vec; i += stride) {
        Vec<TIn> a = in_v[i];
        Vec<TOut> r;
#pragma unroll
        for (int j = 0; j < kVec; ++j) r.v[j] = from_f32<TOut>(f(to_f32(a.v[j])));
        out_v[i] = r;
    }
    for (size_t i = n_vec * kVec + tid; i < n; i += stride) out[i] = from_f32<TOut>(f(to_f32(in[i])));
}

template <class TIn, class TOut, class F>
void launch_map_unary(const Context& ctx, const TIn* in, TOut* out, size_t n, F f) {
    if (n == 0) return;
    size_t n_vec = (vec_aligned<TIn>(in) && vec_aligned<TOut>(out)) ? n / kVec : 0;
    map_unary_kernel<<<grid_for(ctx, std::max<size_t>(n_vec, (n + kVec - 1) / kVec)), kThreads, 0,
                       ctx.stream>>>(in, out, n, n_vec, f);
    SB_CHECK_LAUNCH();
}

void cast(const Context& ctx, const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n) {
    if (n == 0) return;
    if (src_dtype == dst_dtype) {
        if (src != dst)
            SB_CHECK_CUDA(cudaMemcpyAsync(dst, src, n * dtype_size(src_dtype), cudaMemcpyDeviceToDevice,
                                          ctx.stream));
        return;
    }
    dispatch(src_dtype, [&](auto in_tag) {
        using TIn = decltype(in_tag);
        dispatch(dst_dtype, [&](auto out_tag) {
            using TOut = decltype(out_tag);
            launch_map_unary(ctx, static_cast<const TIn*>(src), static_cast<TOut*>(dst), n, Identity{});
        });
    });
}

void activation_forward(const Context& ctx, Activation act, DType dtype, const void* pre, void* out,
                        size_t n) {
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        dispatch_activation(act, [&](auto act_tag) {
            launch_map_unary(ctx, static_cast<const T*>(pre), static_cast<T*>(out), n,
                             ActForward<decltype(act_tag)::value>{});
        });
    });
}

// ---- activation backward: grad_pre[i] = act'(pre[i]) * grad_out[i]. Each thread reads
// both inputs before it writes, so grad_pre may alias grad_out (no __restrict__ here).

template <class T, class F>
__global__ void map_binary_kernel(const T* a, const T* b, T* out, size_t n, size_t n_vec, F f) {
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const Vec<T>* a_v = reinterpret_cast<const Vec<T>*>(a);
    const Vec<T>* b_v = reinterpret_cast<const Vec<T>*>(b);
    Vec<T>* out_v = reinterpret_cast<Vec<T>*>(out);
    const auto map = [&](const Vec<T>& x, const Vec<T>& y) {
        Vec<T> r;
#pragma unroll
        for (int j = 0; j < kVec; ++j) r.v[j] = from_f32<T>(f(to_f32(x.v[j]), to_f32(y.v[j])));
        return r;
    };
    // Two vectors per thread and step (the second a grid stride further), both loaded before either
    // is computed: twice the bytes in flight, for maps whose arithmetic (GELU-erf's backward) is as
    // long as their memory traffic (GELU's forward, a unary map, ran slower so on an H200). An
    // element is read before its own result is written, so out may alias a or b.
    for (size_t i = tid; i < n_vec; i += 2 * stride) {
        const bool second = i + stride < n_vec;
        const Vec<T> x0 = a_v[i], y0 = b_v[i];
        const Vec<T> x1 = second ? a_v[i + stride] : x0, y1 = second ? b_v[i + stride] : y0;
        out_v[i] = map(x0, y0);
        if (second) out_v[i + stride] = map(x1, y1);
    }
    for (size_t i = n_vec * kVec + tid; i < n; i += stride)
        out[i] = from_f32<T>(f(to_f32(a[i]), to_f32(b[i])));
}

void activation_backward(const Context& ctx, Activation act, DType dtype, const void* pre,
                         const void* grad_out, void* grad_pre, size_t n) {
    if (n == 0) return;
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        dispatch_activation(act, [&](auto act_tag) {
            const T* x = static_cast<const T*>(pre);
            const T* g = static_cast<const T*>(grad_out);
            T* out = static_cast<T*>(grad_pre);
            size_t n_vec = (vec_aligned<T>(x) && vec_aligned<T>(g) && vec_aligned<T>(out)) ? n / kVec : 0;
            map_binary_kernel<<<grid_for(ctx, std::max<size_t>(n_vec, (n + kVec - 1) / kVec)), kThreads,
                                0, ctx.stream>>>(x, g, out, n, n_vec,
                                                 ActBackward<decltype(act_tag)::value>{});
            SB_CHECK_LAUNCH();
        });
    });
}

// ---- add: out = a + b through the same binary map (out may alias a or b).

void add(const Context& ctx, DType dtype, const void* a, const void* b, void* out, size_t n) {
    if (n == 0) return;
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        const T* x = static_cast<const T*>(a);
        const T* y = static_cast<const T*>(b);
        T* o = static_cast<T*>(out);
        size_t n_vec = (vec_aligned<T>(x) && vec_aligned<T>(y) && vec_aligned<T>(o)) ? n / kVec : 0;
        map_binary_kernel<<<grid_for(ctx, std::max<size_t>(n_vec, (n + kVec - 1) / kVec)), kThreads, 0,
                            ctx.stream>>>(x, y, o, n, n_vec, AddOp{});
        SB_CHECK_LAUNCH();
    });
}

// ---- gemm_bias_epilogue: c[i, j] = acc[i, j] + beta * c[i, j] + bias[j], rounded once to
// c's dtype. The GEMM fallback when cuBLASLt has no fused bias: acc is the fp32 product
// alpha * op(A) op(B) (or C itself, beta 0, when C is f32). acc may alias c.

template <class T>
__global__ void gemm_bias_epilogue_kernel(T* c, const float* acc, int64_t rows, int64_t cols, float beta,
                                          const float* __restrict__ bias) {
    const int64_t n = rows * cols;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = acc[i] + bias[i % cols];
        if (beta != 0.0f) v += beta * to_f32(c[i]);  // beta == 0: c may hold garbage, never read it
        c[i] = from_f32<T>(v);
    }
}

void gemm_bias_epilogue(const Context& ctx, DType dtype, void* c, const float* acc, int64_t rows, int64_t cols,
                        float beta, const float* bias) {
    if (rows <= 0 || cols <= 0) return;
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        gemm_bias_epilogue_kernel<T><<<grid_for(ctx, static_cast<size_t>(rows * cols)), kThreads, 0, ctx.stream>>>(
            static_cast<T*>(c), acc, rows, cols, beta, bias);
        SB_CHECK_LAUNCH();
    });
}

// ---- bias_grad: column sums in two stages. Stage 1: a block of kBgThreads threads owns
// kBgThreads * V adjacent columns, V being one 16-byte vector of T where the row length and the
// pointer allow it (a warp then reads 512 contiguous bytes of a row), and one chunk of rows,
// which each thread adds in row order with kBgUnroll rows' loads in flight. With labels, the
// block first lists the rows of each tile of kBgThreads rows whose label is not negative (a
// ballot per warp, kept in row order) and reads only those: a skipped row would add +0, so the
// sums are bitwise those over the matrix with such rows zeroed (a running sum that starts at +0
// is never -0, and x + +0 is x). Stage 2 adds the chunks' partials per column in chunk order.

constexpr int kBgThreads = 128;
constexpr int kBgUnroll = 8;
constexpr int kBgBlocksPerSm = 16;  // a full SM of 128-thread blocks
constexpr int64_t kBgMaxChunks = 1024;
constexpr int64_t kBgMinRowsPerChunk = 64;

template <class T, int V>
__global__ void __launch_bounds__(kBgThreads)
    bias_grad_partial_kernel(const T* __restrict__ grad, const int32_t* __restrict__ labels, int64_t rows,
                             int64_t cols, int64_t rows_per_chunk, float* __restrict__ out) {
    using Vec = VecN<T, V>;
    __shared__ int tile_rows[kBgThreads];  // the tile's rows to read, from its first, in order
    __shared__ int warp_taken[kBgThreads / 32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t col = (static_cast<int64_t>(blockIdx.x) * kBgThreads + tid) * V;
    const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
    const int64_t r1 = min(rows, r0 + rows_per_chunk);
    float sum[V];
#pragma unroll
    for (int j = 0; j < V; ++j) sum[j] = 0.0f;
    for (int64_t t0 = r0; t0 < r1; t0 += kBgThreads) {
        int count = static_cast<int>(min(static_cast<int64_t>(kBgThreads), r1 - t0));
        if (labels) {
            const bool take = tid < count && labels[t0 + tid] >= 0;
            const unsigned taken = __ballot_sync(0xffffffffu, take);
            __syncthreads();  // the previous tile's list is read
            if (lane == 0) warp_taken[warp] = __popc(taken);
            __syncthreads();
            int before = 0;
            count = 0;
#pragma unroll
            for (int w = 0; w < kBgThreads / 32; ++w) {
                before += w < warp ? warp_taken[w] : 0;
                count += warp_taken[w];
            }
            if (take) tile_rows[before + __popc(taken & ((1u << lane) - 1u))] = tid;
            __syncthreads();
        }
        if (col >= cols) continue;
        const T* tile = grad + t0 * cols + col;
        auto row_of = [&](int k) { return static_cast<int64_t>(labels ? tile_rows[k] : k) * cols; };
        int k = 0;
        for (; k + kBgUnroll <= count; k += kBgUnroll) {
            Vec v[kBgUnroll];
#pragma unroll
            for (int u = 0; u < kBgUnroll; ++u) v[u] = *reinterpret_cast<const Vec*>(tile + row_of(k + u));
#pragma unroll
            for (int u = 0; u < kBgUnroll; ++u)
#pragma unroll
                for (int j = 0; j < V; ++j) sum[j] += to_f32(v[u].v[j]);
        }
        for (; k < count; ++k) {
            const Vec v = *reinterpret_cast<const Vec*>(tile + row_of(k));
#pragma unroll
            for (int j = 0; j < V; ++j) sum[j] += to_f32(v.v[j]);
        }
    }
    if (col < cols)
#pragma unroll
        for (int j = 0; j < V; ++j) out[static_cast<int64_t>(blockIdx.y) * cols + col + j] = sum[j];
}

__global__ void bias_grad_final_kernel(const float* __restrict__ partials, int64_t chunks, int64_t cols,
                                       float* __restrict__ out) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; col < cols;
         col += stride) {
        float sum = 0.0f;
        for (int64_t c = 0; c < chunks; ++c) sum += partials[c * cols + col];
        out[col] = sum;
    }
}

int64_t column_sum_chunks(const Context& ctx, int64_t rows, int64_t cols, int64_t cols_per_block,
                          int64_t blocks_per_sm) {
    if (rows <= 0 || cols <= 0) return 1;
    const int64_t col_tiles = (cols + cols_per_block - 1) / cols_per_block;
    const int64_t want = (blocks_per_sm * std::max(ctx.sm_count, 1) + col_tiles - 1) / col_tiles;
    const int64_t by_rows = (rows + kBgMinRowsPerChunk - 1) / kBgMinRowsPerChunk;
    const int64_t chunks = std::max<int64_t>(1, std::min({want, by_rows, kBgMaxChunks}));
    // No empty chunk: recompute from the rows each chunk gets.
    const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
    return (rows + rows_per_chunk - 1) / rows_per_chunk;
}

// Counted with 16-byte vectors of bf16 whatever the dtype, so the split (and the sums' bits)
// depends on the shape alone.
int64_t bias_grad_chunks(const Context& ctx, int64_t rows, int64_t cols) {
    return column_sum_chunks(ctx, rows, cols, kBgThreads * 8, kBgBlocksPerSm);
}

void bias_grad(const Context& ctx, DType dtype, const void* grad, const int32_t* labels, int64_t rows, int64_t cols,
               float* out, float* partials) {
    if (cols <= 0) return;
    if (rows <= 0) {
        SB_CHECK_CUDA(cudaMemsetAsync(out, 0, static_cast<size_t>(cols) * sizeof(float), ctx.stream));
        return;
    }
    const int64_t chunks = bias_grad_chunks(ctx, rows, cols);
    const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
    SB_REQUIRE(chunks == 1 || partials != nullptr, "bias_grad needs a partials buffer");
    float* stage1 = chunks == 1 ? out : partials;
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        dispatch_vec<T>(row_vec<T>(cols, {grad}), [&](auto vec) {
            constexpr int V = decltype(vec)::value;
            const int64_t cols_per_block = int64_t{kBgThreads} * V;
            const dim3 grid(static_cast<unsigned>((cols + cols_per_block - 1) / cols_per_block),
                            static_cast<unsigned>(chunks));
            bias_grad_partial_kernel<T, V><<<grid, kBgThreads, 0, ctx.stream>>>(static_cast<const T*>(grad), labels,
                                                                                rows, cols, rows_per_chunk, stage1);
            SB_CHECK_LAUNCH();
        });
    });
    if (chunks > 1) sum_partials(ctx, partials, chunks, cols, out);
}

void sum_partials(const Context& ctx, const float* partials, int64_t chunks, int64_t cols, float* out) {
    if (cols <= 0) return;
    bias_grad_final_kernel<<<grid_for(ctx, static_cast<size_t>(cols)), kThreads, 0, ctx.stream>>>(partials, chunks,
                                                                                                    cols, out);
    SB_CHECK_LAUNCH();
}

// ---- softmax cross-entropy: one block per row, vocabularies of ~50k columns in mind.
// Pass 1 keeps a running (max, sum of exp(x - max)) per thread (online softmax: one read
// of the row instead of two), then the block combines them; pass 2 re-reads the row (L2
// hit) and writes grad = (softmax - onehot) * scale. Both read 16-byte vectors over the
// row's aligned middle (rows of an odd vocabulary start anywhere), scalars at the ends.
// A negative label is an ignored row: its logits are not read; zero gradient, zero loss,
// not counted. The label's logit is read before any gradient is written, so grad may
// alias logits.

// Head/body/tail split of a row for 16-byte loads of T.
template <class T> struct RowSplit {
    int64_t head, nvec, tail0;
    __device__ RowSplit(const T* x, int64_t n) {
        const uintptr_t addr = reinterpret_cast<uintptr_t>(x);
        const int64_t to_boundary = static_cast<int64_t>(((16 - addr % 16) % 16) / sizeof(T));
        head = addr % sizeof(T) ? n : (to_boundary < n ? to_boundary : n);
        nvec = (n - head) / kVec16<T>;
        tail0 = head + nvec * kVec16<T>;
    }
};

// Online softmax statistics: fold value v into the running (m, s). A -inf logit (a class
// excluded, as the transformer's padded vocabulary) adds nothing, also while m is still -inf.
__device__ __forceinline__ void online_add(float& m, float& s, float v) {
    if (v > m) {
        s = s * expf(m - v) + 1.0f;
        m = v;
    } else if (v > -INFINITY) {
        s += expf(v - m);
    }
}

template <class TIn, class TOut>
__global__ void softmax_xent_kernel(const TIn* logits, const int32_t* __restrict__ labels, int64_t rows,
                                    int64_t cols, TOut* grad, float grad_scale, const float* __restrict__ count,
                                    float* __restrict__ row_loss) {
    constexpr int V = kVec16<TIn>;
    using VIn = VecN<TIn, V>;
    using VOut = VecN<TOut, V>;
    const float scale = grad_scale / fmaxf(*count, 1.0f);
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const TIn* x = logits + row * cols;
        TOut* g = grad + row * cols;
        const int32_t label = labels[row];
        const RowSplit<TIn> sp(x, cols);
        bool vec_out = false;  // grad vectors line up with the logits' vectors
        if constexpr (sizeof(TIn) == sizeof(TOut)) vec_out = reinterpret_cast<uintptr_t>(g + sp.head) % 16 == 0;
        const bool ignored = label < 0;  // uniform across the block
        const bool valid = label < cols;
        float mx = 0.0f, inv_sum = 0.0f;
        if (!ignored) {
            float m = -INFINITY, s = 0.0f;
            for (int64_t j = threadIdx.x; j < sp.head; j += blockDim.x) online_add(m, s, to_f32(x[j]));
            for (int64_t j = sp.tail0 + threadIdx.x; j < cols; j += blockDim.x) online_add(m, s, to_f32(x[j]));
            const VIn* xv = reinterpret_cast<const VIn*>(x + sp.head);
            for (int64_t k = threadIdx.x; k < sp.nvec; k += blockDim.x) {
                const VIn a = xv[k];
                float v[V], lm = -INFINITY;
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    v[e] = to_f32(a.v[e]);
                    lm = fmaxf(lm, v[e]);
                }
                if (lm > m) {
                    s *= expf(m - lm);
                    m = lm;
                }
                if (m == -INFINITY) continue;  // all excluded so far: exp(-inf - -inf) would be NaN
#pragma unroll
                for (int e = 0; e < V; ++e) s += expf(v[e] - m);
            }
            mx = block_reduce(m, MaxOp{}, -INFINITY);
            const float sum = block_reduce(m == -INFINITY ? 0.0f : s * expf(m - mx), SumOp{}, 0.0f);
            const float x_label = valid ? to_f32(x[label]) : NAN;
            __syncthreads();  // everyone has read x[label] before grad (maybe == logits) is written
            // (mx - x_label) first: adding log(sum) to mx first would round it at mx's scale.
            if (threadIdx.x == 0) row_loss[row] = logf(sum) + (mx - x_label);
            inv_sum = 1.0f / sum;
        } else if (threadIdx.x == 0) {
            row_loss[row] = 0.0f;
        }
        auto grad_of = [&](int64_t j, float v) {
            if (ignored) return 0.0f;
            return valid ? (expf(v - mx) * inv_sum - (j == label ? 1.0f : 0.0f)) * scale : NAN;
        };
        if (!vec_out) {
            for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) g[j] = from_f32<TOut>(grad_of(j, to_f32(x[j])));
            continue;
        }
        for (int64_t j = threadIdx.x; j < sp.head; j += blockDim.x) g[j] = from_f32<TOut>(grad_of(j, to_f32(x[j])));
        for (int64_t j = sp.tail0 + threadIdx.x; j < cols; j += blockDim.x)
            g[j] = from_f32<TOut>(grad_of(j, to_f32(x[j])));
        const VIn* xv = reinterpret_cast<const VIn*>(x + sp.head);
        VOut* gv = reinterpret_cast<VOut*>(g + sp.head);
        for (int64_t k = threadIdx.x; k < sp.nvec; k += blockDim.x) {
            const VIn a = ignored ? VIn{} : xv[k];
            VOut r;
            const int64_t j0 = sp.head + k * V;
#pragma unroll
            for (int e = 0; e < V; ++e) r.v[e] = from_f32<TOut>(grad_of(j0 + e, to_f32(a.v[e])));
            gv[k] = r;
        }
    }
}

// The number of labelled rows (label >= 0), as a float (exact below 2^24 rows).
__global__ void count_labels_kernel(const int32_t* __restrict__ labels, int64_t rows, float* __restrict__ count) {
    float n = 0.0f;
    for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) n += labels[i] >= 0 ? 1.0f : 0.0f;
    n = block_reduce(n, SumOp{}, 0.0f);
    if (threadIdx.x == 0) *count = n;
}

// Sum of row_loss over max(count, 1) by one block: thread t sums rows t, t + 1024, ...
// then a fixed tree. No labelled row at all gives loss 0.
__global__ void mean_kernel(const float* __restrict__ values, int64_t n, const float* __restrict__ count,
                            float* __restrict__ out) {
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += values[i];
    sum = block_reduce(sum, SumOp{}, 0.0f);
    if (threadIdx.x == 0) *out = sum / fmaxf(*count, 1.0f);
}

void softmax_cross_entropy(const Context& ctx, DType logits_dtype, const void* logits, const int32_t* labels,
                           int64_t rows, int64_t cols, DType grad_dtype, void* grad, float grad_scale,
                           float* row_loss, float* loss) {
    SB_REQUIRE(rows > 0 && cols > 0, "softmax_cross_entropy needs a non-empty matrix");
    // One thread per 16-byte vector of the row, up to 1024 (30 bf16 per thread at 30k columns).
    const int64_t vectors = (cols + 7) / 8;
    const int threads = static_cast<int>(std::min<int64_t>(1024, std::max<int64_t>(32, (vectors + 31) / 32 * 32)));
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(rows, 1 << 30));
    float* count = row_loss + rows;
    count_labels_kernel<<<1, 1024, 0, ctx.stream>>>(labels, rows, count);
    SB_CHECK_LAUNCH();
    dispatch(logits_dtype, [&](auto in_tag) {
        using TIn = decltype(in_tag);
        dispatch(grad_dtype, [&](auto out_tag) {
            using TOut = decltype(out_tag);
            softmax_xent_kernel<TIn, TOut><<<grid, threads, 0, ctx.stream>>>(
                static_cast<const TIn*>(logits), labels, rows, cols, static_cast<TOut*>(grad), grad_scale, count,
                row_loss);
            SB_CHECK_LAUNCH();
        });
    });
    mean_kernel<<<1, 1024, 0, ctx.stream>>>(row_loss, rows, count, loss);
    SB_CHECK_LAUNCH();
}

// ---- optimizers: one pass over the flat fp32 buffers, float4 loads when params, grads
// and state are 16-byte aligned, scalar tail; the compute copy is written in the same pass.

template <class TW> __device__ __forceinline__ void store_copy(TW* copy, size_t i, float p) {
    if (copy) copy[i] = from_f32<TW>(p);
}

// buf = mu * buf + (g + wd * p); p -= lr * buf. Without a momentum buffer, p -= lr * (g + wd * p).
__device__ __forceinline__ float sgd_update(float p, float g, float& buf, bool has_buf, float lr, float mu,
                                            float wd) {
    float d = g + wd * p;
    if (has_buf) {
        d = mu * buf + d;
        buf = d;
    }
    return p - lr * d;
}

template <class TW>
__global__ void sgd_kernel(float* __restrict__ params, const float* __restrict__ grads, float* __restrict__ buf,
                           size_t n, size_t n_vec4, float lr, float mu, float wd, TW* __restrict__ copy) {
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const bool has_buf = buf != nullptr;
    for (size_t i = tid; i < n_vec4; i += stride) {
        const float4 p = reinterpret_cast<float4*>(params)[i];
        const float4 g = reinterpret_cast<const float4*>(grads)[i];
        const float4 b = has_buf ? reinterpret_cast<float4*>(buf)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        float pv[4] = {p.x, p.y, p.z, p.w}, gv[4] = {g.x, g.y, g.z, g.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            pv[j] = sgd_update(pv[j], gv[j], bv[j], has_buf, lr, mu, wd);
            store_copy(copy, i * 4 + j, pv[j]);
        }
        reinterpret_cast<float4*>(params)[i] = make_float4(pv[0], pv[1], pv[2], pv[3]);
        if (has_buf) reinterpret_cast<float4*>(buf)[i] = make_float4(bv[0], bv[1], bv[2], bv[3]);
    }
    for (size_t i = n_vec4 * 4 + tid; i < n; i += stride) {
        float b = has_buf ? buf[i] : 0.0f;
        const float p = sgd_update(params[i], grads[i], b, has_buf, lr, mu, wd);
        params[i] = p;
        if (has_buf) buf[i] = b;
        store_copy(copy, i, p);
    }
}

// Calls f(TW*) with the compute copy typed, or f((float*)nullptr) when there is none.
template <class F> void dispatch_copy(void* copy, DType copy_dtype, F&& f) {
    if (!copy) {
        f(static_cast<float*>(nullptr));
        return;
    }
    dispatch(copy_dtype, [&](auto tag) { f(static_cast<decltype(tag)*>(copy)); });
}

void sgd_step(const Context& ctx, float* params, const float* grads, float* momentum, size_t n, float lr,
              float mu, float weight_decay, void* copy, DType copy_dtype) {
    if (n == 0) return;
    const bool vec = aligned16(params) && aligned16(grads) && (!momentum || aligned16(momentum));
    const size_t n_vec4 = vec ? n / 4 : 0;
    dispatch_copy(copy, copy_dtype, [&](auto* typed_copy) {
        sgd_kernel<<<grid_for(ctx, std::max<size_t>(n_vec4, (n + 3) / 4)), kThreads, 0, ctx.stream>>>(
            params, grads, momentum, n, n_vec4, lr, mu, weight_decay, typed_copy);
        SB_CHECK_LAUNCH();
    });
}

struct AdamParams {
    float beta1, beta2, eps, decay, step_size, inv_sqrt_bc2;
};

// PyTorch's arrangement: p * (1 - lr*wd) - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
__device__ __forceinline__ float adamw_update(float p, float g, float& m, float& v, const AdamParams& a) {
    m = a.beta1 * m + (1.0f - a.beta1) * g;
    v = a.beta2 * v + (1.0f - a.beta2) * g * g;
    const float denom = sqrtf(v) * a.inv_sqrt_bc2 + a.eps;
    return p * a.decay - a.step_size * m / denom;
}

template <class TW>
__global__ void adamw_kernel(float* __restrict__ params, const float* __restrict__ grads, float* __restrict__ m,
                             float* __restrict__ v, size_t n, size_t n_vec4, AdamParams a, TW* __restrict__ copy) {
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (size_t i = tid; i < n_vec4; i += stride) {
        const float4 p = reinterpret_cast<float4*>(params)[i];
        const float4 g = reinterpret_cast<const float4*>(grads)[i];
        const float4 m4 = reinterpret_cast<float4*>(m)[i];
        const float4 v4 = reinterpret_cast<float4*>(v)[i];
        float pv[4] = {p.x, p.y, p.z, p.w}, gv[4] = {g.x, g.y, g.z, g.w};
        float mv[4] = {m4.x, m4.y, m4.z, m4.w}, vv[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            pv[j] = adamw_update(pv[j], gv[j], mv[j], vv[j], a);
            store_copy(copy, i * 4 + j, pv[j]);
        }
        reinterpret_cast<float4*>(params)[i] = make_float4(pv[0], pv[1], pv[2], pv[3]);
        reinterpret_cast<float4*>(m)[i] = make_float4(mv[0], mv[1], mv[2], mv[3]);
        reinterpret_cast<float4*>(v)[i] = make_float4(vv[0], vv[1], vv[2], vv[3]);
    }
    for (size_t i = n_vec4 * 4 + tid; i < n; i += stride) {
        float mi = m[i], vi = v[i];
        const float p = adamw_update(params[i], grads[i], mi, vi, a);
        params[i] = p;
        m[i] = mi;
        v[i] = vi;
        store_copy(copy, i, p);
    }
}

void adamw_step(const Context& ctx, float* params, const float* grads, float* m, float* v, size_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, float step_size, float inv_sqrt_bc2,
                void* copy, DType copy_dtype) {
    if (n == 0) return;
    const bool vec = aligned16(params) && aligned16(grads) && aligned16(m) && aligned16(v);
    const size_t n_vec4 = vec ? n / 4 : 0;
    const AdamParams a{beta1, beta2, eps, 1.0f - lr * weight_decay, step_size, inv_sqrt_bc2};
    dispatch_copy(copy, copy_dtype, [&](auto* typed_copy) {
        adamw_kernel<<<grid_for(ctx, std::max<size_t>(n_vec4, (n + 3) / 4)), kThreads, 0, ctx.stream>>>(
            params, grads, m, v, n, n_vec4, a, typed_copy);
        SB_CHECK_LAUNCH();
    });
}

// ---- unscale_and_check: grads *= inv_scale; any non-finite result sets *flag = 1 (every
// writer stores the same value, so the race is benign and the outcome deterministic).

__global__ void unscale_kernel(float* __restrict__ grads, size_t n, size_t n_vec4, float inv_scale,
                               int* __restrict__ flag) {
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    bool bad = false;
    for (size_t i = tid; i < n_vec4; i += stride) {
        float4 g = reinterpret_cast<float4*>(grads)[i];
        g.x *= inv_scale;
        g.y *= inv_scale;
        g.z *= inv_scale;
        g.w *= inv_scale;
        bad |= !isfinite(g.x) || !isfinite(g.y) || !isfinite(g.z) || !isfinite(g.w);
        reinterpret_cast<float4*>(grads)[i] = g;
    }
    for (size_t i = n_vec4 * 4 + tid; i < n; i += stride) {
        const float g = grads[i] * inv_scale;
        bad |= !isfinite(g);
        grads[i] = g;
    }
    if (bad) *flag = 1;
}

void unscale_and_check(const Context& ctx, float* grads, size_t n, float inv_scale, int* flag) {
    if (n == 0) return;
    const size_t n_vec4 = aligned16(grads) ? n / 4 : 0;
    unscale_kernel<<<grid_for(ctx, std::max<size_t>(n_vec4, (n + 3) / 4)), kThreads, 0, ctx.stream>>>(
        grads, n, n_vec4, inv_scale, flag);
    SB_CHECK_LAUNCH();
}

// ---- checksum: each thread sums its words' terms, a block adds its sum atomically (a
// sum modulo 2^64 in any order is the same bits).

template <bool kAligned>
__device__ uint64_t checksum_word(const unsigned char* p, size_t index, size_t bytes) {
    const size_t first = index * 8;
    if (kAligned && first + 8 <= bytes) return reinterpret_cast<const uint64_t*>(p)[index];
    uint64_t word = 0;  // little-endian assembly, zero-padded past the end (as checksum_host)
    for (size_t b = 0; b < 8 && first + b < bytes; ++b) word |= static_cast<uint64_t>(p[first + b]) << (8 * b);
    return word;
}

template <bool kAligned>
__global__ void checksum_kernel(const unsigned char* __restrict__ p, size_t bytes, unsigned long long* sum) {
    const size_t words = (bytes + 7) / 8;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    uint64_t local = tid == 0 ? bytes : 0;
    for (size_t i = tid; i < words; i += stride) local += checksum_term(checksum_word<kAligned>(p, i, bytes), i);
    for (int offset = 16; offset > 0; offset /= 2) local += __shfl_down_sync(0xffffffffu, local, offset);
    __shared__ uint64_t warp_sums[kThreads / 32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_sums[warp] = local;
    __syncthreads();
    if (warp != 0) return;
    local = lane < kThreads / 32 ? warp_sums[lane] : 0;
    for (int offset = 16; offset > 0; offset /= 2) local += __shfl_down_sync(0xffffffffu, local, offset);
    if (lane == 0) atomicAdd(sum, static_cast<unsigned long long>(local));
}

void checksum(const Context& ctx, const void* data, size_t bytes, uint64_t* sum) {
    const auto* p = static_cast<const unsigned char*>(data);
    auto* out = reinterpret_cast<unsigned long long*>(sum);
    const unsigned grid = grid_for(ctx, std::max<size_t>(1, (bytes + 7) / 8));
    if (reinterpret_cast<uintptr_t>(data) % 8 == 0)
        checksum_kernel<true><<<grid, kThreads, 0, ctx.stream>>>(p, bytes, out);
    else
        checksum_kernel<false><<<grid, kThreads, 0, ctx.stream>>>(p, bytes, out);
    SB_CHECK_LAUNCH();
}

}  // namespace sb::kernels
