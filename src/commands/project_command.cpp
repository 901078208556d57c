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

#include "src/commands/runner.h"
#include "src/core/errors.h"
#include "src/core/files.h"
#include "src/core/plausible.h"
#include "src/core/results.h"
#include "src/projection/buyers_guide.h"
#include "src/projection/shipped_configs.h"
#include "src/projection/workload_projection.h"

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

std::string profile_list() {
    std::string out;
    for (const std::string& name : shipped_profile_names()) out += (out.empty() ? "" : ", ") + name;
    return out.empty() ? "(none found: give --profile-dir)" : out;
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
    ProjectOptions asked = o;
    if (o.gpus.empty())  // 2, 4, 8 up to the node: one GPU has no bus bandwidth
        for (int g : {2, 4, 8})
            if (g <= hw.gpus_per_node.value) asked.gpus.push_back(g);
    const std::vector<int> nodes = node_counts(o);
    for (int N : nodes)
        if (N > 1 && !hw.has_network())
            throw UserError(fmt::format("--nodes {}: {} describes no network between nodes", N, hw.source));
    const std::vector<CommRow> rows = comm_table(model, projected_gpu_counts(asked.gpus, hw), nodes);
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
    const std::vector<int> gpus = projected_gpu_counts(o.gpus, hw);
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
        row.step = point_summary(p.step.step_ms);
        row.compute = point_summary(p.step.compute_ms);
        row.exposed = point_summary(p.step.exposed_comm_ms);
        row.optimizer = point_summary(p.step.optimizer_ms);
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

// compare --out: every projected record of the rows (with its band and the profile's ranges).
void append_records(const std::string& out, const std::vector<CompareRow>& rows) {
    if (out.empty()) return;
    for (const CompareRow& r : rows)
        for (const std::vector<Projection>* projections : {&r.by_gpus, &r.on_nodes})
            for (const Projection& p : *projections) append_record(out, p.record);
}

// The latest record under `dir` (recursively, *.jsonl, measured only) that `matches`, with its file.
}  // namespace

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
            projected_gpu_counts(o.gpus, profiles.back());  // a bad --gpus refused before any work
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
