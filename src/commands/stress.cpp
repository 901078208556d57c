// `scalebench stress` (see stress.h): the soak loop, its interval and final records,
// the replica (silent-data-corruption) check, and the command's options.
#include "src/commands/stress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "src/system/backend.h"
#include "src/system/environment.h"
#include "src/system/watchdog.h"
#include "src/core/errors.h"
#include "src/core/results.h"
#include "src/commands/runner.h"
#include "src/core/stats.h"

namespace sb {

// ---- durations

namespace {
constexpr double kMaxDurationS = 366.0 * 86400;  // a year: any soak fits, and no clock overflows
}

double parse_duration(const std::string& text, const std::string& flag) {
    auto bad = [&](const std::string& why) {
        return UserError(fmt::format("{} '{}': {} (e.g. 90s, 15m, 2h, 72h, 1h30m; a bare number is seconds)", flag,
                                     text, why));
    };
    if (text.empty()) throw bad("empty duration");
    static const std::string kUnits = "dhms";  // largest first; each at most once, in this order
    static const double kSeconds[] = {86400, 3600, 60, 1};
    double total = 0;
    size_t pos = 0;
    int last_unit = -1;
    while (pos < text.size()) {
        size_t end = pos;
        while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) ++end;
        if (end == pos) throw bad(fmt::format("expected a number at '{}'", text.substr(pos)));
        const std::string number = text.substr(pos, end - pos);
        if (std::count(number.begin(), number.end(), '.') > 1 || number == ".") throw bad("malformed number");
        // Digits past what a duration can need would overflow (stod's range, then the clock's).
        if (number.size() > 12) throw bad(fmt::format("'{}' is too long a number", number));
        const double value = std::stod(number);
        if (end == text.size()) {
            if (last_unit >= 0) throw bad(fmt::format("'{}' has no unit", number));
            total = value;  // a bare number: seconds
            pos = end;
            break;
        }
        const size_t unit = kUnits.find(text[end]);
        if (unit == std::string::npos) throw bad(fmt::format("unknown unit '{}' (use d, h, m or s)", text[end]));
        if (static_cast<int>(unit) <= last_unit) throw bad("units must be given once each, largest first");
        last_unit = static_cast<int>(unit);
        total += value * kSeconds[unit];
        pos = end + 1;
    }
    if (!(total > 0) || !std::isfinite(total)) throw bad("must be longer than zero");
    if (total > kMaxDurationS) throw bad(fmt::format("longer than the longest run, {}d", kMaxDurationS / 86400));
    return total;
}

std::string format_duration(double seconds) {
    if (seconds < 60) return fmt::format("{:.1f}s", seconds);
    const long long s = std::llround(seconds);
    if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
    return fmt::format("{}h{:02}m{:02}s", s / 3600, (s / 60) % 60, s % 60);
}

PlantedFlip parse_planted_flip(const std::string& text) {
    const size_t at = text.find('@');
    PlantedFlip f;
    try {
        size_t used = 0;
        if (at == std::string::npos) throw std::invalid_argument("no @");
        f.rank = std::stoi(text.substr(0, at), &used);
        if (used != at) throw std::invalid_argument("rank");
        const std::string step = text.substr(at + 1);
        f.step = std::stoll(step, &used);
        if (used != step.size()) throw std::invalid_argument("step");
    } catch (const std::exception&) {
        throw UserError(fmt::format("--plant-bit-flip '{}': expected RANK@STEP, e.g. 1@250", text));
    }
    if (f.rank < 0 || f.step < 0) throw UserError(fmt::format("--plant-bit-flip '{}': rank and step must be >= 0", text));
    return f;
}

// ---- replica check

nlohmann::json to_json(const SdcEvent& e) {
    return {{"step", e.step}, {"workload", e.workload}, {"rank", e.rank}, {"host", e.host},
            {"gpu", e.gpu.empty() ? nlohmann::json() : e.gpu}, {"checksum", e.checksum}, {"expected", e.expected}};
}

std::vector<SdcEvent> check_replicas(DataParallelTrainer& trainer, MPI_Comm comm, int64_t step, int workload,
                                     const std::vector<RankIdentity>& ranks) {
    int size = 1;
    SB_CHECK_MPI(MPI_Comm_size(comm, &size));
    const uint64_t mine = trainer.params_checksum();
    std::vector<uint64_t> all(static_cast<size_t>(size));
    SB_CHECK_MPI(MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm));
    if (std::all_of(all.begin(), all.end(), [&](uint64_t c) { return c == all[0]; })) return {};

    // The majority is taken as right; with two ranks (or a tie) the lowest rank's group.
    std::map<uint64_t, int> votes;
    for (uint64_t c : all) ++votes[c];
    int reference = 0;
    for (int r = 0; r < size; ++r)
        if (votes[all[static_cast<size_t>(r)]] > votes[all[static_cast<size_t>(reference)]]) reference = r;
    const uint64_t expected = all[static_cast<size_t>(reference)];
    std::vector<SdcEvent> events;
    for (int r = 0; r < size; ++r) {
        if (all[static_cast<size_t>(r)] == expected) continue;
        SdcEvent e;
        e.step = step;
        e.workload = workload;
        e.rank = r;
        if (r < static_cast<int>(ranks.size())) {
            e.host = ranks[static_cast<size_t>(r)].host;
            e.gpu = ranks[static_cast<size_t>(r)].gpu;
        }
        e.checksum = fmt::format("{:016x}", all[static_cast<size_t>(r)]);
        e.expected = fmt::format("{:016x}", expected);
        events.push_back(std::move(e));
    }
    // Resynchronise so that this corruption is reported once and a later one is seen.
    std::vector<float> params = trainer.params_host();
    SB_CHECK_MPI(MPI_Bcast(params.data(), static_cast<int>(params.size()), MPI_FLOAT, reference, comm));
    if (mine != expected) trainer.set_params_host(params);
    return events;
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Collective: every rank's JSON on every rank, in rank order.
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

// Telemetry of one rank over the whole run from its interval summaries (TelemetrySampler's
// format): sample-weighted averages, extremes, throttle reasons seen, ECC deltas summed.
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

// What the progress line shows of the ranks' telemetry: hottest GPU, mean power.
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

// Per workload, what the final record summarises.
struct WorkloadTotals {
    int intervals = 0;
    int64_t steps = 0;
    double first_samples_per_s = NAN, last_samples_per_s = NAN;
    std::vector<double> samples_per_s, step_ms_medians, drift_pct;
};

}  // namespace

int run_stress_plan(const StressPlan& plan, Ops& ops, MPI_Comm world, const nlohmann::json& environment) {
    int rank = 0, size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(world, &rank));
    SB_CHECK_MPI(MPI_Comm_size(world, &size));
    SB_REQUIRE(!plan.workloads.empty(), "stress plan without a workload");

    // Every rank knows every rank's host and GPU, so a divergence can name them.
    const ProcessInfo& p = process_info();
    nlohmann::json me = {{"host", p.host}, {"gpu", device_environment(ops)}};
    std::vector<RankIdentity> identities;
    for (const auto& j : allgather_json(me, world)) identities.push_back({j["host"].get<std::string>(), j["gpu"]});

    std::unique_ptr<Communicator> comm = create_communicator(ops, world);
    std::vector<std::unique_ptr<DataParallelTrainer>> trainers;
    for (const TrainConfig& cfg : plan.workloads) trainers.push_back(std::make_unique<DataParallelTrainer>(cfg, ops, *comm));
    std::vector<int64_t> workload_step(plan.workloads.size(), 0);
    std::vector<WorkloadTotals> totals(plan.workloads.size());
    std::vector<nlohmann::json> sdc_events_all;
    std::vector<nlohmann::json> telemetry_total(static_cast<size_t>(size));
    int64_t global_step = 0, sdc_checks_total = 0;
    int sdc_events_total = 0;

    if (rank == 0) {
        fmt::print("scalebench stress: {} for {} on {} ranks, backend {}, precision {}, intervals of {}, "
                   "replica check every {} steps\n",
                   plan.workloads.size() == 1 ? "1 workload" : fmt::format("{} workloads alternating", plan.workloads.size()),
                   format_duration(plan.duration_s), size, ops.name(), precision_name(ops.precision()),
                   format_duration(plan.interval_s),
                   plan.sdc_check_every > 0 ? std::to_string(plan.sdc_check_every) : std::string("(off)"));
        for (size_t w = 0; w < plan.workloads.size(); ++w)
            fmt::print("  workload {}: {} ({} parameters, global batch {})\n", w, plan.workloads[w].source,
                       trainers[w]->model().num_params(), trainers[w]->global_batch());
        fmt::print("{:>8} {:>11} {:>11} {:>3} {:>8} {:>11} {:>6} {:>8} {:>9} {:>9} {:>9} {:>9}  {}\n", "interval",
                   "elapsed", "remaining", "w", "steps", "samples/s", "busy", "drift", "step ms", "p90", "max", "sdc",
                   "telemetry");
        std::fflush(stdout);
    }

    const Clock::time_point start = Clock::now();
    bool done = false;
    for (int interval = 0; !done; ++interval) {
        const int w = interval % static_cast<int>(plan.workloads.size());
        DataParallelTrainer& trainer = *trainers[static_cast<size_t>(w)];
        const int64_t first_step = workload_step[static_cast<size_t>(w)];
        std::unique_ptr<Telemetry> telemetry = start_telemetry(ops);
        const Clock::time_point interval_start = Clock::now();
        std::vector<double> times;  // 4 per step: step, compute, exposed, optimizer
        std::vector<SdcEvent> events;
        int sdc_checks = 0;
        double sdc_check_s = 0;  // what the checks cost the interval
        auto check = [&] {
            const Clock::time_point check_start = Clock::now();
            auto found = check_replicas(trainer, world, global_step, w, identities);
            events.insert(events.end(), found.begin(), found.end());
            ++sdc_checks;
            sdc_check_s += seconds_since(check_start);
        };
        for (;;) {
            const StepTimes t = trainer.step(workload_step[static_cast<size_t>(w)]++);
            ++global_step;
            times.insert(times.end(), {t.step, t.compute, t.exposed_comm, t.optimizer});
            if (plan.planted_flip && plan.planted_flip->step == global_step && plan.planted_flip->rank == rank) {
                trainer.flip_parameter_bit(0, 22);  // the top mantissa bit: a visible, finite change
                fmt::print(stderr, "stress: planted a bit flip in rank {}'s parameters after step {}\n", rank,
                           global_step);
            }
            if (plan.sdc_check_every > 0 && global_step % plan.sdc_check_every == 0) check();
            // Rank 0's clock decides, so every rank runs the same steps.
            int stop = 0;
            if (rank == 0) {
                if (seconds_since(start) >= plan.duration_s) stop = 2;
                else if (seconds_since(interval_start) >= plan.interval_s) stop = 1;
            }
            SB_CHECK_MPI(MPI_Bcast(&stop, 1, MPI_INT, 0, world));
            if (stop) {
                done = stop == 2;
                break;
            }
        }
        // Each interval ends checked, so a corruption is never carried into the next.
        if (plan.sdc_check_every > 0 && global_step % plan.sdc_check_every != 0) check();
        const double interval_s = seconds_since(interval_start);
        const double elapsed_s = seconds_since(start);
        const nlohmann::json telemetry_summary = telemetry ? telemetry->stop() : nlohmann::json();
        const std::vector<nlohmann::json> telemetry_by_rank = gather_json(telemetry_summary, world);

        // The share of the interval spent in training steps, on the least busy rank: what the
        // replica checks, records and host work between steps leave of a soak (samples/s
        // alone would not show it). Each rank's own steps, on its own clock.
        double stepping_ms = 0;
        for (size_t i = 0; i < times.size(); i += 4) stepping_ms += times[i];
        const double my_busy_pct = 100.0 * stepping_ms / 1000.0 / interval_s;
        double busy_pct = 0;
        SB_CHECK_MPI(MPI_Allreduce(&my_busy_pct, &busy_pct, 1, MPI_DOUBLE, MPI_MIN, world));
        std::vector<double> slowest(times.size());
        SB_CHECK_MPI(MPI_Allreduce(times.data(), slowest.data(), static_cast<int>(times.size()), MPI_DOUBLE, MPI_MAX,
                                   world));
        float loss = trainer.last_loss(), mean_loss = 0;
        SB_CHECK_MPI(MPI_Allreduce(&loss, &mean_loss, 1, MPI_FLOAT, MPI_SUM, world));
        mean_loss /= static_cast<float>(size);
        sdc_checks_total += sdc_checks;
        sdc_events_total += static_cast<int>(events.size());
        for (const SdcEvent& e : events) {
            if (rank == 0)
                fmt::print(stderr,
                           "SILENT DATA CORRUPTION: after step {} (workload {}) rank {} on host {}{} holds parameters "
                           "{} where the other replicas hold {}\n",
                           e.step, e.workload, e.rank, e.host,
                           e.gpu.is_object() && e.gpu.contains("pci_bus_id")
                               ? fmt::format(" (GPU {} {})", e.gpu.value("name", "?"), e.gpu["pci_bus_id"].get<std::string>())
                               : std::string(),
                           e.checksum, e.expected);
            sdc_events_all.push_back(to_json(e));
        }
        if (rank != 0) continue;

        std::vector<double> phase[4];
        for (size_t i = 0; i < slowest.size(); ++i) phase[i % 4].push_back(slowest[i]);
        const Summary step_ms = summarize(phase[0]);
        const int64_t steps = static_cast<int64_t>(phase[0].size());
        const double samples_per_s = trainer.global_batch() / (step_ms.median / 1000.0);
        WorkloadTotals& tot = totals[static_cast<size_t>(w)];
        if (tot.intervals == 0) tot.first_samples_per_s = samples_per_s;
        const double drift_pct = 100.0 * (samples_per_s / tot.first_samples_per_s - 1.0);
        ++tot.intervals;
        tot.steps += steps;
        tot.last_samples_per_s = samples_per_s;
        tot.samples_per_s.push_back(samples_per_s);
        tot.step_ms_medians.push_back(step_ms.median);
        tot.drift_pct.push_back(drift_pct);
        for (size_t r = 0; r < telemetry_by_rank.size(); ++r)
            telemetry_total[r] = merge_telemetry(telemetry_total[r], telemetry_by_rank[r]);

        nlohmann::json event_json = nlohmann::json::array();
        for (const SdcEvent& e : events) event_json.push_back(to_json(e));
        const TrainConfig& cfg = plan.workloads[static_cast<size_t>(w)];
        nlohmann::json record = {
            {"schema_version", kSchemaVersion},
            {"subcommand", "stress"},
            {"run_id", run_id()},
            {"timestamp", utc_timestamp()},
            {"complete", false},
            {"interval", interval},
            {"workload", w},
            {"workload_source", cfg.source},
            {"duration_s", plan.duration_s},
            {"interval_target_s", plan.interval_s},
            {"interval_s", interval_s},
            {"elapsed_s", elapsed_s},
            {"remaining_s", std::max(0.0, plan.duration_s - elapsed_s)},
            {"world_size", size},
            {"backend", ops.name()},
            {"precision", precision_name(ops.precision())},
            {"model", trainer.model().name()},
            {"num_params", trainer.model().num_params()},
            {"local_batch", trainer.local_batch()},
            {"global_batch", trainer.global_batch()},
            {"steps", steps},
            {"first_step", first_step},
            {"global_step", global_step},
            {"step_ms", to_json(step_ms)},
            {"compute_ms", to_json(summarize(phase[1]))},
            {"exposed_comm_ms", to_json(summarize(phase[2]))},
            {"optimizer_ms", to_json(summarize(phase[3]))},
            {"samples_per_s", samples_per_s},
            {"wall_samples_per_s", steps * trainer.global_batch() / interval_s},
            {"busy_pct", busy_pct},
            {"drift_pct", drift_pct},
            {"loss", mean_loss},
            {"sdc_check_every", plan.sdc_check_every},
            {"sdc_checks", sdc_checks},
            {"sdc_check_ms", 1000.0 * sdc_check_s},
            {"sdc_events", event_json},
            {"checks_passed", events.empty()},
            {"telemetry_by_rank", telemetry_by_rank},
            {"config", to_json(cfg)},
            {"environment", environment},
        };
        append_record(plan.out, record);
        fmt::print("{:>8} {:>11} {:>11} {:>3} {:>8} {:>11.1f} {:>5.1f}% {:>7.2f}% {:>9.3f} {:>9.3f} {:>9.3f} {:>9}  {}\n",
                   interval, format_duration(elapsed_s), format_duration(std::max(0.0, plan.duration_s - elapsed_s)), w,
                   steps, samples_per_s, busy_pct, drift_pct, step_ms.median, step_ms.p90, step_ms.max,
                   plan.sdc_check_every == 0 ? std::string("off")
                   : events.empty()          ? fmt::format("{} ok", sdc_checks)
                                             : fmt::format("{} BAD", events.size()),
                   telemetry_brief(telemetry_by_rank));
        std::fflush(stdout);
    }

    if (rank == 0) {
        const double elapsed_s = seconds_since(start);
        nlohmann::json workloads = nlohmann::json::array();
        int intervals = 0;
        for (size_t w = 0; w < totals.size(); ++w) {
            const WorkloadTotals& t = totals[w];
            intervals += t.intervals;
            if (t.intervals == 0) {
                workloads.push_back({{"workload", w}, {"source", plan.workloads[w].source}, {"intervals", 0}});
                continue;
            }
            const auto [dmin, dmax] = std::minmax_element(t.drift_pct.begin(), t.drift_pct.end());
            workloads.push_back({
                {"workload", w},
                {"source", plan.workloads[w].source},
                {"intervals", t.intervals},
                {"steps", t.steps},
                {"samples_per_s", to_json(summarize(t.samples_per_s))},
                {"samples_per_s_first", t.first_samples_per_s},
                {"samples_per_s_last", t.last_samples_per_s},
                {"drift_pct", {{"last", t.drift_pct.back()}, {"min", *dmin}, {"max", *dmax}}},
                {"step_ms_median", to_json(summarize(t.step_ms_medians))},
            });
            fmt::print("workload {} ({}): {} intervals, {} steps, samples/s first {:.1f} last {:.1f} "
                       "(drift {:+.2f}%, range {:+.2f}% .. {:+.2f}%)\n",
                       w, plan.workloads[w].source, t.intervals, t.steps, t.first_samples_per_s,
                       t.last_samples_per_s, t.drift_pct.back(), *dmin, *dmax);
        }
        fmt::print("telemetry over the run: {}\n", telemetry_brief(telemetry_total));
        fmt::print("replica checks: {} ({}), {}\n", sdc_checks_total,
                   plan.sdc_check_every > 0 ? fmt::format("every {} steps and at each interval's end", plan.sdc_check_every)
                                            : std::string("off"),
                   sdc_events_total == 0 ? std::string("all replicas identical")
                                         : fmt::format("{} DIVERGENCES (see stderr and sdc_events)", sdc_events_total));
        const nlohmann::json record = {
            {"schema_version", kSchemaVersion},
            {"subcommand", "stress"},
            {"run_id", run_id()},
            {"timestamp", utc_timestamp()},
            {"complete", true},
            {"intervals", intervals},
            {"duration_s", plan.duration_s},
            {"elapsed_s", elapsed_s},
            {"world_size", size},
            {"backend", ops.name()},
            {"precision", precision_name(ops.precision())},
            {"total_steps", global_step},
            {"workloads", workloads},
            {"sdc_check_every", plan.sdc_check_every},
            {"sdc_checks", sdc_checks_total},
            {"sdc_events", sdc_events_all},
            {"checks_passed", sdc_events_total == 0},
            {"telemetry_by_rank", telemetry_total},
            {"environment", environment},
        };
        append_record(plan.out, record);
        fmt::print("results appended to {}\n", plan.out);
    }
    return sdc_events_total == 0 ? 0 : 3;
}

// ---- command line

void add_stress_options(CLI::App& sub, StressOptions& o) {
    // A flag given twice takes its last value, as in `train`; --config collects them all.
    sub.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    sub.add_option("--config,-c", o.configs,
                   "workload YAML; several (A.yaml,B.yaml or the flag repeated) alternate interval by interval")
        ->delimiter(',')
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    sub.add_option("--duration", o.duration, "how long to train: 90s, 15m, 2h, 72h, 1h30m (a bare number is seconds)")
        ->required();
    sub.add_option("--interval", o.interval, "how often to summarise and append a record (default 10m)");
    sub.add_option("--sdc-check-every", o.sdc_check_every,
                   "compare the ranks' parameter checksums every K steps (0: off; default: the first "
                   "workload's sdc_check_every, 100)");
    sub.add_option("--backend", o.backend, "auto (CUDA when a GPU is visible), cpu or cuda")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
    sub.add_option("--precision", o.precision, "fp32, tf32, bf16 or fp16 (every workload)")
        ->check(CLI::IsMember({"fp32", "tf32", "bf16", "fp16"}));
    sub.add_option("--batch-size", o.batch_size, "batch per rank (weak) or global batch (strong), every workload");
    sub.add_option("--out,-o", o.out, "JSONL file the interval records are appended to");
    sub.add_option("--plant-bit-flip", o.plant_bit_flip,
                   "RANK@STEP: flip one parameter bit on RANK after global step STEP, to see the replica check "
                   "catch it (exit 3)");
}

namespace {

// Each file read by rank 0 and broadcast (load_config_everywhere); none = the built-in default.
std::vector<TrainConfig> load_configs_everywhere(const std::vector<std::string>& paths, MPI_Comm world) {
    std::vector<TrainConfig> out;
    if (paths.empty()) out.emplace_back();
    for (const std::string& path : paths) out.push_back(load_config_everywhere(path, world));
    return out;
}

StressPlan plan_stress(const StressOptions& o, std::vector<TrainConfig> workloads, int world_size) {
    StressPlan plan;
    plan.duration_s = parse_duration(o.duration, "--duration");
    plan.interval_s = parse_duration(o.interval, "--interval");
    if (o.sdc_check_every && *o.sdc_check_every < 0)
        throw UserError(fmt::format("--sdc-check-every {}: must be >= 0", *o.sdc_check_every));
    // One period for the whole run (steps are counted across the alternating workloads).
    plan.sdc_check_every = o.sdc_check_every ? *o.sdc_check_every : workloads.front().sdc_check_every;
    plan.out = o.out;
    if (!o.plant_bit_flip.empty()) {
        plan.planted_flip = parse_planted_flip(o.plant_bit_flip);
        if (plan.planted_flip->rank >= world_size)
            throw UserError(fmt::format("--plant-bit-flip '{}': rank {} but {} ranks launched", o.plant_bit_flip,
                                        plan.planted_flip->rank, world_size));
    }
    FlagKeys flags;
    if (!o.backend.empty()) flags["backend"] = "--backend";
    if (!o.precision.empty()) flags["precision"] = "--precision";
    if (o.batch_size) flags["batch_size"] = "--batch-size";
    for (TrainConfig& cfg : workloads) {
        if (!o.backend.empty()) cfg.backend = parse_backend_choice(o.backend);
        if (!o.precision.empty()) cfg.precision = parse_precision(o.precision);
        if (o.batch_size) cfg.batch_size = *o.batch_size;
        cfg.scaling = {world_size};  // a soak trains on every launched rank
        cfg.out = o.out;
        validate_config(cfg, flags);
        validate_for_world(cfg, world_size, flags);
        // One stress run builds one backend: `auto` goes with either choice (run_stress checks
        // it resolved to the one built), an explicit cpu and cuda do not mix.
        const TrainConfig& first = workloads.front();
        const bool backends_differ = cfg.backend != first.backend && cfg.backend != BackendChoice::auto_select &&
                                     first.backend != BackendChoice::auto_select;
        if (backends_differ || cfg.precision != first.precision)
            throw UserError(fmt::format("{}: backend {} / precision {} differ from {}'s {} / {}: one stress run builds "
                                        "one backend (give --backend and --precision)",
                                        cfg.source, backend_choice_name(cfg.backend), precision_name(cfg.precision),
                                        first.source, backend_choice_name(first.backend),
                                        precision_name(first.precision)));
    }
    plan.workloads = std::move(workloads);
    return plan;
}


}  // namespace

int run_stress(const StressOptions& opts, MPI_Comm world) {
    int rank = 0, size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(world, &rank));
    SB_CHECK_MPI(MPI_Comm_size(world, &size));
    std::vector<TrainConfig> workloads = load_configs_everywhere(opts.configs, world);
    StressPlan plan;
    std::string error;
    try {
        plan = plan_stress(opts, std::move(workloads), size);
        if (rank == 0) error = results_file_problem(plan.out);
    } catch (const UserError& e) {
        error = e.what();
    }
    agree_on_errors(world, error);
    // The backend the workloads name (auto when none names one), built once for all of them.
    BackendChoice backend = BackendChoice::auto_select;
    for (const TrainConfig& cfg : plan.workloads)
        if (cfg.backend != BackendChoice::auto_select) backend = cfg.backend;
    const TrainConfig& first = plan.workloads.front();
    std::unique_ptr<Ops> ops = create_ops(backend, first.precision, world,
                                          opts.backend.empty() ? first.source + ": key 'backend'" : "--backend",
                                          opts.precision.empty() ? first.source + ": key 'precision'" : "--precision");
    for (const TrainConfig& cfg : plan.workloads) {
        check_grad_dtype_backend(cfg, *ops);
        check_memory_footprint(cfg, *ops, world);
    }
    begin_run({plan.out}, "stress", world);
    const int code = run_stress_plan(plan, *ops, world, run_environment(*ops, world));
    end_run(code);
    return code;
}

}  // namespace sb
