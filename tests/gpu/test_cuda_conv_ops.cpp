// CudaOps' convolutional-layer ops against the fp32 CPU backend (CpuOps) on fresh random
// inputs, for f32, bf16 and f16: im2col and col2im (conv1's 3 channels, odd channel
// counts, kernels 1/3/7, strides 1/2, paddings 0/1/3, batch > 1), max pool forward (out
// and the argmax bytes exactly as the CPU's: ties to the first maximum in window order,
// NaN never wins, 255 for an all-NaN window) and backward (routing by those bytes, each
// input's windows added in the CPU's order), global average pool, and BatchNorm forward
// and backward (in place too; a large ResNet shape with a mean of 100 that a
// sum-of-squares variance would cancel). Outputs are NaN-poisoned and guarded on both
// sides; an offset of one element takes the unvectorised path. Tolerances on
// ‖out−ref‖/‖ref‖: fp32 1e-5, bf16/fp16 1e-2; gathers (im2col, max pool forward and
// backward, average pool backward) are exact; fp32 statistics and parameter gradients
// 1e-5 for every input dtype. Reductions must be bitwise reproducible and replay from a
// CUDA graph. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "models/cpu/cpu_ops.h"
#include "models/cuda/cuda_ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace sb {
namespace {

using gpu_test::close;
using gpu_test::conv;
using gpu_test::encode;
using gpu_test::GpuArray;
using gpu_test::host_view;
using gpu_test::rounded;
using gpu_test::tolerance;

const DType kDTypes[] = {DType::f32, DType::bf16, DType::f16};

std::string describe(const Ops::ConvShape& s) {
    return "batch " + std::to_string(s.batch) + " " + std::to_string(s.height) + "x" + std::to_string(s.width) + "x" +
           std::to_string(s.channels) + " kernel " + std::to_string(s.kernel) + " stride " + std::to_string(s.stride) +
           " padding " + std::to_string(s.padding);
}

// ResNet's convolutions in miniature: conv1 (7x7/2 pad 3 on 3 channels), 3x3 at strides 1
// and 2, 1x1 stride-2 downsampling, odd channels, no padding, 2048 channels on few rows.
const Ops::ConvShape kConvShapes[] = {
    conv(2, 9, 11, 3, 7, 2, 3),  conv(2, 7, 6, 5, 3, 1, 1),   conv(2, 8, 7, 64, 3, 2, 1),
    conv(3, 6, 6, 16, 1, 2, 0),  conv(2, 9, 8, 8, 3, 1, 0),   conv(1, 3, 3, 2048, 3, 1, 1),
    conv(2, 12, 12, 24, 7, 2, 3), conv(1, 1, 1, 3, 1, 1, 0),
};

// Max pools. ResNet's 3x3/2 pad 1 takes the backward's 2x2-input-block path; its edges: an odd
// output height or width (10x10, 9x7, 113x113, 6x1, 8x9, 2x3: the last block row or column holds one
// input pixel or two), 7x7 and 3-wide images, ResNet's 112x112 and 113x113, 1x1 and one-column
// images, batch > 1 (blocks of the next image), 5 and 3 channels (scalar items), 24 channels (3 bf16
// vectors a pixel: a warp's items straddle blocks), 2048 channels. The per-pixel gather: 2x2/2
// without padding, stride 1, 3x3/2 without padding. The forward is one kernel for every pool. Each
// test below runs every shape at every offset (kPoolOffsets).
const Ops::ConvShape kPoolShapes[] = {
    conv(2, 10, 10, 64, 3, 2, 1), conv(2, 9, 7, 5, 3, 2, 1),  conv(1, 4, 4, 2048, 3, 2, 1),
    conv(2, 7, 7, 8, 3, 2, 1),    conv(1, 112, 112, 64, 3, 2, 1), conv(1, 113, 113, 8, 3, 2, 1),
    conv(2, 1, 1, 8, 3, 2, 1),    conv(2, 6, 1, 16, 3, 2, 1), conv(3, 8, 9, 24, 3, 2, 1),
    conv(2, 2, 3, 3, 3, 2, 1),    conv(1, 6, 6, 3, 2, 2, 0),  conv(2, 5, 5, 16, 3, 1, 1),
    conv(2, 9, 9, 8, 3, 2, 0),
};

class ConvOpsTest : public gpu_test::CudaOpsFixture {
protected:
    // CUDA's im2col of random x against the CPU's, byte for byte (a copy with zeros: exact), the
    // tensors `offset` elements past an aligned address.
    void expect_im2col_matches_cpu(DType dtype, const Ops::ConvShape& s, int64_t offset) {
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << describe(s) << " offset=" << offset);
        std::vector<float> x = rounded(values(static_cast<size_t>(s.in_rows() * s.channels), -1.0f, 1.0f), dtype);
        GpuArray gx(*gpu_, dtype, s.in_rows(), s.channels, offset);
        GpuArray gcols(*gpu_, dtype, s.out_rows(), s.patch(), offset);
        gx.set(x);
        gpu_->im2col(s, gx.tensor, gcols.tensor);
        std::vector<float> ref(static_cast<size_t>(s.out_rows() * s.patch()));
        cpu_.im2col(s, host_view(x, s.in_rows(), s.channels), host_view(ref, s.out_rows(), s.patch()));
        EXPECT_EQ(gcols.get_bytes(), encode(ref, dtype));
        EXPECT_TRUE(gcols.guards_intact());
    }
};

// ---------------------------------------------------------------------------- im2col / col2im

TEST_F(ConvOpsTest, Im2colMatchesCpuExactly) {
    for (DType dtype : kDTypes)
        for (const Ops::ConvShape& s : kConvShapes)
            for (int64_t offset : {0, 1}) expect_im2col_matches_cpu(dtype, s, offset);
}

// Channel counts that do not vectorise (1, 3, 5) take the staged path where a window's input
// rows fit in shared memory (each block writes one output row's slice of cols as 16-byte
// vectors, with scalars before its first and after its last whole vector), else the flat path
// (16-byte vectors of consecutive patch elements crossing rows). Staged: the stem at full size
// at batch 1 and 2 (224x224x3, 7x7/2 pad 3; 1,843,968 elements per image), and totals of 324,
// 8820 (multiples of 4, not of 8), 1575 and 9 (odd: a tail in every dtype; 9 is almost all head
// and tail) and 72, odd widths, padding on every side. Flat: a stem 1200 pixels wide, whose 7
// staged rows (50.6 KB in bf16) exceed 48 KB. Element offsets 0..7 put cols at every
// misalignment for every dtype (the full stem at 0 and 1).
TEST_F(ConvOpsTest, Im2colOnFewChannelsMatchesCpuExactly) {
    const Ops::ConvShape shapes[] = {
        conv(1, 224, 224, 3, 7, 2, 3), conv(2, 224, 224, 3, 7, 2, 3), conv(3, 5, 7, 1, 3, 2, 1),
        conv(2, 9, 11, 3, 7, 2, 3),    conv(1, 7, 5, 5, 3, 1, 1),     conv(1, 3, 3, 1, 3, 1, 0),
        conv(2, 6, 6, 1, 1, 1, 0),     conv(1, 8, 1200, 3, 7, 2, 3),
    };
    for (DType dtype : kDTypes)
        for (const Ops::ConvShape& s : shapes)
            for (int64_t offset = 0; offset < 8; ++offset)
                if (s.in_rows() <= 10000 || offset <= 1)  // the full stem: aligned and one misaligned
                    expect_im2col_matches_cpu(dtype, s, offset);
}

TEST_F(ConvOpsTest, Col2imMatchesCpu) {
    for (DType dtype : kDTypes)
        for (const Ops::ConvShape& s : kConvShapes)
            for (int64_t offset : {0, 1}) {
                SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << describe(s) << " offset=" << offset);
                std::vector<float> g = rounded(values(static_cast<size_t>(s.out_rows() * s.patch())), dtype);
                GpuArray gcols(*gpu_, dtype, s.out_rows(), s.patch(), offset);
                GpuArray gx(*gpu_, dtype, s.in_rows(), s.channels, offset);
                gcols.set(g);
                gpu_->col2im(s, gcols.tensor, gx.tensor);
                std::vector<float> ref(static_cast<size_t>(s.in_rows() * s.channels));
                cpu_.col2im(s, host_view(g, s.out_rows(), s.patch()), host_view(ref, s.in_rows(), s.channels));
                EXPECT_TRUE(close(gx.get(), ref, tolerance(dtype)));
                EXPECT_TRUE(gx.guards_intact());
            }
}

// col2im is im2col's adjoint: <im2col(x), g> == <x, col2im(g)> (checked in fp32).
TEST_F(ConvOpsTest, Col2imIsTheAdjointOfIm2col) {
    for (const Ops::ConvShape& s : kConvShapes) {
        SCOPED_TRACE(describe(s));
        std::vector<float> x = values(static_cast<size_t>(s.in_rows() * s.channels));
        std::vector<float> g = values(static_cast<size_t>(s.out_rows() * s.patch()));
        GpuArray gx(*gpu_, DType::f32, s.in_rows(), s.channels), gcols(*gpu_, DType::f32, s.out_rows(), s.patch());
        GpuArray gdx(*gpu_, DType::f32, s.in_rows(), s.channels), gg(*gpu_, DType::f32, s.out_rows(), s.patch());
        gx.set(x);
        gg.set(g);
        gpu_->im2col(s, gx.tensor, gcols.tensor);
        gpu_->col2im(s, gg.tensor, gdx.tensor);
        const std::vector<float> cols = gcols.get(), dx = gdx.get();
        double lhs = 0.0, rhs = 0.0;
        for (size_t i = 0; i < cols.size(); ++i) lhs += static_cast<double>(cols[i]) * g[i];
        for (size_t i = 0; i < dx.size(); ++i) rhs += static_cast<double>(x[i]) * dx[i];
        EXPECT_NEAR(lhs, rhs, 1e-5 * (std::fabs(lhs) + 1.0));
    }
}

// ---------------------------------------------------------------------------- max pool

// Device bytes (the max pool's argmax) at a byte offset, poisoned and guarded as GpuArray.
class GpuBytes {
public:
    static constexpr uint8_t kPoison = 0xA5;
    GpuBytes(CudaOps& ops, int64_t n, int64_t offset)
        : ops_(&ops), n_(n), offset_(offset), buf_(ops, static_cast<size_t>(offset + n + GpuArray::kGuard)) {
        const std::vector<uint8_t> poison(buf_.bytes(), kPoison);
        ops_->upload(buf_.get(), poison.data(), poison.size());
    }
    uint8_t* data() const { return buf_.as<uint8_t>() + offset_; }
    std::vector<uint8_t> get() const {
        std::vector<uint8_t> out(static_cast<size_t>(n_));
        ops_->download(out.data(), data(), out.size());
        return out;
    }
    bool guards_intact() const {
        std::vector<uint8_t> all(buf_.bytes());
        ops_->download(all.data(), buf_.get(), all.size());
        for (int64_t i = 0; i < static_cast<int64_t>(all.size()); ++i)
            if ((i < offset_ || i >= offset_ + n_) && all[static_cast<size_t>(i)] != kPoison) return false;
        return true;
    }

private:
    CudaOps* ops_;
    int64_t n_, offset_;
    DeviceBuffer buf_;
};

// Offsets (in elements of x and out, in bytes of argmax): all aligned (the 16-byte path),
// all off by one, and aligned tensors with an unaligned argmax (which must fall back too): each
// kernel runs with 16-byte items and with scalar ones.
struct PoolOffsets {
    int64_t tensors, argmax;
};
const PoolOffsets kPoolOffsets[] = {{0, 0}, {1, 1}, {0, 1}};

// Runs the CUDA forward on x (as the dtype stores it) into `argmax` and checks out and the
// argmax bytes against the CPU's exactly; returns the CPU's bytes.
class ConvOpsMaxPool : public ConvOpsTest {
protected:
    std::vector<uint8_t> forward(const Ops::ConvShape& s, DType dtype, std::vector<float> x, PoolOffsets off,
                                 GpuBytes& argmax) {
        const int64_t in_rows = s.in_rows(), out_rows = s.out_rows(), c = s.channels;
        GpuArray gx(*gpu_, dtype, in_rows, c, off.tensors), gout(*gpu_, dtype, out_rows, c, off.tensors);
        gx.set(x);
        gpu_->maxpool_forward(s, gx.tensor, gout.tensor, argmax.data());
        std::vector<float> ref(static_cast<size_t>(out_rows * c));
        std::vector<uint8_t> ref_argmax(ref.size());
        cpu_.maxpool_forward(s, host_view(x, in_rows, c), host_view(ref, out_rows, c), ref_argmax.data());
        EXPECT_EQ(gout.get_bytes(), encode(ref, dtype));
        EXPECT_EQ(argmax.get(), ref_argmax);
        EXPECT_TRUE(gout.guards_intact());
        EXPECT_TRUE(argmax.guards_intact());
        return ref_argmax;
    }

    // Forward and backward on the GPU against the CPU's, bit for bit (the gather adds each
    // input's windows in the CPU's order); small-integer gradients when `integer_grads` (every
    // sum exact whatever the order, so a failure there is the routing), else random ones.
    void check(const Ops::ConvShape& s, DType dtype, const std::vector<float>& x_in, PoolOffsets off,
               bool integer_grads) {
        const std::vector<float> x = rounded(x_in, dtype);
        const int64_t in_rows = s.in_rows(), out_rows = s.out_rows(), c = s.channels;
        GpuBytes argmax(*gpu_, out_rows * c, off.argmax);
        const std::vector<uint8_t> bytes = forward(s, dtype, x, off, argmax);
        std::vector<float> g(bytes.size()), ref(x.size());
        if (integer_grads) {
            std::uniform_int_distribution<int> pick(1, 8);
            for (float& v : g) v = static_cast<float>(pick(rng_));
        } else {
            g = rounded(values(g.size()), dtype);
        }
        cpu_.maxpool_backward(s, bytes.data(), host_view(g, out_rows, c), host_view(ref, in_rows, c));
        GpuArray gg(*gpu_, dtype, out_rows, c, off.tensors), gdx(*gpu_, dtype, in_rows, c, off.tensors);
        gg.set(g);
        gpu_->maxpool_backward(s, argmax.data(), gg.tensor, gdx.tensor);
        EXPECT_EQ(gdx.get_bytes(), encode(ref, dtype));
        EXPECT_TRUE(gdx.guards_intact());
    }
};

TEST_F(ConvOpsMaxPool, ForwardAndArgmaxMatchCpuExactly) {
    for (DType dtype : kDTypes)
        for (const Ops::ConvShape& s : kPoolShapes)
            for (PoolOffsets off : kPoolOffsets) {
                SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << describe(s) << " offsets="
                                                << off.tensors << "/" << off.argmax);
                GpuBytes argmax(*gpu_, s.out_rows() * s.channels, off.argmax);
                forward(s, dtype, rounded(values(static_cast<size_t>(s.in_rows() * s.channels)), dtype), off, argmax);
            }
}

TEST_F(ConvOpsMaxPool, BackwardMatchesCpu) {
    for (DType dtype : kDTypes)
        for (const Ops::ConvShape& s : kPoolShapes)
            for (PoolOffsets off : kPoolOffsets) {
                SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << describe(s) << " offsets="
                                                << off.tensors << "/" << off.argmax);
                check(s, dtype, values(static_cast<size_t>(s.in_rows() * s.channels)), off, false);
            }
}

// A constant image (every position ties: the first in-bounds one of each window wins),
// and values drawn from {-1, 0, 1} (ties among a window's maxima everywhere), after a ReLU
// as in ResNet (zeros tie), and with each zero's sign drawn (-0 and +0 tie: out keeps the
// first one's bits).
TEST_F(ConvOpsMaxPool, TiesGoToTheFirstMaximumInWindowOrder) {
    for (DType dtype : kDTypes)
        for (const Ops::ConvShape& s : kPoolShapes)
            for (PoolOffsets off : kPoolOffsets) {
                SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << describe(s) << " offsets="
                                                << off.tensors << "/" << off.argmax);
                const size_t n = static_cast<size_t>(s.in_rows() * s.channels);
                check(s, dtype, std::vector<float>(n, 0.5f), off, true);
                std::vector<float> x(n);
                std::uniform_int_distribution<int> pick(-1, 1);
                for (float& v : x) v = static_cast<float>(pick(rng_));
                check(s, dtype, x, off, true);
                for (float& v : x) v = std::max(v, 0.0f);
                check(s, dtype, x, off, true);
                std::bernoulli_distribution negative(0.5);
                for (float& v : x)
                    if (v == 0.0f && negative(rng_)) v = -0.0f;
                check(s, dtype, x, off, true);
            }
}

// NaN never wins: scattered NaNs among values from {-1, 0, 1}, -inf values, and the first
// output pixel's window all NaN in every channel (out -inf, argmax 255, no gradient routed);
// then mostly NaN and -inf (a window of only -inf and NaN records its first -inf, which the
// kernels find in a second pass over such windows).
TEST_F(ConvOpsMaxPool, NanNeverWinsAndAnAllNanWindowRecordsNoMaximum) {
    for (DType dtype : kDTypes)
        for (const Ops::ConvShape& s : kPoolShapes)
            for (PoolOffsets off : kPoolOffsets) {
                SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << describe(s) << " offsets="
                                                << off.tensors << "/" << off.argmax);
                const int64_t c = s.channels;
                std::vector<float> x(static_cast<size_t>(s.in_rows() * c));
                std::uniform_int_distribution<int> pick(-1, 1);
                for (float& v : x) v = static_cast<float>(pick(rng_));
                for (size_t i = 1; i < x.size(); i += 5) x[i] = NAN;
                for (size_t i = 2; i < x.size(); i += 13) x[i] = -INFINITY;
                // Output (0, 0, 0)'s window: rows 0 .. kernel - padding - 1 of image 0, same columns.
                const int reach = s.kernel - s.padding;
                for (int y = 0; y < std::min(reach, s.height); ++y)
                    for (int xx = 0; xx < std::min(reach, s.width); ++xx)
                        for (int64_t ch = 0; ch < c; ++ch)
                            x[static_cast<size_t>((static_cast<int64_t>(y) * s.width + xx) * c + ch)] = NAN;
                check(s, dtype, x, off, true);
                GpuBytes argmax(*gpu_, s.out_rows() * c, off.argmax);
                const std::vector<uint8_t> bytes = forward(s, dtype, x, off, argmax);
                for (int64_t ch = 0; ch < c; ++ch) EXPECT_EQ(bytes[static_cast<size_t>(ch)], 255) << ch;
                std::uniform_int_distribution<int> eighths(0, 7);
                for (float& v : x) {
                    const int r = eighths(rng_);
                    v = r < 4 ? NAN : r < 7 ? -INFINITY : -1.0f;
                }
                check(s, dtype, x, off, true);
            }
}

// ---------------------------------------------------------------------------- average pool

TEST_F(ConvOpsTest, AvgPoolMatchesCpu) {
    struct Case {
        int64_t batch;
        int pixels;
        int64_t cols;
    };
    const Case cases[] = {{3, 49, 2048}, {2, 4, 5}, {4, 1, 64}, {5, 9, 3}};
    for (DType dtype : kDTypes)
        for (const Case& k : cases)
            for (int64_t offset : {0, 1}) {
                SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " batch " << k.batch << " pixels " << k.pixels
                                                << " cols " << k.cols << " offset=" << offset);
                const int64_t rows = k.batch * k.pixels;
                std::vector<float> x = rounded(values(static_cast<size_t>(rows * k.cols)), dtype);
                std::vector<float> g = rounded(values(static_cast<size_t>(k.batch * k.cols)), dtype);
                GpuArray gx(*gpu_, dtype, rows, k.cols, offset), gout(*gpu_, dtype, k.batch, k.cols, offset);
                GpuArray gg(*gpu_, dtype, k.batch, k.cols, offset), gdx(*gpu_, dtype, rows, k.cols, offset);
                gx.set(x);
                gg.set(g);
                gpu_->avgpool_forward(k.pixels, gx.tensor, gout.tensor);
                gpu_->avgpool_backward(k.pixels, gg.tensor, gdx.tensor);
                std::vector<float> out(static_cast<size_t>(k.batch * k.cols)), dx(x.size());
                cpu_.avgpool_forward(k.pixels, host_view(x, rows, k.cols), host_view(out, k.batch, k.cols));
                cpu_.avgpool_backward(k.pixels, host_view(g, k.batch, k.cols), host_view(dx, rows, k.cols));
                EXPECT_TRUE(close(gout.get(), out, tolerance(dtype))) << "forward";
                EXPECT_EQ(gdx.get_bytes(), encode(dx, dtype)) << "backward";  // one division each
                EXPECT_TRUE(gout.guards_intact() && gdx.guards_intact());
            }
}

// ---------------------------------------------------------------------------- BatchNorm

constexpr float kBnEps = 1e-5f;

// rows x cols: one row, odd channels, ResNet's first width, 2048 channels on 49 * 2 rows.
const std::pair<int64_t, int64_t> kBnShapes[] = {{1, 3}, {37, 5}, {300, 64}, {98, 2048}, {1000, 3}, {513, 24}};

class ConvOpsBatchNormTest : public ConvOpsTest {
protected:
    // Per channel a different offset and spread, so every column has its own statistics.
    std::vector<float> activations(int64_t rows, int64_t cols, float offset) {
        std::vector<float> x = values(static_cast<size_t>(rows * cols));
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) {
                float& v = x[static_cast<size_t>(r * cols + c)];
                v = offset + (c % 7 - 3) + v * (1.0f + 0.25f * (c % 3));
            }
        return x;
    }

    void check_forward(int64_t rows, int64_t cols, DType dtype, float offset, int64_t array_offset) {
        std::vector<float> x = rounded(activations(rows, cols, offset), dtype);
        std::vector<float> gamma = values(static_cast<size_t>(cols), 0.5f, 1.5f);
        std::vector<float> beta = values(static_cast<size_t>(cols));
        GpuArray gx(*gpu_, dtype, rows, cols, array_offset), gout(*gpu_, dtype, rows, cols, array_offset);
        GpuArray ggamma(*gpu_, DType::f32, 1, cols, array_offset), gbeta(*gpu_, DType::f32, 1, cols, array_offset);
        GpuArray gmean(*gpu_, DType::f32, 1, cols, array_offset), grstd(*gpu_, DType::f32, 1, cols, array_offset);
        gx.set(x);
        ggamma.set(gamma);
        gbeta.set(beta);
        gpu_->batchnorm_forward(gx.tensor, ggamma.f32(), gbeta.f32(), kBnEps, gout.tensor, gmean.f32(), grstd.f32());
        std::vector<float> ref(x.size()), mean(static_cast<size_t>(cols)), rstd(static_cast<size_t>(cols));
        cpu_.batchnorm_forward(host_view(x, rows, cols), gamma.data(), beta.data(), kBnEps, host_view(ref, rows, cols),
                               mean.data(), rstd.data());
        EXPECT_TRUE(close(gout.get(), ref, tolerance(dtype))) << "out";
        EXPECT_TRUE(close(gmean.get(), mean, 1e-5)) << "mean";
        EXPECT_TRUE(close(grstd.get(), rstd, 1e-5)) << "rstd";
        EXPECT_TRUE(gout.guards_intact() && gmean.guards_intact() && grstd.guards_intact());
        // Fixed partitions and fixed-order trees: a second run gives the same bits.
        const std::vector<uint8_t> first = gout.get_bytes();
        const std::vector<uint8_t> first_rstd = grstd.get_bytes();
        gpu_->batchnorm_forward(gx.tensor, ggamma.f32(), gbeta.f32(), kBnEps, gout.tensor, gmean.f32(), grstd.f32());
        EXPECT_EQ(gout.get_bytes(), first) << "not reproducible";
        EXPECT_EQ(grstd.get_bytes(), first_rstd) << "not reproducible";
    }

    void check_backward(int64_t rows, int64_t cols, DType dtype, float offset, bool in_place) {
        const int64_t array_offset = in_place ? 1 : 0;
        const size_t n = static_cast<size_t>(rows * cols);
        std::vector<float> x = rounded(activations(rows, cols, offset), dtype), g = rounded(values(n), dtype);
        std::vector<float> gamma = values(static_cast<size_t>(cols), 0.5f, 1.5f);
        std::vector<float> beta = values(static_cast<size_t>(cols));
        // mean/rstd from the CPU forward, given to both backends.
        std::vector<float> y(n), mean(static_cast<size_t>(cols)), rstd(static_cast<size_t>(cols));
        cpu_.batchnorm_forward(host_view(x, rows, cols), gamma.data(), beta.data(), kBnEps, host_view(y, rows, cols),
                               mean.data(), rstd.data());
        GpuArray gx(*gpu_, dtype, rows, cols, array_offset), gg(*gpu_, dtype, rows, cols, array_offset);
        GpuArray gdx(*gpu_, dtype, rows, cols, array_offset), ggamma(*gpu_, DType::f32, 1, cols, array_offset);
        GpuArray gmean(*gpu_, DType::f32, 1, cols, array_offset), grstd(*gpu_, DType::f32, 1, cols, array_offset);
        GpuArray gdgamma(*gpu_, DType::f32, 1, cols, array_offset), gdbeta(*gpu_, DType::f32, 1, cols, array_offset);
        gx.set(x);
        gg.set(g);
        ggamma.set(gamma);
        gmean.set(mean);
        grstd.set(rstd);
        GpuArray& result = in_place ? gg : gdx;
        gpu_->batchnorm_backward(gx.tensor, gg.tensor, ggamma.f32(), gmean.f32(), grstd.f32(), result.tensor,
                                 gdgamma.f32(), gdbeta.f32());
        std::vector<float> dx(n), dgamma(static_cast<size_t>(cols)), dbeta(static_cast<size_t>(cols));
        cpu_.batchnorm_backward(host_view(x, rows, cols), host_view(g, rows, cols), gamma.data(), mean.data(),
                                rstd.data(), host_view(dx, rows, cols), dgamma.data(), dbeta.data());
        EXPECT_TRUE(close(result.get(), dx, tolerance(dtype))) << "grad_x";
        EXPECT_TRUE(close(gdgamma.get(), dgamma, 1e-5)) << "grad_gamma";
        EXPECT_TRUE(close(gdbeta.get(), dbeta, 1e-5)) << "grad_beta";
        EXPECT_TRUE(result.guards_intact() && gdgamma.guards_intact() && gdbeta.guards_intact());
        if (!in_place) {
            const std::vector<uint8_t> first = gdx.get_bytes(), first_gamma = gdgamma.get_bytes();
            gpu_->batchnorm_backward(gx.tensor, gg.tensor, ggamma.f32(), gmean.f32(), grstd.f32(), gdx.tensor,
                                     gdgamma.f32(), gdbeta.f32());
            EXPECT_EQ(gdx.get_bytes(), first) << "not reproducible";
            EXPECT_EQ(gdgamma.get_bytes(), first_gamma) << "not reproducible";
        }
    }
};

TEST_F(ConvOpsBatchNormTest, ForwardMatchesCpu) {
    for (DType dtype : kDTypes)
        for (auto [rows, cols] : kBnShapes)
            for (int64_t offset : {0, 1}) {
                SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << rows << "x" << cols
                                                << " offset=" << offset);
                check_forward(rows, cols, dtype, 0.0f, offset);
            }
}

TEST_F(ConvOpsBatchNormTest, BackwardMatchesCpuAlsoInPlace) {
    for (DType dtype : kDTypes)
        for (auto [rows, cols] : kBnShapes)
            for (bool in_place : {false, true}) {
                if (rows == 1) continue;  // grad_x is exactly zero there; nothing to compare against
                SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << rows << "x" << cols
                                                << " in_place=" << in_place);
                check_backward(rows, cols, dtype, 0.0f, in_place);
            }
}

// ResNet's first BatchNorm at batch 16 (256 * 56 * 56 / 16 rows, 64 channels) around a
// mean of 100: E[x^2] - E[x]^2 in fp32 would lose the variance to cancellation.
TEST_F(ConvOpsBatchNormTest, LargeShapeWithLargeMeanStaysAccurate) {
    const int64_t rows = 256 * 56 * 56 / 16, cols = 64;
    for (DType dtype : kDTypes) {
        SCOPED_TRACE(dtype_name(dtype));
        check_forward(rows, cols, dtype, 100.0f, 0);
        check_backward(rows, cols, dtype, 100.0f, false);
        check_backward(rows, cols, dtype, 100.0f, true);
    }
}

// ---------------------------------------------------------------------------- graphs

// The ops allocate nothing and never wait on the host, so a captured step replays them:
// after one eager run (which sizes the scratch), a graph of conv1's im2col, BatchNorm
// forward and backward and the max pool gives the eager results bit for bit.
TEST_F(ConvOpsTest, ReplayFromACudaGraphMatchesEagerRun) {
    const Ops::ConvShape c1 = conv(2, 16, 16, 3, 7, 2, 3);
    const Ops::ConvShape pool = conv(2, c1.out_height(), c1.out_width(), 64, 3, 2, 1);
    const int64_t rows = pool.in_rows(), cols = 64;
    GpuArray x(*gpu_, DType::f32, c1.in_rows(), 3), patches(*gpu_, DType::f32, c1.out_rows(), c1.patch());
    GpuArray act(*gpu_, DType::f32, rows, cols), bn(*gpu_, DType::f32, rows, cols);
    GpuArray pooled(*gpu_, DType::f32, pool.out_rows(), cols), dpool(*gpu_, DType::f32, rows, cols);
    GpuArray g(*gpu_, DType::f32, pool.out_rows(), cols), dbn(*gpu_, DType::f32, rows, cols);
    GpuArray gamma(*gpu_, DType::f32, 1, cols), beta(*gpu_, DType::f32, 1, cols), mean(*gpu_, DType::f32, 1, cols);
    GpuArray rstd(*gpu_, DType::f32, 1, cols), dgamma(*gpu_, DType::f32, 1, cols), dbeta(*gpu_, DType::f32, 1, cols);
    DeviceBuffer argmax(*gpu_, static_cast<size_t>(pool.out_rows() * cols));
    x.set(values(static_cast<size_t>(c1.in_rows() * 3)));
    act.set(values(static_cast<size_t>(rows * cols)));
    g.set(values(static_cast<size_t>(pool.out_rows() * cols)));
    gamma.set(values(static_cast<size_t>(cols), 0.5f, 1.5f));
    beta.set(values(static_cast<size_t>(cols)));
    auto step = [&] {
        gpu_->im2col(c1, x.tensor, patches.tensor);
        gpu_->batchnorm_forward(act.tensor, gamma.f32(), beta.f32(), kBnEps, bn.tensor, mean.f32(), rstd.f32());
        gpu_->maxpool_forward(pool, bn.tensor, pooled.tensor, argmax.as<uint8_t>());
        gpu_->maxpool_backward(pool, argmax.as<uint8_t>(), g.tensor, dpool.tensor);
        gpu_->batchnorm_backward(act.tensor, dpool.tensor, gamma.f32(), mean.f32(), rstd.f32(), dbn.tensor,
                                 dgamma.f32(), dbeta.f32());
    };
    step();
    const std::vector<uint8_t> eager_patches = patches.get_bytes(), eager_dbn = dbn.get_bytes();
    const std::vector<uint8_t> eager_dgamma = dgamma.get_bytes(), eager_rstd = rstd.get_bytes();
    patches.poison();
    dbn.poison();
    dgamma.poison();
    rstd.poison();
    gpu_->begin_capture();
    try {
        step();
    } catch (...) {
        gpu_->abandon_capture();
        throw;
    }
    const int graph = gpu_->end_capture();
    gpu_->replay(graph);
    gpu_->synchronize();
    EXPECT_EQ(patches.get_bytes(), eager_patches);
    EXPECT_EQ(dbn.get_bytes(), eager_dbn);
    EXPECT_EQ(dgamma.get_bytes(), eager_dgamma);
    EXPECT_EQ(rstd.get_bytes(), eager_rstd);
    gpu_->release_graph(graph);
}

// ---------------------------------------------------------------------------- argument checks

TEST_F(ConvOpsTest, RejectsMismatchedShapesAndDtypes) {
    const Ops::ConvShape s = conv(1, 4, 4, 8, 3, 1, 1);
    GpuArray x(*gpu_, DType::f32, 16, 8), cols(*gpu_, DType::f32, 16, 72), bad(*gpu_, DType::f32, 16, 71);
    GpuArray cols16(*gpu_, DType::bf16, 16, 72);
    EXPECT_THROW(gpu_->im2col(s, x.tensor, bad.tensor), std::exception);
    EXPECT_THROW(gpu_->im2col(s, x.tensor, cols16.tensor), std::exception);
    Ops::ConvShape too_much_padding = s;
    too_much_padding.padding = 3;
    EXPECT_THROW(gpu_->col2im(too_much_padding, cols.tensor, x.tensor), std::exception);
    GpuArray stats(*gpu_, DType::f32, 1, 8);
    EXPECT_THROW(gpu_->batchnorm_forward(x.tensor, stats.f32(), stats.f32(), kBnEps, x.tensor, stats.f32(),
                                         stats.f32()),
                 std::exception);  // out aliases x
    GpuArray pooled(*gpu_, DType::f32, 2, 8);
    EXPECT_THROW(gpu_->avgpool_forward(7, x.tensor, pooled.tensor), std::exception);  // 16 rows != 2 * 7
    // Max pool: no argmax buffer, grad_x aliasing grad_out, a 256-position window (no byte for it).
    GpuArray pool_out(*gpu_, DType::f32, 16, 8);
    GpuBytes argmax(*gpu_, 16 * 8, 0);
    EXPECT_THROW(gpu_->maxpool_forward(s, x.tensor, pool_out.tensor, nullptr), std::exception);
    EXPECT_THROW(gpu_->maxpool_backward(s, argmax.data(), x.tensor, x.tensor), std::exception);
    GpuArray image(*gpu_, DType::f32, 256, 8), window_max(*gpu_, DType::f32, 1, 8);
    EXPECT_THROW(gpu_->maxpool_forward(conv(1, 16, 16, 8, 16, 1, 0), image.tensor, window_max.tensor, argmax.data()),
                 std::exception);
}

}  // namespace
}  // namespace sb
