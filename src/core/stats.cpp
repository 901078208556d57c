#include "src/core/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace sb {

double percentile(std::vector<double> values, double q) {
    if (values.empty()) throw std::invalid_argument("percentile of no values");
    std::sort(values.begin(), values.end());
    const double pos = q / 100.0 * static_cast<double>(values.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, values.size() - 1);
    return values[lo] + (values[hi] - values[lo]) * (pos - static_cast<double>(lo));
}

Summary summarize(const std::vector<double>& values) {
    Summary s;
    if (values.empty()) return s;
    s.count = static_cast<int>(values.size());
    s.median = percentile(values, 50);
    s.p10 = percentile(values, 10);
    s.p90 = percentile(values, 90);
    s.min = *std::min_element(values.begin(), values.end());
    s.max = *std::max_element(values.begin(), values.end());
    s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
    return s;
}

nlohmann::json to_json(const Summary& s) {
    return {{"median", s.median}, {"min", s.min}, {"max", s.max}, {"p10", s.p10}, {"p90", s.p90},
            {"mean", s.mean}, {"count", s.count}};
}

}  // namespace sb
