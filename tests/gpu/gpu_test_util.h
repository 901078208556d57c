// Helpers of the GPU tests: skipping without a GPU, per-test random seeds, host-side
// rounding to bf16/f16/tf32 (so the fp32 CPU reference sees exactly the GPU's inputs),
// NaN-poisoned device arrays with guard elements, and relative-error comparison.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include "models/cpu/cpu_ops.h"
#include "models/cuda/cuda_ops.h"
#include "models/ops.h"

// Every GPU test starts with this: no visible GPU (or no driver) is a skip, not a failure.
#define SKIP_WITHOUT_GPU()                                                  \
    do {                                                                    \
        if (::sb::visible_gpu_count() == 0)                        \
            GTEST_SKIP() << "no CUDA GPU visible to this process";          \
    } while (0)

namespace sb::gpu_test {

// A fresh seed per test, or SCALEBENCH_TEST_SEED to replay one that failed.
inline uint64_t test_seed() {
    if (const char* env = std::getenv("SCALEBENCH_TEST_SEED")) return std::strtoull(env, nullptr, 10);
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// Uniform magnitudes in [lo, hi] with random signs: never zero, never a relu kink.
inline std::vector<float> random_values(std::mt19937_64& rng, size_t n, float lo = 0.1f, float hi = 1.0f) {
    std::uniform_real_distribution<float> mag(lo, hi);
    std::bernoulli_distribution neg(0.5);
    std::vector<float> v(n);
    for (float& x : v) x = neg(rng) ? -mag(rng) : mag(rng);
    return v;
}

// ---- host encodings (round to nearest even, as the device conversions)

inline uint16_t bf16_bits(float x) {
    __nv_bfloat16 h = __float2bfloat16_rn(x);
    uint16_t u;
    std::memcpy(&u, &h, 2);
    return u;
}
inline uint16_t f16_bits(float x) {
    __half h = __float2half_rn(x);
    uint16_t u;
    std::memcpy(&u, &h, 2);
    return u;
}
inline float from_bf16_bits(uint16_t u) {
    uint32_t w = static_cast<uint32_t>(u) << 16;
    float x;
    std::memcpy(&x, &w, 4);
    return x;
}
inline float from_f16_bits(uint16_t u) {
    __half_raw raw;
    raw.x = u;
    return __half2float(__half(raw));
}
// TF32 keeps 10 mantissa bits; inputs rounded to it make the TF32 GEMM's inputs exact.
inline float round_tf32(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    std::memcpy(&x, &u, 4);
    return x;
}

inline std::vector<uint8_t> encode(const std::vector<float>& v, DType dtype) {
    std::vector<uint8_t> out(v.size() * dtype_size(dtype));
    for (size_t i = 0; i < v.size(); ++i) {
        if (dtype == DType::f32) {
            std::memcpy(&out[i * 4], &v[i], 4);
        } else {
            uint16_t u = dtype == DType::bf16 ? bf16_bits(v[i]) : f16_bits(v[i]);
            std::memcpy(&out[i * 2], &u, 2);
        }
    }
    return out;
}

inline std::vector<float> decode(const std::vector<uint8_t>& bytes, DType dtype) {
    std::vector<float> out(bytes.size() / dtype_size(dtype));
    for (size_t i = 0; i < out.size(); ++i) {
        if (dtype == DType::f32) {
            std::memcpy(&out[i], &bytes[i * 4], 4);
        } else {
            uint16_t u;
            std::memcpy(&u, &bytes[i * 2], 2);
            out[i] = dtype == DType::bf16 ? from_bf16_bits(u) : from_f16_bits(u);
        }
    }
    return out;
}

// The values as the dtype stores them (what the CPU reference must be given).
inline std::vector<float> rounded(const std::vector<float>& v, DType dtype) { return decode(encode(v, dtype), dtype); }

inline std::vector<uint8_t> nan_bytes(size_t n, DType dtype) {
    std::vector<float> nans(n, std::numeric_limits<float>::quiet_NaN());
    return encode(nans, dtype);
}

inline double tolerance(DType dtype) { return dtype == DType::f32 ? 1e-5 : 1e-2; }

// ---- device arrays: a rows x cols view at `offset` elements into an allocation with
// kGuard poisoned elements after it, so stray writes past either end are caught.

class GpuArray {
public:
    static constexpr int64_t kGuard = 16;

    GpuArray(CudaOps& ops, DType dtype, int64_t rows, int64_t cols, int64_t offset = 0)
        : ops_(&ops), dtype_(dtype), offset_(offset), total_(offset + rows * cols + kGuard),
          buf_(ops, static_cast<size_t>(total_) * dtype_size(dtype)) {
        poison();
        tensor = Tensor{static_cast<char*>(buf_.get()) + offset * dtype_size(dtype), dtype, rows, cols};
    }

    void poison() { ops_->upload(buf_.get(), nan_bytes(static_cast<size_t>(total_), dtype_).data(), bytes(total_)); }
    void set(const std::vector<float>& values) {
        EXPECT_EQ(static_cast<int64_t>(values.size()), tensor.numel());
        ops_->upload(tensor.data, encode(values, dtype_).data(), tensor.bytes());
    }
    std::vector<uint8_t> get_bytes() const {
        std::vector<uint8_t> out(tensor.bytes());
        ops_->download(out.data(), tensor.data, out.size());
        return out;
    }
    std::vector<float> get() const { return decode(get_bytes(), dtype_); }
    // The elements around the view are still the poison they were given.
    bool guards_intact() const {
        std::vector<uint8_t> all(bytes(total_));
        ops_->download(all.data(), buf_.get(), all.size());
        const std::vector<uint8_t> nan = nan_bytes(1, dtype_);
        const size_t es = dtype_size(dtype_);
        for (int64_t i = 0; i < total_; ++i) {
            if (i >= offset_ && i < offset_ + tensor.numel()) continue;
            if (std::memcmp(&all[static_cast<size_t>(i) * es], nan.data(), es) != 0) return false;
        }
        return true;
    }
    float* f32() const { return static_cast<float*>(tensor.data); }

    Tensor tensor;

private:
    size_t bytes(int64_t n) const { return static_cast<size_t>(n) * dtype_size(dtype_); }
    CudaOps* ops_;
    DType dtype_;
    int64_t offset_, total_;
    DeviceBuffer buf_;
};

// ‖out − ref‖ / ‖ref‖ within tol, and every output element finite where the reference is.
inline ::testing::AssertionResult close(const std::vector<float>& out, const std::vector<float>& ref, double tol) {
    if (out.size() != ref.size())
        return ::testing::AssertionFailure() << "size " << out.size() << " != reference size " << ref.size();
    double diff2 = 0.0, ref2 = 0.0, worst = -1.0;
    size_t worst_i = 0, nonfinite = 0, first_nonfinite = 0;
    for (size_t i = 0; i < out.size(); ++i) {
        if (!std::isfinite(out[i]) && std::isfinite(ref[i])) {
            if (nonfinite++ == 0) first_nonfinite = i;
            continue;
        }
        const double d = static_cast<double>(out[i]) - ref[i];
        diff2 += d * d;
        ref2 += static_cast<double>(ref[i]) * ref[i];
        if (std::fabs(d) > worst) {
            worst = std::fabs(d);
            worst_i = i;
        }
    }
    if (nonfinite)
        return ::testing::AssertionFailure() << nonfinite << " of " << out.size()
                                             << " outputs are not finite (unwritten?), first at " << first_nonfinite
                                             << ": " << out[first_nonfinite] << " vs reference " << ref[first_nonfinite];
    const double rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
    if (!(rel <= tol))
        return ::testing::AssertionFailure() << "relative error " << rel << " > " << tol << "; worst at " << worst_i
                                             << ": " << out[worst_i] << " vs reference " << ref[worst_i];
    return ::testing::AssertionSuccess() << "relative error " << rel;
}

inline Tensor host_view(std::vector<float>& v, int64_t rows, int64_t cols) {
    return Tensor{v.data(), DType::f32, rows, cols};
}

// Fresh seed and a CUDA backend per test, the CPU backend as the reference; the seed is
// printed when a test fails.
// A convolution's (or pool's) input and window: NHWC batch x height x width x channels.
inline Ops::ConvShape conv(int batch, int height, int width, int channels, int kernel, int stride, int padding) {
    Ops::ConvShape s;
    s.batch = batch;
    s.height = height;
    s.width = width;
    s.channels = channels;
    s.kernel = kernel;
    s.stride = stride;
    s.padding = padding;
    return s;
}

class CudaOpsFixture : public ::testing::Test {
protected:
    void SetUp() override {
        SKIP_WITHOUT_GPU();
        seed_ = test_seed();
        rng_.seed(seed_);
        gpu_ = std::make_unique<CudaOps>(Precision::fp32, 0);
    }
    void TearDown() override {
        if (HasFailure())
            std::fprintf(stderr, "to replay: SCALEBENCH_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed_));
    }
    std::vector<float> values(size_t n, float lo = 0.1f, float hi = 1.0f) { return random_values(rng_, n, lo, hi); }

    uint64_t seed_ = 0;
    std::mt19937_64 rng_;
    std::unique_ptr<CudaOps> gpu_;
    CpuOps cpu_;
};

}  // namespace sb::gpu_test
