// `scalebench project` and `scalebench compare` (src/commands/project_command.h).
#include "src/commands/project_command.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>  // environ

#include <cerrno>
#include <cstring>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "src/commands/runner.h"
#include "base/errors.h"
#include "src/core/data_dir.h"
#include "src/core/files.h"
#include "src/core/flag_reading.h"
#include "src/core/plausible.h"
#include "src/core/results.h"
#include "src/projection/buyers_guide.h"
#include "src/projection/buyers_guide_output.h"
#include "src/projection/shipped_configs.h"
#include "src/projection/workload_projection.h"
#include "src/system/run_records.h"

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
    sub.add_option("--sharding", o.sharding,
                   "what-if: none (all-reduce), optimizer (ZeRO-1), gradients (ZeRO-2) or parameters (ZeRO-3) instead of the config's "
                   "(compare: also instead of a scenario's choice among modes): docs/sharding.md")
        ->check(CLI::IsMember(names_of(sharding_choices())));
    sub.add_option("--seq-len", o.seq_len, "what-if: the transformer workload's sequence length instead of the config's");
    sub.add_option("--conv-engine", o.conv_engine,
                   "what-if: the ResNet workload's convolution engine, auto, im2col or cudnn, instead of the config's");
    sub.add_option("--input", o.input,
                   "synthetic (default: the data on the device, as train runs) or real (an image workload capped at the "
                   "host's published loader rate, node.input_images_per_s)")
        ->check(CLI::IsMember({"synthetic", "real"}));
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
    check_ranged_count(hw);  // the bands' cost, refused before any projection
    return hw;
}

// `every_resnet`: compare's scenario workloads, of which --conv-engine sets the ResNets' (a
// transformer has no convolution to choose for); else a workload that is no ResNet refuses it.
TrainConfig load_workload(const ProjectOptions& o, bool every_resnet = false) {
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
    FlagKeys flags;  // a what-if's value that cannot run is named by its flag, as train names it
    if (!o.sharding.empty()) {
        cfg.sharding = parse_sharding_mode(o.sharding);
        flags["sharding"] = "--sharding";
    }
    if (o.seq_len != 0) {
        if (cfg.model != "transformer")
            throw UserError(fmt::format("--seq-len {}: the workload is a {} model, not a transformer", o.seq_len, cfg.model));
        if (o.seq_len < 1) throw UserError(fmt::format("--seq-len {}: must be >= 1", o.seq_len));
        cfg.transformer.shape.seq_len = o.seq_len;
    }
    if (!o.conv_engine.empty() && (cfg.model == "resnet" || !every_resnet)) {
        if (cfg.model != "resnet")
            throw UserError(fmt::format("--conv-engine {}: the workload is a {} model, not a ResNet", o.conv_engine, cfg.model));
        if (o.conv_engine == "auto") cfg.conv_engine.reset();
        else if (o.conv_engine == "im2col") cfg.conv_engine = ConvEngine::im2col;
        else if (o.conv_engine == "cudnn") cfg.conv_engine = ConvEngine::cudnn;
        else throw UserError(fmt::format("--conv-engine {}: auto, im2col or cudnn", o.conv_engine));
    }
    try {
        validate_config(cfg, flags);
    } catch (const UserError& e) {
        throw UserError(fmt::format("{} (after the what-if flags)", e.what()));
    }
    return cfg;
}

// A projected record as this run appends it: with its time and the run's id, as train's records.
nlohmann::json stamped(nlohmann::json record, const std::string& run_id) {
    record["timestamp"] = utc_timestamp();
    record["run_id"] = run_id;
    return record;
}

std::string profile_list() {
    std::string out;
    for (const std::string& name : shipped_profile_names()) out += (out.empty() ? "" : ", ") + name;
    return out.empty() ? "(none found: give --profile-dir)" : out;
}

// The --calibrate files are inputs: no output of the run may be one (src/core/files.h); a file
// named twice, in any spelling, would count its records twice.
void note_calibration_inputs(const ProjectOptions& o) {
    if (const std::string repeated = repeated_file(o.calibrate); !repeated.empty())
        throw UserError("--calibrate: " + repeated);
    for (const std::string& path : o.calibrate) note_input(path, "--calibrate file");
}

}  // namespace

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

namespace {

// project --comm: nccl-tests' all_reduce_perf table (out-of-place columns), one block per GPU count.
int print_comm_table(const ProjectOptions& o, const HardwareProfile& hw, const CostModel& model) {
    std::vector<int> asked = o.gpus;
    if (asked.empty())  // 2, 4, 8 up to the node: one GPU has no bus bandwidth
        for (int g : {2, 4, 8})
            if (g <= hw.gpus_per_node.value) asked.push_back(g);
    const std::vector<int> nodes = node_counts(o);
    for (int N : nodes)
        if (N > 1 && !hw.has_network())
            throw UserError(fmt::format("--nodes {}: {} describes no network between nodes", N, hw.source));
    const std::vector<CommRow> rows = comm_table(model, projected_gpu_counts(asked, hw), nodes);
    fmt::print("# scalebench project --comm: projected all_reduce_perf on {} ({}), not measured\n", printable(hw.name),
               printable(hw.device_name));
    fmt::print("# busbw band: every ranged number of the profile at its ends ({})\n", range_list(hw));
    if (const std::string note = busbw_provenance(hw); !note.empty()) fmt::print("# {}\n", printable(note));
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

// Where the speed-up's band overlaps the previous GPU count's: the band is wider than the gain it
// would decide, and the table says so.
std::string undecided_gain(const Projection& before, const Projection& p) {
    if (p.bands.speedup.lo > before.bands.speedup.hi) return "";
    return fmt::format("  band wider than the gain over {} GPUs", before.step.world_size);
}

// What feeds the step: the device's synthetic data, or the host's loader and its ceiling.
std::string input_line(const CostModel& model, const TrainConfig& cfg) {
    if (!model.real_input) return "synthetic (the data on the device, as train runs it; no loader ceiling)";
    if (const double ceiling = model.input_ceiling(cfg); ceiling > 0)
        return fmt::format("real: at most {:g} samples/s per node, the host's loader ({})", ceiling,
                           printable(model.hw.input_images_per_s.source));
    return cfg.model == "resnet" ? "real: no loader rate published for this host; the figures are the synthetic ones"
                                 : "real: a tokenized-text workload, no loader ceiling modelled; the figures are the synthetic ones";
}

// The footprint per GPU against the GPU's memory: once, or (sharded: a rank's share shrinks as ranks
// join) per GPU count; and what a sharded step's collectives move and take.
void print_memory_and_sharding(const std::vector<Projection>& rows, const TrainConfig& cfg, const HardwareProfile& hw) {
    auto verdict = [](const Projection& p) {
        return p.fits_memory() ? "fits" : "DOES NOT FIT: the figures below are what the step would take if it did";
    };
    if (cfg.sharding == ShardingMode::none) {
        fmt::print("memory: {}: {}\n", footprint_line(rows.front(), hw), verdict(rows.front()));
        return;
    }
    fmt::print("sharding: {} (docs/sharding.md): the gradients reduce-scattered and the parameters all-gathered per "
               "bucket{}, in place of the all-reduce; busbw below is both collectives' together\n",
               sharding_mode_name(cfg.sharding),
               cfg.sharding == ShardingMode::parameters ? " as the forward and again as the backward reads it" : "");
    for (const Projection& p : rows) {
        const nlohmann::json& sh = p.record["sharding"];
        fmt::print("  {}: memory {}: {}\n", configuration_name(p), footprint_line(p, hw), verdict(p));
        fmt::print("  {}: reduce-scatter {:.1f} MB in {:.2f} ms, all-gather {:.1f} MB in {:.2f} ms per step "
                   "(nccl-tests' size; {} elements per rank)\n",
                   configuration_name(p), sh["reduce_scatter"]["bytes"].get<double>() / 1e6, p.step.reduce_scatter_ms,
                   sh["all_gather"]["bytes"].get<double>() / 1e6, p.step.all_gather_ms, sh["shard_elements"].get<size_t>());
    }
}

}  // namespace

int run_project(const ProjectOptions& o) {
    const HardwareProfile hw = load_profile(o, o.hardware);
    if (o.comm) return print_comm_table(o, hw, CostModel(hw, calibrate(hw, o.calibrate)));
    TrainConfig cfg = load_workload(o);
    const std::vector<int> gpus = projected_gpu_counts(o.gpus, hw);
    const std::vector<int> nodes = node_counts(o);
    // 'max': the largest batch the fewest ranks projected hold (sharded, a rank's share shrinks as ranks join).
    apply_batch_option(o.batch, cfg, hw, *std::min_element(gpus.begin(), gpus.end()) * *std::min_element(nodes.begin(), nodes.end()));
    note_calibration_inputs(o);
    if (const std::string problem = results_file_problem(o.out, "--out"); !problem.empty()) throw UserError(problem);
    const CostModel model(hw, calibrate(hw, o.calibrate), o.input == "real");
    const std::string run_id = new_run_id();
    std::vector<Projection> rows = project_workload(cfg, model, gpus, nodes);
    widen_to_ranges(rows, cfg, hw, model.calibration, gpus, nodes, model.real_input);
    // Every record as one append, all or none, before a line is printed: a disk that fills now
    // leaves the file as it was and no table half printed.
    std::vector<nlohmann::json> records;
    for (const Projection& p : rows) records.push_back(stamped(p.record, run_id));
    append_records(o.out, records);
    fmt::print("scalebench project: {} model, {} parameters on {} ({}), precision {}, {} scaling, batch {} {}{}\n",
               cfg.model, rows.front().record["num_params"].get<size_t>(), printable(hw.name), printable(hw.device_name),
               precision_name(cfg.precision), scaling_mode_name(cfg.scaling_mode), cfg.batch_size,
               cfg.scaling_mode == ScalingMode::weak ? "per rank" : "global", traced_engine(cfg));
    fmt::print("host: {}{}, host memory {:g} GB/s, PCIe {}\n", hw.host.empty() ? "the profile's" : printable(hw.host),
               o.host.empty() ? "" : " (--host)", hw.host_mem_bw_gbps.value, printable(hw.pcie_topology));
    for (const auto& n : model.calibration.notes) fmt::print("calibration: {}\n", printable(n));
    if (model.calibration.notes.empty()) fmt::print("calibration: none; every figure from {}\n", printable(hw.source));
    fmt::print("input: {}\n", input_line(model, cfg));
    const bool fits = std::all_of(rows.begin(), rows.end(), [](const Projection& p) { return p.fits_memory(); });
    print_memory_and_sharding(rows, cfg, hw);
    print_scaling_table_columns();
    for (const Projection& p : rows) {
        ScalingRow row;
        row.world_size = p.step.world_size;
        row.samples_per_s = p.samples_per_s;
        row.per_rank = p.samples_per_s / p.step.world_size;
        row.efficiency = p.efficiency;
        row.busbw = p.busbw;
        row.step = point_summary(p.step.step_ms);
        row.compute = point_summary(p.step.compute_ms);
        row.exposed = point_summary(p.step.exposed_comm_ms);
        row.optimizer = point_summary(p.step.optimizer_ms);
        print_scaling_table_row(row);
    }
    fmt::print("bands over the profile's ranges ({}):\n", range_list(hw));
    fmt::print("  {:>5} {:>26} {:>20} {:>20} {:>22} {:>22}\n", "GPUs", "samples/s", "efficiency %", "speed-up",
               "busbw GB/s", "exposed comm ms");  // busbw: the all-reduce's, or sharded both collectives' together
    for (size_t i = 0; i < rows.size(); ++i) {
        const Projection& p = rows[i];
        const FigureBands& b = p.bands;
        auto cell = [](double v, const Band& band, double scale, int digits) {
            return fmt::format("{:.{}f} [{:.{}f}-{:.{}f}]", v * scale, digits, band.lo * scale, digits, band.hi * scale, digits);
        };
        fmt::print("  {:>5} {:>26} {:>20} {:>20} {:>22} {:>22}{}{}\n", p.step.world_size, cell(p.samples_per_s, b.samples_per_s, 1, 1),
                   cell(p.efficiency, b.efficiency, 100, 1), cell(p.speedup, b.speedup, 1, 2), cell(p.busbw, b.busbw, 1, 1),
                   cell(p.step.exposed_comm_ms, b.exposed_comm_ms, 1, 2), p.fits_memory() ? "" : " (does not fit)",
                   i > 0 ? undecided_gain(rows[i - 1], p) : "");
    }
    fmt::print("the samples/s band holds the compute model's error on this GPU (gpu.compute_error_pct {:g}% [{:g}-{:g}]); "
               "the speed-up band every range's, the framework's cost per step included\n",
               hw.compute_error_pct.value, hw.compute_error_pct.lo, hw.compute_error_pct.hi);
    fmt::print("projected (not measured){}; {} record(s) appended to {}\n", fits ? "" : ", DOES NOT FIT THE GPU",
               rows.size(), printable(o.out));
    return 0;
}

namespace {

// compare --out: every projected record of the rows (with its band and the profile's ranges).
void add_records(std::vector<nlohmann::json>& records, const std::vector<CompareRow>& rows, const std::string& run_id) {
    for (const CompareRow& r : rows)
        for (const std::vector<Projection>* projections : {&r.by_gpus, &r.on_nodes})
            for (const Projection& p : *projections) records.push_back(stamped(p.record, run_id));
}

// Every record of the run as one append, all or none, before anything is printed.
void append_compare_records(const std::string& out, const std::vector<nlohmann::json>& records) {
    if (!out.empty()) append_records(out, records);
}

std::vector<std::string> profile_names(const ProjectOptions& o) {
    std::vector<std::string> names;
    std::stringstream list(o.hardware);
    for (std::string item; std::getline(list, item, ',');)
        if (!item.empty()) names.push_back(item);
    if (names == std::vector<std::string>{"all"}) {
        names = yaml_names_in(o.profile_dir.empty() ? shipped_config_dir("hardware") : o.profile_dir);
        if (names.empty()) throw UserError("--hardware all: no profiles found (give --profile-dir)");
    }
    if (names.empty()) throw UserError("--hardware: name at least one profile");
    return names;
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

// compare --report FILE.md: the guide's data goes to FILE.json beside it.
std::string report_json_path(const std::string& report) {
    return std::filesystem::path(report).replace_extension(".json").string();
}

// compare --report: its files (FILE.md, FILE.json, and the folder FILE-plots/) may be written,
// checked before any work as --out is: a Markdown name in an existing folder, no special file, no
// input of this run.
void check_report_paths(const ProjectOptions& o) {
    if (std::filesystem::path(o.report).extension() != ".md")
        throw UserError(fmt::format("--report {}: a Markdown file name ending in .md", printable(o.report)));
    const std::filesystem::path dir = std::filesystem::path(o.report).parent_path();
    if (!dir.empty() && !std::filesystem::is_directory(dir))
        throw UserError(fmt::format("--report {}: no directory {}", printable(o.report), printable(dir.string())));
    const std::filesystem::path plots = std::filesystem::path(o.report).replace_extension("").string() + "-plots";
    if (std::error_code ec; std::filesystem::exists(plots, ec) && !std::filesystem::is_directory(plots, ec))
        throw UserError(fmt::format("--report {}: {}, where its plots go, is not a folder", printable(o.report),
                                    printable(plots.string())));
    for (const std::string& path : {o.report, report_json_path(o.report)})
        if (const std::string problem = output_path_problem(path, "--report", OutputKind::whole_file); !problem.empty())
            throw UserError(problem);
}

// compare --report: the guide's JSON beside the Markdown, rendered with its plots by the shipped
// results/compare_report.py.
void write_report(const std::string& report, const nlohmann::json& guide) {
    const std::string json_path = report_json_path(report);
    write_whole_file(json_path, json_text(guide, 2) + "\n");
    const std::string script = shipped_path("results/compare_report.py");
    const std::vector<std::string> argv = {"/usr/bin/python3", script, json_path, report};
    if (const std::string failed = run_child(argv); !failed.empty())
        throw UserError(fmt::format("--report {}: rendering failed ({}); the data is in {}; run: {}", report, failed,
                                    json_path, fmt::join(argv, " ")));
}

}  // namespace

int run_compare(const ProjectOptions& o) {
    const std::vector<std::string> names = profile_names(o);
    CompareSetup setup;
    setup.gpus = o.gpus;
    setup.nodes = compare_node_count(o);  // a bad --nodes refused before any work
    setup.real_input = o.input == "real";
    if (!o.scenarios.empty() && !o.config.empty())
        throw UserError("--scenario: judges the scenario presets' own workloads; give it or --config, not both");
    note_calibration_inputs(o);
    if (!o.out.empty())
        if (const std::string problem = results_file_problem(o.out, "--out"); !problem.empty()) throw UserError(problem);
    // The command line checked these (src/core/flag_reading.cpp); options built in code are
    // held to the same table.
    for (const auto& [flag, value] : {std::pair{"--years", o.years}, std::pair{"--usd-per-kwh", o.usd_per_kwh}})
        if (const std::string p = out_of_range(value, real_flag_range("compare", flag)); !p.empty())
            throw UserError(fmt::format("{}: {}", flag, p));
    if (!o.report.empty()) {
        if (!o.config.empty()) throw UserError("--report: writes the whole buyer's table; give it without --config");
        if (o.json) throw UserError("--report: give it or --json, not both");
        check_report_paths(o);
    }
    std::vector<HardwareProfile> profiles;
    std::vector<Calibration> calibrations;
    for (const auto& name : names) {
        profiles.push_back(load_profile(o, name));
        calibrations.push_back(calibrate(profiles.back(), o.calibrate));
        projected_gpu_counts(o.gpus, profiles.back());  // a bad --gpus refused before any work
    }
    // Two files with one `name:` would stand as two columns no reader could tell apart.
    std::vector<std::string> profile_names_read;
    for (const HardwareProfile& hw : profiles) profile_names_read.push_back(hw.name);
    if (const std::string repeated = repeated_entry(profile_names_read); !repeated.empty())
        throw UserError(fmt::format("--hardware: the profile name {}", repeated));
    const CostTerms terms{o.years, o.usd_per_kwh};
    if (!o.config.empty()) {
        TrainConfig cfg = load_workload(o);
        if (o.batch == "max")
            throw UserError("--batch-size max: compare takes a number (the largest batch differs per GPU; use project)");
        apply_batch_option(o.batch, cfg, profiles.front());
        const WorkloadComparison c = compare_workload(cfg, profiles, calibrations, terms, setup);
        std::vector<nlohmann::json> records;
        add_records(records, c.rows, new_run_id());
        append_compare_records(o.out, records);
        if (o.json) fmt::print("{}\n", json_text(to_json(c), 2));
        else print_workload_comparison(c);
        return 0;
    }
    if (!o.batch.empty()) throw UserError("--batch-size: give it with --config (the scenario presets set their own batches)");
    const std::string configs = shipped_config_dir("").empty() ? "configs" : shipped_config_dir("");
    // The soaks and card tests of each profile's GPU among the shipped records (src/core/data_dir.h).
    const std::string results_dir = shipped_path("results");
    std::vector<Scenario> scenarios = resolve_scenarios(o.scenarios, configs);
    if (!o.conv_engine.empty()) {  // the what-if applies to the ResNet workloads: refused only where there is none
        bool any_resnet = false;
        for (const Scenario& sc : scenarios)
            for (const std::string& path : sc.workloads) any_resnet = any_resnet || load_config_file(path).model == "resnet";
        if (!any_resnet)
            throw UserError(fmt::format("--conv-engine {}: none of the scenarios' workloads is a ResNet", o.conv_engine));
    }
    if (!o.sharding.empty())  // the what-if fixes every workload's mode: no scenario chooses among modes
        for (Scenario& sc : scenarios) sc.sharding.clear();
    const ScenarioGuide guide = judge_scenarios(profiles, calibrations, scenarios, terms, setup,
                                                configs, results_dir, [&](const std::string& path) {
                                                    ProjectOptions one = o;
                                                    one.config = path;
                                                    return load_workload(one, true);
                                                });
    const std::string run_id = new_run_id();
    std::vector<nlohmann::json> records;
    for (const JudgedWorkload& w : guide.workloads) add_records(records, w.rows, run_id);
    append_compare_records(o.out, records);
    if (o.json) {
        fmt::print("{}\n", json_text(to_json(guide), 2));
        return 0;
    }
    if (!o.report.empty()) write_report(o.report, to_json(guide));
    print_scenario_guide(guide);
    return 0;
}

}  // namespace sb
