// The CPU backend's convolutional-layer ops (models/ops.h): im2col + GEMM against the
// convolution's definition, col2im as im2col's adjoint, BatchNorm against its formula and
// finite differences, max pooling (the first maximum of a window takes the gradient, as
// torch) and global average pooling. The CUDA backend is checked against these
// (tests/gpu/test_cuda_conv_ops.cpp).
#include <gtest/gtest.h>

#include <cmath>
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

TEST(ConvOps, MaxPoolTakesTheWindowMaximumAndRoutesTheGradientToTheFirst) {
    CpuOps ops;
    const Ops::ConvShape s = conv_shape(2, 5, 6, 3, 3, 2, 1);
    std::vector<float> x = random_vector(static_cast<size_t>(s.in_rows() * s.channels), 12);
    for (size_t i = 0; i < x.size(); i += 7) x[i] = 0.25f;  // ties
    std::vector<float> out(static_cast<size_t>(s.out_rows() * s.channels), NAN);
    ops.maxpool_forward(s, view(x, s.in_rows(), s.channels), view(out, s.out_rows(), s.channels));
    const std::vector<float> g = random_vector(out.size(), 13);
    std::vector<float> gx(x.size(), NAN), expected(x.size(), 0.0f);
    ops.maxpool_backward(s, view(x, s.in_rows(), s.channels), view(out, s.out_rows(), s.channels),
                         view(const_cast<std::vector<float>&>(g), s.out_rows(), s.channels),
                         view(gx, s.in_rows(), s.channels));
    const int oh = s.out_height(), ow = s.out_width();
    for (int n = 0; n < s.batch; ++n)
        for (int oy = 0; oy < oh; ++oy)
            for (int ox = 0; ox < ow; ++ox)
                for (int c = 0; c < s.channels; ++c) {
                    float best = -INFINITY;
                    size_t arg = 0;
                    for (int ky = 0; ky < 3; ++ky)
                        for (int kx = 0; kx < 3; ++kx) {
                            const int iy = oy * 2 - 1 + ky, ix = ox * 2 - 1 + kx;
                            if (iy < 0 || iy >= s.height || ix < 0 || ix >= s.width) continue;
                            const size_t e = ((static_cast<size_t>(n) * s.height + iy) * s.width + ix) * 3 + c;
                            if (x[e] > best) best = x[e], arg = e;  // strict: the first maximum stays
                        }
                    const size_t o = ((static_cast<size_t>(n) * oh + oy) * ow + ox) * 3 + c;
                    ASSERT_EQ(out[o], best);
                    expected[arg] += g[o];
                }
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
