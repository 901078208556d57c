// `scalebench stress` (see stress.h): the soak loop, its interval and final records,
// the replica (silent-data-corruption) check, and the command's options.
#include "src/commands/stress.h"

#include <unistd.h>

#include <algorithm>
#include <limits>
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

#include "src/commands/stragglers.h"
#include "src/system/backend.h"
#include "src/system/environment.h"
#include "src/system/run_records.h"
#include "base/errors.h"
#include "base/numbers.h"
#include "src/core/files.h"
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
        double value = 0;
        if (const std::string problem = parse_real(number, RealRange{0, false, kNoUpperBound, false}, value); !problem.empty())
            throw bad(problem);
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
    int64_t rank = 0;
    if (at == std::string::npos ||
        !parse_integer(text.substr(0, at), IntRange{0, kMaxWorldSize - 1}, rank).empty() ||
        !parse_integer(text.substr(at + 1), IntRange{0, std::numeric_limits<int64_t>::max()}, f.step).empty())
        throw UserError(fmt::format("--plant-bit-flip '{}': expected RANK@STEP (whole numbers >= 0), e.g. 1@250", text));
    f.rank = static_cast<int>(rank);
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
    const std::string text = json_text(mine);
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
        out.push_back(parse_json(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
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

// One interval as this rank ran it.
struct Interval {
    int index = 0, workload = 0;
    int64_t first_step = 0;     // the workload's step index at the interval's start
    std::vector<double> times;  // 4 per step: step, compute, exposed, optimizer
    std::vector<double> arrivals;  // buckets per step: each bucket's arrival (NaN: not measured)
    std::vector<SdcEvent> events;
    int sdc_checks = 0;
    double sdc_check_s = 0;  // what the checks cost the interval
    double seconds = 0, elapsed_s = 0;
    nlohmann::json telemetry;  // this rank's NVML summary (null on the CPU)
    bool last = false;         // the duration is over
};

// An interval's figures over the ranks (complete on rank 0).
struct IntervalFigures {
    std::vector<double> phase[4];  // per step, the slowest rank's
    double busy_pct = 0;
    float mean_loss = 0;
    std::vector<nlohmann::json> telemetry_by_rank;
    nlohmann::json straggler_check;  // stragglers.h
};

// The soak across its intervals: the trainers (one per workload, alternated interval by
// interval), the global step count and what the final record sums up.
class Soak {
public:
    Soak(const StressPlan& plan, Ops& ops, MPI_Comm world, const nlohmann::json& environment)
        : plan_(plan), ops_(ops), world_(world), environment_(environment) {
        SB_CHECK_MPI(MPI_Comm_rank(world, &rank_));
        SB_CHECK_MPI(MPI_Comm_size(world, &size_));
        SB_REQUIRE(!plan.workloads.empty(), "stress plan without a workload");
        // Every rank knows every rank's host and GPU, so a divergence can name them.
        const ProcessInfo& p = process_info();
        const nlohmann::json me = {{"host", p.host}, {"gpu", device_environment(ops)}};
        for (const auto& j : allgather_json(me, world)) identities_.push_back({j["host"].get<std::string>(), j["gpu"]});
        comm_ = create_communicator(ops, world);
        for (const TrainConfig& cfg : plan.workloads)
            trainers_.push_back(std::make_unique<DataParallelTrainer>(cfg, ops, *comm_));
        workload_step_.assign(plan.workloads.size(), 0);
        totals_.resize(plan.workloads.size());
        telemetry_total_.resize(static_cast<size_t>(size_));
        start_ = Clock::now();  // the duration counts from here, the trainers built
    }

    void print_header() const {
        if (rank_ != 0) return;
        fmt::print("scalebench stress: {} for {} on {} rank{}, backend {}, precision {}, intervals of {}, "
                   "replica check every {} steps\n",
                   plan_.workloads.size() == 1 ? "1 workload"
                                               : fmt::format("{} workloads alternating", plan_.workloads.size()),
                   format_duration(plan_.duration_s), size_, size_ == 1 ? "" : "s", ops_.name(),
                   precision_name(ops_.precision()), format_duration(plan_.interval_s),
                   plan_.sdc_check_every > 0 ? std::to_string(plan_.sdc_check_every) : std::string("(off)"));
        for (size_t w = 0; w < plan_.workloads.size(); ++w)
            fmt::print("  workload {}: {} ({} parameters, global batch {})\n", w, plan_.workloads[w].source,
                       trainers_[w]->model().num_params(), trainers_[w]->global_batch());
        if (shared_gpu_enabled()) fmt::print("{}\n", kSharedGpuNote);
        fmt::print("{:>8} {:>11} {:>11} {:>3} {:>8} {:>11} {:>6} {:>8} {:>9} {:>9} {:>9} {:>9}  {}\n", "interval",
                   "elapsed", "remaining", "w", "steps", "samples/s", "busy", "drift", "step ms", "p90", "max", "sdc",
                   "telemetry");
        flush_stdout();
    }

    // Collective: the steps of interval `index` until its time (or the run's) is up, with the
    // replica checks every sdc_check_every steps and at its end.
    Interval run_interval(int index) {
        Interval iv;
        iv.index = index;
        iv.workload = index % static_cast<int>(plan_.workloads.size());
        DataParallelTrainer& trainer = *trainers_[static_cast<size_t>(iv.workload)];
        int64_t& workload_step = workload_step_[static_cast<size_t>(iv.workload)];
        iv.first_step = workload_step;
        std::unique_ptr<Telemetry> telemetry = start_telemetry(ops_);
        const Clock::time_point interval_start = Clock::now();
        auto check = [&] {
            const Clock::time_point check_start = Clock::now();
            auto found = check_replicas(trainer, world_, global_step_, iv.workload, identities_);
            iv.events.insert(iv.events.end(), found.begin(), found.end());
            ++iv.sdc_checks;
            iv.sdc_check_s += seconds_since(check_start);
        };
        for (;;) {
            StepTimes t = trainer.step(workload_step++);
            ++global_step_;
            iv.times.insert(iv.times.end(), {t.step, t.compute, t.exposed_comm, t.optimizer});
            t.bucket_arrivals.resize(trainer.bucketer().buckets().size(), NAN);
            iv.arrivals.insert(iv.arrivals.end(), t.bucket_arrivals.begin(), t.bucket_arrivals.end());
            if (plan_.planted_flip && plan_.planted_flip->step == global_step_ && plan_.planted_flip->rank == rank_) {
                trainer.flip_parameter_bit(0, 22);  // the top mantissa bit: a visible, finite change
                fmt::print(stderr, "stress: planted a bit flip in rank {}'s parameters after step {}\n", rank_,
                           global_step_);
            }
            if (plan_.sdc_check_every > 0 && global_step_ % plan_.sdc_check_every == 0) check();
            // Rank 0's clock decides, so every rank runs the same steps. The run ends only once
            // every workload has had an interval: should steps outlast the planned intervals, a
            // workload still waiting gets one of at least one step.
            int stop = 0;
            if (rank_ == 0) {
                const bool every_workload_ran = static_cast<size_t>(index) + 1 >= plan_.workloads.size();
                if (seconds_since(start_) >= plan_.duration_s) stop = every_workload_ran ? 2 : 1;
                else if (seconds_since(interval_start) >= plan_.interval_s) stop = 1;
            }
            SB_CHECK_MPI(MPI_Bcast(&stop, 1, MPI_INT, 0, world_));
            if (stop) {
                iv.last = stop == 2;
                break;
            }
        }
        // Each interval ends checked, so a corruption is never carried into the next.
        if (plan_.sdc_check_every > 0 && global_step_ % plan_.sdc_check_every != 0) check();
        iv.seconds = seconds_since(interval_start);
        iv.elapsed_s = seconds_since(start_);
        if (telemetry) iv.telemetry = telemetry->stop();
        return iv;
    }

    // Collective: the interval's figures over the ranks; rank 0 reports its divergences,
    // appends its record and prints its row.
    void finish_interval(const Interval& iv) {
        const IntervalFigures f = reduce_interval(iv);
        // A loss that stopped being finite (the same on every rank: reduced) fails the run:
        // the model diverged, and every later step would train on NaN.
        if (!std::isfinite(f.mean_loss) && diverged_.is_null()) {
            diverged_ = nlohmann::json{{"workload", iv.workload}, {"after_step", global_step_}, {"interval", iv.index}};
            if (rank_ == 0)
                fmt::print(stderr, "stress: loss check FAILED: workload {} ({})'s loss is not finite after global step {} "
                                   "(interval {}): the training diverged; the run stops here\n",
                           iv.workload, plan_.workloads[static_cast<size_t>(iv.workload)].source, global_step_, iv.index);
        }
        sdc_checks_total_ += iv.sdc_checks;
        sdc_events_total_ += static_cast<int>(iv.events.size());
        for (const SdcEvent& e : iv.events) {
            if (rank_ == 0) print_divergence(e);
            sdc_events_all_.push_back(to_json(e));
        }
        if (rank_ != 0) return;
        const DataParallelTrainer& trainer = *trainers_[static_cast<size_t>(iv.workload)];
        const Summary step_ms = summarize(f.phase[0]);
        const int64_t steps = static_cast<int64_t>(f.phase[0].size());
        const double samples_per_s = trainer.global_batch() / (step_ms.median / 1000.0);
        const double drift_pct = add_to_totals(iv.workload, steps, samples_per_s, step_ms.median);
        for (size_t r = 0; r < f.telemetry_by_rank.size(); ++r)
            telemetry_total_[r] = merge_telemetry(telemetry_total_[r], f.telemetry_by_rank[r]);
        append_record(plan_.out, interval_record(iv, f, step_ms, steps, samples_per_s, drift_pct));
        fmt::print("{:>8} {:>11} {:>11} {:>3} {:>8} {:>11.1f} {:>5.1f}% {:>7.2f}% {:>9.3f} {:>9.3f} {:>9.3f} {:>9}  {}\n",
                   iv.index, format_duration(iv.elapsed_s),
                   format_duration(std::max(0.0, plan_.duration_s - iv.elapsed_s)), iv.workload, steps, samples_per_s,
                   f.busy_pct, drift_pct, step_ms.median, step_ms.p90, step_ms.max,
                   plan_.sdc_check_every == 0 ? std::string("off")
                   : iv.events.empty()        ? fmt::format("{} ok", iv.sdc_checks)
                                              : fmt::format("{} BAD", iv.events.size()),
                   telemetry_brief(f.telemetry_by_rank));
        for (const nlohmann::json& s : f.straggler_check["stragglers"])
            fmt::print("  straggler in interval {}: {}\n", iv.index, straggler_line(s));
        flush_stdout();
    }

    // Rank 0: the summary per workload, printed and appended as the final record.
    void finish() const {
        if (rank_ != 0) return;
        nlohmann::json workloads = nlohmann::json::array();
        int intervals = 0;
        for (size_t w = 0; w < totals_.size(); ++w) {
            intervals += totals_[w].intervals;
            workloads.push_back(workload_summary(w));
        }
        fmt::print("telemetry over the run: {}\n", telemetry_brief(telemetry_total_));
        fmt::print("replica checks: {} ({}), {}\n", sdc_checks_total_,
                   plan_.sdc_check_every > 0
                       ? fmt::format("every {} steps and at each interval's end", plan_.sdc_check_every)
                       : std::string("off"),
                   sdc_events_total_ == 0 ? std::string("all replicas identical")
                                          : fmt::format("{} DIVERGENCES (see stderr and sdc_events)", sdc_events_total_));
        const nlohmann::json record = {
            {"schema_version", kSchemaVersion},
            {"subcommand", "stress"},
            {"run_id", run_id()},
            {"timestamp", utc_timestamp()},
            {"complete", true},
            {"intervals", intervals},
            {"duration_s", plan_.duration_s},
            {"elapsed_s", seconds_since(start_)},
            {"world_size", size_},
            {"backend", ops_.name()},
            {"shared_gpu", shared_gpu_enabled()},
            {"precision", precision_name(ops_.precision())},
            {"total_steps", global_step_},
            {"workloads", workloads},
            {"sdc_check_every", plan_.sdc_check_every},
            {"sdc_checks", sdc_checks_total_},
            {"sdc_events", sdc_events_all_},
            {"loss_check", loss_check(diverged_)},
            {"checks_passed", sdc_events_total_ == 0 && diverged_.is_null()},
            {"telemetry_by_rank", telemetry_total_},
            {"environment", environment_},
        };
        append_record(plan_.out, record);
        fmt::print("results appended to {}\n", plan_.out);
    }

    int exit_code() const { return sdc_events_total_ == 0 && diverged_.is_null() ? 0 : 3; }
    bool diverged() const { return !diverged_.is_null(); }

private:
    // Collective over the world.
    IntervalFigures reduce_interval(const Interval& iv) {
        IntervalFigures f;
        f.telemetry_by_rank = gather_json(iv.telemetry, world_);
        // The share of the interval spent in training steps, on the least busy rank: what the
        // replica checks, records and host work between steps leave of a soak (samples/s
        // alone would not show it). Each rank's own steps, on its own clock.
        double stepping_ms = 0;
        for (size_t i = 0; i < iv.times.size(); i += 4) stepping_ms += iv.times[i];
        const double my_busy_pct = 100.0 * stepping_ms / 1000.0 / iv.seconds;
        SB_CHECK_MPI(MPI_Allreduce(&my_busy_pct, &f.busy_pct, 1, MPI_DOUBLE, MPI_MIN, world_));
        std::vector<double> slowest(iv.times.size());
        SB_CHECK_MPI(MPI_Allreduce(iv.times.data(), slowest.data(), static_cast<int>(iv.times.size()), MPI_DOUBLE,
                                   MPI_MAX, world_));
        for (size_t i = 0; i < slowest.size(); ++i) f.phase[i % 4].push_back(slowest[i]);
        std::vector<double> compute;
        for (size_t i = 1; i < iv.times.size(); i += 4) compute.push_back(iv.times[i]);
        const DataParallelTrainer& trainer = *trainers_[static_cast<size_t>(iv.workload)];
        f.straggler_check =
            gather_straggler_check(compute, iv.arrivals, trainer.bucketer().buckets().size(), environment_, world_);
        const float loss = trainers_[static_cast<size_t>(iv.workload)]->last_loss();
        SB_CHECK_MPI(MPI_Allreduce(&loss, &f.mean_loss, 1, MPI_FLOAT, MPI_SUM, world_));
        f.mean_loss /= static_cast<float>(size_);
        return f;
    }

    // A record's loss_check: passed, or where the loss stopped being finite.
    static nlohmann::json loss_check(const nlohmann::json& diverged) {
        return {{"passed", diverged.is_null()}, {"nonfinite", diverged}};
    }

    static void print_divergence(const SdcEvent& e) {
        fmt::print(stderr,
                   "SILENT DATA CORRUPTION: after step {} (workload {}) rank {} on host {}{} holds parameters "
                   "{} where the other replicas hold {}\n",
                   e.step, e.workload, e.rank, e.host,
                   e.gpu.is_object() && e.gpu.contains("pci_bus_id")
                       ? fmt::format(" (GPU {} {})", e.gpu.value("name", "?"), e.gpu["pci_bus_id"].get<std::string>())
                       : std::string(),
                   e.checksum, e.expected);
    }

    // Rank 0: adds an interval to its workload's totals; returns its drift against the first.
    double add_to_totals(int workload, int64_t steps, double samples_per_s, double step_ms_median) {
        WorkloadTotals& tot = totals_[static_cast<size_t>(workload)];
        if (tot.intervals == 0) tot.first_samples_per_s = samples_per_s;
        const double drift_pct = 100.0 * (samples_per_s / tot.first_samples_per_s - 1.0);
        ++tot.intervals;
        tot.steps += steps;
        tot.last_samples_per_s = samples_per_s;
        tot.samples_per_s.push_back(samples_per_s);
        tot.step_ms_medians.push_back(step_ms_median);
        tot.drift_pct.push_back(drift_pct);
        return drift_pct;
    }

    nlohmann::json interval_record(const Interval& iv, const IntervalFigures& f, const Summary& step_ms, int64_t steps,
                                   double samples_per_s, double drift_pct) const {
        const DataParallelTrainer& trainer = *trainers_[static_cast<size_t>(iv.workload)];
        const TrainConfig& cfg = plan_.workloads[static_cast<size_t>(iv.workload)];
        nlohmann::json event_json = nlohmann::json::array();
        for (const SdcEvent& e : iv.events) event_json.push_back(to_json(e));
        return {
            {"schema_version", kSchemaVersion},
            {"subcommand", "stress"},
            {"run_id", run_id()},
            {"timestamp", utc_timestamp()},
            {"complete", false},
            {"interval", iv.index},
            {"workload", iv.workload},
            {"workload_source", cfg.source},
            {"duration_s", plan_.duration_s},
            {"interval_target_s", plan_.interval_s},
            {"interval_s", iv.seconds},
            {"elapsed_s", iv.elapsed_s},
            {"remaining_s", std::max(0.0, plan_.duration_s - iv.elapsed_s)},
            {"world_size", size_},
            {"backend", ops_.name()},
            {"shared_gpu", shared_gpu_enabled()},
            {"precision", precision_name(ops_.precision())},
            {"model", trainer.model().name()},
            {"num_params", trainer.model().num_params()},
            {"local_batch", trainer.local_batch()},
            {"global_batch", trainer.global_batch()},
            {"steps", steps},
            {"first_step", iv.first_step},
            {"global_step", global_step_},
            {"step_ms", to_json(step_ms)},
            {"compute_ms", to_json(summarize(f.phase[1]))},
            {"exposed_comm_ms", to_json(summarize(f.phase[2]))},
            {"optimizer_ms", to_json(summarize(f.phase[3]))},
            {"samples_per_s", samples_per_s},
            {"wall_samples_per_s", steps * trainer.global_batch() / iv.seconds},
            {"busy_pct", f.busy_pct},
            {"drift_pct", drift_pct},
            {"loss", std::isfinite(f.mean_loss) ? nlohmann::json(f.mean_loss) : nlohmann::json()},
            {"loss_check", loss_check(std::isfinite(f.mean_loss) ? nlohmann::json() : diverged_)},
            {"sdc_check_every", plan_.sdc_check_every},
            {"sdc_checks", iv.sdc_checks},
            {"sdc_check_ms", 1000.0 * iv.sdc_check_s},
            {"sdc_events", event_json},
            {"checks_passed", iv.events.empty() && std::isfinite(f.mean_loss)},
            {"telemetry_by_rank", f.telemetry_by_rank},
            {"straggler_check", f.straggler_check},
            {"config", to_json(cfg)},
            {"environment", environment_},
        };
    }

    // Rank 0: one workload's line of the summary, printed, and its entry of the final record.
    nlohmann::json workload_summary(size_t w) const {
        const WorkloadTotals& t = totals_[w];
        const std::string& source = plan_.workloads[w].source;
        if (t.intervals == 0) return {{"workload", w}, {"source", source}, {"intervals", 0}};
        const auto [dmin, dmax] = std::minmax_element(t.drift_pct.begin(), t.drift_pct.end());
        fmt::print("workload {} ({}): {} intervals, {} steps, samples/s first {:.1f} last {:.1f} "
                   "(drift {:+.2f}%, range {:+.2f}% .. {:+.2f}%)\n",
                   w, source, t.intervals, t.steps, t.first_samples_per_s, t.last_samples_per_s, t.drift_pct.back(),
                   *dmin, *dmax);
        return {
            {"workload", w},
            {"source", source},
            {"intervals", t.intervals},
            {"steps", t.steps},
            {"samples_per_s", to_json(summarize(t.samples_per_s))},
            {"samples_per_s_first", t.first_samples_per_s},
            {"samples_per_s_last", t.last_samples_per_s},
            {"drift_pct", {{"last", t.drift_pct.back()}, {"min", *dmin}, {"max", *dmax}}},
            {"step_ms_median", to_json(summarize(t.step_ms_medians))},
        };
    }

    const StressPlan& plan_;
    Ops& ops_;
    MPI_Comm world_;
    const nlohmann::json& environment_;
    int rank_ = 0, size_ = 1;
    std::vector<RankIdentity> identities_;
    std::unique_ptr<Communicator> comm_;
    std::vector<std::unique_ptr<DataParallelTrainer>> trainers_;
    std::vector<int64_t> workload_step_;
    std::vector<WorkloadTotals> totals_;
    std::vector<nlohmann::json> sdc_events_all_;
    std::vector<nlohmann::json> telemetry_total_;
    int64_t global_step_ = 0, sdc_checks_total_ = 0;
    nlohmann::json diverged_;  // where the loss first stopped being finite (workload, step, interval); null: never
    int sdc_events_total_ = 0;
    Clock::time_point start_;
};

}  // namespace

int run_stress_plan(const StressPlan& plan, Ops& ops, MPI_Comm world, const nlohmann::json& environment) {
    Soak soak(plan, ops, world, environment);
    soak.print_header();
    for (int index = 0;; ++index) {
        const Interval interval = soak.run_interval(index);
        soak.finish_interval(interval);
        if (interval.last || soak.diverged()) break;
    }
    soak.finish();
    return soak.exit_code();
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
        ->check(CLI::IsMember(names_of(backend_choices())));
    sub.add_option("--precision", o.precision, "fp32, tf32, bf16 or fp16 (every workload)")
        ->check(CLI::IsMember(names_of(precision_choices())));
    sub.add_option("--batch-size", o.batch_size, "batch per rank (weak) or global batch (strong), every workload");
    sub.add_option("--out,-o", o.out, "JSONL file the interval records are appended to");
    sub.add_option("--plant-bit-flip", o.plant_bit_flip,
                   "RANK@STEP: flip one parameter bit on RANK after global step STEP, to see the replica check "
                   "catch it (exit 3)");
    sub.add_flag("--share-gpu", o.share_gpu,
                 "let several ranks drive one GPU (each its own NCCL host identity): for rehearsal and tests; the "
                 "figures are not hardware figures");
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
    // Workloads alternate interval by interval: each needs an interval of its own.
    const double intervals = std::ceil(plan.duration_s / plan.interval_s);
    if (static_cast<double>(workloads.size()) > intervals)
        throw UserError(fmt::format("--duration {} in intervals of {} (--interval) gives {} interval{}, fewer than the {} "
                                    "workloads of --config, which alternate interval by interval: give a longer "
                                    "--duration or a shorter --interval",
                                    o.duration, o.interval, intervals, intervals == 1 ? "" : "s", workloads.size()));
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
        if (rank == 0) error = results_file_problem(plan.out, "--out");
    } catch (const UserError& e) {
        error = e.what();
    }
    agree_on_errors(world, error);
    // The backend the workloads name (auto when none names one), built once for all of them.
    BackendChoice backend = BackendChoice::auto_select;
    for (const TrainConfig& cfg : plan.workloads)
        if (cfg.backend != BackendChoice::auto_select) backend = cfg.backend;
    const TrainConfig& first = plan.workloads.front();
    bool share_gpu = opts.share_gpu;
    for (const TrainConfig& cfg : plan.workloads) share_gpu = share_gpu || cfg.share_gpu;
    if (share_gpu) enable_shared_gpu(world);
    std::unique_ptr<Ops> ops = create_ops(backend, first.precision, world,
                                          opts.backend.empty() ? first.source + ": key 'backend'" : "--backend",
                                          opts.precision.empty() ? first.source + ": key 'precision'" : "--precision");
    for (const TrainConfig& cfg : plan.workloads) check_grad_dtype_backend(cfg, *ops, key_origin(cfg, {}, "grad_dtype"));
    check_memory_footprint(plan.workloads, *ops, world);
    begin_run({plan.out}, "stress", world);
    const int code = run_stress_plan(plan, *ops, world, run_environment(*ops, world));
    end_run(code);
    return code;
}

}  // namespace sb
