// The scaling table `train` prints as it goes (and `project` prints the same way): its
// column heads and one row per world size.
#pragma once

#include <cmath>

#include "src/core/stats.h"

namespace sb {

class DataParallelTrainer;
struct SizeFigures;

// One row of the scaling table.
struct ScalingRow {
    int world_size = 0;
    double samples_per_s = 0, per_rank = 0, efficiency = NAN, busbw = 0;
    Summary step, compute, exposed, optimizer;
};
void print_scaling_table_columns();
void print_scaling_table_row(const ScalingRow& row);

// Rank 0: the table row of world size n from its reduced figures; `samples_per_s_at_1` is the
// n = 1 throughput (NAN before it is measured).
ScalingRow scaling_row(const DataParallelTrainer& trainer, const SizeFigures& f, int n, double samples_per_s_at_1);

}  // namespace sb
