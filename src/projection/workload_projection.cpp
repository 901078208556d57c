// A workload projected on a hardware profile (src/projection/workload_projection.h).
#include "src/projection/workload_projection.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "collectives/bucketer.h"
#include "base/errors.h"
#include "src/core/config_keys.h"
#include "src/core/results.h"
#include "src/core/workload.h"

namespace sb {

Summary point_summary(double v) { return Summary{v, v, v, v, v, v, 1}; }

std::string traced_engine(const TrainConfig& cfg) {
    if (cfg.model != "resnet") return "";
    return fmt::format(", convolutions traced as {}", conv_engine_name(resolve_conv_engine(cfg, TraceOps(cfg.precision))));
}

std::vector<int> projected_gpu_counts(const std::vector<int>& asked, const HardwareProfile& hw) {
    const int per_node = static_cast<int>(hw.gpus_per_node.value);
    if (asked.empty()) {
        std::vector<int> out;
        for (int g : {1, 2, 4, 8})
            if (g <= per_node) out.push_back(g);
        return out;
    }
    for (int g : asked)
        if (g < 1 || g > per_node)
            throw UserError(fmt::format("--scaling {}: {} has {} GPUs per node ({})", g, hw.name, per_node, hw.source));
    return asked;
}

std::vector<Projection> project_workload(const TrainConfig& cfg, const CostModel& model, const std::vector<int>& gpus,
                                         const std::vector<int>& nodes) {
    std::map<int, StepTrace> traces;  // by local batch
    auto trace_for = [&](int world) -> const StepTrace& {
        if (cfg.scaling_mode == ScalingMode::strong && cfg.batch_size % world != 0)
            throw UserError(fmt::format("{}: key 'batch_size': batch_size {} is not divisible by world size {} "
                                        "(scaling_mode: strong)", cfg.source, cfg.batch_size, world));
        const int local = per_rank_batch(cfg, world);
        auto it = traces.find(local);
        if (it == traces.end()) it = traces.emplace(local, trace_step(cfg, local, profile_limits(model.hw))).first;
        return it->second;
    };
    const std::vector<Bucket> buckets = [&] {
        TraceOps ops(cfg.precision);
        return bucket_layout(create_model(cfg, ops)->params(), cfg.bucket_mb);
    }();
    // Real input: a node's ranks take at most the host's ceiling of samples/s; the step waits for the loader.
    const double ceiling = model.input_ceiling(cfg);
    auto fed = [&](ProjectedStep s, int64_t global_batch) {
        const double least_ms = ceiling > 0 ? 1e3 * global_batch / (ceiling * s.nodes) : 0.0;
        if (least_ms > s.step_ms) {
            s.input_wait_ms = least_ms - s.step_ms;
            s.step_ms = least_ms;
        }
        return s;
    };
    const ProjectedStep one = fed(schedule_step(trace_for(1), model, 1, 1), per_rank_batch(cfg, 1));
    const double samples_at_1 = per_rank_batch(cfg, 1) / (one.step_ms / 1e3);
    const std::vector<std::string> assumptions = projection_assumptions(model);

    std::vector<Projection> out;
    for (int N : nodes) {
        if (N > 1 && !model.hw.has_network())
            throw UserError(fmt::format("--nodes {}: {} describes no network between nodes", N, model.hw.source));
        for (int g : gpus) {
            if (int64_t{g} * N > kMaxWorldSize)
                throw UserError(fmt::format("--nodes {}: {} nodes of {} GPUs are more than the {} GPUs a projection "
                                            "takes", N, N, g, kMaxWorldSize));
            const int world = g * N;
            const StepTrace& t = trace_for(world);
            Projection p;
            p.global_batch = int64_t{t.local_batch} * world;
            p.step = fed(schedule_step(t, model, g, N), p.global_batch);
            p.samples_per_s = p.global_batch / (p.step.step_ms / 1e3);
            p.efficiency = p.samples_per_s / (world * samples_at_1);
            p.speedup = p.samples_per_s / samples_at_1;
            const double algbw = t.gradient_bytes / (p.step.allreduce_ms / 1e3) / 1e9;
            p.busbw = world > 1 ? algbw * 2.0 * (world - 1) / world : 0.0;
            auto point = [](double v) { return Band{v, v}; };
            p.bands = {point(p.samples_per_s), point(p.efficiency), point(p.speedup), point(p.busbw),
                       point(p.step.exposed_comm_ms), point(p.samples_per_s)};
            const double flops_per_step = t.flops_per_sample * p.global_batch;
            const double tflops = flops_per_step / (p.step.step_ms / 1e3) / 1e12;
            const double peak = model.peak_tflops(cfg.precision);
            const HardwareProfile& hw = model.hw;
            p.record = {
                {"schema_version", kSchemaVersion},
                {"subcommand", "project"},
                {"projected", true},
                {"world_size", world},
                {"nodes", N},
                {"gpus_per_node", g},
                {"backend", "projected"},
                {"precision", precision_name(cfg.precision)},
                {"grad_dtype", grad_dtype_name(cfg.grad_dtype)},
                {"model", t.model},
                {"num_params", t.num_params},
                {"scaling_mode", scaling_mode_name(cfg.scaling_mode)},
                {"conv_engine", cfg.model == "resnet" ? nlohmann::json(conv_engine_name(resolve_conv_engine(cfg, TraceOps(cfg.precision))))
                                                      : nlohmann::json()},
                {"local_batch", t.local_batch},
                {"global_batch", p.global_batch},
                {"step_ms", to_json(point_summary(p.step.step_ms))},
                {"compute_ms", to_json(point_summary(p.step.compute_ms))},
                {"exposed_comm_ms", to_json(point_summary(p.step.exposed_comm_ms))},
                {"optimizer_ms", to_json(point_summary(p.step.optimizer_ms))},
                {"samples_per_s", p.samples_per_s},
                {"samples_per_s_per_rank", p.samples_per_s / world},
                {"scaling_efficiency", p.efficiency},
                {"speedup", p.speedup},
                {"straggler_ms", p.step.straggler_ms},
                {"framework_ms", p.step.framework_ms},
                {"input", model.real_input ? "real" : "synthetic"},
                {"input_ceiling_samples_per_s", ceiling > 0 ? nlohmann::json(ceiling * N) : nlohmann::json()},
                {"input_wait_ms", p.step.input_wait_ms},
                {"gradient_bytes", t.gradient_bytes},
                {"buckets", buckets.size()},
                {"allreduce_ms", p.step.allreduce_ms},
                {"allreduce_algbw_gbps", algbw},
                {"allreduce_busbw_gbps", p.busbw},
                {"model_flops_per_step", flops_per_step},
                {"model_tflops_per_s", tflops},
                {"peak_tflops_per_gpu", peak},
                {"mfu", tflops / (world * peak)},
                {"memory_per_gpu_gb", footprint_bytes(t) / kGiB},
                {"memory_breakdown_gb",
                 {{"parameters", t.memory.parameters / kGiB},
                  {"gradients", t.memory.gradients / kGiB},
                  {"optimizer_state", t.memory.optimizer_state / kGiB},
                  {"activations", t.memory.activations / kGiB},
                  {"data", t.memory.data / kGiB},
                  {"scratch", t.memory.scratch / kGiB},
                  {"workspace_and_runtime", (kGemmWorkspaceBytes + kRuntimeReserveBytes) / kGiB}}},
                {"fits_memory", footprint_bytes(t) <= hw.memory_gb.value * kGiB},
                {"traced_ops", t.ops.size()},
                {"hardware", to_json(hw)},
                {"calibration", {{"files", model.calibration.files}, {"notes", model.calibration.notes}}},
                {"assumptions", assumptions},
                {"config", to_json(cfg)},
                // What plot_scaling.py and report name a system by.
                {"environment", {{"gpu", {{"name", hw.device_name}}}, {"hostnames", {hw.name}}}},
            };
            out.push_back(std::move(p));
        }
    }
    return out;
}

void apply_batch_option(const std::string& batch, TrainConfig& cfg, const HardwareProfile& hw) {
    if (batch.empty()) return;
    if (cfg.scaling_mode != ScalingMode::weak)
        throw UserError(fmt::format("--batch-size {}: sets the per-GPU batch, which needs scaling_mode: weak ({})", batch, cfg.source));
    if (batch == "max") {
        const int max = max_fitting_batch(cfg, hw.memory_gb.value);
        if (max == 0)
            throw UserError(fmt::format("--batch-size max: not even one row of {} fits the {:.0f} GB of {}", cfg.model,
                                        hw.memory_gb.value, hw.name));
        cfg.batch_size = max;
        return;
    }
    int64_t value = 0;  // the one number parser, in the batch_size key's range
    if (const std::string problem = parse_integer(batch, kBatchRange, value); !problem.empty())
        throw UserError(fmt::format("--batch-size {}: {} (or 'max')", batch, problem));
    cfg.batch_size = static_cast<int>(value);
    validate_config(cfg, {{"batch_size", "--batch-size"}});  // bounded as the config's batch_size is
}

nlohmann::json to_json(const FigureBands& b) {
    auto pair = [](const Band& band) { return nlohmann::json::array({band.lo, band.hi}); };
    return {{"samples_per_s", pair(b.samples_per_s)},
            {"scaling_efficiency", pair(b.efficiency)},
            {"speedup", pair(b.speedup)},
            {"allreduce_busbw_gbps", pair(b.busbw)},
            {"exposed_comm_ms", pair(b.exposed_comm_ms)},
            {"samples_per_s_without_compute_error", pair(b.samples_per_s_without_compute_error)}};
}

void widen_to_ranges(std::vector<Projection>& rows, const TrainConfig& cfg, const HardwareProfile& hw,
                     const Calibration& cal, const std::vector<int>& gpus, const std::vector<int>& nodes, bool real_input) {
    auto widen = [](Band& band, double v) {
        band.lo = std::min(band.lo, v);
        band.hi = std::max(band.hi, v);
    };
    const std::vector<HardwareProfile> corners = range_corners(hw);
    for (const HardwareProfile& corner : corners) {
        if (corners.size() == 1) break;  // no ranges: the bands are the points
        const std::vector<Projection> at = project_workload(cfg, CostModel(corner, cal, real_input), gpus, nodes);
        SB_REQUIRE(at.size() == rows.size(), "widen_to_ranges: rows of other arguments");
        for (size_t i = 0; i < rows.size(); ++i) {
            FigureBands& b = rows[i].bands;
            widen(b.samples_per_s, at[i].samples_per_s);
            widen(b.efficiency, at[i].efficiency);
            widen(b.speedup, at[i].speedup);
            widen(b.busbw, at[i].busbw);
            widen(b.exposed_comm_ms, at[i].step.exposed_comm_ms);
            if (corner.compute_error_pct.value == hw.compute_error_pct.value)
                widen(b.samples_per_s_without_compute_error, at[i].samples_per_s);
        }
    }
    for (Projection& p : rows) {
        p.record["bands"] = to_json(p.bands);
        p.record["samples_per_s_band"] = {p.bands.samples_per_s.lo, p.bands.samples_per_s.hi};
        p.record["ranges"] = ranged_keys(hw);
    }
}

// The profile's ranges, one line: "node.link_efficiency 0.187-0.7, ..."; "none" when none.
std::string range_list(const HardwareProfile& hw) {
    std::string out;
    HardwareProfile copy = hw;
    for (const auto& [key, number] : sourced_numbers(copy))
        if (number->is_range())
            out += fmt::format("{}{} {:g} [{:g}-{:g}]", out.empty() ? "" : ", ", key, number->value, number->lo, number->hi);
    return out.empty() ? "none" : out;
}

std::string footprint_line(const Projection& p, const HardwareProfile& hw) {
    const nlohmann::json& m = p.record["memory_breakdown_gb"];
    return fmt::format("{:.2f} GiB per GPU of {:.0f} (parameters {:.2f}, gradients {:.2f}, optimizer state {:.2f}, "
                       "activations {:.2f}, data {:.2f}, scratch {:.2f}, workspace and runtime {:.2f})",
                       p.record["memory_per_gpu_gb"].get<double>(), hw.memory_gb.value, m["parameters"].get<double>(),
                       m["gradients"].get<double>(), m["optimizer_state"].get<double>(), m["activations"].get<double>(),
                       m["data"].get<double>(), m["scratch"].get<double>(), m["workspace_and_runtime"].get<double>());
}

std::vector<CommRow> comm_table(const CostModel& model, const std::vector<int>& gpus, const std::vector<int>& nodes) {
    const std::vector<HardwareProfile> corners = range_corners(model.hw);
    std::vector<CommRow> rows;
    for (int N : nodes)
        for (int g : gpus) {
            if (g * N < 2) continue;  // nccl-tests' busbw of one rank is 0
            for (double bytes = 8; bytes <= 4.0 * 1024 * 1024 * 1024; bytes *= 2) {
                CommRow r;
                r.gpus_per_node = g;
                r.nodes = N;
                r.bytes = bytes;
                r.time_us = model.all_reduce_ms(bytes, g, N) * 1e3;
                r.algbw = bytes / (r.time_us * 1e-6) / 1e9;
                r.busbw = model.all_reduce_busbw_gbps(bytes, g, N);
                r.busbw_band = {r.busbw, r.busbw};
                for (const HardwareProfile& corner : corners) {
                    const double b = CostModel(corner, model.calibration).all_reduce_busbw_gbps(bytes, g, N);
                    r.busbw_band = {std::min(r.busbw_band.lo, b), std::max(r.busbw_band.hi, b)};
                }
                rows.push_back(r);
            }
        }
    return rows;
}

}  // namespace sb
