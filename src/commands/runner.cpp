// The sweep (see runner.h): every world size of the scaling list in turn inside one launch,
// its warm-up and measured steps with rank 0's progress line, then its figures reduced, its
// table row printed and its record appended.
#include "src/commands/runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "base/errors.h"
#include "collectives/mpi_communicator.h"
#include "src/commands/stragglers.h"
#include "src/commands/train_record.h"
#include "src/core/results.h"
#include "src/core/stats.h"
#include "src/core/workload.h"
#include "src/system/backend.h"
#include "src/system/environment.h"

namespace sb {

namespace {

void print_header(const TrainConfig& cfg, const Ops& ops, size_t params, int world) {
    fmt::print("scalebench train: {} model, {} parameters, backend {}, precision {}, {} scaling, batch {} {}, "
               "{} rank{} launched\n",
               cfg.model, params, ops.name(), precision_name(ops.precision()), scaling_mode_name(cfg.scaling_mode),
               cfg.batch_size, cfg.scaling_mode == ScalingMode::weak ? "per rank" : "global", world,
               world == 1 ? "" : "s");
    if (shared_gpu_enabled()) fmt::print("{}\n", kSharedGpuNote);
    print_scaling_table_columns();
}



// Whether a person watches rank 0's output: stdout is a terminal, and under a launcher that
// forwards output through a pty of its own (Open MPI does), the launcher's stdout is one too.
// Files, pipes and CI logs get no progress line.
bool output_is_watched() {
    if (!::isatty(STDOUT_FILENO)) return false;
    if (!std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("PMIX_RANK")) return true;
    char target[256] = {};
    const std::string link = "/proc/" + std::to_string(::getppid()) + "/fd/1";
    const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
    const std::string path(target, n > 0 ? static_cast<size_t>(n) : 0);
    return path.rfind("/dev/pts/", 0) == 0 || path.rfind("/dev/tty", 0) == 0;
}

// Rank 0's progress through one world size's steps, rewritten in place at most 4 times a
// second: "n = 4: step 120/203, 45.2 steps/s, 2s left"; cleared before the table row.
class ProgressLine {
public:
    ProgressLine(bool shown, int world_size, int total_steps)
        : shown_(shown), world_size_(world_size), total_(total_steps), start_(std::chrono::steady_clock::now()) {}
    ~ProgressLine() { clear(); }

    void step_done(int done) {
        if (!shown_) return;
        const auto now = std::chrono::steady_clock::now();
        if (now - last_ < std::chrono::milliseconds(250)) return;
        last_ = now;
        const double elapsed = std::chrono::duration<double>(now - start_).count();
        const double rate = done / std::max(elapsed, 1e-9);
        const std::string line = fmt::format("n = {}: step {}/{}, {:.1f} steps/s, {:.0f}s left", world_size_, done,
                                             total_, rate, (total_ - done) / std::max(rate, 1e-9));
        fmt::print("\r{:<{}}", line, width_);
        width_ = std::max(width_, line.size());
        std::fflush(stdout);
    }
    void clear() {
        if (!shown_ || width_ == 0) return;
        fmt::print("\r{:<{}}\r", "", width_);
        std::fflush(stdout);
        width_ = 0;
    }

private:
    bool shown_;
    int world_size_, total_;
    std::chrono::steady_clock::time_point start_, last_{};
    size_t width_ = 0;
};


// The steps communication cost is measured against (DDP's no_sync): the same kernels and
// buckets with no gradient collective, a few warm-up steps (a CUDA graph of their own is
// captured), then as many as the measured steps. Each rank's replica then takes its own
// gradients, so the parameters are put back afterwards for the replica check.
void run_no_comm_steps(DataParallelTrainer& trainer, const TrainConfig& cfg, int64_t first_step, LocalSamples& local) {
    const std::vector<float> params = trainer.params_host();
    const int warmup = std::max(1, std::min(cfg.warmup, 5));
    for (int s = 0; s < warmup + cfg.steps; ++s) {
        const StepTimes t = trainer.step(first_step + s, false);
        if (s >= warmup) local.no_comm_times.insert(local.no_comm_times.end(), {t.step, t.compute});
    }
    trainer.set_params_host(params);
}

// The warm-up and measured steps (telemetry over the measured ones), then, where a step
// issues no host waits, the same steps with the stream held while they are issued: the device
// time of a step with no host launch gaps (the difference is host overhead); at n > 1, then the
// steps without communication.
LocalSamples run_steps(DataParallelTrainer& trainer, const TrainConfig& cfg, Ops& ops, ProgressLine& progress) {
    LocalSamples local;
    std::unique_ptr<Telemetry> telemetry;
    for (int s = 0; s < cfg.warmup + cfg.steps; ++s) {
        if (s == cfg.warmup) telemetry = start_telemetry(ops);
        StepTimes t = trainer.step(s);
        // After the step's timing is read (the step has ended): not part of the measured time.
        const float loss = trainer.last_loss();
        if (s == 0) local.initial_loss = loss;
        if (local.first_nonfinite_step < 0 && !std::isfinite(loss)) local.first_nonfinite_step = s;
        if (s >= cfg.warmup) {
            local.times.insert(local.times.end(), {t.step, t.compute, t.exposed_comm, t.optimizer});
            t.bucket_arrivals.resize(trainer.bucketer().buckets().size(), NAN);
            local.arrivals.insert(local.arrivals.end(), t.bucket_arrivals.begin(), t.bucket_arrivals.end());
        }
        progress.step_done(s + 1);
    }
    progress.clear();
    local.final_loss = trainer.last_loss();
    if (telemetry) local.telemetry = telemetry->stop();
    if (trainer.step_is_host_free()) {
        const int gated_steps = std::max(3, std::min(cfg.steps, 10));
        for (int s = 0; s < gated_steps; ++s) {
            SB_REQUIRE(ops.hold_stream(), "backend cannot hold its stream");
            trainer.issue_step(cfg.warmup + cfg.steps + s);
            ops.release_stream();
            local.device_times.push_back(trainer.step_times().step);
        }
    }
    if (trainer.world_size() > 1) run_no_comm_steps(trainer, cfg, cfg.warmup + cfg.steps + 10, local);
    return local;
}

}  // namespace

bool run_training_sweep(const TrainConfig& cfg, Ops& ops, MPI_Comm world, const nlohmann::json& environment,
                        const SweepChecks& checks) {
    int world_rank = 0, world_size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(world, &world_rank));
    SB_CHECK_MPI(MPI_Comm_size(world, &world_size));
    const std::vector<std::string> hosts =
        environment.contains("hostnames") ? environment["hostnames"].get<std::vector<std::string>>()
                                          : std::vector<std::string>{};
    const bool show_progress = world_rank == 0 && output_is_watched();
    ScalingRow at_1;  // the n = 1 row, once measured
    bool all_passed = true;
    bool header_printed = false;
    // One gradient communicator for the launch; each world size splits its first n ranks.
    std::unique_ptr<Communicator> world_comm = create_communicator(ops, world);

    for (int n : world_sizes(cfg, world_size)) {
        MPI_Comm sub = split_first_ranks(world, n);  // host-side reductions of the figures
        std::unique_ptr<Communicator> comm = world_comm->split_first(n);
        nlohmann::json record;
        ScalingRow row;
        if (sub != MPI_COMM_NULL) {
            DataParallelTrainer trainer(cfg, ops, *comm);
            if (world_rank == 0 && !header_printed) {
                print_header(cfg, ops, trainer.model().num_params(), world_size);
                header_printed = true;
            }
            ProgressLine progress(show_progress, n, cfg.warmup + cfg.steps);
            const LocalSamples local = run_steps(trainer, cfg, ops, progress);
            const SizeFigures figures = reduce_figures(trainer, local, sub, n, checks, environment);
            if (world_rank == 0) {
                const nlohmann::json mismatched = mismatched_replicas(figures, hosts);
                if (figures.recheck_mismatched != 0)
                    fmt::print(stderr, "all-reduce recheck FAILED at {} ranks: {} gradient elements differ between two "
                                       "all-reduces of identical inputs\n", n, figures.recheck_mismatched);
                if (figures.first_nonfinite_step >= 0)
                    fmt::print(stderr, "loss check FAILED at {} ranks: the loss stopped being finite at step {} of {} "
                                       "(warm-up included); the run diverged (too large a learning rate?)\n",
                               n, figures.first_nonfinite_step + 1, cfg.warmup + cfg.steps);
                all_passed = all_passed && mismatched.empty() && figures.recheck_mismatched == 0 &&
                             figures.first_nonfinite_step < 0;
                row = scaling_row(trainer, figures, n, at_1);
                if (n == 1) at_1 = row;
                record = train_record(cfg, ops, trainer, figures, row, at_1, world_size, mismatched,
                                      checks, environment);
            }
            SB_CHECK_MPI(MPI_Comm_free(&sub));
        }
        SB_CHECK_MPI(MPI_Barrier(world));  // ranks outside this sub-world wait here
        if (world_rank == 0) {
            print_scaling_table_row(row);
            for (const nlohmann::json& s : record["straggler_check"]["stragglers"])
                fmt::print("  straggler at {} ranks: {}\n", n, straggler_line(s));
            append_record(cfg.out, record);
        }
    }
    if (world_rank == 0) fmt::print("results appended to {}\n", cfg.out);
    return all_passed;
}

}  // namespace sb
