// The scaling table `train` prints as it goes (and `project` prints the same way): its
// column heads and one row per world size.
#pragma once

#include <cmath>

#include "src/core/stats.h"

namespace sb {

class DataParallelTrainer;
struct SizeFigures;

// The spread of a figure over the measured steps: half its p10..p90 range (for normally
// distributed steps about 1.3 standard deviations; a few held-up steps do not widen it).
inline double spread_of(const Summary& s) { return 0.5 * (s.p90 - s.p10); }

// One row of the scaling table. Each figure with its spread (NAN: not measured, shown "-").
// Communication is charged as DDP charges it: comm_cost = median step - median step without
// communication (no_comm_step) at the same world size; hidden_fraction = 1 - comm_cost /
// allreduce (every bucket all-reduced back to back, alone); the exposed tail (end of backward
// to the last bucket) and the backward's slowdown while communication overlaps it (compute -
// no_comm_compute) are their own figures.
struct ScalingRow {
    int world_size = 0;
    double samples_per_s = 0, per_rank = 0, efficiency = NAN, busbw = 0;
    Summary step, compute, exposed, optimizer;
    double step_spread = NAN;  // of step (ms); samples/s carries the same relative spread
    double samples_per_s_spread = NAN, efficiency_spread = NAN, busbw_spread = NAN;
    Summary no_comm_step, no_comm_compute, allreduce;  // count 0: not measured (n = 1)
    double comm_cost = NAN, comm_cost_spread = NAN, hidden_fraction = NAN, compute_slowdown = NAN;
};
void print_scaling_table_columns();
void print_scaling_table_row(const ScalingRow& row);

// Rank 0: the table row of world size n from its reduced figures; `at_1` is the n = 1 row
// (world_size 0 before it is measured).
ScalingRow scaling_row(const DataParallelTrainer& trainer, const SizeFigures& f, int n, const ScalingRow& at_1);

}  // namespace sb
