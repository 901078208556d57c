// The scaling table (see scaling_table.h): its column heads, one row per world size, and the
// row built from one world size's reduced figures.
#include "src/commands/scaling_table.h"

#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "src/commands/size_figures.h"
#include "src/commands/trainer.h"

namespace sb {

void print_scaling_table_columns() {
    fmt::print("{:>5} {:>12} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>7}\n", "ranks", "samples/s",
               "per rank", "step ms", "min", "max", "compute", "exp.comm", "optimizer", "busbw", "eff.");
    fmt::print("{:>5} {:>12} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>7}\n", "", "", "", "median",
               "", "", "ms", "ms", "ms", "GB/s", "");
    std::fflush(stdout);
}

void print_scaling_table_row(const ScalingRow& r) {
    fmt::print("{:>5} {:>12.1f} {:>11.1f} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>9.2f} {:>7}\n",
               r.world_size, r.samples_per_s, r.per_rank, r.step.median, r.step.min, r.step.max, r.compute.median,
               r.exposed.median, r.optimizer.median, r.busbw,
               std::isnan(r.efficiency) ? std::string("-") : fmt::format("{:.1f}%", 100.0 * r.efficiency));
    std::fflush(stdout);
}

// Rank 0: the table row of one world size; `samples_per_s_at_1` is the n = 1 throughput (NAN
// before it is measured).
ScalingRow scaling_row(const DataParallelTrainer& trainer, const SizeFigures& f, int n, double samples_per_s_at_1) {
    ScalingRow row;
    row.world_size = n;
    row.step = summarize(f.phase[0]);
    row.compute = summarize(f.phase[1]);
    row.exposed = summarize(f.phase[2]);
    row.optimizer = summarize(f.phase[3]);
    row.samples_per_s = trainer.global_batch() / (row.step.median / 1000.0);
    row.per_rank = row.samples_per_s / n;
    row.efficiency = row.samples_per_s / (n * (n == 1 ? row.samples_per_s : samples_per_s_at_1));
    // nccl-tests' bus bandwidth of the gradient collective: the all-reduce's 2(n-1)/n, the
    // reduce-scatter's (n-1)/n over its padded span when sharded.
    if (const ShardedState* sharded = trainer.sharded()) {
        const double bytes = static_cast<double>(sharded->layout().padded_elements() * sizeof(float));
        row.busbw = bytes / (f.allreduce_ms / 1000.0) / 1e9 * (n - 1) / n;
        return row;
    }
    const double gradient_bytes =
        static_cast<double>(trainer.bucketer().total_elements() * dtype_size(trainer.bucketer().comm_dtype()));
    row.busbw = gradient_bytes / (f.allreduce_ms / 1000.0) / 1e9 * 2.0 * (n - 1) / n;
    return row;
}

}  // namespace sb
