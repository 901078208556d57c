// Helpers shared by the test suites.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include "models/model.h"
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

// Checks a model's analytic gradient of every parameter against central finite differences of
// `loss()` (which runs the model on `params` as they are now): |g - fd| <= 2e-3 + 3e-2 |fd|.
// Reports the first five mismatches and expects none.
template <class Loss>
void expect_gradients_match_finite_differences(const std::vector<ParamInfo>& infos, std::vector<float>& params,
                                               const std::vector<float>& analytic, float h, Loss&& loss) {
    int bad = 0, checked = 0;
    for (const ParamInfo& p : infos) {
        for (size_t i = 0; i < p.count(); ++i) {
            float& x = params[p.offset + i];
            const float keep = x;
            x = keep + h;
            const double up = loss();
            x = keep - h;
            const double down = loss();
            x = keep;
            const double fd = (up - down) / (2.0 * h);
            const double g = analytic[p.offset + i];
            ++checked;
            if (!(std::fabs(g - fd) <= 2e-3 + 3e-2 * std::fabs(fd))) {
                if (bad < 5) ADD_FAILURE() << p.name << "[" << i << "]: analytic " << g << " vs fd " << fd;
                ++bad;
            }
        }
    }
    EXPECT_EQ(bad, 0) << "of " << checked;
    EXPECT_EQ(checked, static_cast<int>(params.size()));
}

// Records the order of gradient reports and a copy of each gradient when it was reported.
struct RecordingSink : GradientSink {
    const std::vector<ParamInfo>* params = nullptr;
    const std::vector<float>* grads = nullptr;
    std::vector<int> order;
    std::map<int, std::vector<float>> at_report;
    void gradient_ready(int i) override {
        order.push_back(i);
        const ParamInfo& p = (*params)[static_cast<size_t>(i)];
        at_report[i].assign(grads->begin() + p.offset, grads->begin() + p.offset + p.count());
    }
};

// Every parameter reported exactly once, and unchanged after its report.
inline void expect_each_gradient_reported_once_when_final(const RecordingSink& sink, const std::vector<float>& grads) {
    ASSERT_EQ(sink.order.size(), sink.params->size());
    std::vector<int> seen(sink.params->size(), 0);
    for (int i : sink.order) ++seen[static_cast<size_t>(i)];
    for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << (*sink.params)[i].name;
    for (const auto& [i, snapshot] : sink.at_report) {
        const ParamInfo& p = (*sink.params)[static_cast<size_t>(i)];
        const std::vector<float> final_grad(grads.begin() + p.offset, grads.begin() + p.offset + p.count());
        EXPECT_EQ(snapshot, final_grad) << p.name << " changed after it was reported";
    }
}

}  // namespace sb::test
