// A GPU's soaks and their verdict (src/projection/soak_scoring.h).
#include "src/projection/soak_scoring.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "src/projection/record_scan.h"

namespace sb {

namespace {

// A soak record of the profile's board: its GPU's device name and, where the record gives the
// GPU's memory, within 15% of the profile's (a 24 GB RTX 4090's soak is not the 48 GB board's).
bool soak_of_profiles_gpu(const nlohmann::json& r, const HardwareProfile& hw) {
    if (gpu_name_of(r) != hw.device_name) return false;
    if (!r.contains("environment") || !r["environment"].is_object() || !r["environment"].contains("gpu") ||
        !r["environment"]["gpu"].is_object())
        return true;
    const nlohmann::json& gpu = r["environment"]["gpu"];
    if (!gpu.contains("memory_total_mib") || !gpu["memory_total_mib"].is_number()) return true;
    const double gib = number_of(gpu, "memory_total_mib") / 1024.0;
    return std::abs(gib - hw.memory_gb.value) <= 0.15 * hw.memory_gb.value;
}

}  // namespace

std::string soak_summary(const HardwareProfile& hw, const std::string& results_dir) {
    const auto [r, file] = latest_record(results_dir, [&](const nlohmann::json& x) {
        return text_of(x, "subcommand") == "stress" && x.contains("complete") && x["complete"] == true &&
               soak_of_profiles_gpu(x, hw);
    });
    if (r.is_null()) return "";
    double drift = 0;  // the largest |drift| of any workload over its intervals
    if (r.contains("workloads") && r["workloads"].is_array())
        for (const auto& w : r["workloads"])
            if (w.is_object() && w.contains("drift_pct"))
                drift = std::max({drift, std::abs(number_of(w["drift_pct"], "min")), std::abs(number_of(w["drift_pct"], "max"))});
    const long world = count_of(r, "world_size");
    std::string line = fmt::format("soak {:.0f} s on {} GPU{}: {} replica checks {}, throughput drift within {:.2f}%",
                                   number_of(r, "elapsed_s"), world, world > 1 ? "s" : "", count_of(r, "sdc_checks"),
                                   r.contains("checks_passed") && r["checks_passed"] == true ? "passed" : "FAILED", drift);
    if (r.contains("telemetry_by_rank") && r["telemetry_by_rank"].is_array() && !r["telemetry_by_rank"].empty() &&
        r["telemetry_by_rank"][0].is_object()) {
        const nlohmann::json& t = r["telemetry_by_rank"][0];
        std::vector<std::string> throttling;
        if (t.contains("throttle_reasons_seen") && t["throttle_reasons_seen"].is_array())
            for (const auto& reason : t["throttle_reasons_seen"])
                if (reason.is_string()) throttling.push_back(reason.get<std::string>());
        line += fmt::format(", ECC corrected/uncorrected {}/{}, up to {:.0f} C and {:.0f} W, throttling: {}",
                            count_of(t, "ecc_corrected_delta"), count_of(t, "ecc_uncorrected_delta"),
                            t.contains("temperature_c") ? number_of(t["temperature_c"], "max") : 0.0,
                            t.contains("power_w") ? number_of(t["power_w"], "max") : 0.0,
                            throttling.empty() ? std::string("none") : fmt::format("{}", fmt::join(throttling, ", ")));
    }
    return line + " (" + file + ")";
}

bool SoakRun::interrupted() const {
    // The texts src/system/run_records.cpp writes for a stop from outside: a signal, or the launcher gone.
    return ended.find("received SIG") != std::string::npos || ended.find("launcher") != std::string::npos;
}

std::vector<SoakRun> soak_runs(const HardwareProfile& hw, const std::string& results_dir) {
    struct Pending {
        SoakRun run;
        bool this_gpu = false;
        long interval_mismatches = 0, interval_checks = 0, interval_ecc = 0;
    };
    std::map<std::string, Pending> runs;  // by run_id, or FILE#N for records without one
    auto ecc_of = [](const nlohmann::json& telemetry) {
        long n = 0;
        if (telemetry.is_array())
            for (const auto& t : telemetry)
                n += count_of(t, "ecc_uncorrected_delta");
        return n;
    };
    std::string file_now;
    int anonymous = 0;  // runs of the file without a run_id, each ending at its summary
    for_each_measured_record(results_dir, [&](const nlohmann::json& r, const std::string& file) {
        if (file != file_now) file_now = file, anonymous = 0;
        const std::string sub = text_of(r, "subcommand");
        const std::string id = text_of(r, "run_id");
        if (sub == "incomplete" && text_of(r, "run_subcommand") == "stress" && !id.empty()) {
            const std::string error = text_of(r, "error");
            runs[id].run.ended = error.empty() ? "(no reason recorded)" : error;
            return;
        }
        if (sub != "stress") return;
        Pending& p = runs[id.empty() ? fmt::format("{}#{}", file, anonymous) : id];
        const bool summary = r.contains("complete") && r["complete"] == true;
        if (summary && id.empty()) ++anonymous;
        if (p.run.file.empty()) p.run.file = file;
        p.this_gpu |= soak_of_profiles_gpu(r, hw);
        p.run.timestamp = std::max(p.run.timestamp, text_of(r, "timestamp"));
        p.run.world_size = std::max(p.run.world_size, static_cast<int>(count_of(r, "world_size")));
        p.run.elapsed_s = std::max(p.run.elapsed_s, number_of(r, "elapsed_s"));
        const long events = r.contains("sdc_events") && r["sdc_events"].is_array() ? static_cast<long>(r["sdc_events"].size()) : 0;
        const long checks = count_of(r, "sdc_checks");
        const long ecc = r.contains("telemetry_by_rank") ? ecc_of(r["telemetry_by_rank"]) : 0;
        if (summary) {  // the whole run's totals
            p.run.complete = true;
            p.run.mismatches = std::max(p.run.mismatches, events);
            p.run.replica_checks = std::max(p.run.replica_checks, checks);
            p.run.ecc_uncorrected = std::max(p.run.ecc_uncorrected, ecc);
            if (r.contains("workloads") && r["workloads"].is_array())
                for (const auto& w : r["workloads"])
                    if (w.is_object() && w.contains("drift_pct"))
                        for (const char* end : {"min", "max"})
                            p.run.drift_pct = std::max(p.run.drift_pct, std::abs(number_of(w["drift_pct"], end)));
        } else {  // an interval: counted where the run has no summary
            p.interval_mismatches += events;
            p.interval_checks += checks;
            p.interval_ecc += ecc;
            p.run.drift_pct = std::max(p.run.drift_pct, std::abs(number_of(r, "drift_pct")));
        }
    });
    std::vector<SoakRun> out;
    for (auto& [key, p] : runs) {
        if (!p.this_gpu) continue;  // another GPU's, or an incomplete record whose run left no stress record
        p.run.mismatches = std::max(p.run.mismatches, p.interval_mismatches);
        p.run.replica_checks = std::max(p.run.replica_checks, p.interval_checks);
        p.run.ecc_uncorrected = std::max(p.run.ecc_uncorrected, p.interval_ecc);
        out.push_back(std::move(p.run));
    }
    std::sort(out.begin(), out.end(), [](const SoakRun& a, const SoakRun& b) {
        return a.timestamp != b.timestamp ? a.timestamp > b.timestamp : a.file < b.file;
    });
    return out;
}

const char* soak_status_name(SoakVerdict::Status s) {
    switch (s) {
        case SoakVerdict::Status::not_measured: return "not measured";
        case SoakVerdict::Status::passed: return "passed";
        case SoakVerdict::Status::counts_against: return "counts against";
    }
    return "?";
}

SoakVerdict soak_verdict(const std::vector<SoakRun>& runs, double bound) {
    const std::string band = fmt::format("bound {:g}% [{:g}-{:g}%]", bound, kSoakDriftBound.lo, kSoakDriftBound.hi);
    std::vector<std::string> against, not_scored;
    int passed = 0;
    double drift = 0;
    for (const SoakRun& r : runs) {
        const size_t before = against.size();
        if (r.mismatches > 0)
            against.push_back(fmt::format("{} replica mismatch{} in {} checks ({})", r.mismatches, r.mismatches > 1 ? "es" : "",
                                          r.replica_checks, r.file));
        if (r.ecc_uncorrected > 0)
            against.push_back(fmt::format("{} uncorrected ECC error{} ({})", r.ecc_uncorrected, r.ecc_uncorrected > 1 ? "s" : "",
                                          r.file));
        if (r.faulted()) against.push_back(fmt::format("ended by a hang or fault: {} ({})", r.ended, r.file));
        if (r.drift_pct > bound)
            against.push_back(fmt::format("throughput drift {:.2f}% beyond the {} ({})", r.drift_pct, band, r.file));
        if (against.size() > before) continue;
        if (r.complete) {
            ++passed;
            drift = std::max(drift, r.drift_pct);
        } else {
            not_scored.push_back(fmt::format("{} ({})", r.ended.empty() ? "cut short without a record of why" : r.ended, r.file));
        }
    }
    const std::string unscored =
        not_scored.empty() ? ""
                           : fmt::format("; {} run{} cut short, not scored (a stop and a fault read alike): {}", not_scored.size(),
                                         not_scored.size() > 1 ? "s" : "", fmt::join(not_scored, "; "));
    if (!against.empty()) {
        const std::string said = fmt::format("counts against: {}", fmt::join(against, "; "));
        return {SoakVerdict::Status::counts_against, said, said};
    }
    if (passed == 0) return {SoakVerdict::Status::not_measured, "not measured" + unscored, "not measured"};
    std::vector<std::string> files;
    for (const SoakRun& r : runs)
        if (r.complete && std::find(files.begin(), files.end(), r.file) == files.end()) files.push_back(r.file);
    return {SoakVerdict::Status::passed,
            fmt::format("passed: {} run{} ({}) without a replica mismatch, uncorrected ECC error, hang or fault; "
                        "throughput drift within {:.2f}% ({}){}",
                        passed, passed > 1 ? "s" : "", fmt::join(files, ", "), drift, band, unscored),
            fmt::format("passed ({} run{}, throughput drift within {:.2f}%, {})", passed, passed > 1 ? "s" : "", drift, band)};
}

}  // namespace sb
