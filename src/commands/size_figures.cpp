// One world size's figures reduced over its ranks (see size_figures.h): the slowest rank's
// phases per step, the median step's phases, the straggler check, the losses, the replica
// checksums, the all-reduce recheck and the gradient all-reduce timing.
#include "src/commands/size_figures.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "base/errors.h"
#include "src/commands/stragglers.h"
#include "src/core/stats.h"
#include "src/system/environment.h"

namespace sb {

namespace {

// Back-to-back all-reduces of every bucket timed alone: enough for a median and a spread.
constexpr int kAllreduceIterations = 10;


// Collective over `comm`: the phases of one measured step, which add up to it (per-phase
// medians need not): each step's slowest rank, and of those steps the median one (the lower
// middle for an even count). `times` holds 4 per step: step, compute, exposed, optimizer.
// Complete on rank 0 of `comm`.
nlohmann::json median_step_phases(const std::vector<double>& times, MPI_Comm comm) {
    int rank = 0, size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(comm, &rank));
    SB_CHECK_MPI(MPI_Comm_size(comm, &size));
    std::vector<double> all(rank == 0 ? times.size() * static_cast<size_t>(size) : 0);
    SB_CHECK_MPI(MPI_Gather(times.data(), static_cast<int>(times.size()), MPI_DOUBLE, all.data(),
                            static_cast<int>(times.size()), MPI_DOUBLE, 0, comm));
    const size_t steps = times.size() / 4;
    if (rank != 0 || steps == 0) return nullptr;
    std::vector<std::pair<double, size_t>> slowest;  // (step time, index into all) per step
    for (size_t s = 0; s < steps; ++s) {
        size_t at = 4 * s;
        for (int r = 1; r < size; ++r) {
            const size_t other = static_cast<size_t>(r) * times.size() + 4 * s;
            if (all[other] > all[at]) at = other;
        }
        slowest.emplace_back(all[at], at);
    }
    std::nth_element(slowest.begin(), slowest.begin() + (steps - 1) / 2, slowest.end());
    const size_t at = slowest[(steps - 1) / 2].second;
    return {{"step_ms", all[at]}, {"compute_ms", all[at + 1]}, {"exposed_comm_ms", all[at + 2]},
            {"optimizer_ms", all[at + 3]}, {"rank", at / times.size()}, {"step", (at % times.size()) / 4}};
}


}  // namespace


// Collective over `sub` (n ranks): reduces the samples and runs the checks (the replica
// checksums always, the all-reduce recheck on demand) and the gradient all-reduce timing.
SizeFigures reduce_figures(DataParallelTrainer& trainer, const LocalSamples& local, MPI_Comm sub, int n,
                           const SweepChecks& checks, const nlohmann::json& environment) {
    SizeFigures f;
    // Each step's figure is the slowest rank's (the step ends when the last rank is done).
    std::vector<double> slowest(local.times.size());
    SB_CHECK_MPI(MPI_Allreduce(local.times.data(), slowest.data(), static_cast<int>(local.times.size()), MPI_DOUBLE,
                               MPI_MAX, sub));
    for (size_t i = 0; i < slowest.size(); ++i) f.phase[i % 4].push_back(slowest[i]);
    std::vector<double> no_comm(local.no_comm_times.size());
    SB_CHECK_MPI(MPI_Allreduce(local.no_comm_times.data(), no_comm.data(), static_cast<int>(no_comm.size()),
                               MPI_DOUBLE, MPI_MAX, sub));
    for (size_t i = 0; i < no_comm.size(); ++i) f.no_comm[i % 2].push_back(no_comm[i]);
    f.median_step = median_step_phases(local.times, sub);
    std::vector<double> step, compute;
    for (size_t i = 0; i + 1 < local.times.size(); i += 4) {
        step.push_back(local.times[i]);
        compute.push_back(local.times[i + 1]);
    }
    f.straggler_check =
        gather_straggler_check(step, compute, local.arrivals, trainer.bucketer().buckets().size(), environment, sub);

    float losses[2] = {local.initial_loss, local.final_loss};
    SB_CHECK_MPI(MPI_Allreduce(losses, f.mean_losses, 2, MPI_FLOAT, MPI_SUM, sub));
    for (float& l : f.mean_losses) l /= static_cast<float>(n);
    int mine = local.first_nonfinite_step < 0 ? INT_MAX : local.first_nonfinite_step, first = INT_MAX;
    SB_CHECK_MPI(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, sub));
    f.first_nonfinite_step = first == INT_MAX ? -1 : first;

    // Replica check: data parallelism keeps every rank's parameters bitwise identical.
    const uint64_t checksum = trainer.params_checksum();
    f.checksums.resize(static_cast<size_t>(n));
    SB_CHECK_MPI(MPI_Gather(&checksum, 1, MPI_UINT64_T, f.checksums.data(), 1, MPI_UINT64_T, 0, sub));

    // On demand: the same all-reduce twice from identical inputs must give the same bits.
    if (checks.recheck_allreduce) {
        const long long mine = static_cast<long long>(trainer.recheck_gradient_allreduce());
        SB_CHECK_MPI(MPI_Allreduce(&mine, &f.recheck_mismatched, 1, MPI_LONG_LONG, MPI_SUM, sub));
    }
    const std::vector<double> allreduce_ms = trainer.time_gradient_allreduce(kAllreduceIterations);
    f.allreduce_ms.resize(allreduce_ms.size());
    SB_CHECK_MPI(MPI_Allreduce(allreduce_ms.data(), f.allreduce_ms.data(), static_cast<int>(allreduce_ms.size()),
                               MPI_DOUBLE, MPI_MAX, sub));
    if (trainer.sharded()) {
        const double all_gather_ms = trainer.time_params_all_gather(kAllreduceIterations);
        SB_CHECK_MPI(MPI_Allreduce(&all_gather_ms, &f.all_gather_ms, 1, MPI_DOUBLE, MPI_MAX, sub));
    }
    const double peak = trainer.peak_total_bytes();
    SB_CHECK_MPI(MPI_Allreduce(&peak, &f.peak_memory_bytes, 1, MPI_DOUBLE, MPI_MAX, sub));
    const double device_step_ms = local.device_times.empty() ? NAN : percentile(local.device_times, 50);
    SB_CHECK_MPI(MPI_Allreduce(&device_step_ms, &f.device_step_ms, 1, MPI_DOUBLE, MPI_MAX, sub));
    f.telemetry_by_rank = gather_json(local.telemetry, sub);
    return f;
}

}  // namespace sb
