// Device-side helpers shared by the kernel files (kernels.cu, transformer_kernels.cu):
// storage <-> fp32 conversion, aligned vector units, dtype dispatch, grid sizing and
// deterministic warp/block reductions. Internal to models/cuda/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "models/cuda/kernels.cuh"
#include "base/errors.h"

namespace sb::kernels::detail {

constexpr int kThreads = 256;
constexpr int kVec = 8;  // elements per vector load in the elementwise kernels

// ---- storage <-> fp32

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <class T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

// N elements loaded/stored as one aligned unit.
template <class T, int N> struct alignas(sizeof(T) * N) VecN {
    T v[N];
};
// kVec elements (32 B for f32, 16 B for bf16/f16): the elementwise kernels' unit.
template <class T> using Vec = VecN<T, kVec>;
// Elements in one 16-byte load: 4 for f32, 8 for bf16/f16.
template <class T> constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

template <class T> inline bool vec_aligned(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * kVec) == 0;
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Elements per load of a kernel over rows of n elements (a row's channels, a matrix row): one
// 16-byte vector when n and every pointer allow it, else 1.
template <class T> int row_vec(int64_t n, std::initializer_list<const void*> ptrs) {
    if (n % kVec16<T> != 0) return 1;
    for (const void* p : ptrs)
        if (!aligned16(p)) return 1;
    return kVec16<T>;
}

// Calls f(std::integral_constant<int, V>{}) with V the width row_vec chose.
template <class T, class F> void dispatch_vec(int vec, F&& f) {
    if (vec == kVec16<T>)
        f(std::integral_constant<int, kVec16<T>>{});
    else
        f(std::integral_constant<int, 1>{});
}

inline unsigned grid_for(const Context& ctx, size_t work_items) {
    size_t blocks = (work_items + kThreads - 1) / kThreads;
    size_t cap = static_cast<size_t>(std::max(ctx.sm_count, 1)) * 8;
    return static_cast<unsigned>(std::max<size_t>(1, std::min(blocks, cap)));
}

// Calls f(T{}) with T the C++ type stored for dtype.
template <class F> void dispatch(DType dtype, F&& f) {
    switch (dtype) {
        case DType::f32: f(float{}); return;
        case DType::bf16: f(__nv_bfloat16{}); return;
        case DType::f16: f(__half{}); return;
    }
    SB_REQUIRE(false, "unknown dtype");
}

// ---- reductions: butterfly shuffles inside each warp, so every lane gets the same bits
// (IEEE + and max are commutative); a block reduction then reduces the per-warp values
// the same way. blockDim.x must be a multiple of 32.

struct SumOp {
    __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Reduces over groups of kLanes consecutive lanes (32: the whole warp); every lane of the
// warp must call it.
template <class Op, int kLanes = 32> __device__ __forceinline__ float warp_reduce(float v, Op op) {
#pragma unroll
    for (int off = kLanes / 2; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

template <class Op> __device__ float block_reduce(float v, Op op, float identity) {
    __shared__ float warp_vals[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_reduce(v, op);
    __syncthreads();  // an earlier call's readers are done with warp_vals
    if (lane == 0) warp_vals[warp] = v;
    __syncthreads();
    v = lane < static_cast<int>(blockDim.x >> 5) ? warp_vals[lane] : identity;
    return warp_reduce(v, op);
}

}  // namespace sb::kernels::detail
