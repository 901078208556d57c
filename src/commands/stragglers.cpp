#include "src/commands/stragglers.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/errors.h"

namespace sb {

namespace {

double median(std::vector<double> v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
    if (v.empty()) return NAN;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The standard deviation estimated from the median absolute deviation (1.4826 MAD, exact for
// a normal distribution): one step the scheduler held up does not hide a straggler.
double robust_sigma(const std::vector<double>& v) {
    if (v.size() < 2) return 0;
    const double m = median(v);
    std::vector<double> deviations;
    for (double x : v) deviations.push_back(std::fabs(x - m));
    return 1.4826 * median(deviations);
}

}  // namespace

namespace {

double median_of_range(const std::vector<double>& v, size_t count) {
    return median(std::vector<double>(v.begin(), v.begin() + static_cast<long>(std::min(count, v.size()))));
}

// The compute test: each rank's compute time against the median of the other ranks', step by step.
void add_compute_test(const std::vector<std::vector<double>>& compute_ms, size_t steps, nlohmann::json& per_rank) {
    const size_t ranks = compute_ms.size();
    for (size_t r = 0; r < ranks; ++r) {
        std::vector<double> excess, others_by_step;
        for (size_t s = 0; s < steps; ++s) {
            std::vector<double> others;
            for (size_t q = 0; q < ranks; ++q)
                if (q != r) others.push_back(compute_ms[q][s]);
            others_by_step.push_back(median(others));
            excess.push_back(compute_ms[r][s] - others_by_step.back());
        }
        const double others = median(others_by_step), behind = median(excess), spread = robust_sigma(excess);
        nlohmann::json& e = per_rank[r];
        e["compute_ms"] = median_of_range(compute_ms[r], steps);
        e["others_compute_ms"] = ranks > 1 && steps ? others : 0.0;
        e["behind_ms"] = ranks > 1 && steps ? behind : 0.0;
        e["behind_fraction"] = ranks > 1 && steps && others > 0 ? behind / others : 0.0;
        e["behind_sigma_ms"] = spread;
        if (ranks > 1 && steps > 0 && behind > kStragglerFraction * others && behind > kStragglerSigmas * spread &&
            behind > kStragglerMinMs)
            e["named_by"].push_back("compute");
    }
}

// Arrivals of bucket b in step s on every rank, or empty where one is missing.
std::vector<double> arrivals_at(const RankSteps& in, size_t s, size_t b) {
    std::vector<double> at;
    for (const auto& rank : in.arrivals_ms) {
        if (s >= rank.size() || b >= rank[s].size() || std::isnan(rank[s][b])) return {};
        at.push_back(rank[s][b]);
    }
    return at;
}

// The rank that arrived last and its lag behind the latest of the others.
std::pair<size_t, double> last_arrival(const std::vector<double>& at) {
    const size_t last = static_cast<size_t>(std::max_element(at.begin(), at.end()) - at.begin());
    double others = -INFINITY;
    for (size_t r = 0; r < at.size(); ++r)
        if (r != last) others = std::max(others, at[r]);
    return {last, at[last] - others};
}

// The arrival test, per rank and per bucket (the rank most often last at it, its median lag).
nlohmann::json add_arrival_test(const RankSteps& in, size_t steps, nlohmann::json& per_rank) {
    const size_t ranks = in.arrivals_ms.size();
    size_t bucket_count = 0;
    for (const auto& rank_steps : in.arrivals_ms)
        for (const auto& step : rank_steps) bucket_count = std::max(bucket_count, step.size());
    std::vector<std::vector<double>> lags_when_last(ranks);
    size_t samples = 0;
    nlohmann::json buckets = nlohmann::json::array();
    for (size_t b = 0; b < bucket_count && ranks > 1; ++b) {
        std::map<size_t, std::vector<double>> by_last;
        size_t seen = 0;
        for (size_t s = 0; s < steps; ++s) {
            const std::vector<double> at = arrivals_at(in, s, b);
            if (at.empty()) continue;
            const auto [last, lag] = last_arrival(at);
            by_last[last].push_back(lag);
            lags_when_last[last].push_back(lag);
            ++seen;
        }
        samples += seen;
        if (seen == 0) continue;
        const auto most = std::max_element(by_last.begin(), by_last.end(),
                                           [](const auto& x, const auto& y) { return x.second.size() < y.second.size(); });
        buckets.push_back({{"bucket", b},
                           {"last_rank", most->first},
                           {"last_share", static_cast<double>(most->second.size()) / static_cast<double>(seen)},
                           {"lag_ms", median(most->second)}});
    }
    for (size_t r = 0; r < ranks && r < per_rank.size(); ++r) {
        nlohmann::json& e = per_rank[r];
        const double step = r < in.step_ms.size() ? median_of_range(in.step_ms[r], steps) : NAN;
        const double share = samples ? static_cast<double>(lags_when_last[r].size()) / static_cast<double>(samples) : 0;
        const double lag = lags_when_last[r].empty() ? 0.0 : median(lags_when_last[r]);
        const double spread = robust_sigma(lags_when_last[r]);
        e["step_ms"] = std::isnan(step) ? nlohmann::json() : nlohmann::json(step);
        e["last_share"] = share;
        e["lag_ms"] = lag;
        e["lag_fraction"] = step > 0 ? lag / step : 0.0;
        e["lag_sigma_ms"] = spread;
        if (samples > 0 && share >= kArrivalLastShare && step > 0 && lag > kStragglerFraction * step &&
            lag > kStragglerMinMs)
            e["named_by"].push_back("arrival");
    }
    return buckets;
}

}  // namespace

nlohmann::json straggler_check(const RankSteps& in, const std::vector<RankLocation>& who) {
    const size_t ranks = in.compute_ms.size();
    size_t steps = ranks ? in.compute_ms[0].size() : 0;
    for (const auto& c : in.compute_ms) steps = std::min(steps, c.size());
    nlohmann::json per_rank = nlohmann::json::array();
    for (size_t r = 0; r < ranks; ++r) {
        const RankLocation id = r < who.size() ? who[r] : RankLocation{};
        per_rank.push_back({{"rank", r}, {"host", id.host}, {"gpu_bus_id", id.gpu_bus_id},
                            {"named_by", nlohmann::json::array()}});
    }
    add_compute_test(in.compute_ms, steps, per_rank);
    const nlohmann::json buckets = add_arrival_test(in, steps, per_rank);
    nlohmann::json stragglers = nlohmann::json::array();
    for (const nlohmann::json& e : per_rank)
        if (!e["named_by"].empty()) stragglers.push_back(e);
    return {{"per_rank", per_rank}, {"buckets", buckets}, {"stragglers", stragglers}};
}

std::string straggler_line(const nlohmann::json& s) {
    const std::string bus = s.value("gpu_bus_id", std::string("-"));
    std::string line = fmt::format("rank {} on {}{}", s.value("rank", -1), s.value("host", std::string("?")),
                                   bus == "-" ? std::string() : fmt::format(" (GPU {})", bus));
    const auto named = s.find("named_by");
    const auto by = [&](const char* test) {
        return named != s.end() && named->is_array() && std::find(named->begin(), named->end(), test) != named->end();
    };
    std::vector<std::string> parts;
    if (by("arrival"))
        parts.push_back(fmt::format("arrives last at {:.0f}% of buckets, {:.3f} ms after the other ranks ({:.0f}% of "
                                    "the {:.3f} ms step, spread {:.3f} ms)",
                                    100 * s.value("last_share", 0.0), s.value("lag_ms", 0.0),
                                    100 * s.value("lag_fraction", 0.0), s.value("step_ms", 0.0),
                                    s.value("lag_sigma_ms", 0.0)));
    if (by("compute") || !by("arrival"))
        parts.push_back(fmt::format("computes {:.3f} ms, {:.3f} ms (+{:.0f}%) over the other ranks' {:.3f} ms per "
                                    "step (spread {:.3f} ms)",
                                    s.value("compute_ms", 0.0), s.value("behind_ms", 0.0),
                                    100 * s.value("behind_fraction", 0.0), s.value("others_compute_ms", 0.0),
                                    s.value("behind_sigma_ms", 0.0)));
    return line + " is behind: " + fmt::format("{}", fmt::join(parts, "; "));
}

nlohmann::json gather_straggler_check(const std::vector<double>& step_ms, const std::vector<double>& compute_ms,
                                      const std::vector<double>& arrivals_ms, size_t buckets,
                                      const nlohmann::json& environment, MPI_Comm comm) {
    int rank = 0, n = 1;
    SB_CHECK_MPI(MPI_Comm_rank(comm, &rank));
    SB_CHECK_MPI(MPI_Comm_size(comm, &n));
    const size_t steps = compute_ms.size();
    SB_REQUIRE(step_ms.size() == steps && arrivals_ms.size() == steps * buckets,
               "step times and bucket arrivals do not match the steps");
    std::vector<double> mine = step_ms;
    mine.insert(mine.end(), compute_ms.begin(), compute_ms.end());
    mine.insert(mine.end(), arrivals_ms.begin(), arrivals_ms.end());
    std::vector<double> all(rank == 0 ? mine.size() * static_cast<size_t>(n) : 0);
    SB_CHECK_MPI(MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
                            static_cast<int>(mine.size()), MPI_DOUBLE, 0, comm));
    if (rank != 0) return nullptr;
    RankSteps in;
    for (int r = 0; r < n; ++r) {
        const double* at = all.data() + static_cast<size_t>(r) * mine.size();
        in.step_ms.emplace_back(at, at + steps);
        in.compute_ms.emplace_back(at + steps, at + 2 * steps);
        std::vector<std::vector<double>> by_step;
        for (size_t s = 0; s < steps; ++s)
            by_step.emplace_back(at + 2 * steps + s * buckets, at + 2 * steps + (s + 1) * buckets);
        in.arrivals_ms.push_back(std::move(by_step));
    }
    return straggler_check(in, rank_locations(environment, n));
}

std::vector<RankLocation> rank_locations(const nlohmann::json& environment, int ranks) {
    std::vector<RankLocation> who(static_cast<size_t>(std::max(ranks, 0)));
    for (size_t r = 0; r < who.size(); ++r) {
        const auto hosts = environment.find("hostnames");
        if (hosts != environment.end() && hosts->is_array() && r < hosts->size() && (*hosts)[r].is_string())
            who[r].host = (*hosts)[r].get<std::string>();
        const auto gpus = environment.find("gpus_by_rank");
        if (gpus != environment.end() && gpus->is_array() && r < gpus->size() && (*gpus)[r].is_object())
            who[r].gpu_bus_id = (*gpus)[r].value("pci_bus_id", std::string("-"));
    }
    return who;
}

}  // namespace sb
