// A GPU's soaks and their verdict (src/projection/soak_scoring.h).
#include "src/projection/soak_scoring.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

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
    const double gib = gpu["memory_total_mib"].get<double>() / 1024.0;
    return std::abs(gib - hw.memory_gb.value) <= 0.15 * hw.memory_gb.value;
}

}  // namespace

std::string soak_summary(const HardwareProfile& hw, const std::string& results_dir) {
    const auto [r, file] = latest_record(results_dir, [&](const nlohmann::json& x) {
        return x.value("subcommand", "") == "stress" && x.value("complete", false) && soak_of_profiles_gpu(x, hw);
    });
    if (r.is_null()) return "";
    double drift = 0;  // the largest |drift| of any workload over its intervals
    for (const auto& w : r["workloads"])
        drift = std::max({drift, std::abs(w["drift_pct"]["min"].get<double>()), std::abs(w["drift_pct"]["max"].get<double>())});
    std::string line = fmt::format("soak {:.0f} s on {} GPU{}: {} replica checks {}, throughput drift within {:.2f}%",
                                   r["elapsed_s"].get<double>(), r["world_size"].get<int>(), r["world_size"].get<int>() > 1 ? "s" : "",
                                   r["sdc_checks"].get<int>(), r["checks_passed"].get<bool>() ? "passed" : "FAILED", drift);
    if (r["telemetry_by_rank"].is_array() && !r["telemetry_by_rank"].empty() && r["telemetry_by_rank"][0].is_object()) {
        const nlohmann::json& t = r["telemetry_by_rank"][0];
        line += fmt::format(", ECC corrected/uncorrected {}/{}, up to {:.0f} C and {:.0f} W, throttling: {}",
                            t["ecc_corrected_delta"].get<long>(), t["ecc_uncorrected_delta"].get<long>(),
                            t["temperature_c"]["max"].get<double>(), t["power_w"]["max"].get<double>(),
                            t["throttle_reasons_seen"].empty() ? std::string("none")
                                                               : fmt::format("{}", fmt::join(t["throttle_reasons_seen"], ", ")));
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
                if (t.is_object() && t.contains("ecc_uncorrected_delta") && t["ecc_uncorrected_delta"].is_number())
                    n += t["ecc_uncorrected_delta"].get<long>();
        return n;
    };
    std::error_code ec;
    if (results_dir.empty() || !std::filesystem::is_directory(results_dir, ec)) return {};
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::recursive_directory_iterator(results_dir, ec))
        if (e.path().extension() == ".jsonl") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (const std::string& file : files) {
        std::ifstream in(file);
        int anonymous = 0;  // runs of this file without a run_id, each ending at its summary
        for (std::string line; std::getline(in, line);) {
            const nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
            if (r.is_discarded() || !r.is_object() || r.value("projected", false)) continue;
            const std::string sub = r.value("subcommand", "");
            const std::string id = r.contains("run_id") && r["run_id"].is_string() ? r["run_id"].get<std::string>() : "";
            if (sub == "incomplete" && r.value("run_subcommand", "") == "stress" && !id.empty()) {
                runs[id].run.ended = r.value("error", std::string("(no reason recorded)"));
                continue;
            }
            if (sub != "stress") continue;
            Pending& p = runs[id.empty() ? fmt::format("{}#{}", file, anonymous) : id];
            const bool summary = r.value("complete", false);
            if (summary && id.empty()) ++anonymous;
            if (p.run.file.empty()) p.run.file = file;
            p.this_gpu |= soak_of_profiles_gpu(r, hw);
            p.run.timestamp = std::max(p.run.timestamp, r.value("timestamp", std::string()));
            p.run.world_size = std::max(p.run.world_size, r.value("world_size", 0));
            p.run.elapsed_s = std::max(p.run.elapsed_s, r.value("elapsed_s", 0.0));
            const long events = r.contains("sdc_events") && r["sdc_events"].is_array() ? static_cast<long>(r["sdc_events"].size()) : 0;
            const long checks = r.value("sdc_checks", 0L);
            const long ecc = r.contains("telemetry_by_rank") ? ecc_of(r["telemetry_by_rank"]) : 0;
            if (summary) {  // the whole run's totals
                p.run.complete = true;
                p.run.mismatches = std::max(p.run.mismatches, events);
                p.run.replica_checks = std::max(p.run.replica_checks, checks);
                p.run.ecc_uncorrected = std::max(p.run.ecc_uncorrected, ecc);
                if (r.contains("workloads") && r["workloads"].is_array())
                    for (const auto& w : r["workloads"])
                        if (w.is_object() && w.contains("drift_pct") && w["drift_pct"].is_object())
                            for (const char* end : {"min", "max"})
                                if (w["drift_pct"].contains(end) && w["drift_pct"][end].is_number())
                                    p.run.drift_pct = std::max(p.run.drift_pct, std::abs(w["drift_pct"][end].get<double>()));
            } else {  // an interval: counted where the run has no summary
                p.interval_mismatches += events;
                p.interval_checks += checks;
                p.interval_ecc += ecc;
                if (r.contains("drift_pct") && r["drift_pct"].is_number())
                    p.run.drift_pct = std::max(p.run.drift_pct, std::abs(r["drift_pct"].get<double>()));
            }
        }
    }
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
