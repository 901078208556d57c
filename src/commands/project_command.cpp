// `scalebench project` and `scalebench compare` (src/commands/project_command.h).
#include "src/commands/project_command.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>  // environ

#include <cerrno>
#include <cstring>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "collectives/bucketer.h"
#include "src/core/errors.h"
#include "src/core/plausible.h"
#include "src/core/results.h"
#include "src/commands/runner.h"
#include "src/core/stats.h"
#include "src/core/workload.h"
#include "src/core/yaml_fields.h"

namespace sb {

namespace {

void add_common(CLI::App& sub, ProjectOptions& o) {
    sub.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    sub.add_option("--config,-c", o.config,
                   "workload YAML (project: default the built-in MLP workload; compare: default every scenario preset's "
                   "workloads)");
    sub.add_option("--calibrate", o.calibrate,
                   "gemm, comm, one-GPU train and op_profile (train --profile-ops) JSONL records of the profile's GPU to "
                   "calibrate from (repeatable, comma lists)")
        ->delimiter(',')
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
        ->check(CLI::ExistingFile);
    sub.add_option("--profile-dir", o.profile_dir,
                   "where profile names are looked up (default: configs/hardware under the working directory or the "
                   "binary's)");
    sub.add_option("--host", o.host,
                   "host section replacing the profiles' (sockets, PCIe topology, host memory bandwidth): a name in "
                   "configs/hosts or a YAML path");
    sub.add_option("--precision", o.precision, "what-if: fp32, tf32, bf16 or fp16 instead of the config's");
    sub.add_option("--grad-dtype", o.grad_dtype, "what-if: the all-reduce dtype, fp32, bf16 or fp16, instead of the config's");
    sub.add_option("--seq-len", o.seq_len, "what-if: the transformer workload's sequence length instead of the config's");
    sub.add_option("--conv-engine", o.conv_engine,
                   "what-if: the ResNet workload's convolution engine, auto, im2col or cudnn, instead of the config's");
}

// --batch-size (alias --batch): project takes 'max' too, compare a number (the largest batch differs per GPU).
void add_batch_option(CLI::App& sub, ProjectOptions& o, bool offer_max) {
    sub.add_option("--batch-size,--batch", o.batch,
                   offer_max ? "per-GPU batch: a number, or 'max' for the largest whose footprint fits the GPU (weak scaling)"
                             : "per-GPU batch (weak scaling)");
}

// --scaling (alias --gpus): the GPUs per node projected, as train's --scaling names its world sizes.
void add_scaling_option(CLI::App& sub, ProjectOptions& o, const std::string& help) {
    sub.add_option("--scaling,--gpus", o.gpus, help)->delimiter(',');
}

// --nodes, one option for project and compare (node_counts reads it for both).
void add_nodes_option(CLI::App& sub, ProjectOptions& o, const std::string& help) {
    sub.add_option("--nodes", o.nodes, help)->delimiter(',');
}

Summary single(double v) { return Summary{v, v, v, v, v, v, 1}; }

std::string profile_list();

HardwareProfile load_profile(const ProjectOptions& o, const std::string& name) {
    const std::string dir = o.profile_dir.empty() ? shipped_config_dir("hardware") : o.profile_dir;
    const std::string path = hardware_profile_path(name, dir.empty() ? "configs/hardware" : dir);
    if (path.find('/') != std::string::npos && name.find('/') == std::string::npos && !std::filesystem::exists(path) &&
        name.size() > 0 && name.find(".yaml") == std::string::npos)
        throw UserError(fmt::format("--hardware {}: no such profile in {}; profiles: {}", name,
                                    dir.empty() ? "configs/hardware" : dir, profile_list()));
    HardwareProfile hw = load_hardware_profile(path);
    if (!o.host.empty()) {
        const std::string hosts = shipped_config_dir("hosts");
        const std::string path = hardware_profile_path(o.host, hosts.empty() ? "configs/hosts" : hosts);
        apply_host_section(hw, read_text_file(path, "host section"), path);
    }
    return hw;
}

TrainConfig load_workload(const ProjectOptions& o) {
    TrainConfig cfg = o.config.empty() ? TrainConfig{} : load_config_file(o.config);
    auto what_if = [](const char* flag, const std::string& value, auto parse) {
        try {
            return parse(value);
        } catch (const std::exception& e) {
            throw UserError(fmt::format("{} {}: {}", flag, value, e.what()));
        }
    };
    if (!o.precision.empty()) cfg.precision = what_if("--precision", o.precision, parse_precision);
    if (!o.grad_dtype.empty()) cfg.grad_dtype = what_if("--grad-dtype", o.grad_dtype, parse_grad_dtype);
    if (o.seq_len != 0) {
        if (cfg.model != "transformer")
            throw UserError(fmt::format("--seq-len {}: the workload is a {} model, not a transformer", o.seq_len, cfg.model));
        if (o.seq_len < 1) throw UserError(fmt::format("--seq-len {}: must be >= 1", o.seq_len));
        cfg.transformer.shape.seq_len = o.seq_len;
    }
    if (!o.conv_engine.empty()) {
        if (cfg.model != "resnet")
            throw UserError(fmt::format("--conv-engine {}: the workload is a {} model, not a ResNet", o.conv_engine, cfg.model));
        if (o.conv_engine == "auto") cfg.conv_engine.reset();
        else if (o.conv_engine == "im2col") cfg.conv_engine = ConvEngine::im2col;
        else if (o.conv_engine == "cudnn") cfg.conv_engine = ConvEngine::cudnn;
        else throw UserError(fmt::format("--conv-engine {}: auto, im2col or cudnn", o.conv_engine));
    }
    try {
        validate_config(cfg);
    } catch (const UserError& e) {
        throw UserError(fmt::format("{} (after the what-if flags)", e.what()));
    }
    return cfg;
}

// ", convolutions traced as ENGINE" for a ResNet workload (the engine resolved as the trace runs it), else "".
std::string traced_engine(const TrainConfig& cfg) {
    if (cfg.model != "resnet") return "";
    return fmt::format(", convolutions traced as {}", conv_engine_name(resolve_conv_engine(cfg, TraceOps(cfg.precision))));
}

std::string profile_list() {
    std::string out;
    for (const std::string& name : shipped_profile_names()) out += (out.empty() ? "" : ", ") + name;
    return out.empty() ? "(none found: give --profile-dir)" : out;
}

std::vector<int> gpu_counts(const ProjectOptions& o, const HardwareProfile& hw) {
    const int per_node = static_cast<int>(hw.gpus_per_node.value);
    if (o.gpus.empty()) {
        std::vector<int> out;
        for (int g : {1, 2, 4, 8})
            if (g <= per_node) out.push_back(g);
        return out;
    }
    for (int g : o.gpus)
        if (g < 1 || g > per_node)
            throw UserError(fmt::format("--scaling {}: {} has {} GPUs per node ({})", g, hw.name, per_node, hw.source));
    return o.gpus;
}

}  // namespace

std::string shipped_config_dir(const std::string& sub) {
    namespace fs = std::filesystem;
    const fs::path relative = fs::path("configs") / sub;
    if (fs::is_directory(relative)) return relative.string();
    std::error_code ec;
    fs::path dir = fs::canonical("/proc/self/exe", ec).parent_path();
    for (int up = 0; !ec && up < 4 && !dir.empty(); ++up, dir = dir.parent_path()) {
        if (fs::is_directory(dir / relative)) return (dir / relative).string();
        if (fs::is_directory(dir / "share" / "scalebench" / relative)) return (dir / "share" / "scalebench" / relative).string();
        if (dir == dir.parent_path()) break;
    }
    return "";
}

std::vector<std::string> shipped_profile_names() {
    std::vector<std::string> names;
    const std::string dir = shipped_config_dir("hardware");
    if (dir.empty()) return names;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

std::vector<int> node_counts(const ProjectOptions& o) {
    for (int N : o.nodes)
        if (N < 1 || N > kMaxWorldSize)
            throw UserError(fmt::format("--nodes {}: must be >= 1 and <= {}", N, kMaxWorldSize));
    return o.nodes.empty() ? std::vector<int>{1} : o.nodes;
}

int compare_node_count(const ProjectOptions& o) {
    const std::vector<int> nodes = node_counts(o);
    if (nodes.size() > 1)
        throw UserError(fmt::format("--nodes {}: compare judges one node count (project takes a list)", fmt::join(nodes, ",")));
    return nodes.front();
}

void add_project_options(CLI::App& sub, ProjectOptions& o) {
    add_common(sub, o);
    sub.add_option("--hardware", o.hardware,
                   "hardware profile: a name in configs/hardware or a YAML path; shipped: " + profile_list())
        ->required();
    add_batch_option(sub, o, true);
    add_scaling_option(sub, o, "GPUs per node to project, e.g. 1,2,4,8 (default: those up to the node's)");
    add_nodes_option(sub, o, "node counts, e.g. 1,2,4 (default 1); the network between nodes is the profile's");
    sub.add_option("--out,-o", o.out, "JSONL file the projected records are appended to");
    sub.add_flag("--comm", o.comm,
                 "print the projected all-reduce (float sum) against message size and GPU count in nccl-tests' "
                 "all_reduce_perf table instead of a workload, with the busbw band over the profile's ranges");
}

void add_compare_options(CLI::App& sub, ProjectOptions& o) {
    add_common(sub, o);
    sub.add_flag("--json", o.json, "print the table, bands and verdicts as one JSON object (for scripts)");
    sub.add_option("--hardware", o.hardware,
                   "hardware profiles, comma separated (names or paths), or 'all'; shipped: " + profile_list())
        ->required();
    std::string scenarios;
    for (const std::string& name : shipped_scenario_names()) scenarios += (scenarios.empty() ? "" : ", ") + name;
    sub.add_option("--scenario", o.scenarios,
                   "without --config: the scenario presets to judge (names in configs/scenarios or paths; default all: " +
                       scenarios + ")")
        ->delimiter(',');
    o.out.clear();
    sub.add_option("--out,-o", o.out, "JSONL file every projected record is appended to (default: none)");
    add_batch_option(sub, o, false);
    add_scaling_option(sub, o, "GPUs per node to project, e.g. 1,2,4,8 (default: those up to each node's)");
    add_nodes_option(sub, o,
                     "what-if: every multi-GPU scenario judges this many nodes of the profile's node (default 1); the "
                     "network between nodes is the profile's");
    sub.add_option("--report", o.report,
                   "without --config: write the whole answer as Markdown with plots (FILE.md; FILE.json and "
                   "FILE-plots/ beside it; needs /usr/bin/python3 with matplotlib)");
    sub.add_option("--years", o.years, "the period the node's power is paid for (default 3)");
    sub.add_option("--usd-per-kwh", o.usd_per_kwh, "the price of power (default 0.15)");
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
    const ProjectedStep one = schedule_step(trace_for(1), model, 1, 1);
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
            p.step = schedule_step(t, model, g, N);
            p.global_batch = int64_t{t.local_batch} * world;
            p.samples_per_s = p.global_batch / (p.step.step_ms / 1e3);
            p.efficiency = p.samples_per_s / (world * samples_at_1);
            p.speedup = p.samples_per_s / samples_at_1;
            const double algbw = t.gradient_bytes / (p.step.allreduce_ms / 1e3) / 1e9;
            p.busbw = world > 1 ? algbw * 2.0 * (world - 1) / world : 0.0;
            auto point = [](double v) { return Band{v, v}; };
            p.bands = {point(p.samples_per_s), point(p.efficiency), point(p.speedup), point(p.busbw),
                       point(p.step.exposed_comm_ms)};
            const double flops_per_step = t.flops_per_sample * p.global_batch;
            const double tflops = flops_per_step / (p.step.step_ms / 1e3) / 1e12;
            const double peak = model.peak_tflops(cfg.precision);
            const HardwareProfile& hw = model.hw;
            p.record = {
                {"schema_version", kSchemaVersion},
                {"subcommand", "project"},
                {"projected", true},
                {"timestamp", utc_timestamp()},
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
                {"step_ms", to_json(single(p.step.step_ms))},
                {"compute_ms", to_json(single(p.step.compute_ms))},
                {"exposed_comm_ms", to_json(single(p.step.exposed_comm_ms))},
                {"optimizer_ms", to_json(single(p.step.optimizer_ms))},
                {"samples_per_s", p.samples_per_s},
                {"samples_per_s_per_rank", p.samples_per_s / world},
                {"scaling_efficiency", p.efficiency},
                {"speedup", p.speedup},
                {"straggler_ms", p.step.straggler_ms},
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
    size_t used = 0;
    int value = 0;
    try {
        value = std::stoi(batch, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != batch.size() || value < 1) throw UserError(fmt::format("--batch-size {}: a positive number or 'max'", batch));
    cfg.batch_size = value;
    validate_config(cfg, {{"batch_size", "--batch-size"}});  // bounded as the config's batch_size is
}

nlohmann::json to_json(const FigureBands& b) {
    auto pair = [](const Band& band) { return nlohmann::json::array({band.lo, band.hi}); };
    return {{"samples_per_s", pair(b.samples_per_s)},
            {"scaling_efficiency", pair(b.efficiency)},
            {"speedup", pair(b.speedup)},
            {"allreduce_busbw_gbps", pair(b.busbw)},
            {"exposed_comm_ms", pair(b.exposed_comm_ms)}};
}

void widen_to_ranges(std::vector<Projection>& rows, const TrainConfig& cfg, const HardwareProfile& hw,
                     const Calibration& cal, const std::vector<int>& gpus, const std::vector<int>& nodes) {
    auto widen = [](Band& band, double v) {
        band.lo = std::min(band.lo, v);
        band.hi = std::max(band.hi, v);
    };
    const std::vector<HardwareProfile> corners = range_corners(hw);
    for (const HardwareProfile& corner : corners) {
        if (corners.size() == 1) break;  // no ranges: the bands are the points
        const std::vector<Projection> at = project_workload(cfg, CostModel(corner, cal), gpus, nodes);
        SB_REQUIRE(at.size() == rows.size(), "widen_to_ranges: rows of other arguments");
        for (size_t i = 0; i < rows.size(); ++i) {
            FigureBands& b = rows[i].bands;
            widen(b.samples_per_s, at[i].samples_per_s);
            widen(b.efficiency, at[i].efficiency);
            widen(b.speedup, at[i].speedup);
            widen(b.busbw, at[i].busbw);
            widen(b.exposed_comm_ms, at[i].step.exposed_comm_ms);
        }
    }
    for (Projection& p : rows) {
        p.record["bands"] = to_json(p.bands);
        p.record["samples_per_s_band"] = {p.bands.samples_per_s.lo, p.bands.samples_per_s.hi};
        p.record["ranges"] = ranged_keys(hw);
    }
}

namespace {

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

}  // namespace

std::vector<CommRow> comm_table(const CostModel& model, const std::vector<int>& gpus, const std::vector<int>& nodes) {
    const std::vector<HardwareProfile> corners = range_corners(model.hw);
    std::vector<CommRow> rows;
    for (int N : nodes)
        for (int g : gpus) {
            if (g * N < 2) continue;  // nccl-tests' busbw of one rank is 0
            for (double bytes = 8; bytes <= 4.0 * 1024 * 1024 * 1024; bytes *= 2) {
                CommRow r{g, N, bytes};
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

namespace {

// project --comm: nccl-tests' all_reduce_perf table (out-of-place columns), one block per GPU count.
int print_comm_table(const ProjectOptions& o, const HardwareProfile& hw, const CostModel& model) {
    ProjectOptions asked = o;
    if (o.gpus.empty())  // 2, 4, 8 up to the node: one GPU has no bus bandwidth
        for (int g : {2, 4, 8})
            if (g <= hw.gpus_per_node.value) asked.gpus.push_back(g);
    const std::vector<int> nodes = node_counts(o);
    for (int N : nodes)
        if (N > 1 && !hw.has_network())
            throw UserError(fmt::format("--nodes {}: {} describes no network between nodes", N, hw.source));
    const std::vector<CommRow> rows = comm_table(model, gpu_counts(asked, hw), nodes);
    fmt::print("# scalebench project --comm: projected all_reduce_perf on {} ({}), not measured\n", hw.name, hw.device_name);
    fmt::print("# busbw band: every ranged number of the profile at its ends ({})\n", range_list(hw));
    for (size_t i = 0; i < rows.size();) {
        const int g = rows[i].gpus_per_node, N = rows[i].nodes;
        fmt::print("#\n# nGpus {} per node, {} node{}: {} ranks\n", g, N, N > 1 ? "s" : "", g * N);
        fmt::print("#{:>12} {:>12} {:>8} {:>6} {:>6} {:>10} {:>8} {:>8} {:>17}\n", "size", "count", "type", "redop", "root",
                   "time", "algbw", "busbw", "busbw band");
        fmt::print("#{:>12} {:>12} {:>8} {:>6} {:>6} {:>10} {:>8} {:>8} {:>17}\n", "(B)", "(elements)", "", "", "", "(us)",
                   "(GB/s)", "(GB/s)", "(GB/s)");
        double sum = 0;
        size_t count = 0;
        for (; i < rows.size() && rows[i].gpus_per_node == g && rows[i].nodes == N; ++i, ++count) {
            const CommRow& r = rows[i];
            sum += r.busbw;
            fmt::print(" {:>12.0f} {:>12.0f} {:>8} {:>6} {:>6} {:>10.1f} {:>8.2f} {:>8.2f} {:>17}\n", r.bytes, r.bytes / 4,
                       "float", "sum", -1, r.time_us, r.algbw, r.busbw,
                       fmt::format("{:.2f}-{:.2f}", r.busbw_band.lo, r.busbw_band.hi));
        }
        fmt::print("# Avg bus bandwidth    : {:.4g}\n", sum / count);
    }
    return 0;
}

}  // namespace

int run_project(const ProjectOptions& o) {
    const HardwareProfile hw = load_profile(o, o.hardware);
    if (o.comm) return print_comm_table(o, hw, CostModel(hw, calibrate(hw, o.calibrate)));
    TrainConfig cfg = load_workload(o);
    apply_batch_option(o.batch, cfg, hw);
    const std::vector<int> gpus = gpu_counts(o, hw);
    const std::vector<int> nodes = node_counts(o);
    if (const std::string problem = results_file_problem(o.out, "--out"); !problem.empty()) throw UserError(problem);
    const CostModel model(hw, calibrate(hw, o.calibrate));
    std::vector<Projection> rows = project_workload(cfg, model, gpus, nodes);
    widen_to_ranges(rows, cfg, hw, model.calibration, gpus, nodes);
    fmt::print("scalebench project: {} model, {} parameters on {} ({}), precision {}, {} scaling, batch {} {}{}\n",
               cfg.model, rows.front().record["num_params"].get<size_t>(), hw.name, hw.device_name,
               precision_name(cfg.precision), scaling_mode_name(cfg.scaling_mode), cfg.batch_size,
               cfg.scaling_mode == ScalingMode::weak ? "per rank" : "global", traced_engine(cfg));
    fmt::print("host: {}{}, host memory {:g} GB/s, PCIe {}\n", hw.host.empty() ? "the profile's" : hw.host,
               o.host.empty() ? "" : " (--host)", hw.host_mem_bw_gbps.value, hw.pcie_topology);
    for (const auto& n : model.calibration.notes) fmt::print("calibration: {}\n", n);
    if (model.calibration.notes.empty()) fmt::print("calibration: none; every figure from {}\n", hw.source);
    const bool fits = rows.front().record["fits_memory"].get<bool>();
    fmt::print("memory: {}: {}\n", footprint_line(rows.front(), hw),
               fits ? "fits" : "DOES NOT FIT: the figures below are what the step would take if it did");
    print_scaling_table_columns();
    for (const Projection& p : rows) {
        ScalingRow row;
        row.world_size = p.step.world_size;
        row.samples_per_s = p.samples_per_s;
        row.per_rank = p.samples_per_s / p.step.world_size;
        row.efficiency = p.efficiency;
        row.busbw = p.busbw;
        row.step = single(p.step.step_ms);
        row.compute = single(p.step.compute_ms);
        row.exposed = single(p.step.exposed_comm_ms);
        row.optimizer = single(p.step.optimizer_ms);
        print_scaling_table_row(row);
        append_record(o.out, p.record);
    }
    fmt::print("bands over the profile's ranges ({}):\n", range_list(hw));
    fmt::print("  {:>5} {:>26} {:>20} {:>20} {:>22} {:>22}\n", "GPUs", "samples/s", "efficiency %", "speed-up",
               "busbw GB/s", "exposed comm ms");
    for (const Projection& p : rows) {
        const FigureBands& b = p.bands;
        auto cell = [](double v, const Band& band, double scale, int digits) {
            return fmt::format("{:.{}f} [{:.{}f}-{:.{}f}]", v * scale, digits, band.lo * scale, digits, band.hi * scale, digits);
        };
        fmt::print("  {:>5} {:>26} {:>20} {:>20} {:>22} {:>22}{}\n", p.step.world_size, cell(p.samples_per_s, b.samples_per_s, 1, 1),
                   cell(p.efficiency, b.efficiency, 100, 1), cell(p.speedup, b.speedup, 1, 2), cell(p.busbw, b.busbw, 1, 1),
                   cell(p.step.exposed_comm_ms, b.exposed_comm_ms, 1, 2), fits ? "" : " (does not fit)");
    }
    fmt::print("projected (not measured){}; {} record(s) appended to {}\n", fits ? "" : ", DOES NOT FIT THE GPU",
               rows.size(), o.out);
    return 0;
}

}  // namespace sb

namespace sb {

namespace {

}  // namespace

namespace {

// The profile that maximises `score` among those `eligible`, or nullptr.
template <class Score, class Eligible>
const CompareRow* best(const std::vector<CompareRow>& rows, Score score, Eligible eligible) {
    const CompareRow* found = nullptr;
    for (const auto& r : rows)
        if (eligible(r) && (!found || score(r) > score(*found))) found = &r;
    return found;
}

}  // namespace

namespace {

// The entry of by_gpus (one node) of `gpus` GPUs, or of the node's largest count below.
size_t index_of(const CompareRow& r, int gpus) {
    size_t best_index = 0;
    for (size_t i = 0; i < r.by_gpus.size(); ++i)
        if (r.by_gpus[i].step.world_size <= gpus) best_index = i;
    return best_index;
}

// What a scenario judges of a row: the configuration (an entry of by_gpus or on_nodes) and the score.
struct Judged {
    const CompareRow* row = nullptr;
    const Projection* p = nullptr;
    double score = 0, lo = 0, hi = 0;  // central, and the band the row's ranges give it
    double cost() const { return p->step.world_size * row->hw.price_usd.value; }
};

// The configuration a rule of `gpus` GPUs judges in a row: that many GPUs per node or the node's
// largest count below, on the row's N nodes when it has them and the rule is multi-GPU; its band.
std::pair<const Projection*, Band> judged_configuration(const CompareRow& r, int gpus) {
    const size_t i = index_of(r, gpus);
    const bool across = gpus > 1 && !r.on_nodes.empty();
    const Projection& p = across ? r.on_nodes[i] : r.by_gpus[i];
    return {&p, p.bands.samples_per_s};
}

}  // namespace

std::vector<ScenarioRule> single_workload_rules() {
    return {{"small experiments", 1, Score::per_10k_gpus, {}},
            {"NLP fine-tuning", 4, Score::per_10k_gpus, {}},
            {"large CV training", 1 << 20, Score::per_10k_gpus, {}},
            {"multi-GPU training", 1 << 20, Score::samples_per_s, {}}};
}

ConfigurationCost configuration_cost(const HardwareProfile& hw, int gpus, const CostTerms& terms) {
    const double share = static_cast<double>(gpus) / hw.gpus_per_node.value;
    const double watts = gpus * hw.tdp_w.value + share * hw.host_power_w.value;
    return {gpus * hw.price_usd.value, share * hw.server_usd.value,
            watts / 1e3 * terms.years * 365.25 * 24 * terms.usd_per_kwh};
}

std::string configuration_name(const Projection& p) {
    const int g = p.step.world_size;
    return fmt::format("{} GPU{}{}", g, g > 1 ? "s" : "",
                       p.step.nodes > 1 ? fmt::format(" on {} nodes x {}", p.step.nodes, g / p.step.nodes) : "");
}

std::string unmet_requirements(const HardwareProfile& hw, const std::vector<std::string>& needs) {
    std::string out;
    auto add = [&](const std::string& why) { out += (out.empty() ? "" : ", ") + why; };
    for (const std::string& need : needs) {
        if (need == "soak") continue;  // the soaks of its GPU: decide judges them
        if (need == "vendor_driver" && hw.patched_driver) add("needs a patched driver");
        else if (need != "vendor_driver" && !hw.has_production()) add("records no production facts");
        else if (need == "ecc" && hw.ecc.value != "yes") add("ECC " + hw.ecc.value + " (not on by default)");
        else if (need == "datacenter_use" && hw.datacenter_use.value != "yes") add("no datacenter support or licence");
    }
    return out;
}

std::vector<Verdict> verdicts(const std::vector<CompareRow>& rows) {
    std::vector<Verdict> out;
    for (const ScenarioRule& rule : single_workload_rules()) out.push_back(decide(rows, rule));
    return out;
}

Verdict decide(const std::vector<CompareRow>& rows, const ScenarioRule& rule, const CostTerms& terms) {
    // The scaling floor: a multi-GPU configuration slower than one GPU of a compared profile (that
    // the workload fits) is no multi-GPU answer; that one GPU is.
    double fastest_single = 0;
    for (const CompareRow& r : rows)
        if (r.fits()) fastest_single = std::max(fastest_single, r.by_gpus.front().samples_per_s);
    auto scale = [&](const CompareRow& r, const Projection& p) {
        const int g = p.step.world_size;
        switch (rule.score) {
            case Score::samples_per_s: return 1.0;
            case Score::per_10k_gpus: return 1e4 / (g * r.hw.price_usd.value);
            case Score::per_10k_whole_cost: return 1e4 / configuration_cost(r.hw, g, terms).total();
        }
        return 1.0;
    };
    std::vector<Judged> eligible;
    std::string excluded;
    const bool judges_soaks = std::find(rule.needs.begin(), rule.needs.end(), "soak") != rule.needs.end();
    for (const CompareRow& r : rows) {
        std::string unmet = unmet_requirements(r.hw, rule.needs);
        if (judges_soaks)
            if (const SoakVerdict soak = soak_verdict(r.soaks, rule.soak_drift_bound_pct);
                soak.status == SoakVerdict::Status::counts_against)
                unmet += (unmet.empty() ? "" : ", ") + soak.said;
        if (!unmet.empty()) {
            excluded += fmt::format("{}{}: {}", excluded.empty() ? "" : "; ", r.hw.name, unmet);
            continue;
        }
        const auto [p, band] = judged_configuration(r, rule.gpus);
        if (!r.fits() || (p->step.world_size > 1 && p->samples_per_s <= fastest_single)) continue;
        const double k = scale(r, *p);
        eligible.push_back({&r, p, p->samples_per_s * k, band.lo * k, band.hi * k});
    }
    if (eligible.empty()) {
        std::string why = std::none_of(rows.begin(), rows.end(), [](const CompareRow& r) { return r.fits(); })
                              ? "the workload fits none"
                              : "every multi-GPU configuration is slower than one GPU of a compared profile";
        if (!excluded.empty()) why = "none qualifies (" + excluded + ")";
        return {rule.scenario, nullptr, why};
    }
    const Judged best = *std::max_element(eligible.begin(), eligible.end(),
                                          [](const Judged& a, const Judged& b) { return a.score < b.score; });
    // The tie: every candidate the bands (or 1%) cannot tell from the best, each central value
    // inside the other's band; it goes to the cheaper configuration, then to the one without a
    // patched driver.
    std::vector<Judged> tied;
    for (const Judged& j : eligible) {
        const bool inside_each_other = j.hi >= best.score && j.score >= best.lo;
        if (inside_each_other || j.score >= 0.99 * best.score) tied.push_back(j);
    }
    auto cost = [&](const Judged& j) {
        const int g = j.p->step.world_size;
        return rule.score == Score::per_10k_whole_cost ? configuration_cost(j.row->hw, g, terms).total() : j.cost();
    };
    const Judged pick = *std::min_element(tied.begin(), tied.end(), [&](const Judged& a, const Judged& b) {
        if (cost(a) != cost(b)) return cost(a) < cost(b);
        if (a.row->hw.patched_driver != b.row->hw.patched_driver) return !a.row->hw.patched_driver;
        return a.score > b.score;
    });
    const Projection& p = *pick.p;
    const char* what = rule.score == Score::samples_per_s     ? "samples/s"
                       : rule.score == Score::per_10k_gpus ? "samples/s per $10k"
                                                           : "samples/s per $10k of the whole cost";
    std::string reason = fmt::format(
        "{} {} at {} ({:.1f} [{:.1f}-{:.1f}], {:.1f}% scaling, {:.2f} ms exposed communication, {:.2f} of {:.0f} GiB "
        "per GPU, {:.1f} samples/s per kW)",
        what, rule.score == Score::samples_per_s ? "highest" : "best", configuration_name(p), pick.score, pick.lo, pick.hi,
        100.0 * p.efficiency, p.step.exposed_comm_ms, p.record["memory_per_gpu_gb"].get<double>(),
        pick.row->hw.memory_gb.value, pick.row->per_kw(p));
    if (pick.row != best.row)
        reason += fmt::format("; ties with {} ({:.1f} [{:.1f}-{:.1f}]) within the band and costs less or needs no patched "
                              "driver",
                              best.row->hw.name, best.score, best.lo, best.hi);
    if (p.step.world_size > 1)
        reason += fmt::format("; faster than the fastest single GPU compared ({:.1f} samples/s)", fastest_single);
    if (judges_soaks) {
        const SoakVerdict soak = soak_verdict(pick.row->soaks, rule.soak_drift_bound_pct);
        reason += "; soak " + soak.brief;
    }
    // What the winner's figures rest on: said beside every verdict it wins.
    for (const Caveat& c : pick.row->hw.caveats) reason += fmt::format("; caveat: {} ({})", c.text, c.source);
    if (!excluded.empty()) reason += "; excluded: " + excluded;
    return {rule.scenario, pick.row, reason};
}

namespace {

std::string winner_name(const Verdict& v) { return v.winner ? v.winner->hw.name : std::string("none"); }

}  // namespace

std::vector<CompareRow> compare_rows(const TrainConfig& cfg, const std::vector<HardwareProfile>& profiles,
                                     const std::vector<Calibration>& calibrations, const std::string& key, bool high,
                                     const CompareSetup& setup, size_t moved) {
    std::vector<CompareRow> rows;
    for (size_t i = 0; i < profiles.size(); ++i) {
        const std::vector<std::string> ranged = ranged_keys(profiles[i]);
        const bool at_end = i == moved && !key.empty() && std::find(ranged.begin(), ranged.end(), key) != ranged.end();
        CompareRow row;
        row.hw = at_end ? at_range_end(profiles[i], key, high) : profiles[i];
        if (i < setup.soaks.size()) row.soaks = setup.soaks[i];
        ProjectOptions asked;
        asked.gpus = setup.gpus;
        const std::vector<int> gpus = gpu_counts(asked, row.hw);
        // One node, then (--nodes N) the same GPU counts on N nodes: project's code path, whose
        // records say nodes and gpus_per_node.
        const std::vector<int> nodes = setup.nodes > 1 ? std::vector<int>{1, setup.nodes} : std::vector<int>{1};
        std::vector<Projection> all = project_workload(cfg, CostModel(row.hw, calibrations[i]), gpus, nodes);
        if (key.empty()) widen_to_ranges(all, cfg, row.hw, calibrations[i], gpus, nodes);
        row.on_nodes.assign(all.begin() + static_cast<std::ptrdiff_t>(gpus.size()), all.end());
        all.resize(gpus.size());
        row.by_gpus = std::move(all);
        rows.push_back(std::move(row));
    }
    return rows;
}

std::vector<std::vector<std::string>> verdict_flips(const TrainConfig& cfg, const std::vector<HardwareProfile>& profiles,
                                                    const std::vector<Calibration>& calibrations,
                                                    const std::vector<Verdict>& central,
                                                    const std::vector<ScenarioRule>& rules, const CostTerms& terms,
                                                    const CompareSetup& setup) {
    std::vector<std::vector<std::string>> flips(central.size());
    // The rows as given, without their bands (as every end is decided): a key no profile has.
    const std::vector<CompareRow> given =
        compare_rows(cfg, profiles, calibrations, "soak.drift_bound_pct", false, setup, profiles.size());
    for (size_t i = 0; i < profiles.size(); ++i) {
        HardwareProfile profile = profiles[i];
        CompareSetup alone = setup;  // profile i's own soaks
        alone.soaks = i < setup.soaks.size() ? std::vector<std::vector<SoakRun>>{setup.soaks[i]} : std::vector<std::vector<SoakRun>>{};
        for (const auto& [key, number] : sourced_numbers(profile))
            for (bool high : {false, true}) {
                const double end = high ? number->hi : number->lo;
                if (!number->is_range() || end == number->value) continue;  // an end at the central value changes nothing
                std::vector<CompareRow> moved = given;  // only profile i moves
                moved[i] = compare_rows(cfg, {profiles[i]}, {calibrations[i]}, key, high, alone).front();
                for (size_t s = 0; s < central.size(); ++s)
                    if (const Verdict v = decide(moved, rules[s], terms); winner_name(v) != winner_name(central[s]))
                        flips[s].push_back(fmt::format("{} with {}'s {} at its {} end ({:g})", winner_name(v),
                                                       profiles[i].name, key, high ? "high" : "low", end));
            }
    }
    // The soak drift bound's ends, where a soak's drift lies between them (else no end changes a verdict).
    bool drift_in_band = false;
    for (const auto& runs : setup.soaks)
        for (const SoakRun& run : runs)
            drift_in_band |= run.drift_pct > kSoakDriftBound.lo && run.drift_pct <= kSoakDriftBound.hi;
    if (!drift_in_band) return flips;
    const std::vector<CompareRow>& rows = given;
    for (bool high : {false, true})
        for (size_t s = 0; s < central.size(); ++s) {
            if (std::find(rules[s].needs.begin(), rules[s].needs.end(), "soak") == rules[s].needs.end()) continue;
            ScenarioRule at_end = rules[s];
            at_end.soak_drift_bound_pct = high ? kSoakDriftBound.hi : kSoakDriftBound.lo;
            const Verdict v = decide(rows, at_end, terms);
            if (winner_name(v) != winner_name(central[s]))
                flips[s].push_back(fmt::format("{} with soak.drift_bound_pct at its {} end ({:g})", winner_name(v),
                                               high ? "high" : "low", at_end.soak_drift_bound_pct));
        }
    return flips;
}

namespace {

// compare --out: every projected record of the rows (with its band and the profile's ranges).
void append_records(const std::string& out, const std::vector<CompareRow>& rows) {
    if (out.empty()) return;
    for (const CompareRow& r : rows)
        for (const std::vector<Projection>* projections : {&r.by_gpus, &r.on_nodes})
            for (const Projection& p : *projections) append_record(out, p.record);
}

// The latest record under `dir` (recursively, *.jsonl, measured only) that `matches`, with its file.
std::pair<nlohmann::json, std::string> latest_record(const std::string& dir,
                                                      const std::function<bool(const nlohmann::json&)>& matches) {
    std::pair<nlohmann::json, std::string> found;
    std::error_code ec;
    if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return found;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
        if (e.path().extension() != ".jsonl") continue;
        std::ifstream in(e.path());
        for (std::string line; std::getline(in, line);) {
            const nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
            if (r.is_discarded() || !r.is_object() || (r.contains("projected") && r["projected"] == true) || !matches(r))
                continue;
            if (found.first.is_null() || r.value("timestamp", "") > found.first.value("timestamp", ""))
                found = {r, e.path().string()};
        }
    }
    return found;
}

std::string gpu_name_of(const nlohmann::json& r) {
    if (r.contains("gpu") && r["gpu"].is_object()) return r["gpu"].value("name", "");
    if (r.contains("environment") && r["environment"].contains("gpu")) return r["environment"]["gpu"].value("name", "");
    return "";
}

// A soak record of the profile's board: its GPU's device name and, where the record gives the
// GPU's memory, within 15% of the profile's (a 24 GB RTX 4090's soak is not the 48 GB board's).
bool soak_of_profiles_gpu(const nlohmann::json& r, const HardwareProfile& hw) {
    if (gpu_name_of(r) != hw.device_name) return false;
    if (!r.contains("environment") || !r["environment"].is_object() || !r["environment"].contains("gpu") ||
        !r["environment"]["gpu"].is_object())
        return true;
    const nlohmann::json& gpu = r["environment"]["gpu"];
    if (!gpu.contains("memory_total_mib") || !gpu["memory_total_mib"].is_number()) return true;
    const double gib = gpu["memory_total_mib"].get<double>() / 1024.0;
    return std::abs(gib - hw.memory_gb.value) <= 0.15 * hw.memory_gb.value;
}

}  // namespace

std::vector<CardFigure> card_tests(const HardwareProfile& hw, const Calibration& cal, const std::string& configs_dir,
                                   const std::string& results_dir) {
    const CostModel model(hw, cal);
    std::vector<CardFigure> out;
    for (const auto& [precision, size] : {std::pair{Precision::fp16, 8192}, std::pair{Precision::fp32, 4096}}) {
        TracedOp op;  // as TraceOps records the row-major C = A @ B the gemm subcommand times
        op.kind = "gemm";
        op.dtype = compute_dtype(precision);
        op.tensor_core = true;
        op.m = op.n = op.k = size;
        op.flops = 2.0 * size * size * size;
        op.bytes = 3.0 * size * size * dtype_size(op.dtype);
        const double ms = model.op_ms(op, precision);
        const auto [record, file] = latest_record(results_dir, [&](const nlohmann::json& r) {
            return r.value("subcommand", "") == "gemm" && r.value("dtype", "") == precision_name(precision) &&
                   r.value("m", 0) == size && r.value("n", 0) == size && r.value("k", 0) == size &&
                   gpu_name_of(r) == hw.device_name;
        });
        const std::string name = fmt::format("GEMM {} {}^3", precision_name(precision), size);
        out.push_back({name, "ms", ms, record.is_null() ? -1.0 : record["time_ms"]["median"].get<double>(), file});
        out.push_back({name, "TFLOP/s", op.flops / (ms / 1e3) / 1e12,
                       record.is_null() ? -1.0 : record["tflops"].get<double>(), file});
    }
    for (const auto& [preset, label] : {std::pair{"resnet50.yaml", "ResNet-50"}, std::pair{"bert-base.yaml", "BERT-base"}}) {
        const TrainConfig cfg = load_config_file(configs_dir + "/" + preset);
        const Projection p = project_workload(cfg, model, {1}, {1}).front();
        // A ResNet record counts only where it ran the engine the projection traced.
        const std::string engine =
            cfg.model == "resnet" ? conv_engine_name(resolve_conv_engine(cfg, TraceOps(cfg.precision))) : "";
        const auto [record, file] = latest_record(results_dir, [&](const nlohmann::json& r) {
            if (r.value("subcommand", "") != "train" || r.value("world_size", 0) != 1 || gpu_name_of(r) != hw.device_name ||
                r.value("local_batch", 0) != cfg.batch_size || r.value("precision", "") != precision_name(cfg.precision) ||
                !r.contains("config"))
                return false;
            const nlohmann::json& c = r["config"];
            if (c.value("model", "") != cfg.model) return false;
            const nlohmann::json want = to_json(cfg);
            return cfg.model == "resnet" ? c["resnet"] == want["resnet"] && conv_engine_of_record(r) == engine
                                         : c["transformer"]["arch"] == want["transformer"]["arch"] &&
                                               c["transformer"]["layers"] == want["transformer"]["layers"] &&
                                               c["transformer"]["hidden"] == want["transformer"]["hidden"] &&
                                               c["transformer"]["seq_len"] == want["transformer"]["seq_len"];
        });
        out.push_back({fmt::format("{} batch {}", label, cfg.batch_size), "samples/s", p.samples_per_s,
                       record.is_null() ? -1.0 : record["samples_per_s"].get<double>(), file});
    }
    return out;
}

std::string soak_summary(const HardwareProfile& hw, const std::string& results_dir) {
    const auto [r, file] = latest_record(results_dir, [&](const nlohmann::json& x) {
        return x.value("subcommand", "") == "stress" && x.value("complete", false) && soak_of_profiles_gpu(x, hw);
    });
    if (r.is_null()) return "";
    double drift = 0;  // the largest |drift| of any workload over its intervals
    for (const auto& w : r["workloads"])
        drift = std::max({drift, std::abs(w["drift_pct"]["min"].get<double>()), std::abs(w["drift_pct"]["max"].get<double>())});
    std::string line = fmt::format("soak {:.0f} s on {} GPU{}: {} replica checks {}, throughput drift within {:.2f}%",
                                   r["elapsed_s"].get<double>(), r["world_size"].get<int>(), r["world_size"].get<int>() > 1 ? "s" : "",
                                   r["sdc_checks"].get<int>(), r["checks_passed"].get<bool>() ? "passed" : "FAILED", drift);
    if (r["telemetry_by_rank"].is_array() && !r["telemetry_by_rank"].empty() && r["telemetry_by_rank"][0].is_object()) {
        const nlohmann::json& t = r["telemetry_by_rank"][0];
        line += fmt::format(", ECC corrected/uncorrected {}/{}, up to {:.0f} C and {:.0f} W, throttling: {}",
                            t["ecc_corrected_delta"].get<long>(), t["ecc_uncorrected_delta"].get<long>(),
                            t["temperature_c"]["max"].get<double>(), t["power_w"]["max"].get<double>(),
                            t["throttle_reasons_seen"].empty() ? std::string("none")
                                                               : fmt::format("{}", fmt::join(t["throttle_reasons_seen"], ", ")));
    }
    return line + " (" + file + ")";
}

bool SoakRun::interrupted() const {
    // The texts src/system/run_records.cpp writes for a stop from outside: a signal, or the launcher gone.
    return ended.find("received SIG") != std::string::npos || ended.find("launcher") != std::string::npos;
}

std::vector<SoakRun> soak_runs(const HardwareProfile& hw, const std::string& results_dir) {
    struct Pending {
        SoakRun run;
        bool this_gpu = false;
        long interval_mismatches = 0, interval_checks = 0, interval_ecc = 0;
    };
    std::map<std::string, Pending> runs;  // by run_id, or FILE#N for records without one
    auto ecc_of = [](const nlohmann::json& telemetry) {
        long n = 0;
        if (telemetry.is_array())
            for (const auto& t : telemetry)
                if (t.is_object() && t.contains("ecc_uncorrected_delta") && t["ecc_uncorrected_delta"].is_number())
                    n += t["ecc_uncorrected_delta"].get<long>();
        return n;
    };
    std::error_code ec;
    if (results_dir.empty() || !std::filesystem::is_directory(results_dir, ec)) return {};
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::recursive_directory_iterator(results_dir, ec))
        if (e.path().extension() == ".jsonl") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (const std::string& file : files) {
        std::ifstream in(file);
        int anonymous = 0;  // runs of this file without a run_id, each ending at its summary
        for (std::string line; std::getline(in, line);) {
            const nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
            if (r.is_discarded() || !r.is_object() || r.value("projected", false)) continue;
            const std::string sub = r.value("subcommand", "");
            const std::string id = r.contains("run_id") && r["run_id"].is_string() ? r["run_id"].get<std::string>() : "";
            if (sub == "incomplete" && r.value("run_subcommand", "") == "stress" && !id.empty()) {
                runs[id].run.ended = r.value("error", std::string("(no reason recorded)"));
                continue;
            }
            if (sub != "stress") continue;
            Pending& p = runs[id.empty() ? fmt::format("{}#{}", file, anonymous) : id];
            const bool summary = r.value("complete", false);
            if (summary && id.empty()) ++anonymous;
            if (p.run.file.empty()) p.run.file = file;
            p.this_gpu |= soak_of_profiles_gpu(r, hw);
            p.run.timestamp = std::max(p.run.timestamp, r.value("timestamp", std::string()));
            p.run.world_size = std::max(p.run.world_size, r.value("world_size", 0));
            p.run.elapsed_s = std::max(p.run.elapsed_s, r.value("elapsed_s", 0.0));
            const long events = r.contains("sdc_events") && r["sdc_events"].is_array() ? static_cast<long>(r["sdc_events"].size()) : 0;
            const long checks = r.value("sdc_checks", 0L);
            const long ecc = r.contains("telemetry_by_rank") ? ecc_of(r["telemetry_by_rank"]) : 0;
            if (summary) {  // the whole run's totals
                p.run.complete = true;
                p.run.mismatches = std::max(p.run.mismatches, events);
                p.run.replica_checks = std::max(p.run.replica_checks, checks);
                p.run.ecc_uncorrected = std::max(p.run.ecc_uncorrected, ecc);
                if (r.contains("workloads") && r["workloads"].is_array())
                    for (const auto& w : r["workloads"])
                        if (w.is_object() && w.contains("drift_pct") && w["drift_pct"].is_object())
                            for (const char* end : {"min", "max"})
                                if (w["drift_pct"].contains(end) && w["drift_pct"][end].is_number())
                                    p.run.drift_pct = std::max(p.run.drift_pct, std::abs(w["drift_pct"][end].get<double>()));
            } else {  // an interval: counted where the run has no summary
                p.interval_mismatches += events;
                p.interval_checks += checks;
                p.interval_ecc += ecc;
                if (r.contains("drift_pct") && r["drift_pct"].is_number())
                    p.run.drift_pct = std::max(p.run.drift_pct, std::abs(r["drift_pct"].get<double>()));
            }
        }
    }
    std::vector<SoakRun> out;
    for (auto& [key, p] : runs) {
        if (!p.this_gpu) continue;  // another GPU's, or an incomplete record whose run left no stress record
        p.run.mismatches = std::max(p.run.mismatches, p.interval_mismatches);
        p.run.replica_checks = std::max(p.run.replica_checks, p.interval_checks);
        p.run.ecc_uncorrected = std::max(p.run.ecc_uncorrected, p.interval_ecc);
        out.push_back(std::move(p.run));
    }
    std::sort(out.begin(), out.end(), [](const SoakRun& a, const SoakRun& b) {
        return a.timestamp != b.timestamp ? a.timestamp > b.timestamp : a.file < b.file;
    });
    return out;
}

const char* soak_status_name(SoakVerdict::Status s) {
    switch (s) {
        case SoakVerdict::Status::not_measured: return "not measured";
        case SoakVerdict::Status::passed: return "passed";
        case SoakVerdict::Status::counts_against: return "counts against";
    }
    return "?";
}

SoakVerdict soak_verdict(const std::vector<SoakRun>& runs, double bound) {
    const std::string band = fmt::format("bound {:g}% [{:g}-{:g}%]", bound, kSoakDriftBound.lo, kSoakDriftBound.hi);
    std::vector<std::string> against, not_scored;
    int passed = 0;
    double drift = 0;
    for (const SoakRun& r : runs) {
        const size_t before = against.size();
        if (r.mismatches > 0)
            against.push_back(fmt::format("{} replica mismatch{} in {} checks ({})", r.mismatches, r.mismatches > 1 ? "es" : "",
                                          r.replica_checks, r.file));
        if (r.ecc_uncorrected > 0)
            against.push_back(fmt::format("{} uncorrected ECC error{} ({})", r.ecc_uncorrected, r.ecc_uncorrected > 1 ? "s" : "",
                                          r.file));
        if (r.faulted()) against.push_back(fmt::format("ended by a hang or fault: {} ({})", r.ended, r.file));
        if (r.drift_pct > bound)
            against.push_back(fmt::format("throughput drift {:.2f}% beyond the {} ({})", r.drift_pct, band, r.file));
        if (against.size() > before) continue;
        if (r.complete) {
            ++passed;
            drift = std::max(drift, r.drift_pct);
        } else {
            not_scored.push_back(fmt::format("{} ({})", r.ended.empty() ? "cut short without a record of why" : r.ended, r.file));
        }
    }
    const std::string unscored =
        not_scored.empty() ? ""
                           : fmt::format("; {} run{} cut short, not scored (a stop and a fault read alike): {}", not_scored.size(),
                                         not_scored.size() > 1 ? "s" : "", fmt::join(not_scored, "; "));
    if (!against.empty()) {
        const std::string said = fmt::format("counts against: {}", fmt::join(against, "; "));
        return {SoakVerdict::Status::counts_against, said, said};
    }
    if (passed == 0) return {SoakVerdict::Status::not_measured, "not measured" + unscored, "not measured"};
    std::vector<std::string> files;
    for (const SoakRun& r : runs)
        if (r.complete && std::find(files.begin(), files.end(), r.file) == files.end()) files.push_back(r.file);
    return {SoakVerdict::Status::passed,
            fmt::format("passed: {} run{} ({}) without a replica mismatch, uncorrected ECC error, hang or fault; "
                        "throughput drift within {:.2f}% ({}){}",
                        passed, passed > 1 ? "s" : "", fmt::join(files, ", "), drift, band, unscored),
            fmt::format("passed ({} run{}, throughput drift within {:.2f}%, {})", passed, passed > 1 ? "s" : "", drift, band)};
}

std::vector<std::string> shipped_scenario_names() {
    std::vector<std::string> names;
    const std::string dir = shipped_config_dir("scenarios");
    if (dir.empty()) return names;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

Scenario load_scenario(const std::string& path, const std::string& configs_dir) {
    const YAML::Node root = load_yaml_document(read_text_file(path, "scenario"), path, "scenario");
    YamlFields f(path);
    if (!root.IsMap()) f.fail_at(root.Mark(), "the scenario must be a map of keys");
    Scenario sc;
    sc.source = path;
    sc.name = std::filesystem::path(path).stem().string();
    std::set<std::string> seen;
    f.for_each_key(root, "", {"scenario", "gpus", "workloads", "requires"},
                   [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                       seen.insert(key);
                       if (key == "scenario") {
                           sc.rule.scenario = f.non_empty_text(v, k, key);
                       } else if (key == "gpus") {
                           sc.rule.gpus = static_cast<int>(f.integer(v, k, key, 1, 64));
                       } else if (key == "workloads") {
                           if (!v.IsSequence() || v.size() == 0)
                               f.fail(v, k, key, "a list of workload configs (paths under configs/)");
                           for (const YAML::Node& item : v) {
                               const std::string w = configs_dir + "/" + f.non_empty_text(item, k, key);
                               if (!std::filesystem::is_regular_file(w))
                                   f.fail_at(item.Mark(), fmt::format("key 'workloads': no workload config {}", w));
                               sc.workloads.push_back(w);
                           }
                       } else {
                           if (!v.IsSequence()) f.fail(v, k, key, "a list of: ecc, datacenter_use, vendor_driver, soak");
                           for (const YAML::Node& item : v)
                               sc.rule.needs.push_back(
                                   f.choice(item, k, key, {"ecc", "datacenter_use", "vendor_driver", "soak"}));
                       }
                   });
    for (const char* key : {"scenario", "gpus", "workloads"})
        if (!seen.count(key)) f.fail_at(root.Mark(), fmt::format("key '{}': missing", key));
    return sc;
}

namespace {

std::vector<std::string> profile_names(const ProjectOptions& o) {
    std::vector<std::string> names;
    std::stringstream list(o.hardware);
    for (std::string item; std::getline(list, item, ',');)
        if (!item.empty()) names.push_back(item);
    if (names == std::vector<std::string>{"all"}) {
        const std::string dir = o.profile_dir.empty() ? shipped_config_dir("hardware") : o.profile_dir;
        names.clear();
        if (!dir.empty())
            for (const auto& e : std::filesystem::directory_iterator(dir))
                if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
        std::sort(names.begin(), names.end());
        if (names.empty()) throw UserError("--hardware all: no profiles found (give --profile-dir)");
    }
    if (names.empty()) throw UserError("--hardware: name at least one profile");
    return names;
}

// "bert-large-s384 b32": the workload's file name and its per-GPU batch (unless the name says it).
std::string workload_label(const std::string& path, const TrainConfig& cfg) {
    const std::string stem = std::filesystem::path(path).stem().string();
    const std::string batch = fmt::format("b{}", cfg.batch_size);
    return stem.find(batch) != std::string::npos ? stem : stem + " " + batch;
}

// Text wrapped at `width` columns: its own leading spaces kept, continuation lines indented by `indent`.
std::string wrapped(const std::string& text, size_t indent, size_t width = 100) {
    const size_t lead = std::min(text.find_first_not_of(' '), text.size());
    std::string out, line = text.substr(0, lead);
    bool first = true;
    std::stringstream words(text.substr(lead));
    for (std::string w; words >> w; first = false) {
        if (!first && line.size() + 1 + w.size() > width) {
            out += line + "\n";
            line = std::string(indent, ' ') + w;
        } else {
            line += (first ? "" : " ") + w;
        }
    }
    return out + line;
}

const char* budget_name(Score s) { return s == Score::samples_per_s ? "ample" : "limited"; }

// compare --json: a row's configurations (by_gpus, or on_nodes), each with its band and scores;
// with `terms`, also per $10k of the whole cost.
nlohmann::json configurations_json(const CompareRow& row, const std::vector<Projection>& projections,
                                   const CostTerms* terms) {
    nlohmann::json out = nlohmann::json::array();
    for (const Projection& p : projections) {
        nlohmann::json j = {{"gpus", p.step.world_size},
                            {"samples_per_s", p.samples_per_s},
                            {"samples_per_s_band", {p.bands.samples_per_s.lo, p.bands.samples_per_s.hi}},
                            {"scaling_efficiency", p.efficiency},
                            {"speedup", p.speedup},
                            {"allreduce_busbw_gbps", p.busbw},
                            {"exposed_comm_ms", p.step.exposed_comm_ms},
                            {"bands", to_json(p.bands)},
                            {"samples_per_s_per_10k_usd", row.per_10k(p)}};
        if (terms)
            j["samples_per_s_per_10k_usd_whole_cost"] =
                p.samples_per_s * 1e4 / configuration_cost(row.hw, p.step.world_size, *terms).total();
        j["samples_per_s_per_kw"] = row.per_kw(p);
        if (p.step.nodes > 1) j.update({{"nodes", p.step.nodes}, {"gpus_per_node", p.step.world_size / p.step.nodes}});
        out.push_back(std::move(j));
    }
    return out;
}

// The node count of a multi-GPU scenario's configuration, said after its GPUs: " per node on 2 nodes".
std::string on_nodes_text(int nodes) { return nodes > 1 ? fmt::format(" per node on {} nodes", nodes) : ""; }

// A row's configurations on N nodes, one line: "on 2 nodes: 2 GPUs 5371.0, ..., 16 GPUs 42000.0
// [41000.0-42000.0]; at 16 GPUs 97.7% scaling, 0.80 ms exposed communication".
std::string on_nodes_line(const CompareRow& row) {
    std::string cells;
    for (const Projection& p : row.on_nodes)
        cells += fmt::format("{}{} GPU{} {:.1f}", cells.empty() ? "" : ", ", p.step.world_size, p.step.world_size > 1 ? "s" : "",
                             p.samples_per_s);
    const Projection& top = row.on_nodes.back();
    const Band band = top.bands.samples_per_s;
    return fmt::format("on {} nodes: {} [{:.1f}-{:.1f}]; at {} GPUs {:.1f}% scaling, {:.2f} ms exposed communication",
                       row.nodes(), cells, band.lo, band.hi, top.step.world_size, 100.0 * top.efficiency,
                       top.step.exposed_comm_ms);
}

// Runs argv[0] with its arguments as a child process (no shell: no word splitting or quoting of the
// paths) and waits for it. Empty when it exits 0, else what went wrong.
std::string run_child(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = 0;
    if (const int err = posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ); err != 0)
        return fmt::format("cannot start {}: {}", argv[0], std::strerror(err));
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return fmt::format("waiting for {}: {}", argv[0], std::strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
    return WIFEXITED(status) ? fmt::format("{} exited with {}", argv[0], WEXITSTATUS(status))
                             : fmt::format("{} ended by signal {}", argv[0], WTERMSIG(status));
}

// compare without --config: every scenario preset's workloads, each judged in the two budget columns.
int run_compare_scenarios(const ProjectOptions& o, const std::vector<HardwareProfile>& profiles,
                          const std::vector<Calibration>& calibrations) {
    const std::string configs = [] {
        const std::string hw = shipped_config_dir("hardware");
        return hw.empty() ? std::string("configs") : std::filesystem::path(hw).parent_path().string();
    }();
    const std::vector<std::string> names = o.scenarios.empty() ? shipped_scenario_names() : o.scenarios;
    if (names.empty()) throw UserError("compare: no scenario presets found in configs/scenarios (give --config)");
    const std::vector<std::string> known = shipped_scenario_names();
    std::vector<Scenario> scenarios;
    for (const std::string& name : names) {
        const bool is_path = name.find('/') != std::string::npos || name.find(".yaml") != std::string::npos;
        if (!is_path && std::find(known.begin(), known.end(), name) == known.end()) {
            std::string list;
            for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
            throw UserError(fmt::format("--scenario {}: no such scenario; scenarios: {}", name, list));
        }
        scenarios.push_back(load_scenario(is_path ? name : configs + "/scenarios/" + name + ".yaml", configs));
    }
    const CostTerms terms{o.years, o.usd_per_kwh};
    // The soaks of each profile's GPU among the committed records (results/ beside configs/).
    const std::string results_dir = (std::filesystem::path(configs).parent_path() / "results").string();
    CompareSetup setup{o.gpus, compare_node_count(o), {}};
    for (const HardwareProfile& hw : profiles) setup.soaks.push_back(soak_runs(hw, results_dir));
    // Every workload once: its rows, and its verdicts and flips under every rule that judges it.
    struct WorkloadResult {
        std::string path, label;
        TrainConfig cfg;
        std::vector<CompareRow> rows;
        std::vector<ScenarioRule> rules;
        std::vector<Verdict> verdicts;
        std::vector<std::vector<std::string>> flips;
    };
    std::vector<WorkloadResult> results;
    auto result_of = [&](const std::string& path) -> WorkloadResult& {
        for (auto& r : results)
            if (r.path == path) return r;
        ProjectOptions one = o;
        one.config = path;
        WorkloadResult r;
        r.path = path;
        r.cfg = load_workload(one);
        r.label = workload_label(path, r.cfg);
        results.push_back(std::move(r));
        return results.back();
    };
    for (const Scenario& sc : scenarios)
        for (const std::string& w : sc.workloads)
            for (Score score : {Score::samples_per_s, Score::per_10k_whole_cost}) {
                ScenarioRule rule = sc.rule;
                rule.score = score;
                result_of(w).rules.push_back(rule);
            }
    for (WorkloadResult& r : results) {
        r.rows = compare_rows(r.cfg, profiles, calibrations, "", false, setup);
        for (const ScenarioRule& rule : r.rules) r.verdicts.push_back(decide(r.rows, rule, terms));
        r.flips = verdict_flips(r.cfg, profiles, calibrations, r.verdicts, r.rules, terms, setup);
    }
    for (const WorkloadResult& r : results) append_records(o.out, r.rows);
    std::vector<std::vector<CardFigure>> cards;
    for (size_t i = 0; i < profiles.size(); ++i) cards.push_back(card_tests(profiles[i], calibrations[i], configs, results_dir));
    auto cell = [&](const Scenario& sc, const std::string& w, Score score) {
        const WorkloadResult& r = result_of(w);
        for (size_t i = 0; i < r.rules.size(); ++i)
            if (r.rules[i].scenario == sc.rule.scenario && r.rules[i].score == score)
                return std::make_pair(&r.verdicts[i], &r.flips[i]);
        throw std::logic_error("compare: a scenario's rule was not decided");
    };

    if (o.json || !o.report.empty()) {
        nlohmann::json out = {{"projected", true},
                              {"nodes", setup.nodes},
                              {"cost_terms", {{"years", terms.years}, {"usd_per_kwh", terms.usd_per_kwh}}},
                              {"profiles", nlohmann::json::array()},
                              {"workloads", nlohmann::json::array()},
                              {"scenarios", nlohmann::json::array()}};
        for (const HardwareProfile& hw : profiles) {
            const int g = static_cast<int>(hw.gpus_per_node.value);
            const ConfigurationCost c = configuration_cost(hw, g, terms);
            out["profiles"].push_back({{"name", hw.name},
                                       {"node_cost_usd", {{"gpus", c.gpus_usd}, {"server", c.server_usd}, {"power", c.power_usd},
                                                          {"total", c.total()}, {"gpus_per_node", g}}},
                                       {"hardware", to_json(hw)}});
        }
        for (size_t i = 0; i < profiles.size(); ++i) {
            nlohmann::json figures = nlohmann::json::array();
            for (const CardFigure& f : cards[i]) {
                nlohmann::json j = {{"test", f.test}, {"unit", f.unit}, {"projected", f.projected}};
                if (f.measured >= 0) j.update({{"measured", f.measured}, {"measured_from", f.measured_from}});
                figures.push_back(j);
            }
            const HardwareProfile& hw = profiles[i];
            if (const std::string soak = soak_summary(profiles[i], results_dir); !soak.empty()) out["profiles"][i]["soak"] = soak;
            const SoakVerdict soak = soak_verdict(setup.soaks[i]);
            out["profiles"][i]["soak_verdict"] = {{"status", soak_status_name(soak.status)},
                                                  {"said", soak.said},
                                                  {"runs", setup.soaks[i].size()},
                                                  {"drift_bound_pct", {kSoakDriftBound.value, kSoakDriftBound.lo, kSoakDriftBound.hi}}};
            out["profiles"][i]["card"] = {{"figures", figures},
                                          {"memory_gib", hw.memory_gb.value},
                                          {"memory_bandwidth_gbps", hw.peak.mem_bw_gbps},
                                          {"copy_gbps", hw.copy_gbps.value},
                                          {"tdp_w", hw.tdp_w.value},
                                          {"price_usd", hw.price_usd.value}};
        }
        for (const WorkloadResult& r : results) {
            nlohmann::json rows = nlohmann::json::array();
            for (const CompareRow& row : r.rows) {
                rows.push_back({{"name", row.hw.name},
                                {"memory_per_gpu_gib", row.at_max().record["memory_per_gpu_gb"]},
                                {"memory_breakdown_gib", row.at_max().record["memory_breakdown_gb"]},
                                {"memory_headroom_gib", row.hw.memory_gb.value - row.at_max().record["memory_per_gpu_gb"].get<double>()},
                                {"fits_memory", row.fits()},
                                {"ranges", ranged_keys(row.hw)},
                                {"by_gpus", configurations_json(row, row.by_gpus, &terms)}});
                if (!row.on_nodes.empty())
                    rows.back()["on_nodes"] = configurations_json(row, row.on_nodes, &terms);
            }
            out["workloads"].push_back({{"workload", r.label}, {"config", to_json(r.cfg)}, {"profiles", rows}});
        }
        for (const Scenario& sc : scenarios) {
            nlohmann::json cells = nlohmann::json::array();
            for (const std::string& w : sc.workloads)
                for (Score score : {Score::samples_per_s, Score::per_10k_whole_cost}) {
                    const auto [v, flips] = cell(sc, w, score);
                    cells.push_back({{"workload", result_of(w).label},
                                     {"budget", budget_name(score)},
                                     {"winner", v->winner ? nlohmann::json(v->winner->hw.name) : nlohmann::json()},
                                     {"reason", v->reason},
                                     {"flips", *flips}});
                }
            out["scenarios"].push_back({{"scenario", sc.rule.scenario}, {"preset", sc.source}, {"gpus", sc.rule.gpus},
                                        {"nodes", sc.rule.gpus > 1 ? setup.nodes : 1}, {"requires", sc.rule.needs},
                                        {"cells", cells}});
        }
        if (o.json) {
            fmt::print("{}\n", out.dump(2));
            return 0;
        }
        // --report: the JSON beside the Markdown, rendered with its plots by results/compare_report.py.
        const std::string json_path = (std::filesystem::path(o.report).replace_extension(".json")).string();
        std::ofstream(json_path) << out.dump(2) << "\n";
        const std::string script = (std::filesystem::path(configs).parent_path() / "results" / "compare_report.py").string();
        const std::vector<std::string> argv = {"/usr/bin/python3", script, json_path, o.report};
        if (const std::string failed = run_child(argv); !failed.empty())
            throw UserError(fmt::format("--report {}: rendering failed ({}); the data is in {}; run: {}", o.report, failed,
                                        json_path, fmt::join(argv, " ")));
    }

    std::string list;
    for (const HardwareProfile& hw : profiles) list += (list.empty() ? "" : ", ") + hw.name;
    fmt::print("{}\n", wrapped("scalebench compare: the buyer's table for " + list +
                                    " (projected, not measured). ample: the most samples/s per node; limited: the "
                                    "most samples/s per $10k of the whole cost (GPUs, their share of the server, power "
                                    "over the period). * : a range of a profile flips the cell (below)." +
                                    (setup.nodes > 1 ? fmt::format(" --nodes {}: every multi-GPU scenario judges {} nodes "
                                                                   "of each profile's node, the network between them the "
                                                                   "profile's.", setup.nodes, setup.nodes)
                                                     : std::string()),
                                0));
    fmt::print("\n{:<19} {:<19} {:<29} {}\n", "scenario", "workload", "ample budget", "limited budget");
    for (const Scenario& sc : scenarios) {
        bool first = true;
        for (const std::string& w : sc.workloads) {
            std::string cols[2];
            int c = 0;
            for (Score score : {Score::samples_per_s, Score::per_10k_whole_cost}) {
                const auto [v, flips] = cell(sc, w, score);
                cols[c++] = (v->winner ? v->winner->hw.name : std::string("none qualifies")) + (flips->empty() ? "" : " *");
            }
            fmt::print("{:<19} {:<19} {:<29} {}\n", first ? sc.rule.scenario : "", result_of(w).label, cols[0], cols[1]);
            first = false;
        }
    }

    fmt::print("\nnode cost per profile, full node (power: GPUs' TDP and host, {:g} years at {:g} USD/kWh):\n",
               terms.years, terms.usd_per_kwh);
    fmt::print("{:<24} {:>11} {:>11} {:>11} {:>11} {:>8}\n", "profile", "GPUs USD", "server USD", "power USD", "total USD",
               "node kW");
    for (const HardwareProfile& hw : profiles) {
        const int g = static_cast<int>(hw.gpus_per_node.value);
        const ConfigurationCost c = configuration_cost(hw, g, terms);
        fmt::print("{:<24} {:>11.0f} {:>11} {:>11.0f} {:>11.0f} {:>8.2f}\n", hw.name, c.gpus_usd,
                   hw.server_usd.source.empty() ? std::string("not given") : fmt::format("{:.0f}", c.server_usd),
                   c.power_usd, c.total(), (g * hw.tdp_w.value + hw.host_power_w.value) / 1e3);
    }

    fmt::print("\ncard tests, one GPU: projected, and measured (m) where results/ has the GPU's records\n");
    fmt::print("{:<22} {:>14} {:>13} {:>9} {:>9} {:>5} {:>6} {:>5} {:>6}\n", "profile", "fp16 8192^3", "fp32 4096^3",
               "RN50 b256", "BERT-b 32", "GiB", "GB/s", "TDP W", "USD");
    fmt::print("{:<22} {:>14} {:>13} {:>9} {}\n", "", "ms TFLOP/s", "ms TFLOP/s", "samples/s", "samples/s");
    std::vector<std::string> measured_files;
    for (size_t i = 0; i < profiles.size(); ++i) {
        const std::vector<CardFigure>& c = cards[i];
        const HardwareProfile& hw = profiles[i];
        auto cells = [&](bool measured) {
            std::string out;
            const int widths[] = {6, 7, 5, 7, 9, 9};
            for (size_t k = 0; k < c.size(); ++k) {
                const double v = measured ? c[k].measured : c[k].projected;
                out += fmt::format(" {:>{}}", v < 0 ? std::string("-") : fmt::format("{:.{}f}", v, c[k].unit == "ms" ? 2 : 1),
                                   widths[k]);
            }
            return out;
        };
        fmt::print("{:<22}{} {:>5.0f} {:>6.0f} {:>5.0f} {:>6.0f}\n", hw.name, cells(false), hw.memory_gb.value,
                   hw.peak.mem_bw_gbps, hw.tdp_w.value, hw.price_usd.value);
        if (std::any_of(c.begin(), c.end(), [](const CardFigure& f) { return f.measured >= 0; })) {
            fmt::print("{:<22}{}\n", "  (m)", cells(true));
            for (const CardFigure& f : c)
                if (f.measured >= 0 && std::find(measured_files.begin(), measured_files.end(), f.measured_from) == measured_files.end())
                    measured_files.push_back(f.measured_from);
        }
    }
    fmt::print("{}\n", wrapped("GiB: the GPU's memory; GB/s: its datasheet memory bandwidth; measured from: " +
                                    (measured_files.empty() ? std::string("none") : fmt::format("{}", fmt::join(measured_files, ", "))),
                                2));

    for (const WorkloadResult& r : results) {
        fmt::print("\n{}\n", wrapped(fmt::format("{} ({} parameters, {}{}): samples/s [band] by GPUs; the rest at the "
                                                "most GPUs",
                                                r.label, r.rows.front().at_max().record["num_params"].get<size_t>(),
                                                precision_name(r.cfg.precision), traced_engine(r.cfg)),
                                    2));
        fmt::print("{:<22} {:>9} {:>9} {:>9} {:>9} {:>6} {:>8} {:>9} {:>7}\n", "profile", "1 GPU", "2 GPUs", "4 GPUs",
                   "8 GPUs", "eff.", "exp.ms", "mem GiB", "fits");
        for (const CompareRow& row : r.rows) {
            auto at = [&](int g) {
                const Projection* p = row.at(g);
                return p ? fmt::format("{:.1f}", p->samples_per_s) : std::string("-");
            };
            const Projection& top = row.at_max();
            fmt::print("{:<22} {:>9} {:>9} {:>9} {:>9} {:>5.1f}% {:>8.2f} {:>9.2f} {:>7}\n", row.hw.name, at(1), at(2),
                       at(4), at(8), 100.0 * top.efficiency, top.step.exposed_comm_ms,
                       top.record["memory_per_gpu_gb"].get<double>(), row.fits() ? "yes" : "NO");
            if (const Band& band = top.bands.samples_per_s; band.hi > band.lo)
                fmt::print("{}\n", wrapped(fmt::format("  band at {} GPUs: [{:.1f}-{:.1f}], efficiency [{:.1f}-{:.1f}]%, "
                                                     "exposed communication [{:.2f}-{:.2f}] ms, from {}",
                                                     top.step.world_size, band.lo, band.hi, 100 * top.bands.efficiency.lo,
                                                     100 * top.bands.efficiency.hi, top.bands.exposed_comm_ms.lo,
                                                     top.bands.exposed_comm_ms.hi, range_list(row.hw)),
                                         4));
            if (!row.on_nodes.empty()) fmt::print("{}\n", wrapped("  " + on_nodes_line(row), 4));
        }
    }

    fmt::print("\nthe figures behind each cell:\n");
    for (const Scenario& sc : scenarios) {
        fmt::print("{}\n", wrapped(fmt::format("{} ({} GPU{}{}; {})", sc.rule.scenario, sc.rule.gpus,
                                              sc.rule.gpus > 1 ? "s" + on_nodes_text(setup.nodes) + " or the node's largest below"
                                                               : std::string(),
                                              sc.rule.needs.empty() ? "" : ", requires " + fmt::format("{}", fmt::join(sc.rule.needs, ", ")),
                                              sc.source),
                                  2));
        if (std::find(sc.rule.needs.begin(), sc.rule.needs.end(), "soak") != sc.rule.needs.end())
            for (size_t i = 0; i < profiles.size(); ++i) {  // the soaks the cells judge, and the latest one's telemetry
                const std::string latest = soak_summary(profiles[i], results_dir);
                fmt::print("{}\n", wrapped("  " + profiles[i].name + ": soak " + soak_verdict(setup.soaks[i]).said +
                                               (latest.empty() ? "" : "; the latest: " + latest),
                                           4));
            }
        for (const std::string& w : sc.workloads)
            for (Score score : {Score::samples_per_s, Score::per_10k_whole_cost}) {
                const auto [v, flips] = cell(sc, w, score);
                const std::string head = fmt::format("  {}, {}: ", result_of(w).label, budget_name(score));
                fmt::print("{}\n", wrapped(head + (v->winner ? v->winner->hw.name + ": " : std::string("none: ")) + v->reason, 4));
                for (const std::string& f : *flips) fmt::print("{}\n", wrapped("    flips inside the band: " + f, 6));
            }
    }
    return 0;
}

}  // namespace

int run_compare(const ProjectOptions& o) {
    const std::vector<std::string> names = profile_names(o);
    const CompareSetup setup{o.gpus, compare_node_count(o), {}};  // a bad --nodes refused before any work
    if (!o.scenarios.empty() && !o.config.empty())
        throw UserError("--scenario: judges the scenario presets' own workloads; give it or --config, not both");
    if (!o.out.empty())
        if (const std::string problem = results_file_problem(o.out, "--out"); !problem.empty()) throw UserError(problem);
    if (const std::string p = implausible(o.years, {0, true, 100}); !p.empty())
        throw UserError(fmt::format("--years {}: {}", o.years, p));
    if (const std::string p = implausible(o.usd_per_kwh, {0, false, 100}); !p.empty())
        throw UserError(fmt::format("--usd-per-kwh {}: {}", o.usd_per_kwh, p));
    if (!o.report.empty()) {
        if (!o.config.empty()) throw UserError("--report: writes the whole buyer's table; give it without --config");
        if (o.json) throw UserError("--report: give it or --json, not both");
        const std::filesystem::path dir = std::filesystem::path(o.report).parent_path();
        if (std::filesystem::path(o.report).extension() != ".md")
            throw UserError(fmt::format("--report {}: a Markdown file name ending in .md", o.report));
        if (!dir.empty() && !std::filesystem::is_directory(dir))
            throw UserError(fmt::format("--report {}: no directory {}", o.report, dir.string()));
    }
    if (o.config.empty()) {
        if (!o.batch.empty()) throw UserError("--batch-size: give it with --config (the scenario presets set their own batches)");
        std::vector<HardwareProfile> profiles;
        std::vector<Calibration> calibrations;
        for (const auto& name : names) {
            profiles.push_back(load_profile(o, name));
            calibrations.push_back(calibrate(profiles.back(), o.calibrate));
            gpu_counts(o, profiles.back());  // a bad --gpus refused before any work
        }
        return run_compare_scenarios(o, profiles, calibrations);
    }
    TrainConfig cfg = load_workload(o);
    std::vector<HardwareProfile> profiles;
    std::vector<Calibration> calibrations;
    for (const auto& name : names) {
        profiles.push_back(load_profile(o, name));
        calibrations.push_back(calibrate(profiles.back(), o.calibrate));
    }
    if (o.batch == "max") throw UserError("--batch-size max: compare takes a number (the largest batch differs per GPU; use project)");
    apply_batch_option(o.batch, cfg, profiles.front());
    const std::vector<CompareRow> rows = compare_rows(cfg, profiles, calibrations, "", false, setup);
    append_records(o.out, rows);
    const std::vector<Verdict> central = verdicts(rows);
    const std::vector<std::vector<std::string>> flips =
        verdict_flips(cfg, profiles, calibrations, central, single_workload_rules(), CostTerms{o.years, o.usd_per_kwh}, setup);
    if (o.json) {
        nlohmann::json out = {{"workload", to_json(cfg)}, {"projected", true}, {"nodes", setup.nodes},
                              {"profiles", nlohmann::json::array()}, {"verdicts", nlohmann::json::array()}};
        for (const CompareRow& r : rows) {
            out["profiles"].push_back({{"name", r.hw.name},
                                       {"memory_per_gpu_gib", r.at_max().record["memory_per_gpu_gb"]},
                                       {"memory_breakdown_gib", r.at_max().record["memory_breakdown_gb"]},
                                       {"fits_memory", r.fits()},
                                       {"ranges", ranged_keys(r.hw)},
                                       {"by_gpus", configurations_json(r, r.by_gpus, nullptr)},
                                       {"hardware", to_json(r.hw)}});
            if (!r.on_nodes.empty())
                out["profiles"].back()["on_nodes"] = configurations_json(r, r.on_nodes, nullptr);
        }
        for (size_t i = 0; i < central.size(); ++i)
            out["verdicts"].push_back({{"scenario", central[i].scenario},
                                       {"winner", central[i].winner ? nlohmann::json(central[i].winner->hw.name) : nlohmann::json()},
                                       {"reason", central[i].reason},
                                       {"flips", flips[i]}});
        fmt::print("{}\n", out.dump(2));
        return 0;
    }
    const auto& any = rows.front().at_max().record;
    fmt::print("compare: {} model, {} parameters, precision {}, {} scaling, batch {} {}{}\n(projected, not measured)\n",
               cfg.model, any["num_params"].get<size_t>(), precision_name(cfg.precision),
               scaling_mode_name(cfg.scaling_mode), cfg.batch_size,
               cfg.scaling_mode == ScalingMode::weak ? "per GPU" : "global", traced_engine(cfg));
    // Two tables within 100 columns: samples/s by GPUs (one node, then the full node on N nodes),
    // then the figures at each profile's most GPUs.
    const std::string nodes_column = setup.nodes > 1 ? fmt::format(" {:>10}", fmt::format("{} nodes", setup.nodes)) : "";
    fmt::print("{:<24} {:>10} {:>10} {:>10} {:>10}{} {:>7}\n", "samples/s", "1 GPU", "2 GPUs", "4 GPUs", "8 GPUs",
               nodes_column, "eff.");
    for (const auto& r : rows) {
        auto cell = [&](int g) {
            const Projection* p = r.at(g);
            return p ? fmt::format("{:.1f}", p->samples_per_s) : std::string("-");
        };
        fmt::print("{:<24} {:>10} {:>10} {:>10} {:>10}{} {:>6.1f}%\n", r.hw.name, cell(1), cell(2), cell(4), cell(8),
                   r.on_nodes.empty() ? "" : fmt::format(" {:>10.1f}", r.top().samples_per_s), 100.0 * r.top().efficiency);
    }
    fmt::print("\n{:<24} {:>5} {:>10} {:>10} {:>10} {:>10} {:>6}\n", "at the most GPUs", "GPUs", "exp.comm ms",
               "per $10k", "per kW", "mem GiB", "fits");
    for (const auto& r : rows) {
        const Projection& top = r.top();
        fmt::print("{:<24} {:>5} {:>11.3f} {:>10.1f} {:>10.1f} {:>10.2f} {:>6}\n", r.hw.name, top.step.world_size,
                   top.step.exposed_comm_ms, r.per_10k(top), r.per_kw(top), top.record["memory_per_gpu_gb"].get<double>(),
                   r.fits() ? "yes" : "NO");
    }
    fmt::print("{}\n", wrapped((setup.nodes > 1 ? fmt::format("{} nodes: the full node on {} nodes (the network between "
                                                                  "them the profile's); ",
                                                                  setup.nodes, setup.nodes)
                                                    : std::string()) +
                                      "eff.: scaling efficiency at the most GPUs; per $10k: samples/s per 10,000 USD of "
                                      "GPUs (the profiles' reference prices, GPUs only); per kW: per kW of GPU TDP; mem "
                                      "GiB: per GPU",
                                  2));
    // The band each profile's ranges give its figures, at each GPU count and on N nodes.
    bool any_range = false;
    for (size_t i = 0; i < profiles.size(); ++i) {
        if (ranged_keys(profiles[i]).empty()) continue;
        if (!any_range) fmt::print("\nbands (every ranged number of the profile at its ends):\n");
        any_range = true;
        std::string cells;
        for (const std::vector<Projection>* projections : {&rows[i].by_gpus, &rows[i].on_nodes})
            for (const Projection& p : *projections)
                cells += fmt::format("{}{}: {:.1f} [{:.1f}-{:.1f}] ({:.1f}% [{:.1f}-{:.1f}])", cells.empty() ? "" : ", ",
                                     configuration_name(p), p.samples_per_s, p.bands.samples_per_s.lo,
                                     p.bands.samples_per_s.hi, 100 * p.efficiency, 100 * p.bands.efficiency.lo,
                                     100 * p.bands.efficiency.hi);
        fmt::print("{}\n    from:\n", wrapped("  " + profiles[i].name + " " + cells, 4));
        std::stringstream ranges(range_list(profiles[i]));
        for (std::string range; std::getline(ranges, range, ',');)
            fmt::print("      {}\n", range.substr(range.find_first_not_of(' ')));
    }

    fmt::print("\nverdicts for this workload:\n");
    for (size_t s = 0; s < central.size(); ++s) {
        const Verdict& v = central[s];
        const std::string said = v.winner ? v.winner->hw.name + ": " + v.reason : "none of the profiles: " + v.reason;
        fmt::print("{}\n", wrapped("  " + v.scenario + ": " + said, 4));
        for (const std::string& f : flips[s]) fmt::print("{}\n", wrapped("    flips inside the band: " + f, 6));
    }
    return 0;
}

}  // namespace sb
