// One world size's figures over its ranks: what each rank measured in its steps
// (LocalSamples), reduced over the ranks (SizeFigures: each step's slowest rank, the median
// step's phases, the straggler check, the losses, the replica checksums, the all-reduce
// recheck and the gradient all-reduce timing).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include <mpi.h>
#include <nlohmann/json.hpp>

#include "src/commands/trainer.h"

namespace sb {

// Checks the sweep runs on demand, beyond the replica check it always runs.
struct SweepChecks {
    // After the measured steps, all-reduce one gradient buffer twice and compare the bits;
    // adds `allreduce_recheck` to each record.
    bool recheck_allreduce = false;
};

// What one world size's steps measured on this rank.
struct LocalSamples {
    std::vector<double> times;     // 4 per measured step: step, compute, exposed, optimizer
    std::vector<double> no_comm_times;  // 2 per step without communication (n > 1): step, compute
    std::vector<double> arrivals;  // buckets per measured step: each bucket's arrival (NaN: not measured)
    float initial_loss = 0, final_loss = 0;
    int first_nonfinite_step = -1;     // the first step (0-based, warm-up included) whose loss is inf or NaN
    nlohmann::json telemetry;          // NVML summary over the measured steps (null on the CPU)
    std::vector<double> device_times;  // the steps again, issued with the stream held
};

// One world size's figures over its ranks; complete on rank 0 of the sub-world.
struct SizeFigures {
    std::vector<double> phase[4];  // per measured step, the slowest rank's: step, compute, exposed, optimizer
    std::vector<double> no_comm[2];  // per step without communication (n > 1), the slowest rank's: step, compute
    nlohmann::json median_step;
    float mean_losses[2] = {0, 0};  // first step, last measured step
    int first_nonfinite_step = -1;  // the earliest over the ranks, or -1: the loss stayed finite
    std::vector<uint64_t> checksums;  // every rank's parameter checksum
    long long recheck_mismatched = 0;
    // Every bucket's gradient collective back to back, per iteration, the slowest rank's: the
    // all-reduce, or the reduce-scatter when sharded.
    std::vector<double> allreduce_ms;
    double device_step_ms = NAN;       // slowest rank
    double all_gather_ms = NAN;        // sharded: the parameters' all-gather alone (median), slowest rank
    double peak_memory_bytes = 0;      // the backend's high-water mark, largest rank
    std::vector<nlohmann::json> telemetry_by_rank;
    nlohmann::json straggler_check;  // stragglers.h
};

// Collective over `sub` (n ranks): reduces the samples and runs the checks (the replica
// checksums always, the all-reduce recheck on demand) and the gradient all-reduce timing.
SizeFigures reduce_figures(DataParallelTrainer& trainer, const LocalSamples& local, MPI_Comm sub, int n,
                           const SweepChecks& checks, const nlohmann::json& environment);

}  // namespace sb
