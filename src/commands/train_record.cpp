// The train record (see train_record.h): one JSON object per (run, world size), as
// results/SCHEMA.md describes it, and the replica check's verdict it carries.
#include "src/commands/train_record.h"

#include <cmath>
#include <ctime>
#include <optional>

#include <fmt/format.h>

#include "base/errors.h"
#include "src/core/results.h"
#include "src/core/workload.h"
#include "src/system/backend.h"
#include "src/system/environment.h"

namespace sb {

std::string utc_timestamp() {
    std::time_t now = std::time(nullptr);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    return text;
}

// Rank 0: the ranks whose parameters differ from rank 0's ({rank, host}), each also printed.
nlohmann::json mismatched_replicas(const SizeFigures& f, const std::vector<std::string>& hosts) {
    nlohmann::json mismatched = nlohmann::json::array();
    for (size_t r = 0; r < f.checksums.size(); ++r) {
        if (f.checksums[r] == f.checksums[0]) continue;
        const std::string host = r < hosts.size() ? hosts[r] : "?";
        fmt::print(stderr, "replica check FAILED: rank {} on {} holds parameters that differ from rank 0\n", r, host);
        mismatched.push_back({{"rank", r}, {"host", host}});
    }
    return mismatched;
}

namespace {
nlohmann::json or_null(double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); }

// The mode and, sharded, each collective of the step alone: its bytes (nccl-tests' size: the
// reduce-scatter's the padded span of every bucket in fp32, the all-gather's every bucket the
// step gathered in the compute dtype), its median time and bus bandwidth ((n-1)/n for both).
nlohmann::json sharding_record(const DataParallelTrainer& trainer, const SizeFigures& f, const ScalingRow& row,
                               const TrainConfig& cfg, int n) {
    const ShardedState* sharded = trainer.sharded();
    if (!sharded) return {{"mode", sharding_mode_name(cfg.sharding)}};
    const double bytes = static_cast<double>(sharded->layout().padded_elements() * sizeof(float));
    const auto collective = [&](double collective_bytes, double ms) {
        return nlohmann::json{{"bytes", collective_bytes}, {"ms", or_null(ms)},
                              {"busbw_gbps", or_null(collective_bytes / (ms / 1000.0) / 1e9 * (n - 1) / n)}};
    };
    // Resident slots gather every bucket once a step; shared ones a bucket once or twice.
    const ParameterSlots& slots = *trainer.parameter_slots();
    nlohmann::json record = {
        {"mode", sharding_mode_name(cfg.sharding)},
        {"shard_elements", sharded->layout().shard_elements()},
        {"reduce_scatter", collective(bytes, row.allreduce.median)},
        {"all_gather", collective(slots.gathered_bytes_last_step(), f.all_gather_ms)},
        {"gathered_buckets", slots.gathered_last_step().size()}};
    if (trainer.bucketer().lands_in_slots()) record["landing_slots"] = trainer.bucketer().landing_slots();
    if (!slots.resident()) record["parameter_slots"] = slots.slots();
    return record;
}

// Per rank, by kind: predicted before the run (src/core/rank_memory.h) and measured (this
// rank's buffers, the allocator's deltas, and the high-water mark of the largest rank).
nlohmann::json memory_record(const DataParallelTrainer& trainer, const SizeFigures& f, const TrainConfig& cfg,
                             int n) {
    const RankMemory predicted = predict_rank_memory(cfg, n, trainer.local_batch());
    nlohmann::json measured = to_json(trainer.measured_memory());
    measured["peak_total"] = f.peak_memory_bytes;
    return {{"predicted", to_json(predicted)},
            {"measured", measured},
            {"peak_vs_predicted", f.peak_memory_bytes / predicted.total()}};
}

// The figures' spreads and the communication charged as DDP charges it (scaling_table.h);
// null where not measured (no communication at n = 1).
nlohmann::json spread_and_communication(const ScalingRow& row) {
    const bool measured = row.no_comm_step.count > 0;
    return {
        {"step_spread_ms", or_null(row.step_spread)},
        {"samples_per_s_spread", or_null(row.samples_per_s_spread)},
        {"scaling_efficiency_spread", or_null(row.efficiency_spread)},
        {"allreduce_spread_ms", row.allreduce.count ? nlohmann::json(spread_of(row.allreduce)) : nlohmann::json()},
        {"allreduce_busbw_spread_gbps", or_null(row.busbw_spread)},
        {"no_comm_step_ms", measured ? to_json(row.no_comm_step) : nlohmann::json()},
        {"no_comm_compute_ms", measured ? to_json(row.no_comm_compute) : nlohmann::json()},
        {"comm_cost_ms", or_null(row.comm_cost)},
        {"comm_cost_spread_ms", or_null(row.comm_cost_spread)},
        {"hidden_fraction", or_null(row.hidden_fraction)},
        {"compute_slowdown_ms", or_null(row.compute_slowdown)},
    };
}
}  // namespace

// Rank 0: the record of world size `row.world_size` (results/SCHEMA.md, train).
nlohmann::json train_record(const TrainConfig& cfg, Ops& ops, const DataParallelTrainer& trainer,
                            const SizeFigures& f, const ScalingRow& row, const ScalingRow& at_1, int launched,
                            const nlohmann::json& mismatched, const SweepChecks& checks,
                            const nlohmann::json& environment) {
    // The engine the trainer ran and the memory prediction traces: the config's, resolved once by the command.
    SB_REQUIRE(cfg.model != "resnet" || cfg.conv_engine, "a ResNet's record needs its convolution engine resolved");
    const int n = row.world_size;
    const int global_batch = trainer.global_batch();
    const double gradient_bytes =
        static_cast<double>(trainer.bucketer().total_elements() * dtype_size(trainer.bucketer().comm_dtype()));
    // Sharded, the step has no all-reduce: the gradient collective is under `sharding`.
    const bool sharded = trainer.sharded() != nullptr;
    const double algbw = sharded ? NAN : gradient_bytes / (row.allreduce.median / 1000.0) / 1e9;
    const double flops_per_step = trainer.model().flops_per_sample() * global_batch;
    const double tflops = flops_per_step / (row.step.median / 1000.0) / 1e12;
    const std::optional<double> peak = device_peak_tflops(ops);
    const bool replicas_ok = mismatched.empty(), recheck_ok = f.recheck_mismatched == 0;
    nlohmann::json record = {
        {"schema_version", kSchemaVersion},
        {"subcommand", "train"},
        {"run_id", run_id()},
        {"timestamp", utc_timestamp()},
        {"world_size", n},
        {"launched_world_size", launched},
        {"backend", ops.name()},
        {"precision", precision_name(ops.precision())},
        {"grad_dtype", grad_dtype_name(cfg.grad_dtype)},
        {"model", trainer.model().name()},
        {"num_params", trainer.model().num_params()},
        {"scaling_mode", scaling_mode_name(cfg.scaling_mode)},
        {"local_batch", trainer.local_batch()},
        {"global_batch", global_batch},
        {"warmup_steps", cfg.warmup},
        {"measured_steps", cfg.steps},
        {"step_ms", to_json(row.step)},
        {"compute_ms", to_json(row.compute)},
        {"exposed_comm_ms", to_json(row.exposed)},
        {"optimizer_ms", to_json(row.optimizer)},
        {"median_step", f.median_step},
        {"samples_per_s", row.samples_per_s},
        {"samples_per_s_per_rank", row.per_rank},
        {"tokens_per_s", row.samples_per_s * tokens_per_sample(cfg)},
        {"scaling_efficiency", or_null(row.efficiency)},
        {"speedup", or_null(at_1.world_size ? row.samples_per_s / at_1.samples_per_s : NAN)},
        {"gradient_bytes", gradient_bytes},
        {"buckets", trainer.bucketer().buckets().size()},
        {"allreduce_ms", or_null(sharded ? NAN : row.allreduce.median)},
        {"allreduce_algbw_gbps", or_null(algbw)},
        {"allreduce_busbw_gbps", or_null(sharded ? NAN : row.busbw)},
        {"sharding", sharding_record(trainer, f, row, cfg, n)},
        {"memory_per_rank", memory_record(trainer, f, cfg, n)},
        {"model_flops_per_step", flops_per_step},
        {"model_tflops_per_s", tflops},
        {"peak_tflops_per_gpu", peak ? nlohmann::json(*peak) : nlohmann::json()},
        {"mfu", peak ? nlohmann::json(tflops / (n * *peak)) : nlohmann::json()},
        {"cuda_graphs", trainer.uses_graphs()},
        {"kernel_variants", kernel_variants(ops)},
        {"shared_gpu", shared_gpu_enabled()},
        {"conv_engine", cfg.model == "resnet" ? nlohmann::json(conv_engine_name(*cfg.conv_engine)) : nlohmann::json()},
        {"device_step_ms", or_null(f.device_step_ms)},
        {"host_overhead_ms", or_null(row.step.median - f.device_step_ms)},
        {"gpu_busy_fraction", or_null(f.device_step_ms / row.step.median)},
        {"telemetry_by_rank", f.telemetry_by_rank},
        {"straggler_check", f.straggler_check},
        {"initial_loss", f.mean_losses[0]},
        {"final_loss", f.mean_losses[1]},
        {"replica_check", {{"passed", replicas_ok}, {"checksum", fmt::format("{:016x}", f.checksums[0])},
                           {"mismatched_ranks", mismatched}}},
        {"loss_check", {{"passed", f.first_nonfinite_step < 0},
                        {"first_nonfinite_step", f.first_nonfinite_step < 0 ? nlohmann::json() : nlohmann::json(f.first_nonfinite_step + 1)}}},
        {"checks_passed", replicas_ok && recheck_ok && f.first_nonfinite_step < 0},
        {"config", to_json(cfg)},
        {"environment", environment},
    };
    record.update(spread_and_communication(row));
    if (checks.recheck_allreduce)
        record["allreduce_recheck"] = {{"passed", recheck_ok}, {"mismatched_elements", f.recheck_mismatched}};
    return record;
}

}  // namespace sb
