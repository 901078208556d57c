// The stress soak (see stress.h): its intervals of steps with the replica checks, each
// interval's figures over the ranks, its record and table row, and the final record.
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

#include "src/commands/stragglers.h"
#include "src/commands/stress_telemetry.h"
#include "src/system/backend.h"
#include "src/system/environment.h"
#include "src/system/run_records.h"
#include "base/errors.h"
#include "src/core/files.h"
#include "src/core/results.h"
#include "src/commands/runner.h"
#include "src/core/stats.h"

namespace sb {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }


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
            const bool planted = plan_.planted_flip && plan_.planted_flip->step == global_step_;
            if (planted && plan_.planted_flip->rank == rank_) {
                trainer.flip_parameter_bit(0, 22);  // the top mantissa bit: a visible, finite change
                fmt::print(stderr, "stress: planted a bit flip in rank {}'s parameters after step {}\n", rank_,
                           global_step_);
            }
            // Sharded, each step gathers the values a rank reads afresh, so a planted flip is
            // checked before the next gather overwrites it.
            if (plan_.sdc_check_every > 0 &&
                (global_step_ % plan_.sdc_check_every == 0 || (planted && trainer.sharded())))
                check();
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
        std::vector<double> step, compute;
        for (size_t i = 0; i + 1 < iv.times.size(); i += 4) {
            step.push_back(iv.times[i]);
            compute.push_back(iv.times[i + 1]);
        }
        const DataParallelTrainer& trainer = *trainers_[static_cast<size_t>(iv.workload)];
        f.straggler_check =
            gather_straggler_check(step, compute, iv.arrivals, trainer.bucketer().buckets().size(), environment_, world_);
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

}  // namespace sb
