// Summary statistics of repeated measurements (median, min, max, p10, p90), as
// every figure scalebench reports is a distribution over steps or iterations.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

namespace sb {

struct Summary {
    double median = 0, min = 0, max = 0, p10 = 0, p90 = 0, mean = 0;
    int count = 0;
};

// Percentiles by linear interpolation between order statistics (numpy's default).
double percentile(std::vector<double> values, double q);
Summary summarize(const std::vector<double>& values);
nlohmann::json to_json(const Summary& s);

}  // namespace sb
