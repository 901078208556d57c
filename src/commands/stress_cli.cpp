// `scalebench stress`'s command line (see stress.h): durations, the planted bit flip, the
// flags, the plan checked against the launched world before any work, and the command's entry.
#include "src/commands/stress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "src/commands/stragglers.h"
#include "src/system/backend.h"
#include "src/system/environment.h"
#include "src/system/run_records.h"
#include "base/errors.h"
#include "base/numbers.h"
#include "src/core/files.h"
#include "src/core/flag_reading.h"
#include "src/core/results.h"
#include "src/commands/runner.h"
#include "src/core/stats.h"
#include "src/core/workload.h"

namespace sb {

// ---- durations

// Each number of a unit, and the whole, in the flag's entry of the flag table (seconds; a
// number of a unit may be 0, as in 1h0m, and no more than the whole may be).
double parse_duration(const std::string& text, const std::string& flag) {
    auto bad = [&](const std::string& why) {
        return UserError(fmt::format("{} '{}': {} (e.g. 90s, 15m, 2h, 72h, 1h30m; a bare number is seconds)", flag,
                                     text, why));
    };
    const RealRange whole = real_entry("stress " + flag);
    const RealRange each{whole.lo, false, whole.hi, whole.hi_open, whole.why};
    if (text.empty()) throw bad("empty duration");
    static const std::string kUnits = "dhms";  // largest first; each at most once, in this order
    static const double kSeconds[] = {86400, 3600, 60, 1};
    double total = 0;
    size_t pos = 0;
    int last_unit = -1;
    while (pos < text.size()) {
        size_t end = pos;
        while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) ++end;
        if (end == pos) throw bad(fmt::format("expected a number at '{}'", text.substr(pos)));
        const std::string number = text.substr(pos, end - pos);
        double value = 0;
        if (const std::string problem = parse_real(number, each, value); !problem.empty())
            throw UserError(fmt::format("{} '{}': {}", flag, text, problem));
        if (end == text.size()) {
            if (last_unit >= 0) throw bad(fmt::format("'{}' has no unit", number));
            total = value;  // a bare number: seconds
            pos = end;
            break;
        }
        const size_t unit = kUnits.find(text[end]);
        if (unit == std::string::npos) throw bad(fmt::format("unknown unit '{}' (use d, h, m or s)", text[end]));
        if (static_cast<int>(unit) <= last_unit) throw bad("units must be given once each, largest first");
        last_unit = static_cast<int>(unit);
        total += value * kSeconds[unit];
        pos = end + 1;
    }
    if (const std::string problem = real_range_problem(total, number_text(total), whole); !problem.empty())
        throw UserError(fmt::format("{} '{}': {}", flag, text, problem));
    return total;
}

std::string format_duration(double seconds) {
    if (seconds < 60) return fmt::format("{:.1f}s", seconds);
    const long long s = std::llround(seconds);
    if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
    return fmt::format("{}h{:02}m{:02}s", s / 3600, (s / 60) % 60, s % 60);
}

// RANK and STEP each in its entry of the flag table.
PlantedFlip parse_planted_flip(const std::string& text) {
    const size_t at = text.find('@');
    if (at == std::string::npos)
        throw UserError(fmt::format("--plant-bit-flip '{}': expected RANK@STEP, e.g. 1@250", text));
    int64_t rank = 0;
    PlantedFlip f;
    std::string problem = parse_part("stress --plant-bit-flip RANK", text.substr(0, at), rank);
    if (problem.empty()) problem = parse_part("stress --plant-bit-flip STEP", text.substr(at + 1), f.step);
    if (!problem.empty())
        throw UserError(fmt::format("--plant-bit-flip '{}': {}", text, problem));
    f.rank = static_cast<int>(rank);
    return f;
}

void check_planted_flip(const PlantedFlip& flip, const std::string& text, int world_size, double duration_s) {
    if (flip.rank >= world_size)
        throw UserError(fmt::format("--plant-bit-flip '{}': rank {} but {} ranks launched", text, flip.rank, world_size));
    // A step past duration x 10^6 is one the soak cannot reach (kMostStepsPerSecond).
    const double reachable = std::floor(duration_s * kMostStepsPerSecond);
    if (static_cast<double>(flip.step) > reachable)
        throw UserError(fmt::format("--plant-bit-flip '{}': step {} lies past the {:.0f} steps a --duration of {} can "
                                    "run (at most {:.0f} steps a second), so the flip would never be planted",
                                    text, flip.step, reachable, format_duration(duration_s), kMostStepsPerSecond));
}

// ---- command line

void add_stress_options(CLI::App& sub, StressOptions& o) {
    // A flag given twice takes its last value, as in `train`; --config collects them all.
    sub.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    sub.add_option("--config,-c", o.configs,
                   "workload YAML; several (A.yaml,B.yaml or the flag repeated) alternate interval by interval")
        ->delimiter(',')
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    sub.add_option("--duration", o.duration, "how long to train: 90s, 15m, 2h, 72h, 1h30m (a bare number is seconds)")
        ->required();
    sub.add_option("--interval", o.interval, "how often to summarise and append a record (default 10m)");
    sub.add_option("--sdc-check-every", o.sdc_check_every,
                   "compare the ranks' parameter checksums every K steps (0: off; default: the first "
                   "workload's sdc_check_every, 100)");
    sub.add_option("--backend", o.backend, "auto (CUDA when a GPU is visible), cpu or cuda")
        ->check(CLI::IsMember(names_of(backend_choices())));
    sub.add_option("--precision", o.precision, "fp32, tf32, bf16 or fp16 (every workload)")
        ->check(CLI::IsMember(names_of(precision_choices())));
    sub.add_option("--batch-size", o.batch_size, "batch per rank (weak) or global batch (strong), every workload");
    sub.add_option("--out,-o", o.out, "JSONL file the interval records are appended to");
    sub.add_option("--plant-bit-flip", o.plant_bit_flip,
                   "RANK@STEP: flip one parameter bit on RANK after global step STEP, to see the replica check "
                   "catch it (exit 3)");
    sub.add_flag("--share-gpu", o.share_gpu,
                 "let several ranks drive one GPU (each its own NCCL host identity): for rehearsal and tests; the "
                 "figures are not hardware figures");
}

namespace {

// Each file read by rank 0 and broadcast (load_config_everywhere); none = the built-in default.
std::vector<TrainConfig> load_configs_everywhere(const std::vector<std::string>& paths, MPI_Comm world) {
    std::vector<TrainConfig> out;
    if (paths.empty()) out.emplace_back();
    for (const std::string& path : paths) out.push_back(load_config_everywhere(path, world));
    return out;
}

StressPlan plan_stress(const StressOptions& o, std::vector<TrainConfig> workloads, int world_size) {
    StressPlan plan;
    plan.duration_s = parse_duration(o.duration, "--duration");
    plan.interval_s = parse_duration(o.interval, "--interval");
    // Workloads alternate interval by interval: each needs an interval of its own.
    const double intervals = std::ceil(plan.duration_s / plan.interval_s);
    if (static_cast<double>(workloads.size()) > intervals)
        throw UserError(fmt::format("--duration {} in intervals of {} (--interval) gives {} interval{}, fewer than the {} "
                                    "workloads of --config, which alternate interval by interval: give a longer "
                                    "--duration or a shorter --interval",
                                    o.duration, o.interval, intervals, intervals == 1 ? "" : "s", workloads.size()));
    if (o.sdc_check_every && *o.sdc_check_every < 0)
        throw UserError(fmt::format("--sdc-check-every {}: must be >= 0", *o.sdc_check_every));
    // One period for the whole run (steps are counted across the alternating workloads).
    plan.sdc_check_every = o.sdc_check_every ? *o.sdc_check_every : workloads.front().sdc_check_every;
    plan.out = o.out;
    if (!o.plant_bit_flip.empty()) {
        plan.planted_flip = parse_planted_flip(o.plant_bit_flip);
        check_planted_flip(*plan.planted_flip, o.plant_bit_flip, world_size, plan.duration_s);
    }
    FlagKeys flags;
    if (!o.backend.empty()) flags["backend"] = "--backend";
    if (!o.precision.empty()) flags["precision"] = "--precision";
    if (o.batch_size) flags["batch_size"] = "--batch-size";
    for (TrainConfig& cfg : workloads) {
        if (!o.backend.empty()) cfg.backend = parse_backend_choice(o.backend);
        if (!o.precision.empty()) cfg.precision = parse_precision(o.precision);
        if (o.batch_size) cfg.batch_size = *o.batch_size;
        cfg.scaling = {world_size};  // a soak trains on every launched rank
        cfg.out = o.out;
        validate_config(cfg, flags);
        validate_for_world(cfg, world_size, flags);
        if (cfg.sharding == ShardingMode::parameters)
            throw UserError(fmt::format("{}: sharding parameters: stress checks that every rank holds the same "
                                        "replica, and with its parameters sharded no rank holds one",
                                        key_origin(cfg, flags, "sharding")));
        // One stress run builds one backend: `auto` goes with either choice (run_stress checks
        // it resolved to the one built), an explicit cpu and cuda do not mix.
        const TrainConfig& first = workloads.front();
        const bool backends_differ = cfg.backend != first.backend && cfg.backend != BackendChoice::auto_select &&
                                     first.backend != BackendChoice::auto_select;
        if (backends_differ || cfg.precision != first.precision)
            throw UserError(fmt::format("{}: backend {} / precision {} differ from {}'s {} / {}: one stress run builds "
                                        "one backend (give --backend and --precision)",
                                        cfg.source, backend_choice_name(cfg.backend), precision_name(cfg.precision),
                                        first.source, backend_choice_name(first.backend),
                                        precision_name(first.precision)));
    }
    plan.workloads = std::move(workloads);
    return plan;
}


}  // namespace

int run_stress(const StressOptions& opts, MPI_Comm world) {
    int rank = 0, size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(world, &rank));
    SB_CHECK_MPI(MPI_Comm_size(world, &size));
    // One workload file named twice (another spelling, a link) would alternate with itself: refused
    // as the flag table refuses a repeated entry, by the file's identity, before any file is read.
    std::string repeated = rank == 0 ? repeated_file(opts.configs) : "";
    agree_on_errors(world, repeated.empty() ? "" : "--config: " + repeated);
    std::vector<TrainConfig> workloads = load_configs_everywhere(opts.configs, world);
    StressPlan plan;
    std::string error;
    try {
        plan = plan_stress(opts, std::move(workloads), size);
        if (rank == 0) error = results_file_problem(plan.out, "--out");
    } catch (const UserError& e) {
        error = e.what();
    }
    agree_on_errors(world, error);
    // The backend the workloads name (auto when none names one), built once for all of them.
    BackendChoice backend = BackendChoice::auto_select;
    for (const TrainConfig& cfg : plan.workloads)
        if (cfg.backend != BackendChoice::auto_select) backend = cfg.backend;
    const TrainConfig& first = plan.workloads.front();
    bool share_gpu = opts.share_gpu;
    for (const TrainConfig& cfg : plan.workloads) share_gpu = share_gpu || cfg.share_gpu;
    if (share_gpu) enable_shared_gpu(world);
    std::unique_ptr<Ops> ops = create_ops(backend, first.precision, world,
                                          opts.backend.empty() ? first.source + ": key 'backend'" : "--backend",
                                          opts.precision.empty() ? first.source + ": key 'precision'" : "--precision");
    agree_on_errors(world, test_hooks_problem(read_test_hooks(), size, ops->name()));  // a CUDA fault off CUDA
    for (TrainConfig& cfg : plan.workloads) {
        check_grad_dtype_backend(cfg, *ops, key_origin(cfg, {}, "grad_dtype"));
        cfg = with_conv_engine_resolved(cfg, *ops);
    }
    check_memory_footprint(plan.workloads, *ops, world);
    begin_run({plan.out}, "stress", world);
    const int code = run_stress_plan(plan, *ops, world, run_environment(*ops, world));
    end_run(code);
    return code;
}

}  // namespace sb
