// The scaling table (see scaling_table.h): its column heads, one row per world size, and the
// row built from one world size's reduced figures.
#include "src/commands/scaling_table.h"

#include <cmath>
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "src/commands/size_figures.h"
#include "src/commands/trainer.h"

namespace sb {

namespace {

// A figure, or "-" where it was not measured.
std::string cell(double v, int precision, double scale = 1, const char* suffix = "") {
    return std::isnan(v) ? std::string("-") : fmt::format("{:.{}f}{}", scale * v, precision, suffix);
}

constexpr const char* kColumns = "{:>5} {:>12} {:>11} {:>10} {:>6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>8} "
                                 "{:>9} {:>7} {:>7} {:>6}\n";

}  // namespace

void print_scaling_table_columns() {
    fmt::print(kColumns, "ranks", "samples/s", "per rank", "step ms", "±", "compute", "tail", "optimizer", "no-comm",
               "comm cost", "±", "hidden", "bwd slow", "busbw", "±", "eff.", "±");
    fmt::print(kColumns, "", "", "", "median", "%", "ms", "ms", "ms", "step ms", "ms", "ms", "", "ms", "GB/s", "GB/s",
               "", "");
    std::fflush(stdout);
}

void print_scaling_table_row(const ScalingRow& r) {
    fmt::print(kColumns, r.world_size, cell(r.samples_per_s, 1), cell(r.per_rank, 1), cell(r.step.median, 3),
               cell(r.step_spread / r.step.median, 1, 100), cell(r.compute.median, 3), cell(r.exposed.median, 3),
               cell(r.optimizer.median, 3), cell(r.no_comm_step.count ? r.no_comm_step.median : NAN, 3),
               cell(r.comm_cost, 3), cell(r.comm_cost_spread, 3), cell(r.hidden_fraction, 1, 100, "%"),
               cell(r.compute_slowdown, 3), cell(r.busbw, 2), cell(r.busbw_spread, 2), cell(r.efficiency, 1, 100, "%"),
               cell(r.efficiency_spread, 1, 100, "%"));
    std::fflush(stdout);
}

ScalingRow scaling_row(const DataParallelTrainer& trainer, const SizeFigures& f, int n, const ScalingRow& at_1) {
    ScalingRow row;
    row.world_size = n;
    row.step = summarize(f.phase[0]);
    row.compute = summarize(f.phase[1]);
    row.exposed = summarize(f.phase[2]);
    row.optimizer = summarize(f.phase[3]);
    row.step_spread = spread_of(row.step);
    const double relative = row.step_spread / row.step.median;
    row.samples_per_s = trainer.global_batch() / (row.step.median / 1000.0);
    row.samples_per_s_spread = row.samples_per_s * relative;
    row.per_rank = row.samples_per_s / n;
    const bool first = n == 1 || at_1.world_size == 0;
    const double base = n == 1 ? row.samples_per_s : at_1.world_size ? at_1.samples_per_s : NAN;
    row.efficiency = row.samples_per_s / (n * base);
    // At n = 1 the efficiency is 1 by definition: no spread.
    const double relative_at_1 = first ? 0.0 : at_1.step_spread / at_1.step.median;
    row.efficiency_spread = n == 1 ? 0.0 : row.efficiency * std::hypot(relative, relative_at_1);
    if (f.allreduce_ms.empty()) return row;
    row.allreduce = summarize(f.allreduce_ms);
    // nccl-tests' bus bandwidth of the gradient collective: the all-reduce's 2(n-1)/n, or the
    // reduce-scatter's (n-1)/n over its padded span when sharded.
    const ShardedState* sharded = trainer.sharded();
    const double gradient_bytes =
        sharded ? static_cast<double>(sharded->layout().padded_elements() * sizeof(float))
                : static_cast<double>(trainer.bucketer().total_elements() * dtype_size(trainer.bucketer().comm_dtype()));
    row.busbw = gradient_bytes / (row.allreduce.median / 1000.0) / 1e9 * (sharded ? 1.0 : 2.0) * (n - 1) / n;
    row.busbw_spread = row.busbw * spread_of(row.allreduce) / row.allreduce.median;
    if (f.no_comm[0].empty()) return row;
    row.no_comm_step = summarize(f.no_comm[0]);
    row.no_comm_compute = summarize(f.no_comm[1]);
    row.comm_cost = row.step.median - row.no_comm_step.median;
    row.comm_cost_spread = std::hypot(row.step_spread, spread_of(row.no_comm_step));
    // Sharded, the collectives alone are the reduce-scatter and the all-gather.
    row.hidden_fraction = 1.0 - row.comm_cost / (row.allreduce.median + (sharded ? f.all_gather_ms : 0.0));
    row.compute_slowdown = row.compute.median - row.no_comm_compute.median;
    return row;
}

}  // namespace sb
