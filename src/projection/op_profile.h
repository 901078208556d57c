// Per-op profile of a training step, `train --profile-ops FILE` (DESIGN: Projection,
// calibration): one rank runs the workload's warm-up and measured steps eagerly on
// TimedOps over the real backend, and one `op_profile` record is written per distinct op
// (kind and shape as the projection's trace names them) with the median time of its calls
// over the measured steps. `project --calibrate` reads the records back through
// profiled_op_of_record, so the record's format lives here only (results/SCHEMA.md).
#pragma once

#include <string>
#include <vector>

#include <mpi.h>
#include <nlohmann/json.hpp>

#include "models/timed_ops.h"
#include "models/trace_ops.h"
#include "src/core/config.h"
#include "src/core/stats.h"

namespace sb {

struct OpTiming {
    TracedOp op;
    size_t first_index = 0;  // position of its first call in the step
    int calls_per_step = 0;
    Summary ms;              // of one call, over every call of the measured steps
};

struct OpProfile {
    std::string model;
    size_t num_params = 0;
    int local_batch = 0;
    int measured_steps = 0;  // whole steps in the profile
    std::vector<OpTiming> ops;  // in the order of their first call in a step
};

// Groups the samples of the measured steps (one vector a step) by op (op_key), in the order
// of first call. The step with the most ops is the whole step; a step that issued other ops
// (fp16 skips the optimizer after an overflow) is left out, so each op's time count is
// calls_per_step times the whole steps.
std::vector<OpTiming> summarize_op_samples(const std::vector<std::vector<TimedOps::Sample>>& steps);

// Warm-up steps of a profile: cfg's, at least one.
int profiled_warmup(const TrainConfig& cfg);

// Runs the warm-up and cfg's measured steps as one rank (the local batch of world size 1)
// on `backend` wrapped in TimedOps, eagerly, and times every op of the measured steps.
OpProfile profile_training_ops(const TrainConfig& cfg, Ops& backend);

// One `op_profile` record per op of the profile. Under SCALEBENCH_DEVICE_LIMITS each record names
// the architecture whose limits it ran under (`emulated_arch`; null under the device's own).
std::vector<nlohmann::json> op_profile_records(const OpProfile& profile, const TrainConfig& cfg, const Ops& backend,
                                               const nlohmann::json& environment);

// An op_profile record read back: the op as the trace names it, its median time and the
// run's precision. A record that is not one, or whose figures cannot be a measurement
// (time not positive, FLOPs of a GEMM that are not 2mnk x batch, ...), is a UserError
// saying what is wrong.
struct ProfiledOp {
    TracedOp op;
    Precision precision = Precision::fp32;
    double ms = 0;  // median of one call
    int calls_per_step = 0;
};
ProfiledOp profiled_op_of_record(const nlohmann::json& record);

// The architecture whose limits a run took from SCALEBENCH_DEVICE_LIMITS, "" under the device's
// own: from an environment's gpu.device_limits (its source is "device" when read from the GPU).
// Such a run's figures are neither its GPU's (other kernel variants) nor the emulated GPU's (the
// SMs, clocks and memory stay the device's): calibration leaves them out.
std::string emulated_arch_of_environment(const nlohmann::json& environment);
// A record's: its `emulated_arch` (op_profile records), else its environment's.
std::string emulated_arch_of_record(const nlohmann::json& record);

// `train --profile-ops FILE`, collective over `world`: rank 0 profiles (a one-rank
// communicator of its own), prints the ops by their share of the step and appends the
// records to `out`; the other ranks wait.
void run_op_profile(const TrainConfig& cfg, Ops& backend, MPI_Comm world, const nlohmann::json& environment,
                    const std::string& out);

}  // namespace sb
