#include "src/commands/stragglers.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

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

nlohmann::json straggler_check(const std::vector<std::vector<double>>& compute_ms,
                               const std::vector<std::vector<std::vector<double>>>& arrivals_ms,
                               const std::vector<RankLocation>& who) {
    const size_t ranks = compute_ms.size();
    size_t steps = ranks ? compute_ms[0].size() : 0;
    for (const auto& c : compute_ms) steps = std::min(steps, c.size());

    // Each step's median rank, and each rank's excess over it.
    std::vector<double> median_by_step(steps);
    for (size_t s = 0; s < steps; ++s) {
        std::vector<double> at_step;
        for (size_t r = 0; r < ranks; ++r) at_step.push_back(compute_ms[r][s]);
        median_by_step[s] = median(at_step);
    }
    const double typical = median(median_by_step);
    nlohmann::json per_rank = nlohmann::json::array(), stragglers = nlohmann::json::array();
    for (size_t r = 0; r < ranks; ++r) {
        std::vector<double> excess;
        for (size_t s = 0; s < steps; ++s) excess.push_back(compute_ms[r][s] - median_by_step[s]);
        const double behind = median(excess), spread = robust_sigma(excess);
        const RankLocation id = r < who.size() ? who[r] : RankLocation{};
        nlohmann::json entry = {{"rank", r},
                                {"host", id.host},
                                {"gpu_bus_id", id.gpu_bus_id},
                                {"compute_ms", median(std::vector<double>(compute_ms[r].begin(),
                                                                          compute_ms[r].begin() + static_cast<long>(steps)))},
                                {"median_rank_compute_ms", typical},
                                {"behind_ms", steps ? behind : 0.0},
                                {"behind_fraction", typical > 0 && steps ? behind / typical : 0.0},
                                {"behind_sigma_ms", spread}};
        per_rank.push_back(entry);
        if (ranks > 1 && steps > 0 && behind > kStragglerFraction * typical && behind > kStragglerSigmas * spread &&
            behind > kStragglerMinMs)
            stragglers.push_back(entry);
    }

    // Per bucket: in each step the rank whose input was ready last, and how far behind the
    // median rank; over the steps, the rank most often last and the median lag.
    nlohmann::json buckets = nlohmann::json::array();
    size_t bucket_count = 0;
    for (const auto& rank_steps : arrivals_ms)
        for (const auto& step : rank_steps) bucket_count = std::max(bucket_count, step.size());
    for (size_t b = 0; b < bucket_count && ranks > 1; ++b) {
        std::map<size_t, int> last_count;
        std::vector<double> lags;
        for (size_t s = 0; s < steps; ++s) {
            std::vector<double> at;
            size_t last = 0;
            bool complete = true;
            for (size_t r = 0; r < ranks; ++r) {
                const bool has = r < arrivals_ms.size() && s < arrivals_ms[r].size() && b < arrivals_ms[r][s].size() &&
                                 !std::isnan(arrivals_ms[r][s][b]);
                if (!has) {
                    complete = false;
                    break;
                }
                at.push_back(arrivals_ms[r][s][b]);
                if (at.back() > at[last]) last = r;
            }
            if (!complete) continue;
            ++last_count[last];
            lags.push_back(at[last] - median(at));
        }
        if (lags.empty()) continue;
        const auto most = std::max_element(last_count.begin(), last_count.end(),
                                           [](const auto& a, const auto& b) { return a.second < b.second; });
        buckets.push_back({{"bucket", b},
                           {"last_rank", most->first},
                           {"last_share", static_cast<double>(most->second) / static_cast<double>(lags.size())},
                           {"lag_ms", median(lags)}});
    }
    return {{"per_rank", per_rank}, {"buckets", buckets}, {"stragglers", stragglers}};
}

std::string straggler_line(const nlohmann::json& s) {
    const std::string bus = s.value("gpu_bus_id", std::string("-"));
    const double behind = s.value("behind_ms", 0.0), typical = s.value("median_rank_compute_ms", 0.0);
    return fmt::format("rank {} on {}{} is behind: compute {:.3f} ms, {:.3f} ms (+{:.0f}%) over the median rank's "
                       "{:.3f} ms per step (spread {:.3f} ms)",
                       s.value("rank", -1), s.value("host", std::string("?")),
                       bus == "-" ? std::string() : fmt::format(" (GPU {})", bus), s.value("compute_ms", 0.0), behind,
                       100 * s.value("behind_fraction", 0.0), typical, s.value("behind_sigma_ms", 0.0));
}

nlohmann::json gather_straggler_check(const std::vector<double>& compute_ms, const std::vector<double>& arrivals_ms,
                                      size_t buckets, const nlohmann::json& environment, MPI_Comm comm) {
    int rank = 0, n = 1;
    SB_CHECK_MPI(MPI_Comm_rank(comm, &rank));
    SB_CHECK_MPI(MPI_Comm_size(comm, &n));
    const size_t steps = compute_ms.size();
    SB_REQUIRE(arrivals_ms.size() == steps * buckets, "bucket arrivals do not match the steps");
    std::vector<double> mine = compute_ms;
    mine.insert(mine.end(), arrivals_ms.begin(), arrivals_ms.end());
    std::vector<double> all(rank == 0 ? mine.size() * static_cast<size_t>(n) : 0);
    SB_CHECK_MPI(MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
                            static_cast<int>(mine.size()), MPI_DOUBLE, 0, comm));
    if (rank != 0) return nullptr;
    std::vector<std::vector<double>> compute;
    std::vector<std::vector<std::vector<double>>> arrivals;
    for (int r = 0; r < n; ++r) {
        const double* at = all.data() + static_cast<size_t>(r) * mine.size();
        compute.emplace_back(at, at + steps);
        std::vector<std::vector<double>> by_step;
        for (size_t s = 0; s < steps; ++s) by_step.emplace_back(at + steps + s * buckets, at + steps + (s + 1) * buckets);
        arrivals.push_back(std::move(by_step));
    }
    return straggler_check(compute, arrivals, rank_locations(environment, n));
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
