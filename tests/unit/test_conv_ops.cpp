// The CPU backend's convolutional-layer ops (models/ops.h): im2col + GEMM against the
// convolution's definition, col2im as im2col's adjoint, BatchNorm against its formula and
// finite differences, max pooling (the forward records each window's first maximum as a
// byte, the backward routes the gradient by those bytes, as torch) and global average
// pooling. The CUDA backend is checked against these (tests/gpu/test_cuda_conv_ops.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "models/cpu/cpu_ops.h"
#include "tests/test_util.h"

namespace sb {
namespace {

using test::random_vector;
using test::view;

Ops::ConvShape conv_shape(int batch, int height, int width, int channels, int kernel, int stride, int padding) {
    Ops::ConvShape s;
    s.batch = batch, s.height = height, s.width = width, s.channels = channels;
    s.kernel = kernel, s.stride = stride, s.padding = padding;
    return s;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
    double sum = 0;
    for (size_t i = 0; i < a.size(); ++i) sum += static_cast<double>(a[i]) * b[i];
    return sum;
}

const Ops::ConvShape kShapes[] = {
    conv_shape(2, 5, 5, 3, 3, 1, 1),  conv_shape(2, 7, 6, 4, 3, 2, 1), conv_shape(1, 9, 9, 3, 7, 2, 3),
    conv_shape(3, 6, 6, 5, 1, 2, 0),  conv_shape(2, 4, 4, 2, 1, 1, 0), conv_shape(1, 8, 5, 3, 3, 2, 0),
};

TEST(ConvOps, Im2colTimesWeightIsTheConvolution) {
    CpuOps ops;
    for (const Ops::ConvShape& s : kShapes) {
        SCOPED_TRACE(testing::Message() << s.height << "x" << s.width << "x" << s.channels << " k" << s.kernel << "/"
                                        << s.stride << " pad " << s.padding);
        const int out_c = 3, oh = s.out_height(), ow = s.out_width();
        std::vector<float> x = random_vector(static_cast<size_t>(s.in_rows() * s.channels), 1);
        std::vector<float> w = random_vector(static_cast<size_t>(out_c * s.patch()), 2);  // [out, ky, kx, in]
        std::vector<float> cols(static_cast<size_t>(s.out_rows() * s.patch()), NAN);
        std::vector<float> y(static_cast<size_t>(s.out_rows() * out_c), NAN);
        ops.im2col(s, view(x, s.in_rows(), s.channels), view(cols, s.out_rows(), s.patch()));
        ops.gemm(false, true, 1.0f, view(cols, s.out_rows(), s.patch()), view(w, out_c, s.patch()), 0.0f,
                 view(y, s.out_rows(), out_c));
        // The definition: y[n, oy, ox, o] = sum over ky, kx, c of w[o, ky, kx, c] x[n, iy, ix, c].
        for (int n = 0; n < s.batch; ++n)
            for (int oy = 0; oy < oh; ++oy)
                for (int ox = 0; ox < ow; ++ox)
                    for (int o = 0; o < out_c; ++o) {
                        double sum = 0;
                        for (int ky = 0; ky < s.kernel; ++ky)
                            for (int kx = 0; kx < s.kernel; ++kx) {
                                const int iy = oy * s.stride - s.padding + ky, ix = ox * s.stride - s.padding + kx;
                                if (iy < 0 || iy >= s.height || ix < 0 || ix >= s.width) continue;
                                for (int c = 0; c < s.channels; ++c)
                                    sum += static_cast<double>(w[((o * s.kernel + ky) * s.kernel + kx) * s.channels + c]) *
                                           x[((static_cast<size_t>(n) * s.height + iy) * s.width + ix) * s.channels + c];
                            }
                        const size_t row = (static_cast<size_t>(n) * oh + oy) * ow + ox;
                        ASSERT_NEAR(y[row * out_c + o], sum, 1e-5) << "n " << n << " oy " << oy << " ox " << ox;
                    }
    }
}

TEST(ConvOps, Col2imIsTheAdjointOfIm2col) {
    CpuOps ops;
    for (const Ops::ConvShape& s : kShapes) {
        std::vector<float> x = random_vector(static_cast<size_t>(s.in_rows() * s.channels), 3);
        std::vector<float> g = random_vector(static_cast<size_t>(s.out_rows() * s.patch()), 4);
        std::vector<float> cols(g.size(), NAN), gx(x.size(), NAN);
        ops.im2col(s, view(x, s.in_rows(), s.channels), view(cols, s.out_rows(), s.patch()));
        ops.col2im(s, view(g, s.out_rows(), s.patch()), view(gx, s.in_rows(), s.channels));
        // <im2col(x), g> = <x, col2im(g)>, and col2im overwrote every element.
        EXPECT_NEAR(dot(cols, g), dot(x, gx), 1e-4 * std::sqrt(static_cast<double>(g.size())));
        for (float v : gx) ASSERT_FALSE(std::isnan(v));
    }
}

TEST(ConvOps, ShapesThatDoNotFitAreRejected) {
    CpuOps ops;
    const Ops::ConvShape s = conv_shape(1, 4, 4, 2, 3, 1, 1);
    std::vector<float> x(32), cols(16 * 18);
    EXPECT_THROW(ops.im2col(s, view(x, 16, 2), view(cols, 16, 17)), std::exception);
    EXPECT_THROW(ops.im2col(conv_shape(1, 4, 4, 2, 3, 1, 3), view(x, 16, 2), view(cols, 16, 18)), std::exception);
    // A max-pool window of 256 positions: its argmax does not fit a byte (255 means none).
    std::vector<float> image(256), pooled(1);
    std::vector<uint8_t> argmax(1);
    const Ops::ConvShape wide = conv_shape(1, 16, 16, 1, 16, 1, 0);
    EXPECT_THROW(ops.maxpool_forward(wide, view(image, 256, 1), view(pooled, 1, 1), argmax.data()), std::exception);
    const Ops::ConvShape fits = conv_shape(1, 15, 15, 1, 15, 1, 0);
    image.resize(225);
    ops.maxpool_forward(fits, view(image, 225, 1), view(pooled, 1, 1), argmax.data());
    EXPECT_EQ(argmax[0], 0);  // all zeros tie: the first position
}

struct BatchNormCase {
    int64_t rows, cols;
    double offset;  // added to every x: a large mean must not cost the variance its digits
};

TEST(ConvOps, BatchNormForwardNormalisesEachColumnOverTheRows) {
    CpuOps ops;
    for (const BatchNormCase& c : {BatchNormCase{50, 3, 0.0}, BatchNormCase{7, 5, 100.0}, BatchNormCase{1000, 2, -30.0}}) {
        std::vector<float> x = random_vector(static_cast<size_t>(c.rows * c.cols), 5, c.offset - 2, c.offset + 1);
        std::vector<float> gamma = random_vector(static_cast<size_t>(c.cols), 6, 0.5, 1.5);
        std::vector<float> beta = random_vector(static_cast<size_t>(c.cols), 7);
        std::vector<float> out(x.size(), NAN), mean(static_cast<size_t>(c.cols)), rstd(mean.size());
        ops.batchnorm_forward(view(x, c.rows, c.cols), gamma.data(), beta.data(), 1e-5f, view(out, c.rows, c.cols),
                              mean.data(), rstd.data());
        for (int64_t j = 0; j < c.cols; ++j) {
            double mu = 0, var = 0;
            for (int64_t i = 0; i < c.rows; ++i) mu += x[static_cast<size_t>(i * c.cols + j)];
            mu /= static_cast<double>(c.rows);
            for (int64_t i = 0; i < c.rows; ++i) var += std::pow(x[static_cast<size_t>(i * c.cols + j)] - mu, 2);
            var /= static_cast<double>(c.rows);  // biased, as torch normalises
            EXPECT_NEAR(mean[static_cast<size_t>(j)], mu, 1e-6 * (1 + std::fabs(mu)));
            EXPECT_NEAR(rstd[static_cast<size_t>(j)], 1 / std::sqrt(var + 1e-5), 1e-5 / std::sqrt(var));
            for (int64_t i = 0; i < c.rows; ++i) {
                const size_t e = static_cast<size_t>(i * c.cols + j);
                EXPECT_NEAR(out[e], (x[e] - mu) / std::sqrt(var + 1e-5) * gamma[j] + beta[j], 1e-4);
            }
        }
    }
}

TEST(ConvOps, BatchNormBackwardMatchesFiniteDifferencesAlsoInPlace) {
    const int64_t rows = 6, cols = 3;
    std::vector<float> x = random_vector(static_cast<size_t>(rows * cols), 8, -2, 2);
    std::vector<float> gamma = random_vector(static_cast<size_t>(cols), 9, 0.5, 1.5);
    std::vector<float> beta = random_vector(static_cast<size_t>(cols), 10);
    const std::vector<float> w = random_vector(x.size(), 11);  // L = sum(w * out)
    auto loss = [&](const std::vector<float>& xs, const std::vector<float>& gs, const std::vector<float>& bs) {
        CpuOps ops;
        std::vector<float> xcopy = xs, out(xs.size()), mean(cols), rstd(cols);
        ops.batchnorm_forward(view(xcopy, rows, cols), gs.data(), bs.data(), 1e-5f, view(out, rows, cols), mean.data(),
                              rstd.data());
        return dot(w, out);
    };
    CpuOps ops;
    std::vector<float> out(x.size()), mean(cols), rstd(cols);
    ops.batchnorm_forward(view(x, rows, cols), gamma.data(), beta.data(), 1e-5f, view(out, rows, cols), mean.data(),
                          rstd.data());
    std::vector<float> dy = w, dgamma(cols, NAN), dbeta(cols, NAN);
    ops.batchnorm_backward(view(x, rows, cols), view(dy, rows, cols), gamma.data(), mean.data(), rstd.data(),
                           view(dy, rows, cols), dgamma.data(), dbeta.data());  // grad_x aliases grad_out
    const float h = 1e-3f;
    auto fd = [&](std::vector<float>& v, size_t i) {
        const float keep = v[i];
        v[i] = keep + h;
        const double up = loss(x, gamma, beta);
        v[i] = keep - h;
        const double down = loss(x, gamma, beta);
        v[i] = keep;
        return (up - down) / (2.0 * h);
    };
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(dy[i], fd(x, i), 2e-3) << "x[" << i << "]";
    for (size_t j = 0; j < static_cast<size_t>(cols); ++j) {
        EXPECT_NEAR(dgamma[j], fd(gamma, j), 2e-3) << "gamma[" << j << "]";
        EXPECT_NEAR(dbeta[j], fd(beta, j), 2e-3) << "beta[" << j << "]";
    }
}

// The reference the forward is held to, written out per window: the first non-NaN value in
// window order (ky, then kx) and then only strictly larger ones, padding skipped. Calls
// f(output index, maximum, window position or 255) for every output element.
template <class F> void each_window_maximum(const Ops::ConvShape& s, const std::vector<float>& x, F&& f) {
    const int oh = s.out_height(), ow = s.out_width(), c = s.channels;
    for (int n = 0; n < s.batch; ++n)
        for (int oy = 0; oy < oh; ++oy)
            for (int ox = 0; ox < ow; ++ox)
                for (int ch = 0; ch < c; ++ch) {
                    float best = -INFINITY;
                    int arg = 255;
                    for (int ky = 0; ky < s.kernel; ++ky)
                        for (int kx = 0; kx < s.kernel; ++kx) {
                            const int iy = oy * s.stride - s.padding + ky, ix = ox * s.stride - s.padding + kx;
                            if (iy < 0 || iy >= s.height || ix < 0 || ix >= s.width) continue;
                            const float v = x[((static_cast<size_t>(n) * s.height + iy) * s.width + ix) * c + ch];
                            if (std::isnan(v)) continue;
                            if (arg == 255 || v > best) best = v, arg = ky * s.kernel + kx;
                        }
                    f(((static_cast<size_t>(n) * oh + oy) * ow + ox) * c + ch, best, arg);
                }
}

// Index of the input element at window position k of output element o (-1 in the padding).
int64_t window_input(const Ops::ConvShape& s, size_t o, int k) {
    const int64_t c = s.channels, pixel = static_cast<int64_t>(o) / c, ch = static_cast<int64_t>(o) % c;
    const int64_t ox = pixel % s.out_width(), oy = pixel / s.out_width() % s.out_height();
    const int64_t n = pixel / (static_cast<int64_t>(s.out_width()) * s.out_height());
    const int64_t iy = oy * s.stride - s.padding + k / s.kernel, ix = ox * s.stride - s.padding + k % s.kernel;
    if (iy < 0 || iy >= s.height || ix < 0 || ix >= s.width) return -1;
    return ((n * s.height + iy) * s.width + ix) * c + ch;
}

// Window maxima with ties (0.25 every 7th element), NaNs (never win; one window of channel 0
// all NaN: -inf and byte 255), a -inf (wins over nothing but NaN) and padded borders: out
// and the argmax bytes against the written-out reference.
TEST(ConvOps, MaxPoolRecordsEachWindowsFirstMaximum) {
    CpuOps ops;
    for (const Ops::ConvShape& s : {conv_shape(2, 5, 6, 3, 3, 2, 1), conv_shape(1, 6, 6, 2, 2, 2, 0),
                                    conv_shape(2, 4, 5, 3, 3, 1, 1)}) {
        SCOPED_TRACE(s.describe());
        std::vector<float> x = random_vector(static_cast<size_t>(s.in_rows() * s.channels), 12);
        for (size_t i = 0; i < x.size(); i += 7) x[i] = 0.25f;
        for (size_t i = 3; i < x.size(); i += 11) x[i] = NAN;
        x[5] = -INFINITY;
        // Output (0, 0)'s window: channel 0 all NaN, channel 1 all one value above the rest
        // (every position ties: the first in-bounds one wins).
        int first_inside = -1;
        for (int k = 0; k < s.kernel * s.kernel; ++k) {
            const int64_t e = window_input(s, 0, k);
            if (e < 0) continue;
            if (first_inside < 0) first_inside = k;
            x[static_cast<size_t>(e)] = NAN;
            x[static_cast<size_t>(e) + 1] = 2.0f;
        }
        std::vector<float> out(static_cast<size_t>(s.out_rows() * s.channels), NAN);
        std::vector<uint8_t> argmax(out.size(), 77);
        ops.maxpool_forward(s, view(x, s.in_rows(), s.channels), view(out, s.out_rows(), s.channels), argmax.data());
        each_window_maximum(s, x, [&](size_t o, float best, int arg) {
            ASSERT_EQ(out[o], best) << o;
            ASSERT_EQ(argmax[o], arg) << o;
        });
        EXPECT_EQ(out[0], -INFINITY);
        EXPECT_EQ(argmax[0], 255);
        EXPECT_EQ(out[1], 2.0f);
        EXPECT_EQ(argmax[1], first_inside);
    }
}

// The backward routes by the bytes alone: arbitrary positions (padding ones and 255 route
// nowhere) gather into the input element at that position, summed over windows.
TEST(ConvOps, MaxPoolBackwardRoutesByTheArgmaxBytes) {
    CpuOps ops;
    const Ops::ConvShape s = conv_shape(2, 5, 6, 3, 3, 2, 1);
    const std::vector<float> g = random_vector(static_cast<size_t>(s.out_rows() * s.channels), 13);
    std::vector<uint8_t> argmax(g.size());
    std::vector<float> expected(static_cast<size_t>(s.in_rows() * s.channels), 0.0f);
    for (size_t o = 0; o < argmax.size(); ++o) {
        argmax[o] = o % 10 == 9 ? 255 : static_cast<uint8_t>((o * 5) % 9);
        if (argmax[o] == 255) continue;
        const int64_t e = window_input(s, o, argmax[o]);
        if (e >= 0) expected[static_cast<size_t>(e)] += g[o];
    }
    std::vector<float> gx(expected.size(), NAN);
    ops.maxpool_backward(s, argmax.data(), view(const_cast<std::vector<float>&>(g), s.out_rows(), s.channels),
                         view(gx, s.in_rows(), s.channels));
    for (size_t i = 0; i < gx.size(); ++i) EXPECT_FLOAT_EQ(gx[i], expected[i]) << i;
}

// Forward then backward: each window's gradient lands on its first maximum, as torch.
TEST(ConvOps, MaxPoolRoutesTheGradientToTheFirstMaximum) {
    CpuOps ops;
    const Ops::ConvShape s = conv_shape(2, 5, 6, 3, 3, 2, 1);
    std::vector<float> x = random_vector(static_cast<size_t>(s.in_rows() * s.channels), 12);
    for (size_t i = 0; i < x.size(); i += 7) x[i] = 0.25f;  // ties
    std::vector<float> out(static_cast<size_t>(s.out_rows() * s.channels), NAN);
    std::vector<uint8_t> argmax(out.size());
    ops.maxpool_forward(s, view(x, s.in_rows(), s.channels), view(out, s.out_rows(), s.channels), argmax.data());
    const std::vector<float> g = random_vector(out.size(), 13);
    std::vector<float> gx(x.size(), NAN), expected(x.size(), 0.0f);
    ops.maxpool_backward(s, argmax.data(), view(const_cast<std::vector<float>&>(g), s.out_rows(), s.channels),
                         view(gx, s.in_rows(), s.channels));
    each_window_maximum(s, x, [&](size_t o, float, int arg) {
        ASSERT_NE(arg, 255);
        expected[static_cast<size_t>(window_input(s, o, arg))] += g[o];
    });
    for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(gx[i], expected[i]) << i;
}

TEST(ConvOps, GlobalAveragePoolAndItsAdjoint) {
    CpuOps ops;
    const int batch = 3, pixels = 5, cols = 4;
    std::vector<float> x = random_vector(static_cast<size_t>(batch * pixels * cols), 14);
    std::vector<float> out(static_cast<size_t>(batch * cols), NAN);
    ops.avgpool_forward(pixels, view(x, batch * pixels, cols), view(out, batch, cols));
    for (int n = 0; n < batch; ++n)
        for (int c = 0; c < cols; ++c) {
            double sum = 0;
            for (int p = 0; p < pixels; ++p) sum += x[static_cast<size_t>((n * pixels + p) * cols + c)];
            EXPECT_NEAR(out[static_cast<size_t>(n * cols + c)], sum / pixels, 1e-6);
        }
    std::vector<float> g = random_vector(out.size(), 15), gx(x.size(), NAN);
    ops.avgpool_backward(pixels, view(g, batch, cols), view(gx, batch * pixels, cols));
    EXPECT_NEAR(dot(out, g), dot(x, gx), 1e-5);
}

}  // namespace
}  // namespace sb
