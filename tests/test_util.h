// Helpers shared by the test suites.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "models/ops.h"
#include "models/rng.h"

namespace sb::test {

// A host fp32 vector as a row-major rows x cols tensor (the CPU backend's memory).
inline Tensor view(std::vector<float>& v, int64_t rows, int64_t cols) {
    return Tensor{v.data(), DType::f32, rows, cols};
}

// n values uniform in [lo, hi) from the portable generator, reproducible from `seed`.
inline std::vector<float> random_vector(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
    PortableRng rng(seed);
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(rng.uniform(lo, hi));
    return v;
}

// ‖a − b‖ / ‖b‖ over all elements, in double precision.
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
        norm += static_cast<double>(b[i]) * b[i];
    }
    return std::sqrt(diff / norm);
}

}  // namespace sb::test
