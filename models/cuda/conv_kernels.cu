// The convolutional-layer kernels of CudaOps (declared in kernels.cuh), each next to its
// launcher: im2col/col2im, max and global average pooling, BatchNorm. Images are NHWC, so
// a pixel's channels are contiguous: every kernel gives consecutive threads consecutive
// channel vectors (16 bytes when the channel count and the pointers allow, else scalars),
// except im2col on channels that do not vectorise, which writes the patch matrix as 16-byte
// vectors of consecutive elements (from input rows staged in shared memory where they fit).
// Nothing scatters: col2im and the max-pool backward are gathers (each input element sums
// what it fed, in the CPU's order), and BatchNorm reduces over rows in fixed row chunks whose
// partials are combined per channel in double. No float atomics, so results are bitwise
// reproducible on a given GPU, and no allocation or host sync, so all of it captures into
// CUDA graphs. Math is fp32 whatever the storage dtype.
#include "models/cuda/kernels.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "models/cuda/cuda_check.h"
#include "models/cuda/kernel_util.cuh"

namespace sb::kernels {

using namespace detail;

namespace {

// ---- shared machinery

// n / d and n % d for a divisor fixed at launch: a multiply-high and a shift instead of
// the ~20 instructions of a runtime division (Granlund-Montgomery, round-up variant; exact
// for every 32-bit n).
struct FastDivmod {
    uint32_t d = 1, mul = 1, shift = 0;
    FastDivmod() = default;
    explicit FastDivmod(uint32_t divisor) : d(divisor) {
        while ((uint64_t{1} << shift) < d) ++shift;
        mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
    }
    __device__ __forceinline__ uint32_t div(uint32_t n) const {
        return static_cast<uint32_t>((static_cast<uint64_t>(__umulhi(n, mul)) + n) >> shift);
    }
    __device__ __forceinline__ void divmod(uint32_t n, uint32_t& q, uint32_t& r) const {
        q = div(n);
        r = n - q * d;
    }
};

// Rows x items_per_row work (an item: one channel vector, or one patch vector) in tiles of
// whole rows, a block per tile, grid-stride over tiles. Within a tile the flat item index
// is split into (row, item) once per thread and then stepped by blockDim.x incrementally.
struct RowItems {
    int64_t rows = 0;
    FastDivmod per_row;
    uint32_t tile_rows = 1;
};

constexpr uint32_t kTileItems = 8 * kThreads;  // items of one tile: 8 per thread

RowItems row_items(int64_t rows, int64_t items_per_row) {
    RowItems r;
    r.rows = rows;
    r.per_row = FastDivmod(static_cast<uint32_t>(items_per_row));
    r.tile_rows = static_cast<uint32_t>(std::max<int64_t>(1, kTileItems / items_per_row));
    return r;
}

unsigned tile_grid(const Context& ctx, const RowItems& r) {
    const int64_t tiles = (r.rows + r.tile_rows - 1) / r.tile_rows;
    return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(tiles, int64_t{ctx.sm_count} * 8)));
}

// Calls f(row, item) for every item of every row this thread owns (row < 2^31).
template <class F> __device__ __forceinline__ void for_each_item(const RowItems& r, F&& f) {
    const uint32_t d = r.per_row.d;
    uint32_t step_rows, step_items;
    r.per_row.divmod(blockDim.x, step_rows, step_items);
    for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * r.tile_rows; row0 < r.rows;
         row0 += static_cast<int64_t>(gridDim.x) * r.tile_rows) {
        const uint32_t n = static_cast<uint32_t>(min(static_cast<int64_t>(r.tile_rows), r.rows - row0));
        uint32_t lr, k;
        r.per_row.divmod(threadIdx.x, lr, k);
        while (lr < n) {
            f(static_cast<uint32_t>(row0) + lr, k);
            k += step_items;
            lr += step_rows;
            if (k >= d) {
                k -= d;
                ++lr;
            }
        }
    }
}


template <class T, int V> __device__ __forceinline__ VecN<T, V> zero_vec() {
    VecN<T, V> z;
#pragma unroll
    for (int e = 0; e < V; ++e) z.v[e] = from_f32<T>(0.0f);
    return z;
}

// The geometry a conv-shaped kernel needs, with its divisors prepared.
struct ConvDims {
    int height, width, kernel, stride, padding, out_h, out_w;
    uint32_t cvecs;  // channel vectors per pixel
    FastDivmod div_w, div_h, div_ow, div_oh, div_kernel, div_cvecs, div_stride;
};

ConvDims conv_dims(const Ops::ConvShape& s, int vec) {
    ConvDims d{};
    d.height = s.height;
    d.width = s.width;
    d.kernel = s.kernel;
    d.stride = s.stride;
    d.padding = s.padding;
    d.out_h = s.out_height();
    d.out_w = s.out_width();
    d.cvecs = static_cast<uint32_t>(s.channels / vec);
    d.div_w = FastDivmod(static_cast<uint32_t>(s.width));
    d.div_h = FastDivmod(static_cast<uint32_t>(s.height));
    d.div_ow = FastDivmod(static_cast<uint32_t>(d.out_w));
    d.div_oh = FastDivmod(static_cast<uint32_t>(d.out_h));
    d.div_kernel = FastDivmod(static_cast<uint32_t>(s.kernel));
    d.div_cvecs = FastDivmod(d.cvecs);
    d.div_stride = FastDivmod(static_cast<uint32_t>(s.stride));
    return d;
}

void require_conv(const Ops::ConvShape& s, const char* op) {
    SB_REQUIRE(s.valid(), std::string(op) + ": bad shape: " + s.describe());
    SB_REQUIRE(s.in_rows() < (int64_t{1} << 31) && s.out_rows() < (int64_t{1} << 31) &&
                   s.patch() < (int64_t{1} << 31),
               std::string(op) + ": more than 2^31 pixels or patch columns");
}

// Splits a pixel's flat row into (image, y, x).
__device__ __forceinline__ void split_pixel(uint32_t row, const FastDivmod& div_w, const FastDivmod& div_h,
                                            uint32_t& n, uint32_t& y, uint32_t& x) {
    uint32_t t;
    div_w.divmod(row, t, x);
    div_h.divmod(t, n, y);
}

// The window positions k (0 <= k < kernel) and output coordinates o of the windows that
// cover input coordinate i: i + padding = o * stride + k. Calls f(o, k) with o ascending,
// the order in which the CPU visits windows, so sums over them round as the CPU's.
template <class F>
__device__ __forceinline__ void for_each_cover(int i, int padding, int kernel, int out_n, const FastDivmod& div_s,
                                               F&& f) {
    uint32_t q, r;  // the last window covering i (o = q) takes i at position r
    div_s.divmod(static_cast<uint32_t>(i + padding), q, r);
    if (static_cast<int>(r) >= kernel) return;  // i falls between windows (stride > kernel)
    const int earlier = static_cast<int>(div_s.div(static_cast<uint32_t>(kernel - 1) - r));
    int k = static_cast<int>(r) + earlier * static_cast<int>(div_s.d);
    for (int o = static_cast<int>(q) - earlier; o <= static_cast<int>(q); ++o, k -= static_cast<int>(div_s.d))
        if (o >= 0 && o < out_n) f(o, k);
}

}  // namespace

// ---- im2col: an item is one channel vector of one (ky, kx) of an output row's patch;
// consecutive threads write consecutive vectors of a patch row and read consecutive
// channels of an input pixel. Padding writes zeros.

template <class T, int V>
__global__ void im2col_kernel(const T* __restrict__ x, T* __restrict__ cols, ConvDims d, RowItems items) {
    using VT = VecN<T, V>;
    const VT* xv = reinterpret_cast<const VT*>(x);
    VT* cv = reinterpret_cast<VT*>(cols);
    const int64_t patch_vecs = items.per_row.d;
    for_each_item(items, [&](uint32_t orow, uint32_t k) {
        uint32_t kyx, c, ky, kx, n, oy, ox;
        d.div_cvecs.divmod(k, kyx, c);
        d.div_kernel.divmod(kyx, ky, kx);
        split_pixel(orow, d.div_ow, d.div_oh, n, oy, ox);
        const int y = static_cast<int>(oy) * d.stride - d.padding + static_cast<int>(ky);
        const int xx = static_cast<int>(ox) * d.stride - d.padding + static_cast<int>(kx);
        VT v = zero_vec<T, V>();
        if (y >= 0 && y < d.height && xx >= 0 && xx < d.width)
            v = xv[((static_cast<int64_t>(n) * d.height + y) * d.width + xx) * d.cvecs + c];
        cv[static_cast<int64_t>(orow) * patch_vecs + k] = v;
    });
}

// ---- im2col for channel counts that do not vectorise (the stem's 3): cols is one flat array
// (out_rows x patch, contiguous), so a thread writes a 16-byte vector of consecutive elements,
// crossing rows freely, gathering each from x (which is small beside cols and stays in cache).
// The elements before cols' first 16-byte boundary (`head`) and after the last whole vector
// are written one by one.

// A flat index of cols as an output pixel (n, oy, ox) and a patch position (ky, kx, c), with
// the input pixel (iy, ix) they read: split once, then stepped element by element.
struct PatchCursor {
    uint32_t c, kx, ky, ox, oy;
    int ix, iy;     // outside the image where the window is in the padding
    int64_t image;  // offset of image n in x
    __device__ __forceinline__ PatchCursor(uint32_t flat, const ConvDims& d, const FastDivmod& div_patch) {
        uint32_t orow, k, kyx, n;
        div_patch.divmod(flat, orow, k);
        d.div_cvecs.divmod(k, kyx, c);
        d.div_kernel.divmod(kyx, ky, kx);
        split_pixel(orow, d.div_ow, d.div_oh, n, oy, ox);
        iy = static_cast<int>(oy) * d.stride - d.padding + static_cast<int>(ky);
        ix = static_cast<int>(ox) * d.stride - d.padding + static_cast<int>(kx);
        image = static_cast<int64_t>(n) * d.height * d.width * d.cvecs;
    }
    template <class T> __device__ __forceinline__ T load(const T* __restrict__ x, const ConvDims& d) const {
        if (static_cast<unsigned>(iy) >= static_cast<unsigned>(d.height) ||
            static_cast<unsigned>(ix) >= static_cast<unsigned>(d.width))
            return from_f32<T>(0.0f);
        return x[image + (static_cast<int64_t>(iy) * d.width + ix) * d.cvecs + c];
    }
    __device__ __forceinline__ void next(const ConvDims& d) {
        if (++c < d.cvecs) return;
        c = 0;
        ++ix;
        if (++kx < static_cast<uint32_t>(d.kernel)) return;
        kx = 0;
        ix -= d.kernel;
        ++iy;
        if (++ky < static_cast<uint32_t>(d.kernel)) return;
        ky = 0;
        iy -= d.kernel;
        ix += d.stride;
        if (++ox < static_cast<uint32_t>(d.out_w)) return;
        ox = 0;
        ix -= d.out_w * d.stride;
        iy += d.stride;
        if (++oy < static_cast<uint32_t>(d.out_h)) return;
        oy = 0;
        iy -= d.out_h * d.stride;
        image += static_cast<int64_t>(d.height) * d.width * d.cvecs;
    }
};

template <class T>
__global__ void im2col_flat_kernel(const T* __restrict__ x, T* __restrict__ cols, ConvDims d, FastDivmod div_patch,
                                   uint32_t head, uint32_t vectors, uint32_t total) {
    constexpr int E = kVec16<T>;
    using VT = VecN<T, E>;
    VT* cv = reinterpret_cast<VT*>(cols + head);
    const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
    for (uint32_t i = tid; i < vectors; i += gridDim.x * blockDim.x) {
        PatchCursor p(head + i * E, d, div_patch);
        VT v;
#pragma unroll
        for (int e = 0; e < E; ++e) {
            v.v[e] = p.load(x, d);
            p.next(d);
        }
        cv[i] = v;
    }
    const uint32_t tail = head + vectors * E;  // the first element after the last vector
    if (tid < head + (total - tail)) {
        const uint32_t flat = tid < head ? tid : tail + (tid - head);
        cols[flat] = PatchCursor(flat, d, div_patch).load(x, d);
    }
}

// ---- im2col for channels that do not vectorise, with the input rows a window reads staged in
// shared memory where they fit (the stem's 7 rows of 229 3-channel pixels: 9.6 KB in bf16).
// A block writes one output row (n, oy): its slice of cols, out_w x patch elements, contiguous.
// It loads the kernel input rows once, coalesced, zeros standing in for the padding; then
// writes the slice as 16-byte vectors (and the elements before the slice's first and after its
// last whole vector one by one), each element read from shared memory. Staged row ky is input
// row oy * stride - padding + ky over columns -padding .. (out_w - 1) * stride - padding +
// kernel - 1, channels innermost, so patch element (ky, kx, c) of output column ox is
// stage[ky * row_len + ox * stride * channels + kx * channels + c]: a window's row is `run`
// consecutive elements, in the stage as in cols.

namespace {

constexpr int64_t kMaxStageBytes = 48 * 1024;  // dynamic shared memory without an opt-in
constexpr int kStageLoads = 4;                  // loads a thread has in flight while staging

struct StagedRows {
    int row_len;  // elements of one staged row: ((out_w - 1) * stride + kernel) * channels
    int run;      // kernel * channels: one window row
    int step;     // stride * channels: between neighbouring windows of a staged row
    FastDivmod div_patch, div_run, div_row_len;
};

StagedRows staged_rows(const Ops::ConvShape& s) {
    StagedRows r;
    r.row_len = ((s.out_width() - 1) * s.stride + s.kernel) * s.channels;
    r.run = s.kernel * s.channels;
    r.step = s.stride * s.channels;
    r.div_patch = FastDivmod(static_cast<uint32_t>(s.patch()));
    r.div_run = FastDivmod(static_cast<uint32_t>(r.run));
    r.div_row_len = FastDivmod(static_cast<uint32_t>(r.row_len));
    return r;
}

int64_t stage_bytes(const Ops::ConvShape& s, size_t elem) {
    return int64_t{s.kernel} * ((int64_t{s.out_width()} - 1) * s.stride + s.kernel) * s.channels *
           static_cast<int64_t>(elem);
}

// Element j of an output row's slice (j = ox * patch + ky * run + kx * channels + c) as a stage
// index, stepped element by element.
struct StageCursor {
    int start, rem, ky;  // start: the stage index of the window row (ox, ky); rem < run
    __device__ __forceinline__ StageCursor(uint32_t j, const StagedRows& st) {
        uint32_t ox, k, q, r;
        st.div_patch.divmod(j, ox, k);
        st.div_run.divmod(k, q, r);
        ky = static_cast<int>(q);
        rem = static_cast<int>(r);
        start = ky * st.row_len + static_cast<int>(ox) * st.step;
    }
    __device__ __forceinline__ int index() const { return start + rem; }
    __device__ __forceinline__ void next(const StagedRows& st, int kernel) {
        if (++rem < st.run) return;
        rem = 0;
        start += st.row_len;
        if (++ky < kernel) return;
        ky = 0;
        start += st.step - kernel * st.row_len;
    }
};

}  // namespace

template <class T>
__global__ void __launch_bounds__(kThreads, 8)  // 32 registers: eight blocks (2048 threads) per SM
    im2col_staged_kernel(const T* __restrict__ x, T* __restrict__ cols, ConvDims d, StagedRows st,
                         uint32_t misaligned) {
    constexpr int E = kVec16<T>;
    using VT = VecN<T, E>;
    extern __shared__ __align__(16) unsigned char stage_raw[];
    T* stage = reinterpret_cast<T*>(stage_raw);
    uint32_t n, oy;
    d.div_oh.divmod(blockIdx.x, n, oy);
    const int x_row = d.width * static_cast<int>(d.cvecs);  // elements of one input row
    const int left = d.padding * static_cast<int>(d.cvecs);  // stage elements left of input column 0
    const int64_t image = static_cast<int64_t>(n) * d.height;
    const int iy0 = static_cast<int>(oy) * d.stride - d.padding;  // the input row of staged row 0
    const uint32_t staged = static_cast<uint32_t>(d.kernel * st.row_len);
    // kStageLoads loads go out before their stores: a block waits a few latencies, not one per element.
    for (uint32_t t0 = threadIdx.x; t0 < staged; t0 += kStageLoads * blockDim.x) {
        T v[kStageLoads];
#pragma unroll
        for (int u = 0; u < kStageLoads; ++u) {
            uint32_t ky, col;
            st.div_row_len.divmod(t0 + u * blockDim.x, ky, col);
            const int iy = iy0 + static_cast<int>(ky), j = static_cast<int>(col) - left;
            const bool inside = t0 + u * blockDim.x < staged && iy >= 0 && iy < d.height && j >= 0 && j < x_row;
            v[u] = inside ? x[(image + iy) * x_row + j] : from_f32<T>(0.0f);
        }
#pragma unroll
        for (int u = 0; u < kStageLoads; ++u)
            if (t0 + u * blockDim.x < staged) stage[t0 + u * blockDim.x] = v[u];
    }
    __syncthreads();
    // The slice [begin, end) of cols; cols + i is 16-byte aligned where (i + misaligned) % E == 0.
    const int64_t slice = static_cast<int64_t>(d.out_w) * st.div_patch.d;
    const int64_t begin = static_cast<int64_t>(blockIdx.x) * slice, end = begin + slice;
    const int64_t vbegin = min(end, (begin + misaligned + E - 1) / E * E - misaligned);
    const int64_t vend = max(vbegin, (end + misaligned) / E * E - misaligned);
    const uint32_t vectors = static_cast<uint32_t>((vend - vbegin) / E);
    VT* cv = reinterpret_cast<VT*>(cols + vbegin);
    for (uint32_t i = threadIdx.x; i < vectors; i += blockDim.x) {
        StageCursor p(static_cast<uint32_t>(vbegin - begin) + i * E, st);
        VT v;
#pragma unroll
        for (int e = 0; e < E; ++e) {
            v.v[e] = stage[p.index()];
            p.next(st, d.kernel);
        }
        cv[i] = v;
    }
    const uint32_t head = static_cast<uint32_t>(vbegin - begin), tail = static_cast<uint32_t>(end - vend);
    if (threadIdx.x < head + tail) {
        const uint32_t tid = threadIdx.x;
        const uint32_t j = tid < head ? tid : static_cast<uint32_t>(vend - begin) + (tid - head);
        cols[begin + j] = stage[StageCursor(j, st).index()];
    }
}

// One entry point: channel vectors where the channels vectorise, else the staged path where
// its rows fit in shared memory, else the flat path (both 32-bit flat indices: up to 2^32 - 1
// patch elements; beyond that, scalar channel items).
void im2col(const Context& ctx, DType dtype, const Ops::ConvShape& s, const void* x, void* cols) {
    require_conv(s, "im2col");
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        const int vec = row_vec<T>(s.channels, {x, cols});
        const int64_t total = s.out_rows() * s.patch();
        if (vec == 1 && total <= int64_t{UINT32_MAX}) {
            constexpr int E = kVec16<T>;
            const int64_t misaligned = static_cast<int64_t>(reinterpret_cast<uintptr_t>(cols) % 16 / sizeof(T));
            const int64_t staged = stage_bytes(s, sizeof(T));
            if (staged <= kMaxStageBytes) {
                im2col_staged_kernel<T><<<static_cast<unsigned>(s.out_rows() / s.out_width()), kThreads,
                                          static_cast<size_t>(staged), ctx.stream>>>(
                    static_cast<const T*>(x), static_cast<T*>(cols), conv_dims(s, 1), staged_rows(s),
                    static_cast<uint32_t>(misaligned));
                SB_CHECK_LAUNCH();
                return;
            }
            const int64_t head = std::min<int64_t>(total, misaligned ? E - misaligned : 0);
            const int64_t vectors = (total - head) / E;
            const unsigned grid = grid_for(ctx, static_cast<size_t>(std::max<int64_t>(vectors, total - vectors * E)));
            im2col_flat_kernel<T><<<grid, kThreads, 0, ctx.stream>>>(
                static_cast<const T*>(x), static_cast<T*>(cols), conv_dims(s, 1),
                FastDivmod(static_cast<uint32_t>(s.patch())), static_cast<uint32_t>(head),
                static_cast<uint32_t>(vectors), static_cast<uint32_t>(total));
            SB_CHECK_LAUNCH();
            return;
        }
        dispatch_vec<T>(vec, [&](auto v) {
            constexpr int V = decltype(v)::value;
            const ConvDims d = conv_dims(s, V);
            const RowItems items = row_items(s.out_rows(), s.patch() / V);
            im2col_kernel<T, V><<<tile_grid(ctx, items), kThreads, 0, ctx.stream>>>(
                static_cast<const T*>(x), static_cast<T*>(cols), d, items);
            SB_CHECK_LAUNCH();
        });
    });
}

// ---- col2im as a gather: an item is one channel vector of one input pixel, which adds the
// patch entries im2col copied it to: for each covering window, ky then kx ascending.

template <class T, int V>
__global__ void col2im_kernel(const T* __restrict__ grad_cols, T* __restrict__ grad_x, ConvDims d,
                              RowItems items) {
    using VT = VecN<T, V>;
    const VT* gc = reinterpret_cast<const VT*>(grad_cols);
    VT* gx = reinterpret_cast<VT*>(grad_x);
    const int64_t patch_vecs = static_cast<int64_t>(d.kernel) * d.kernel * d.cvecs;
    for_each_item(items, [&](uint32_t row, uint32_t c) {
        uint32_t n, y, xx;
        split_pixel(row, d.div_w, d.div_h, n, y, xx);
        float acc[V] = {};
        for_each_cover(static_cast<int>(y), d.padding, d.kernel, d.out_h, d.div_stride, [&](int oy, int ky) {
            for_each_cover(static_cast<int>(xx), d.padding, d.kernel, d.out_w, d.div_stride, [&](int ox, int kx) {
                const int64_t orow = (static_cast<int64_t>(n) * d.out_h + oy) * d.out_w + ox;
                const VT g = gc[orow * patch_vecs + (ky * d.kernel + kx) * static_cast<int64_t>(d.cvecs) + c];
#pragma unroll
                for (int e = 0; e < V; ++e) acc[e] += to_f32(g.v[e]);
            });
        });
        VT r;
#pragma unroll
        for (int e = 0; e < V; ++e) r.v[e] = from_f32<T>(acc[e]);
        gx[static_cast<int64_t>(row) * d.cvecs + c] = r;
    });
}

void col2im(const Context& ctx, DType dtype, const Ops::ConvShape& s, const void* grad_cols, void* grad_x) {
    require_conv(s, "col2im");
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        dispatch_vec<T>(row_vec<T>(s.channels, {grad_cols, grad_x}), [&](auto vec) {
            constexpr int V = decltype(vec)::value;
            const ConvDims d = conv_dims(s, V);
            const RowItems items = row_items(s.in_rows(), s.channels / V);
            col2im_kernel<T, V><<<tile_grid(ctx, items), kThreads, 0, ctx.stream>>>(
                static_cast<const T*>(grad_cols), static_cast<T*>(grad_x), d, items);
            SB_CHECK_LAUNCH();
        });
    });
}

// ---- max pool. Forward: an item is one channel vector of one output pixel: the maximum of its
// window's in-bounds pixels and, as one byte, the window position (ky * kernel + kx) of the
// first maximum (kNoMaxpoolArgmax when every in-bounds value is NaN), in one pass over x (two for
// a window of only -inf and NaN).
// Backward as a gather: an item is one channel vector of an input pixel (of a 2x2 block of them
// for kernel 3, stride 2, padding 1), which sums grad_out over the covering windows whose
// recorded position it is, in the CPU's window order; x is not read again.

constexpr uint8_t kNoArgmax = Ops::kNoMaxpoolArgmax;

// One element's maximum over a window fed in window order (ky, then kx), as the CPU's: the
// first non-NaN value, then each strictly larger one, so NaN never wins and ties keep the first
// maximum (its bits too: -0 before +0 stays -0). add() takes only values above -inf (one compare
// per value); a window whose values are all -inf or NaN is then left without a position, and
// settle(), fed the window again, gives it the CPU's: its first -inf (kNoArgmax if all NaN).
struct FirstMax {
    float m = -INFINITY;
    uint32_t k = kNoArgmax;
    __device__ __forceinline__ void add(float v, uint32_t position) {
        if (v > m) {
            m = v;
            k = position;
        }
    }
    __device__ __forceinline__ void settle(float v, uint32_t position) {
        if (k == kNoArgmax && v == -INFINITY) k = position;
    }
};

template <int V> __device__ __forceinline__ bool unsettled(const FirstMax (&w)[V]) {
    bool any = false;
#pragma unroll
    for (int e = 0; e < V; ++e) any |= w[e].k == kNoArgmax;
    return any;
}

template <class T, int V>
__device__ __forceinline__ void store_max(const FirstMax (&w)[V], int64_t o, VecN<T, V>* ov, VecN<uint8_t, V>* av) {
    VecN<T, V> r;
    VecN<uint8_t, V> best;
#pragma unroll
    for (int e = 0; e < V; ++e) {
        r.v[e] = from_f32<T>(w[e].m);
        best.v[e] = static_cast<uint8_t>(w[e].k);
    }
    ov[o] = r;
    av[o] = best;
}

template <class T, int V>
__global__ void maxpool_forward_kernel(const T* __restrict__ x, T* __restrict__ out, uint8_t* __restrict__ argmax,
                                       ConvDims d, RowItems items) {
    using VT = VecN<T, V>;
    const VT* xv = reinterpret_cast<const VT*>(x);
    for_each_item(items, [&](uint32_t orow, uint32_t c) {
        uint32_t n, oy, ox;
        split_pixel(orow, d.div_ow, d.div_oh, n, oy, ox);
        FirstMax w[V];
        const int y0 = static_cast<int>(oy) * d.stride - d.padding;
        const int x0 = static_cast<int>(ox) * d.stride - d.padding;
        const auto for_each_position = [&](auto&& f) {  // f(element vector, window position), in window order
            for (int y = max(y0, 0); y < min(y0 + d.kernel, d.height); ++y)
                for (int xx = max(x0, 0); xx < min(x0 + d.kernel, d.width); ++xx)
                    f(xv[((static_cast<int64_t>(n) * d.height + y) * d.width + xx) * d.cvecs + c],
                      static_cast<uint32_t>((y - y0) * d.kernel + (xx - x0)));
        };
        for_each_position([&](const VT& a, uint32_t k) {
#pragma unroll
            for (int e = 0; e < V; ++e) w[e].add(to_f32(a.v[e]), k);
        });
        if (unsettled(w))
            for_each_position([&](const VT& a, uint32_t k) {
#pragma unroll
                for (int e = 0; e < V; ++e) w[e].settle(to_f32(a.v[e]), k);
            });
        store_max<T, V>(w, static_cast<int64_t>(orow) * d.cvecs + c, reinterpret_cast<VT*>(out),
                        reinterpret_cast<VecN<uint8_t, V>*>(argmax));
    });
}

template <class T, int V>
__global__ void maxpool_backward_kernel(const uint8_t* __restrict__ argmax, const T* __restrict__ grad_out,
                                        T* __restrict__ grad_x, ConvDims d, RowItems items) {
    using VT = VecN<T, V>;
    using VI = VecN<uint8_t, V>;
    const VI* av = reinterpret_cast<const VI*>(argmax);
    const VT* gv = reinterpret_cast<const VT*>(grad_out);
    VT* gx = reinterpret_cast<VT*>(grad_x);
    for_each_item(items, [&](uint32_t row, uint32_t c) {
        uint32_t n, y, xx;
        split_pixel(row, d.div_w, d.div_h, n, y, xx);
        float acc[V] = {};
        for_each_cover(static_cast<int>(y), d.padding, d.kernel, d.out_h, d.div_stride, [&](int oy, int ky) {
            for_each_cover(static_cast<int>(xx), d.padding, d.kernel, d.out_w, d.div_stride, [&](int ox, int kx) {
                const int64_t o = ((static_cast<int64_t>(n) * d.out_h + oy) * d.out_w + ox) * d.cvecs + c;
                const VI a = av[o];
                const uint8_t k = static_cast<uint8_t>(ky * d.kernel + kx);
                bool any = false;
#pragma unroll
                for (int e = 0; e < V; ++e) any |= a.v[e] == k;
                if (!any) return;
                const VT g = gv[o];
#pragma unroll
                for (int e = 0; e < V; ++e)
                    if (a.v[e] == k) acc[e] += to_f32(g.v[e]);
            });
        });
        VT r;
#pragma unroll
        for (int e = 0; e < V; ++e) r.v[e] = from_f32<T>(acc[e]);
        gx[static_cast<int64_t>(row) * d.cvecs + c] = r;
    });
}

// Backward for ResNet's pool (kernel 3, stride 2, padding 1): an item is one channel vector
// of a 2x2 block of input pixels, rows 2by-1, 2by and columns 2bx-1, 2bx (those inside the
// image). Only the 2x2 windows (by-1 .. by) x (bx-1 .. bx) cover them, so a thread loads each
// window's argmax and grad_out once for four pixels (the generic gather loads a window once
// per pixel it covers) and splits its index once. Pixel (py, px) of the block is position
// (py + 2 - 2wy, px + 2 - 2wx) of window (wy, wx), inside it where both are at most 2.
// Windows are added in (wy, wx) order: output rows, then columns, ascending, as the CPU.
template <class T, int V>
__global__ void maxpool_backward_3x3s2_kernel(const uint8_t* __restrict__ argmax, const T* __restrict__ grad_out,
                                              T* __restrict__ grad_x, ConvDims d, FastDivmod div_bw,
                                              FastDivmod div_bh, RowItems blocks) {
    using VT = VecN<T, V>;
    using VI = VecN<uint8_t, V>;
    const VI* av = reinterpret_cast<const VI*>(argmax);
    const VT* gv = reinterpret_cast<const VT*>(grad_out);
    VT* gx = reinterpret_cast<VT*>(grad_x);
    for_each_item(blocks, [&](uint32_t block, uint32_t c) {
        uint32_t n, by, bx;
        split_pixel(block, div_bw, div_bh, n, by, bx);
        float acc[2][2][V] = {};
#pragma unroll
        for (int wy = 0; wy < 2; ++wy)
#pragma unroll
            for (int wx = 0; wx < 2; ++wx) {
                const int oy = static_cast<int>(by) - 1 + wy, ox = static_cast<int>(bx) - 1 + wx;
                if (oy < 0 || oy >= d.out_h || ox < 0 || ox >= d.out_w) continue;
                const int64_t o = ((static_cast<int64_t>(n) * d.out_h + oy) * d.out_w + ox) * d.cvecs + c;
                const VI a = av[o];
                uint32_t in_block = 0;  // bit k: window position k is one of the block's pixels
#pragma unroll
                for (int py = 0; py < 2; ++py)
#pragma unroll
                    for (int px = 0; px < 2; ++px)
                        if (py + 2 - 2 * wy <= 2 && px + 2 - 2 * wx <= 2)
                            in_block |= 1u << ((py + 2 - 2 * wy) * 3 + (px + 2 - 2 * wx));
                bool any = false;
#pragma unroll
                for (int e = 0; e < V; ++e) any |= a.v[e] < 9 && ((in_block >> a.v[e]) & 1u);
                if (!any) continue;
                const VT g = gv[o];
#pragma unroll
                for (int py = 0; py < 2; ++py)
#pragma unroll
                    for (int px = 0; px < 2; ++px) {
                        if (py + 2 - 2 * wy > 2 || px + 2 - 2 * wx > 2) continue;
                        const uint8_t k = static_cast<uint8_t>((py + 2 - 2 * wy) * 3 + (px + 2 - 2 * wx));
#pragma unroll
                        for (int e = 0; e < V; ++e)
                            if (a.v[e] == k) acc[py][px][e] += to_f32(g.v[e]);
                    }
            }
#pragma unroll
        for (int py = 0; py < 2; ++py)
#pragma unroll
            for (int px = 0; px < 2; ++px) {
                const int y = 2 * static_cast<int>(by) - 1 + py, xx = 2 * static_cast<int>(bx) - 1 + px;
                if (y < 0 || y >= d.height || xx < 0 || xx >= d.width) continue;
                VT r;
#pragma unroll
                for (int e = 0; e < V; ++e) r.v[e] = from_f32<T>(acc[py][px][e]);
                gx[((static_cast<int64_t>(n) * d.height + y) * d.width + xx) * d.cvecs + c] = r;
            }
    });
}

void maxpool_forward(const Context& ctx, DType dtype, const Ops::ConvShape& s, const void* x, void* out,
                     uint8_t* argmax) {
    require_conv(s, "maxpool_forward");
    SB_REQUIRE(s.kernel * s.kernel < kNoArgmax, "maxpool_forward: a window of more than 254 positions");
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        // The byte vectors of argmax are V-aligned when the channel vectors are 16-byte aligned.
        dispatch_vec<T>(row_vec<T>(s.channels, {x, out, argmax}), [&](auto vec) {
            constexpr int V = decltype(vec)::value;
            const ConvDims d = conv_dims(s, V);
            const RowItems items = row_items(s.out_rows(), s.channels / V);
            maxpool_forward_kernel<T, V><<<tile_grid(ctx, items), kThreads, 0, ctx.stream>>>(
                static_cast<const T*>(x), static_cast<T*>(out), argmax, d, items);
            SB_CHECK_LAUNCH();
        });
    });
}

void maxpool_backward(const Context& ctx, DType dtype, const Ops::ConvShape& s, const uint8_t* argmax,
                      const void* grad_out, void* grad_x) {
    require_conv(s, "maxpool_backward");
    SB_REQUIRE(s.kernel * s.kernel < kNoArgmax, "maxpool_backward: a window of more than 254 positions");
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        dispatch_vec<T>(row_vec<T>(s.channels, {argmax, grad_out, grad_x}), [&](auto vec) {
            constexpr int V = decltype(vec)::value;
            const ConvDims d = conv_dims(s, V);
            const T* g = static_cast<const T*>(grad_out);
            T* gx = static_cast<T*>(grad_x);
            if (s.kernel == 3 && s.stride == 2 && s.padding == 1) {
                // Blocks by = (y + 1) / 2 for y < height: height / 2 + 1 of them (likewise columns).
                const int bh = s.height / 2 + 1, bw = s.width / 2 + 1;
                const RowItems blocks = row_items(int64_t{s.batch} * bh * bw, s.channels / V);
                maxpool_backward_3x3s2_kernel<T, V><<<tile_grid(ctx, blocks), kThreads, 0, ctx.stream>>>(
                    argmax, g, gx, d, FastDivmod(static_cast<uint32_t>(bw)), FastDivmod(static_cast<uint32_t>(bh)),
                    blocks);
            } else {
                const RowItems ins = row_items(s.in_rows(), s.channels / V);
                maxpool_backward_kernel<T, V><<<tile_grid(ctx, ins), kThreads, 0, ctx.stream>>>(argmax, g, gx, d, ins);
            }
            SB_CHECK_LAUNCH();
        });
    });
}

// ---- global average pool. Forward: an item is one channel vector of one image, summing
// its `pixels` rows in order (consecutive threads read consecutive channels of a row).
// Backward: an item is one channel vector of one input row.

template <class T, int V>
__global__ void avgpool_forward_kernel(const T* __restrict__ x, int pixels, uint32_t cvecs, T* __restrict__ out,
                                       RowItems items) {
    using VT = VecN<T, V>;
    const VT* xv = reinterpret_cast<const VT*>(x);
    VT* ov = reinterpret_cast<VT*>(out);
    const float inv = 1.0f / static_cast<float>(pixels);
    for_each_item(items, [&](uint32_t n, uint32_t c) {
        const VT* src = xv + static_cast<int64_t>(n) * pixels * cvecs + c;
        float acc[V] = {};
#pragma unroll 4
        for (int p = 0; p < pixels; ++p) {
            const VT a = src[static_cast<int64_t>(p) * cvecs];
#pragma unroll
            for (int e = 0; e < V; ++e) acc[e] += to_f32(a.v[e]);
        }
        VT r;
#pragma unroll
        for (int e = 0; e < V; ++e) r.v[e] = from_f32<T>(acc[e] * inv);
        ov[static_cast<int64_t>(n) * cvecs + c] = r;
    });
}

template <class T, int V>
__global__ void avgpool_backward_kernel(const T* __restrict__ grad_out, FastDivmod div_pixels, uint32_t cvecs,
                                        T* __restrict__ grad_x, RowItems items) {
    using VT = VecN<T, V>;
    const VT* gv = reinterpret_cast<const VT*>(grad_out);
    VT* gx = reinterpret_cast<VT*>(grad_x);
    const float pixels = static_cast<float>(div_pixels.d);
    for_each_item(items, [&](uint32_t row, uint32_t c) {
        const VT g = gv[static_cast<int64_t>(div_pixels.div(row)) * cvecs + c];
        VT r;
#pragma unroll
        for (int e = 0; e < V; ++e) r.v[e] = from_f32<T>(to_f32(g.v[e]) / pixels);
        gx[static_cast<int64_t>(row) * cvecs + c] = r;
    });
}

void avgpool_forward(const Context& ctx, DType dtype, const void* x, int64_t batch, int pixels, int64_t cols,
                     void* out) {
    if (batch <= 0 || cols <= 0) return;
    SB_REQUIRE(pixels > 0 && batch * pixels < (int64_t{1} << 31), "avgpool_forward: bad shape");
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        dispatch_vec<T>(row_vec<T>(cols, {x, out}), [&](auto vec) {
            constexpr int V = decltype(vec)::value;
            const RowItems items = row_items(batch, cols / V);
            avgpool_forward_kernel<T, V><<<tile_grid(ctx, items), kThreads, 0, ctx.stream>>>(
                static_cast<const T*>(x), pixels, static_cast<uint32_t>(cols / V), static_cast<T*>(out), items);
            SB_CHECK_LAUNCH();
        });
    });
}

void avgpool_backward(const Context& ctx, DType dtype, const void* grad_out, int64_t batch, int pixels,
                      int64_t cols, void* grad_x) {
    if (batch <= 0 || cols <= 0) return;
    SB_REQUIRE(pixels > 0 && batch * pixels < (int64_t{1} << 31), "avgpool_backward: bad shape");
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        dispatch_vec<T>(row_vec<T>(cols, {grad_out, grad_x}), [&](auto vec) {
            constexpr int V = decltype(vec)::value;
            const RowItems items = row_items(batch * pixels, cols / V);
            avgpool_backward_kernel<T, V><<<tile_grid(ctx, items), kThreads, 0, ctx.stream>>>(
                static_cast<const T*>(grad_out), FastDivmod(static_cast<uint32_t>(pixels)),
                static_cast<uint32_t>(cols / V), static_cast<T*>(grad_x), items);
            SB_CHECK_LAUNCH();
        });
    });
}

// ---- BatchNorm over the rows, per channel. The rows x cols matrix is cut into tiles: a
// block of W x TY threads (W * TY = 256) owns W channel vectors (W the power of two
// covering the vectors, at most 32) and one chunk of rows, each thread every TY-th row of
// it, kUnroll rows' loads in flight. Chunks depend only on (rows, cols, sm_count).
//
// Forward: stage 1 sums d = x - x[0, c] and d^2 per thread in fp32 (the shift by the
// channel's first value keeps a large mean from cancelling the variance), a fixed tree
// over TY gives one partial per chunk; stage 2, a block per channel, adds the chunks in
// double in a fixed tree and writes mean and rstd; stage 3 normalises (same tiles).
// Backward: stage 1 sums dy and dy * xhat the same way; stage 2 writes grad_beta,
// grad_gamma and the two means the elementwise stage 3 needs (into the scratch).

namespace {

constexpr int kBnUnroll = 4;
constexpr int64_t kBnMaxChunks = 2048;
constexpr int64_t kBnMinRowsPerChunk = 64;
constexpr int kBnCombineThreads = 128;
constexpr int kBnColsPerTile = 256;  // channels a block covers, about, for the chunk count

int64_t bn_chunks(const Context& ctx, int64_t rows, int64_t cols) {
    const int64_t col_tiles = (cols + kBnColsPerTile - 1) / kBnColsPerTile;
    const int64_t want = (8 * static_cast<int64_t>(std::max(ctx.sm_count, 1)) + col_tiles - 1) / col_tiles;
    const int64_t by_rows = (rows + kBnMinRowsPerChunk - 1) / kBnMinRowsPerChunk;
    const int64_t chunks = std::max<int64_t>(1, std::min({want, by_rows, kBnMaxChunks}));
    const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;  // no empty chunk
    return (rows + rows_per_chunk - 1) / rows_per_chunk;
}

struct BnGrid {
    dim3 grid, block;
    int64_t chunks = 1, rows_per_chunk = 1;
};

BnGrid bn_grid(const Context& ctx, int64_t rows, int64_t cols, int vec) {
    BnGrid g;
    const int64_t cvecs = cols / vec;
    int w = 1;
    while (w < 32 && w < cvecs) w *= 2;
    g.block = dim3(static_cast<unsigned>(w), static_cast<unsigned>(kThreads / w));
    g.chunks = bn_chunks(ctx, rows, cols);
    g.rows_per_chunk = (rows + g.chunks - 1) / g.chunks;
    g.grid = dim3(static_cast<unsigned>((cvecs + w - 1) / w), static_cast<unsigned>(g.chunks));
    return g;
}

}  // namespace

size_t batchnorm_scratch_floats(const Context& ctx, int64_t rows, int64_t cols) {
    return static_cast<size_t>((2 * bn_chunks(ctx, rows, cols) + 2) * cols);
}

// The forward's output before any residual and ReLU; the ReLU backward recomputes it with
// the same operations, so its mask is the forward's bit for bit.
__device__ __forceinline__ float bn_apply(float x, float mu, float rs, float ga, float be) {
    return (x - mu) * rs * ga + be;
}

// Stage 1 of both directions. Forward (dy null): s1 = sum (x - x[0]), s2 = sum (x - x[0])^2.
// Backward: s1 = sum dy, s2 = sum dy * (x - mean) * rstd, dy first masked by relu'(bn(x))
// when kRelu (gamma and beta then give bn(x)).
template <class T, int V, bool kBackward, bool kRelu = false>
__global__ void batchnorm_partials_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                                          const float* __restrict__ mean, const float* __restrict__ rstd,
                                          const float* __restrict__ gamma, const float* __restrict__ beta,
                                          int64_t rows, int64_t cols, int64_t rows_per_chunk,
                                          float* __restrict__ part1, float* __restrict__ part2) {
    using VT = VecN<T, V>;
    __shared__ float sh1[kThreads * 8 + kThreads];
    __shared__ float sh2[kThreads * 8 + kThreads];
    const int tx = threadIdx.x, ty = threadIdx.y, ny = blockDim.y;
    const int64_t cvecs = cols / V;
    const int64_t cv = static_cast<int64_t>(blockIdx.x) * blockDim.x + tx;
    const bool active = cv < cvecs;
    const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
    const int64_t r1 = min(rows, r0 + rows_per_chunk);
    const VT* xv = reinterpret_cast<const VT*>(x);
    const VT* gv = reinterpret_cast<const VT*>(dy);
    float s1[V] = {}, s2[V] = {}, a[V], b[V], ga[V], be[V];
    if (active) {
        if constexpr (kBackward) {
#pragma unroll
            for (int e = 0; e < V; ++e) {
                a[e] = mean[cv * V + e];
                b[e] = rstd[cv * V + e];
                if constexpr (kRelu) {
                    ga[e] = gamma[cv * V + e];
                    be[e] = beta[cv * V + e];
                }
            }
        } else {
            const VT first = xv[cv];
#pragma unroll
            for (int e = 0; e < V; ++e) a[e] = to_f32(first.v[e]);
        }
        for (int64_t r = r0 + ty; r < r1; r += kBnUnroll * ny) {
            VT xs[kBnUnroll], gs[kBnUnroll];
#pragma unroll
            for (int u = 0; u < kBnUnroll; ++u) {
                const int64_t rr = r + static_cast<int64_t>(u) * ny;
                if (rr < r1) {
                    xs[u] = xv[rr * cvecs + cv];
                    if constexpr (kBackward) gs[u] = gv[rr * cvecs + cv];
                }
            }
#pragma unroll
            for (int u = 0; u < kBnUnroll; ++u) {
                if (r + static_cast<int64_t>(u) * ny >= r1) break;
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    if constexpr (kBackward) {
                        float g = to_f32(gs[u].v[e]);
                        if constexpr (kRelu) g = bn_apply(to_f32(xs[u].v[e]), a[e], b[e], ga[e], be[e]) > 0.0f ? g : 0.0f;
                        s1[e] += g;
                        s2[e] += g * (to_f32(xs[u].v[e]) - a[e]) * b[e];
                    } else {
                        const float d = to_f32(xs[u].v[e]) - a[e];
                        s1[e] += d;
                        s2[e] += d * d;
                    }
                }
            }
        }
    }
    // Fixed tree over the TY threads of each channel.
    const int pitch = blockDim.x * V + 1;
#pragma unroll
    for (int e = 0; e < V; ++e) {
        sh1[ty * pitch + tx * V + e] = s1[e];
        sh2[ty * pitch + tx * V + e] = s2[e];
    }
    __syncthreads();
    for (int half = ny / 2; half > 0; half /= 2) {
        if (ty < half)
#pragma unroll
            for (int e = 0; e < V; ++e) {
                sh1[ty * pitch + tx * V + e] += sh1[(ty + half) * pitch + tx * V + e];
                sh2[ty * pitch + tx * V + e] += sh2[(ty + half) * pitch + tx * V + e];
            }
        __syncthreads();
    }
    if (ty == 0 && active)
#pragma unroll
        for (int e = 0; e < V; ++e) {
            part1[static_cast<int64_t>(blockIdx.y) * cols + cv * V + e] = sh1[tx * V + e];
            part2[static_cast<int64_t>(blockIdx.y) * cols + cv * V + e] = sh2[tx * V + e];
        }
}

namespace {

// Per channel blockIdx.x: the chunks' two partials added in double, in a fixed tree;
// every thread of the block gets the sums.
__device__ void combine_partials(const float* __restrict__ part1, const float* __restrict__ part2, int64_t chunks,
                                 int64_t cols, double& sum1, double& sum2) {
    __shared__ double sh1[kBnCombineThreads], sh2[kBnCombineThreads];
    const int64_t c = blockIdx.x;
    double a = 0.0, b = 0.0;
    for (int64_t i = threadIdx.x; i < chunks; i += blockDim.x) {
        a += part1[i * cols + c];
        b += part2[i * cols + c];
    }
    sh1[threadIdx.x] = a;
    sh2[threadIdx.x] = b;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (static_cast<int>(threadIdx.x) < half) {
            sh1[threadIdx.x] += sh1[threadIdx.x + half];
            sh2[threadIdx.x] += sh2[threadIdx.x + half];
        }
        __syncthreads();
    }
    sum1 = sh1[0];
    sum2 = sh2[0];
}

}  // namespace

template <class T>
__global__ void batchnorm_stats_kernel(const T* __restrict__ x, const float* __restrict__ part1,
                                       const float* __restrict__ part2, int64_t chunks, int64_t rows, int64_t cols,
                                       float eps, float* __restrict__ mean, float* __restrict__ rstd) {
    double s1, s2;
    combine_partials(part1, part2, chunks, cols, s1, s2);
    if (threadIdx.x == 0) {
        const int64_t c = blockIdx.x;
        const double n = static_cast<double>(rows);
        const double shifted_mean = s1 / n;
        const double var = fmax(s2 / n - shifted_mean * shifted_mean, 0.0);
        mean[c] = static_cast<float>(static_cast<double>(to_f32(x[c])) + shifted_mean);
        rstd[c] = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
    }
}

// coef[c] = mean of dy, coef[cols + c] = mean of dy * xhat (as float, as the CPU rounds them).
__global__ void batchnorm_param_grad_kernel(const float* __restrict__ part1, const float* __restrict__ part2,
                                            int64_t chunks, int64_t rows, int64_t cols,
                                            float* __restrict__ grad_gamma, float* __restrict__ grad_beta,
                                            float* __restrict__ coef) {
    double s1, s2;
    combine_partials(part1, part2, chunks, cols, s1, s2);
    if (threadIdx.x == 0) {
        const int64_t c = blockIdx.x;
        const double n = static_cast<double>(rows);
        grad_beta[c] = static_cast<float>(s1);
        grad_gamma[c] = static_cast<float>(s2);
        coef[c] = static_cast<float>(s1 / n);
        coef[cols + c] = static_cast<float>(s2 / n);
    }
}

// Stage 3 of both directions on the stage-1 tiles; a thread keeps its channels' constants
// in registers. Forward: out = (x - mean) rstd gamma + beta (+ residual, then relu, when
// fused: one rounding to T at the end). Backward (dy, gx may alias, so no __restrict__; each
// thread reads its vectors before writing them): gx = gamma rstd (dy - mean(dy) - xhat
// mean(dy xhat)), dy masked by relu'(bn(x)) when kRelu.
template <class T, int V, bool kRelu = false, bool kResidual = false>
__global__ void batchnorm_normalize_kernel(const T* __restrict__ x, const float* __restrict__ gamma,
                                           const float* __restrict__ beta, const float* __restrict__ mean,
                                           const float* __restrict__ rstd, int64_t rows, int64_t cols,
                                           int64_t rows_per_chunk, const T* __restrict__ residual,
                                           T* __restrict__ out) {
    using VT = VecN<T, V>;
    const int ny = blockDim.y;
    const int64_t cvecs = cols / V;
    const int64_t cv = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (cv >= cvecs) return;
    const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
    const int64_t r1 = min(rows, r0 + rows_per_chunk);
    float mu[V], rs[V], ga[V], be[V];
#pragma unroll
    for (int e = 0; e < V; ++e) {
        mu[e] = mean[cv * V + e];
        rs[e] = rstd[cv * V + e];
        ga[e] = gamma[cv * V + e];
        be[e] = beta[cv * V + e];
    }
    const VT* xv = reinterpret_cast<const VT*>(x);
    const VT* resv = reinterpret_cast<const VT*>(residual);
    VT* ov = reinterpret_cast<VT*>(out);
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kBnUnroll * ny) {
        VT xs[kBnUnroll], res[kBnUnroll];
#pragma unroll
        for (int u = 0; u < kBnUnroll; ++u) {
            const int64_t rr = r + static_cast<int64_t>(u) * ny;
            if (rr < r1) {
                xs[u] = xv[rr * cvecs + cv];
                if constexpr (kResidual) res[u] = resv[rr * cvecs + cv];
            }
        }
#pragma unroll
        for (int u = 0; u < kBnUnroll; ++u) {
            const int64_t rr = r + static_cast<int64_t>(u) * ny;
            if (rr >= r1) break;
            VT o;
#pragma unroll
            for (int e = 0; e < V; ++e) {
                float y = bn_apply(to_f32(xs[u].v[e]), mu[e], rs[e], ga[e], be[e]);
                if constexpr (kResidual) y += to_f32(res[u].v[e]);
                if constexpr (kRelu) y = y > 0.0f ? y : 0.0f;
                o.v[e] = from_f32<T>(y);
            }
            ov[rr * cvecs + cv] = o;
        }
    }
}

template <class T, int V, bool kRelu = false>
__global__ void batchnorm_grad_x_kernel(const T* __restrict__ x, const T* dy, const float* __restrict__ gamma,
                                        const float* __restrict__ beta, const float* __restrict__ mean,
                                        const float* __restrict__ rstd, const float* __restrict__ coef, int64_t rows,
                                        int64_t cols, int64_t rows_per_chunk, T* gx) {
    using VT = VecN<T, V>;
    const int ny = blockDim.y;
    const int64_t cvecs = cols / V;
    const int64_t cv = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (cv >= cvecs) return;
    const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
    const int64_t r1 = min(rows, r0 + rows_per_chunk);
    float mu[V], rs[V], scale[V], m_dy[V], m_dyx[V], ga[V], be[V];
#pragma unroll
    for (int e = 0; e < V; ++e) {
        const int64_t c = cv * V + e;
        mu[e] = mean[c];
        rs[e] = rstd[c];
        scale[e] = gamma[c] * rstd[c];
        ga[e] = gamma[c];
        be[e] = kRelu ? beta[c] : 0.0f;
        m_dy[e] = coef[c];
        m_dyx[e] = coef[cols + c];
    }
    const VT* xv = reinterpret_cast<const VT*>(x);
    const VT* gv = reinterpret_cast<const VT*>(dy);
    VT* ov = reinterpret_cast<VT*>(gx);
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kBnUnroll * ny) {
        VT xs[kBnUnroll], gs[kBnUnroll];
#pragma unroll
        for (int u = 0; u < kBnUnroll; ++u) {
            const int64_t rr = r + static_cast<int64_t>(u) * ny;
            if (rr < r1) {
                xs[u] = xv[rr * cvecs + cv];
                gs[u] = gv[rr * cvecs + cv];
            }
        }
#pragma unroll
        for (int u = 0; u < kBnUnroll; ++u) {
            const int64_t rr = r + static_cast<int64_t>(u) * ny;
            if (rr >= r1) break;
            VT o;
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const float xv_e = to_f32(xs[u].v[e]);
                const float xhat = (xv_e - mu[e]) * rs[e];
                float g = to_f32(gs[u].v[e]);
                if constexpr (kRelu) g = bn_apply(xv_e, mu[e], rs[e], ga[e], be[e]) > 0.0f ? g : 0.0f;
                o.v[e] = from_f32<T>(scale[e] * (g - m_dy[e] - xhat * m_dyx[e]));
            }
            ov[rr * cvecs + cv] = o;
        }
    }
}

void batchnorm_forward(const Context& ctx, DType dtype, const void* x, const float* gamma, const float* beta,
                       float eps, int64_t rows, int64_t cols, void* out, float* mean, float* rstd, float* scratch,
                       bool relu, const void* residual) {
    SB_REQUIRE(rows > 0 && cols > 0, "batchnorm_forward: empty input");
    SB_REQUIRE(scratch != nullptr, "batchnorm_forward needs a scratch buffer");
    SB_REQUIRE(relu || residual == nullptr, "batchnorm_forward: a residual comes with the ReLU");
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        dispatch_vec<T>(row_vec<T>(cols, {x, out, residual ? residual : x}), [&](auto vec) {
            constexpr int V = decltype(vec)::value;
            const BnGrid g = bn_grid(ctx, rows, cols, V);
            float* part1 = scratch;
            float* part2 = scratch + g.chunks * cols;
            const T* xt = static_cast<const T*>(x);
            batchnorm_partials_kernel<T, V, false><<<g.grid, g.block, 0, ctx.stream>>>(
                xt, nullptr, nullptr, nullptr, nullptr, nullptr, rows, cols, g.rows_per_chunk, part1, part2);
            SB_CHECK_LAUNCH();
            batchnorm_stats_kernel<T><<<static_cast<unsigned>(cols), kBnCombineThreads, 0, ctx.stream>>>(
                xt, part1, part2, g.chunks, rows, cols, eps, mean, rstd);
            SB_CHECK_LAUNCH();
            const T* res = static_cast<const T*>(residual);
            T* o = static_cast<T*>(out);
            if (residual)
                batchnorm_normalize_kernel<T, V, true, true><<<g.grid, g.block, 0, ctx.stream>>>(
                    xt, gamma, beta, mean, rstd, rows, cols, g.rows_per_chunk, res, o);
            else if (relu)
                batchnorm_normalize_kernel<T, V, true, false><<<g.grid, g.block, 0, ctx.stream>>>(
                    xt, gamma, beta, mean, rstd, rows, cols, g.rows_per_chunk, nullptr, o);
            else
                batchnorm_normalize_kernel<T, V, false, false><<<g.grid, g.block, 0, ctx.stream>>>(
                    xt, gamma, beta, mean, rstd, rows, cols, g.rows_per_chunk, nullptr, o);
            SB_CHECK_LAUNCH();
        });
    });
}

void batchnorm_backward(const Context& ctx, DType dtype, const void* x, const void* grad_out, const float* gamma,
                        const float* mean, const float* rstd, int64_t rows, int64_t cols, void* grad_x,
                        float* grad_gamma, float* grad_beta, float* scratch, const float* relu_beta) {
    SB_REQUIRE(rows > 0 && cols > 0, "batchnorm_backward: empty input");
    SB_REQUIRE(scratch != nullptr, "batchnorm_backward needs a scratch buffer");
    dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        dispatch_vec<T>(row_vec<T>(cols, {x, grad_out, grad_x}), [&](auto vec) {
            constexpr int V = decltype(vec)::value;
            const BnGrid g = bn_grid(ctx, rows, cols, V);
            float* part1 = scratch;
            float* part2 = scratch + g.chunks * cols;
            float* coef = scratch + 2 * g.chunks * cols;
            const T* xt = static_cast<const T*>(x);
            const T* gt = static_cast<const T*>(grad_out);
            if (relu_beta)
                batchnorm_partials_kernel<T, V, true, true><<<g.grid, g.block, 0, ctx.stream>>>(
                    xt, gt, mean, rstd, gamma, relu_beta, rows, cols, g.rows_per_chunk, part1, part2);
            else
                batchnorm_partials_kernel<T, V, true, false><<<g.grid, g.block, 0, ctx.stream>>>(
                    xt, gt, mean, rstd, nullptr, nullptr, rows, cols, g.rows_per_chunk, part1, part2);
            SB_CHECK_LAUNCH();
            batchnorm_param_grad_kernel<<<static_cast<unsigned>(cols), kBnCombineThreads, 0, ctx.stream>>>(
                part1, part2, g.chunks, rows, cols, grad_gamma, grad_beta, coef);
            SB_CHECK_LAUNCH();
            if (relu_beta)
                batchnorm_grad_x_kernel<T, V, true><<<g.grid, g.block, 0, ctx.stream>>>(
                    xt, gt, gamma, relu_beta, mean, rstd, coef, rows, cols, g.rows_per_chunk, static_cast<T*>(grad_x));
            else
                batchnorm_grad_x_kernel<T, V, false><<<g.grid, g.block, 0, ctx.stream>>>(
                    xt, gt, gamma, nullptr, mean, rstd, coef, rows, cols, g.rows_per_chunk, static_cast<T*>(grad_x));
            SB_CHECK_LAUNCH();
        });
    });
}

}  // namespace sb::kernels
