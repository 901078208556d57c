// The training sweep (DESIGN: Runner): every world size of the scaling list measured in turn
// inside one launch, rank 0's table printed as it goes and one record per size appended.
// The trainer (trainer.h), the table (scaling_table.h), the reduced figures (size_figures.h)
// and the record (train_record.h) live in their own files; this header brings them along.
#pragma once

#include <mpi.h>
#include <nlohmann/json.hpp>

#include "models/ops.h"
#include "src/commands/scaling_table.h"
#include "src/commands/size_figures.h"
#include "src/commands/train_record.h"
#include "src/commands/trainer.h"
#include "src/core/config.h"

namespace sb {

// Runs every world size of cfg.scaling on `world` (collective), prints the table on
// rank 0 and appends one record per size to cfg.out. Returns false when a check failed. `cfg`
// as with_conv_engine_resolved returns it for `ops` (src/core/workload.h).
bool run_training_sweep(const TrainConfig& cfg, Ops& ops, MPI_Comm world, const nlohmann::json& environment,
                        const SweepChecks& checks = {});

}  // namespace sb
