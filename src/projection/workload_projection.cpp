// A workload projected on a hardware profile (src/projection/workload_projection.h).
#include "src/projection/workload_projection.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

const StepTrace& TraceCache::trace(const TrainConfig& cfg, int local_batch, int world_size, const DeviceLimits& limits) {
    // An unsharded step is the same at every world size.
    const int world = cfg.sharding == ShardingMode::none ? 1 : world_size;
    const auto key = std::make_tuple(local_batch, world, cfg.sharding);
    auto it = traces_.find(key);
    if (it == traces_.end()) it = traces_.emplace(key, trace_step(cfg, local_batch, limits, world)).first;
    return it->second;
}

const std::vector<ModeFit>& TraceCache::fits(const TrainConfig& cfg, const std::vector<ShardingMode>& modes,
                                             int world_size, int local_batch, const HardwareProfile& hw) {
    const auto key = std::make_tuple(world_size, local_batch, hw.memory_gb.value);
    auto it = fits_.find(key);
    if (it == fits_.end()) it = fits_.emplace(key, sharding_fits(cfg, modes, world_size, local_batch, hw)).first;
    return it->second;
}

std::vector<ModeFit> sharding_fits(const TrainConfig& cfg, const std::vector<ShardingMode>& modes, int world_size,
                                   int local_batch, const HardwareProfile& hw) {
    std::vector<ModeFit> out;
    for (ShardingMode mode : modes.empty() ? std::vector<ShardingMode>{cfg.sharding} : modes) {
        TrainConfig c = cfg;
        c.sharding = mode;
        try {
            validate_config(c);  // a mode the workload cannot train in (fp16, a 16-bit grad_dtype) is no candidate
        } catch (const UserError&) {
            continue;
        }
        const double bytes = footprint_bytes(predict_rank_memory(c, world_size, local_batch));
        out.push_back({mode, bytes, bytes <= hw.memory_gb.value * kGiB});
    }
    SB_REQUIRE(!out.empty(), fmt::format("{}: the workload trains in none of the sharding modes asked", cfg.source));
    return out;
}

namespace {

// The mode a configuration runs in: the first candidate that fits, else the one nearest to fitting
// (its figures say what the step would take if it did).
ShardingMode chosen_mode(const std::vector<ModeFit>& fits) {
    for (const ModeFit& f : fits)
        if (f.fits) return f.mode;
    return std::min_element(fits.begin(), fits.end(), [](const ModeFit& a, const ModeFit& b) {
               return a.footprint_bytes < b.footprint_bytes;
           })->mode;
}

nlohmann::json or_null(bool present, double v) { return present ? nlohmann::json(v) : nlohmann::json(); }

// The step's collectives as a train record's `sharding` says them: the mode and, sharded, each
// collective's bytes (nccl-tests' size), time (every bucket back to back) and busbw ((n-1)/n), and
// both together's busbw (the banded figure).
nlohmann::json sharding_json(const StepTrace& t, const Projection& p) {
    if (t.sharding == ShardingMode::none) return {{"mode", sharding_mode_name(t.sharding)}};
    const int n = p.step.world_size;
    auto collective = [&](Collective kind, double ms) {
        const double bytes = t.collective_bytes(kind);
        return nlohmann::json{{"bytes", bytes}, {"ms", ms}, {"busbw_gbps", or_null(n > 1, bytes / (ms / 1e3) / 1e9 * (n - 1) / n)}};
    };
    nlohmann::json record = {{"mode", sharding_mode_name(t.sharding)},
                             {"shard_elements", t.shard_elements},
                             {"reduce_scatter", collective(Collective::reduce_scatter, p.step.reduce_scatter_ms)},
                             {"all_gather", collective(Collective::all_gather, p.step.all_gather_ms)},
                             {"busbw_gbps", or_null(n > 1, p.busbw)}};
    // Every bucket once, or sharding parameters as the forward and the backward read the buckets.
    record["gathered_buckets"] = std::count_if(t.collectives.begin(), t.collectives.end(), [](const TracedCollective& c) {
            return c.kind == Collective::all_gather;
        });
    return record;
}

nlohmann::json memory_json(const RankMemory& m) {
    return {{"parameters", m.parameters / kGiB},         {"gradients", m.gradients / kGiB},
            {"optimizer_state", m.optimizer_state / kGiB}, {"activations", m.activations / kGiB},
            {"comm_buffers", m.comm_buffers / kGiB},       {"data", m.data / kGiB},
            {"workspace_and_runtime", (kGemmWorkspaceBytes + kRuntimeReserveBytes) / kGiB}};
}

// A projected configuration as a `train`-shaped record (results/SCHEMA.md, project).
nlohmann::json projection_record(const Projection& p, const StepTrace& t, const TrainConfig& cfg, const CostModel& model,
                                 double ceiling, double algbw, const std::vector<std::string>& assumptions) {
    const int world = p.step.world_size;
    const bool sharded = t.sharding != ShardingMode::none;
    const double flops_per_step = t.flops_per_sample * p.global_batch;
    const double tflops = flops_per_step / (p.step.step_ms / 1e3) / 1e12;
    const double peak = model.peak_tflops(cfg.precision);
    const HardwareProfile& hw = model.hw;
    nlohmann::json fits = nlohmann::json::array();
    for (const ModeFit& f : p.fits)
        fits.push_back({{"mode", sharding_mode_name(f.mode)}, {"memory_per_gpu_gb", f.footprint_bytes / kGiB}, {"fits", f.fits}});
    TrainConfig ran = cfg;
    ran.sharding = t.sharding;
    nlohmann::json record = {
        {"schema_version", kSchemaVersion},
        {"subcommand", "project"},
        {"projected", true},
        {"world_size", world},
        {"nodes", p.step.nodes},
        {"gpus_per_node", world / p.step.nodes},
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
        {"input_ceiling_samples_per_s", ceiling > 0 ? nlohmann::json(ceiling * p.step.nodes) : nlohmann::json()},
        {"input_wait_ms", p.step.input_wait_ms},
        {"gradient_bytes", t.gradient_bytes},
        {"buckets", t.buckets},
        // Sharded, the step has no all-reduce (as train's records): its collectives are under `sharding`.
        {"allreduce_ms", or_null(!sharded, p.step.allreduce_ms)},
        {"allreduce_algbw_gbps", or_null(!sharded, algbw)},
        {"allreduce_busbw_gbps", or_null(!sharded, p.busbw)},
        {"sharding", sharding_json(t, p)},
        {"model_flops_per_step", flops_per_step},
        {"model_tflops_per_s", tflops},
        {"peak_tflops_per_gpu", peak},
        {"mfu", tflops / (world * peak)},
        {"memory_per_gpu_gb", footprint_bytes(t) / kGiB},
        {"memory_breakdown_gb", memory_json(t.memory)},
        {"fits_memory", footprint_bytes(t) <= hw.memory_gb.value * kGiB},
        {"traced_ops", t.ops.size()},
        {"hardware", to_json(hw)},
        {"calibration", {{"files", model.calibration.files}, {"notes", model.calibration.notes}}},
        {"assumptions", assumptions},
        {"config", to_json(ran)},
        // What plot_scaling.py and report name a system by.
        {"environment", {{"gpu", {{"name", hw.device_name}}}, {"hostnames", {hw.name}}}},
    };
    if (!fits.empty()) record["sharding_fit"] = fits;  // the candidate modes' footprints, where several were asked
    return record;
}

// project_workload, where `with_records` false leaves each Projection's record empty: the range
// corners need only the figures, and a record costs as much as the schedule.
std::vector<Projection> project_configurations(const TrainConfig& cfg, const CostModel& model, const std::vector<int>& gpus,
                                               const std::vector<int>& nodes, const std::vector<ShardingMode>& modes,
                                               TraceCache* cache, bool with_records) {
    TraceCache own;
    TraceCache& traces = cache ? *cache : own;
    // The configuration of `world` ranks: its local batch, the fit of each candidate mode, the trace of the one it runs.
    struct Configuration {
        std::vector<ModeFit> fits;
        const StepTrace* trace;
    };
    auto configuration = [&](int world) {
        if (cfg.scaling_mode == ScalingMode::strong && cfg.batch_size % world != 0)
            throw UserError(fmt::format("{}: key 'batch_size': batch_size {} is not divisible by world size {} "
                                        "(scaling_mode: strong)", cfg.source, cfg.batch_size, world));
        const int local = per_rank_batch(cfg, world);
        Configuration c{traces.fits(cfg, modes, world, local, model.hw), nullptr};
        TrainConfig ran = cfg;
        ran.sharding = chosen_mode(c.fits);
        c.trace = &traces.trace(ran, local, world, profile_limits(model.hw));
        return c;
    };
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
    const ProjectedStep one = fed(schedule_step(*configuration(1).trace, model, 1, 1), per_rank_batch(cfg, 1));
    const double samples_at_1 = per_rank_batch(cfg, 1) / (one.step_ms / 1e3);
    const std::vector<std::string> assumptions = with_records ? projection_assumptions(model) : std::vector<std::string>{};

    std::vector<Projection> out;
    for (int N : nodes) {
        if (N > 1 && !model.hw.has_network())
            throw UserError(fmt::format("--nodes {}: {} describes no network between nodes", N, model.hw.source));
        for (int g : gpus) {
            if (int64_t{g} * N > kMaxWorldSize)
                throw UserError(fmt::format("--nodes {}: {} nodes of {} GPUs are more than the {} GPUs a projection "
                                            "takes", N, N, g, kMaxWorldSize));
            const int world = g * N;
            const Configuration c = configuration(world);
            const StepTrace& t = *c.trace;
            Projection p;
            p.sharding = t.sharding;
            p.fits = modes.size() > 1 ? c.fits : std::vector<ModeFit>{};
            p.global_batch = int64_t{t.local_batch} * world;
            p.step = fed(schedule_step(t, model, g, N), p.global_batch);
            p.samples_per_s = p.global_batch / (p.step.step_ms / 1e3);
            p.efficiency = p.samples_per_s / (world * samples_at_1);
            p.speedup = p.samples_per_s / samples_at_1;
            const double algbw = t.gradient_bytes / (p.step.allreduce_ms / 1e3) / 1e9;
            // The step's collectives' busbw: the all-reduce's 2(n-1)/n, or the reduce-scatter's and
            // all-gather's (n-1)/n over both together.
            const double sharded_busbw = (t.collective_bytes(Collective::reduce_scatter) + t.collective_bytes(Collective::all_gather)) /
                                         ((p.step.reduce_scatter_ms + p.step.all_gather_ms) / 1e3) / 1e9 * (world - 1) / world;
            p.busbw = world <= 1 ? 0.0 : t.sharding == ShardingMode::none ? algbw * 2.0 * (world - 1) / world : sharded_busbw;
            auto point = [](double v) { return Band{v, v}; };
            p.bands = {point(p.samples_per_s), point(p.efficiency), point(p.speedup), point(p.busbw),
                       point(p.step.exposed_comm_ms), point(p.samples_per_s)};
            if (with_records) p.record = projection_record(p, t, cfg, model, ceiling, algbw, assumptions);
            out.push_back(std::move(p));
        }
    }
    return out;
}

}  // namespace

std::vector<Projection> project_workload(const TrainConfig& cfg, const CostModel& model, const std::vector<int>& gpus,
                                         const std::vector<int>& nodes, const std::vector<ShardingMode>& modes,
                                         TraceCache* cache) {
    return project_configurations(cfg, model, gpus, nodes, modes, cache, true);
}

void apply_batch_option(const std::string& batch, TrainConfig& cfg, const HardwareProfile& hw, int world_size) {
    if (batch.empty()) return;
    if (cfg.scaling_mode != ScalingMode::weak)
        throw UserError(fmt::format("--batch-size {}: sets the per-GPU batch, which needs scaling_mode: weak ({})", batch, cfg.source));
    if (batch == "max") {
        const int max = max_fitting_batch(cfg, hw.memory_gb.value, world_size);
        if (max == 0)
            throw UserError(fmt::format("--batch-size max: not even one row of {} fits the {:.0f} GB of {}{}", cfg.model,
                                        hw.memory_gb.value, hw.name,
                                        cfg.sharding == ShardingMode::none
                                            ? std::string()
                                            : fmt::format(" at {} GPUs, sharding {}", world_size, sharding_mode_name(cfg.sharding))));
        cfg.batch_size = max;
        return;
    }
    int64_t value = 0;  // the one number parser, in the batch_size key's range
    if (const std::string problem = parse_integer(batch, kBatchRange, value); !problem.empty())
        throw UserError(fmt::format("--batch-size {}: {} (or 'max')", batch, problem));
    cfg.batch_size = static_cast<int>(value);
    validate_config(cfg, {{"batch_size", "--batch-size"}});  // bounded as the config's batch_size is
}

nlohmann::json to_json(const FigureBands& b, ShardingMode mode) {
    auto pair = [](const Band& band) { return nlohmann::json::array({band.lo, band.hi}); };
    return {{"samples_per_s", pair(b.samples_per_s)},
            {"scaling_efficiency", pair(b.efficiency)},
            {"speedup", pair(b.speedup)},
            {mode == ShardingMode::none ? "allreduce_busbw_gbps" : "sharding_busbw_gbps", pair(b.busbw)},
            {"exposed_comm_ms", pair(b.exposed_comm_ms)},
            {"samples_per_s_without_compute_error", pair(b.samples_per_s_without_compute_error)}};
}

void widen_to_ranges(std::vector<Projection>& rows, const TrainConfig& cfg, const HardwareProfile& hw,
                     const Calibration& cal, const std::vector<int>& gpus, const std::vector<int>& nodes, bool real_input,
                     const std::vector<ShardingMode>& modes, TraceCache* cache) {
    auto widen = [](Band& band, double v) {
        band.lo = std::min(band.lo, v);
        band.hi = std::max(band.hi, v);
    };
    std::vector<HardwareProfile> corners = range_corners(hw);
    // The band without the compute model's error takes the corners with that error at its central
    // value; where the value is no end of its range (A100 SXM4: 0 in [-34, 83]), those are corners of their own.
    if (const Sourced& e = hw.compute_error_pct; e.is_range() && e.value != e.lo && e.value != e.hi) {
        HardwareProfile pinned = hw;
        pinned.compute_error_pct = {e.value, e.source, e.value, e.value, {}, {}};  // a point
        for (HardwareProfile& corner : range_corners(pinned)) corners.push_back(std::move(corner));
    }
    TraceCache own;  // the corners move no number a trace depends on
    for (const HardwareProfile& corner : corners) {
        if (corners.size() == 1) break;  // no ranges: the bands are the points
        const std::vector<Projection> at =
            project_configurations(cfg, CostModel(corner, cal, real_input), gpus, nodes, modes, cache ? cache : &own, false);
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
        p.record["bands"] = to_json(p.bands, p.sharding);
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
                       "activations {:.2f}, comm buffers {:.2f}, data {:.2f}, workspace and runtime {:.2f})",
                       p.record["memory_per_gpu_gb"].get<double>(), hw.memory_gb.value, m["parameters"].get<double>(),
                       m["gradients"].get<double>(), m["optimizer_state"].get<double>(), m["activations"].get<double>(),
                       m["comm_buffers"].get<double>(), m["data"].get<double>(), m["workspace_and_runtime"].get<double>());
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
