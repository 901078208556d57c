// The stress soak's telemetry across ranks and intervals (see stress_telemetry.h).
#include "src/commands/stress_telemetry.h"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/errors.h"

namespace sb {

std::vector<nlohmann::json> allgather_json(const nlohmann::json& mine, MPI_Comm comm) {
    int size = 1;
    SB_CHECK_MPI(MPI_Comm_size(comm, &size));
    const std::string text = mine.dump();
    int length = static_cast<int>(text.size());
    std::vector<int> lengths(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
    SB_CHECK_MPI(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm));
    int total = 0;
    for (int r = 0; r < size; ++r) {
        offsets[static_cast<size_t>(r)] = total;
        total += lengths[static_cast<size_t>(r)];
    }
    std::string all(static_cast<size_t>(total), '\0');
    SB_CHECK_MPI(MPI_Allgatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
                                comm));
    std::vector<nlohmann::json> out;
    for (int r = 0; r < size; ++r)
        out.push_back(nlohmann::json::parse(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                                                       static_cast<size_t>(lengths[static_cast<size_t>(r)]))));
    return out;
}

nlohmann::json merge_telemetry(const nlohmann::json& total, const nlohmann::json& add) {
    if (!add.is_object() || add.value("nvml", "") != "ok") return total.is_null() ? add : total;
    if (!total.is_object() || total.value("nvml", "") != "ok") return add;
    nlohmann::json j = total;
    const double na = total.value("samples", 0.0), nb = add.value("samples", 0.0);
    for (const char* key : {"temperature_c", "power_w", "sm_clock_mhz", "memory_used_mib"}) {
        const nlohmann::json &a = total[key], &b = add[key];
        if (!a.is_object() || !b.is_object()) {
            if (!a.is_object()) j[key] = b;
            continue;
        }
        nlohmann::json m = a;
        if (na + nb > 0) m["avg"] = (a["avg"].get<double>() * na + b["avg"].get<double>() * nb) / (na + nb);
        m["max"] = std::max(a["max"].get<double>(), b["max"].get<double>());
        if (a.contains("min") && b.contains("min")) m["min"] = std::min(a["min"].get<double>(), b["min"].get<double>());
        j[key] = m;
    }
    const nlohmann::json& mem = j["memory_used_mib"];
    j["memory_fluctuation_pct"] = mem.is_object() && mem["avg"].get<double>() > 0
                                      ? nlohmann::json(100.0 * (mem["max"].get<double>() - mem["min"].get<double>()) /
                                                       mem["avg"].get<double>())
                                      : nlohmann::json();
    nlohmann::json reasons = total["throttle_reasons_seen"];
    for (const auto& r : add["throttle_reasons_seen"])
        if (std::find(reasons.begin(), reasons.end(), r) == reasons.end()) reasons.push_back(r);
    j["throttle_reasons_seen"] = reasons;
    for (const char* key : {"ecc_corrected_delta", "ecc_uncorrected_delta"}) {
        const nlohmann::json &a = total[key], &b = add[key];
        j[key] = a.is_number() && b.is_number() ? nlohmann::json(a.get<int64_t>() + b.get<int64_t>())
                                                : (a.is_number() ? a : b);
    }
    j["samples"] = na + nb;
    return j;
}

std::string telemetry_brief(const std::vector<nlohmann::json>& by_rank) {
    double temp_max = -1, power_sum = 0;
    int power_n = 0;
    int64_t ecc = 0;
    std::vector<std::string> throttles;
    for (const auto& t : by_rank) {
        if (!t.is_object() || t.value("nvml", "") != "ok") continue;
        if (t["temperature_c"].is_object()) temp_max = std::max(temp_max, t["temperature_c"]["max"].get<double>());
        if (t["power_w"].is_object()) {
            power_sum += t["power_w"]["avg"].get<double>();
            ++power_n;
        }
        for (const char* key : {"ecc_corrected_delta", "ecc_uncorrected_delta"})
            if (t[key].is_number()) ecc += t[key].get<int64_t>();
        for (const auto& r : t["throttle_reasons_seen"])
            if (std::find(throttles.begin(), throttles.end(), r.get<std::string>()) == throttles.end())
                throttles.push_back(r.get<std::string>());
    }
    if (temp_max < 0 && power_n == 0) return "-";
    std::string s = fmt::format("{:.0f}C max, {:.0f} W avg", temp_max, power_n ? power_sum / power_n : 0.0);
    if (ecc) s += fmt::format(", ECC +{}", ecc);
    if (!throttles.empty()) s += ", throttle: " + fmt::format("{}", fmt::join(throttles, "+"));
    return s;
}

}  // namespace sb
