// scalebench: the command line (DESIGN: Data flow step 1). Parses the subcommand and
// flags, loads and validates the config on every rank, and maps failures to exit codes:
// 0 ok, 2 bad input (printed once, by rank 0), 3 a correctness check failed,
// 1 an internal failure (the job is aborted so no rank waits forever).

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mpi.h>

#include "src/system/backend.h"
#include "src/commands/comm_command.h"
#include "src/core/config.h"
#include "src/core/files.h"
#include "src/core/flag_reading.h"
#include "src/system/environment.h"
#include "src/projection/op_profile.h"
#include "src/commands/project_command.h"
#include "base/errors.h"
#include "src/commands/report.h"
#include "src/core/results.h"
#include "src/commands/runner.h"
#include "src/commands/stress.h"
#include "src/core/workload.h"
#include "src/doctor/doctor_command.h"
#include "collectives/deadline.h"
#include "src/system/run_records.h"
#ifdef SCALEBENCH_HAVE_CUDA
#include "src/commands/gemm_bench.h"
#include "src/doctor/live_cuda.h"
#endif

namespace sb {
namespace {

struct TrainFlags {
    std::string config;
    std::string backend, precision, scaling_mode, out, grad_dtype, sharding;
    std::vector<int> scaling;
    std::optional<int> steps, warmup, batch_size;
    std::optional<double> bucket_mb;
    std::optional<bool> cuda_graphs;
    bool recheck_allreduce = false;
    bool share_gpu = false;
    std::string profile_ops;  // op_profile records go here when set
};

void add_train_options(CLI::App& sub, TrainFlags& f) {
    // A flag given twice takes its last value, as a later flag overrides an earlier one.
    sub.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    sub.add_option("--config,-c", f.config, "workload YAML (default: the built-in MLP workload)");
    sub.add_option("--backend", f.backend, "auto (CUDA when a GPU is visible), cpu or cuda")
        ->check(CLI::IsMember(names_of(backend_choices())));
    sub.add_option("--precision", f.precision, "fp32, tf32, bf16 or fp16")
        ->check(CLI::IsMember(names_of(precision_choices())));
    sub.add_option("--scaling", f.scaling, "world sizes to measure in this launch, e.g. 1,2,4")->delimiter(',');
    sub.add_option("--scaling-mode", f.scaling_mode, "weak (batch per rank fixed) or strong (global batch fixed)")
        ->check(CLI::IsMember(names_of(scaling_mode_choices())));
    sub.add_option("--steps", f.steps, "measured steps per world size");
    sub.add_option("--warmup", f.warmup, "warm-up steps per world size (not measured)");
    sub.add_option("--batch-size", f.batch_size, "batch per rank (weak) or global batch (strong)");
    sub.add_option("--bucket-mb", f.bucket_mb, "gradient bucket size in MiB, as DDP's bucket_cap_mb");
    sub.add_option("--grad-dtype", f.grad_dtype, "dtype of the gradient all-reduce: fp32, bf16 or fp16 (CUDA)")
        ->check(CLI::IsMember(names_of(grad_dtype_choices())));
    sub.add_option("--sharding", f.sharding,
                   "none (all-reduce), optimizer (ZeRO-1), gradients (ZeRO-2) or parameters (ZeRO-3): docs/sharding.md")
        ->check(CLI::IsMember(names_of(sharding_choices())));
    sub.add_option("--out,-o", f.out, "JSONL file the records are appended to");
    sub.add_option("--cuda-graphs", f.cuda_graphs, "true or false: replay each step as a CUDA graph (CUDA)");
    sub.add_flag("--share-gpu", f.share_gpu,
                 "let several ranks drive one GPU (each its own NCCL host identity): for rehearsing a launch and "
                 "testing; the figures are not hardware figures");
    sub.add_flag("--recheck-allreduce", f.recheck_allreduce,
                 "after the measured steps, all-reduce one gradient buffer twice and compare the bits (exit 3 if they differ)");
    sub.add_option("--profile-ops", f.profile_ops,
                   "after the sweep, time every op of the step on rank 0 (eagerly: CUDA graphs off) and append one "
                   "op_profile record per op kind and shape to this JSONL file (project --calibrate reads them)");
}


// Applies the flags given over the config; returns which keys they set, so an error in one
// of those values names the flag.
FlagKeys apply_flags(const TrainFlags& f, TrainConfig& cfg) {
    FlagKeys set;
    if (!f.backend.empty()) {
        cfg.backend = parse_backend_choice(f.backend);
        set["backend"] = "--backend";
    }
    if (!f.precision.empty()) {
        cfg.precision = parse_precision(f.precision);
        set["precision"] = "--precision";
    }
    if (!f.scaling.empty()) {
        cfg.scaling = f.scaling;
        set["scaling"] = "--scaling";
    }
    if (!f.scaling_mode.empty()) {
        cfg.scaling_mode = parse_scaling_mode(f.scaling_mode);
        set["scaling_mode"] = "--scaling-mode";
    }
    if (f.steps) {
        cfg.steps = *f.steps;
        set["steps"] = "--steps";
    }
    if (f.warmup) {
        cfg.warmup = *f.warmup;
        set["warmup"] = "--warmup";
    }
    if (f.batch_size) {
        cfg.batch_size = *f.batch_size;
        set["batch_size"] = "--batch-size";
    }
    if (f.bucket_mb) {
        cfg.bucket_mb = *f.bucket_mb;
        set["bucket_mb"] = "--bucket-mb";
    }
    if (!f.out.empty()) {
        cfg.out = f.out;
        set["out"] = "--out";
    }
    if (!f.grad_dtype.empty()) {
        cfg.grad_dtype = parse_grad_dtype(f.grad_dtype);
        set["grad_dtype"] = "--grad-dtype";
    }
    if (!f.sharding.empty()) {
        cfg.sharding = parse_sharding_mode(f.sharding);
        set["sharding"] = "--sharding";
    }
    if (f.cuda_graphs) {
        cfg.cuda_graphs = *f.cuda_graphs;
        set["cuda_graphs"] = "--cuda-graphs";
    }
    if (f.share_gpu) {
        cfg.share_gpu = true;
        set["share_gpu"] = "--share-gpu";
    }
    return set;
}


int run_train(const TrainFlags& flags, MPI_Comm world) {
    int rank = 0, size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(world, &rank));
    SB_CHECK_MPI(MPI_Comm_size(world, &size));
    TrainConfig cfg = load_config_everywhere(flags.config, world);
    std::string error;
    FlagKeys set_by_flags;
    try {
        set_by_flags = apply_flags(flags, cfg);
        validate_config(cfg, set_by_flags);
        validate_for_world(cfg, size, set_by_flags);
        if (rank == 0) error = results_file_problem(cfg.out, key_origin(cfg, set_by_flags, "out"));
        if (rank == 0 && error.empty() && !flags.profile_ops.empty())
            error = results_file_problem(flags.profile_ops, "--profile-ops");
        if (error.empty() && cfg.share_gpu && !flags.profile_ops.empty())
            error = fmt::format("--profile-ops with {}: an op profile times one rank's ops, which ranks sharing its GPU "
                                "would slow down", key_origin(cfg, set_by_flags, "share_gpu"));
        if (error.empty() && flags.recheck_allreduce &&
            (cfg.sharding == ShardingMode::gradients || cfg.sharding == ShardingMode::parameters))
            error = fmt::format("--recheck-allreduce: {} is {}, whose gradients land in reused slots, so no gradient "
                                "buffer stands after the step to reduce twice (sharding: optimizer keeps one)",
                                key_origin(cfg, set_by_flags, "sharding"), sharding_mode_name(cfg.sharding));
    } catch (const UserError& e) {
        error = e.what();
    }
    agree_on_errors(world, error);
    if (cfg.share_gpu) enable_shared_gpu(world);
    std::unique_ptr<Ops> ops = create_ops(cfg.backend, cfg.precision, world, key_origin(cfg, set_by_flags, "backend"),
                                          key_origin(cfg, set_by_flags, "precision"));
    agree_on_errors(world, test_hooks_problem(read_test_hooks(), size, ops->name()));  // a CUDA fault off CUDA
    check_grad_dtype_backend(cfg, *ops, key_origin(cfg, set_by_flags, "grad_dtype"));
    cfg = with_conv_engine_resolved(cfg, *ops);  // refuses cudnn where it cannot run, before any step
    check_memory_footprint({cfg}, *ops, world);
    // From here on the run is bracketed: a fault leaves an "incomplete" record.
    std::vector<std::string> outputs = {cfg.out};
    if (!flags.profile_ops.empty() && flags.profile_ops != cfg.out) outputs.push_back(flags.profile_ops);
    begin_run(outputs, "train", world);
    const nlohmann::json environment = run_environment(*ops, world);
    const bool passed = run_training_sweep(cfg, *ops, world, environment, SweepChecks{flags.recheck_allreduce});
    if (!flags.profile_ops.empty()) run_op_profile(cfg, *ops, world, environment, flags.profile_ops);
    flush_stdout();  // a table that could not be printed whole ends the run incomplete, not clean
    end_run(passed ? 0 : 3);
    return passed ? 0 : 3;
}

// CLI11's message on one line, with where to read the flags: "--steps: Value x could not be
// converted (scalebench train --help lists the flags)".
std::string one_line_parse_error(const CLI::App& app, const CLI::ParseError& e) {
    std::string text = e.what();
    for (char& c : text)
        if (c == '\n') c = ' ';
    while (!text.empty() && text.back() == ' ') text.pop_back();
    std::string command = "scalebench";
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
        if (sub->parsed()) command += " " + sub->get_name();
    return fmt::format("{} ({} --help lists the flags)", text, command);
}

// `train` is the default subcommand: `scalebench --steps 5` means `scalebench train --steps 5`.
// A first word that is not a flag names a subcommand: a misspelt one (`scalebench reprot x.jsonl`)
// is bad input, not train's stray argument, nor train's help.
std::vector<std::string> with_default_subcommand(int argc, char** argv, const CLI::App& app) {
    std::vector<std::string> args(argv + 1, argv + argc);
    const bool top_level_flag = !args.empty() && (args[0] == "-h" || args[0] == "--help" || args[0] == "--version");
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
        names.push_back(sub->get_name());
    const bool is_subcommand = !args.empty() && std::find(names.begin(), names.end(), args[0]) != names.end();
    if (!args.empty() && !is_subcommand && args[0].rfind('-', 0) != 0) {
        const std::string guess = closest(args[0], names);
        throw AgreedError(fmt::format("unknown subcommand '{}'; {}", args[0],
                                      guess.empty() ? fmt::format("subcommands: {}", fmt::join(names, ", "))
                                                    : fmt::format("did you mean '{}'?", guess)));
    }
    if (!is_subcommand && !top_level_flag) args.insert(args.begin(), "train");
    std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
    return args;
}

}  // namespace
}  // namespace sb

int main(int argc, char** argv) {
    if (argc == 2 && std::string(argv[1]) == sb::kRecordGuardArgument) return sb::run_record_guard();
#ifdef SCALEBENCH_HAVE_CUDA
    if (argc > 1 && std::string(argv[1]) == sb::doctor::kAllReduceProbeArgument)
        return sb::doctor::run_allreduce_probe(argc, argv);  // the doctor's NCCL probe: no MPI
#endif
    sb::enable_record_guard();
    sb::StartupDeadline startup;  // MPI_Init and the first collective, under the collective timeout
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int code = 0;
    try {
        sb::init_process_info(MPI_COMM_WORLD);
        // Every rank reads the collective timeout; a bad one is refused once (rank 0), as the
        // test hooks are. Once refused, the deadline keeps its default for the shutdown.
        std::string timeout_error;
        try {
            sb::collective_timeout_s();
        } catch (const sb::UserError& e) {
            timeout_error = e.what();
        }
        sb::init_fault_handling(MPI_COMM_WORLD);
        startup.passed();
        sb::agree_on_errors(MPI_COMM_WORLD, timeout_error);
        CLI::App app{"scalebench: how data-parallel training scales across GPUs (and CPU ranks)", "scalebench"};
        app.set_version_flag("--version", "scalebench 0.1.0");
        app.require_subcommand(1, 1);
        sb::TrainFlags train_flags;
        CLI::App* train = app.add_subcommand("train", "data-parallel training steps over a scaling sweep (default)");
        sb::add_train_options(*train, train_flags);
        sb::ReportOptions report_options;
        CLI::App* report = app.add_subcommand("report", "print the scaling table of JSONL result files");
        report->add_option("files", report_options.files, "JSONL files")->required()->check(CLI::ExistingFile);
        report->add_flag("--csv", report_options.csv, "CSV instead of Markdown");
        report->add_flag("--compare", report_options.compare,
                         "systems side by side: throughput, efficiency and busbw at each world size");
        sb::CommOptions comm_options;
        CLI::App* comm = app.add_subcommand("comm", "collective sweeps (all_reduce & co.) in the format of nccl-tests");
        sb::add_comm_options(*comm, comm_options);
        sb::StressOptions stress_options;
        CLI::App* stress = app.add_subcommand("stress", "training for a duration (72h soak): interval records, telemetry, replica checks");
        sb::add_stress_options(*stress, stress_options);
        sb::ProjectOptions project_options;
        CLI::App* project = app.add_subcommand("project", "projected scaling of a workload on a hardware profile (no GPU needed)");
        sb::add_project_options(*project, project_options);
        sb::ProjectOptions compare_options;
        CLI::App* compare = app.add_subcommand("compare", "the buyer's table: a workload projected on several hardware profiles");
        sb::add_compare_options(*compare, compare_options);
        sb::DoctorOptions doctor_options;
        CLI::App* doctor = app.add_subcommand("doctor", "is this rig what it should be: topology, configuration, "
                                                        "transfer, collective and training checks, each with its verdict");
        sb::add_doctor_options(*doctor, doctor_options);
#ifdef SCALEBENCH_HAVE_CUDA
        sb::GemmOptions gemm_options;
        CLI::App* gemm = app.add_subcommand("gemm", "cuBLASLt matrix-multiply throughput per GPU");
        sb::add_gemm_options(*gemm, gemm_options);
#endif
        sb::read_numeric_flags_with_one_parser(app);
        try {
            app.parse(sb::with_default_subcommand(argc, argv, app));
            sb::refuse_repeated_list_entries(app);
        } catch (const CLI::ParseError& e) {
            // Help and version are exit 0; a bad flag is bad input: exit 2, one line, printed once.
            if (rank == 0 && e.get_exit_code() == 0) app.exit(e);
            if (rank == 0 && e.get_exit_code() != 0) fmt::print(stderr, "scalebench: error: {}\n", sb::one_line_parse_error(app, e));
            sb::shutdown_fault_handling();
            return sb::finalize_with_deadline(e.get_exit_code() == 0 ? 0 : 2);
        }
        {
            // The test hooks are read before any work, and a bad one refused once (rank 0); for
            // a subcommand that trains, one that could never fire too: a rank not launched, a
            // CUDA fault in a build without CUDA (train and stress check the backend they chose).
            std::string hook_error;
            try {
                const sb::TestHooks hooks = sb::read_test_hooks();
#ifdef SCALEBENCH_HAVE_CUDA
                const std::string backend;
#else
                const std::string backend = "cpu";
#endif
                if (train->parsed() || stress->parsed()) hook_error = sb::test_hooks_problem(hooks, size, backend);
            } catch (const sb::UserError& e) {
                hook_error = e.what();
            }
            sb::agree_on_errors(MPI_COMM_WORLD, hook_error);
        }
        if (train->parsed()) {
            code = sb::run_train(train_flags, MPI_COMM_WORLD);
        } else if (stress->parsed()) {
            code = sb::run_stress(stress_options, MPI_COMM_WORLD);
        } else if (comm->parsed()) {
            code = sb::run_comm(comm_options, MPI_COMM_WORLD);
        } else if (project->parsed() || compare->parsed()) {
            // A model evaluated on the host: rank 0 alone; errors are bad input (exit 2).
            if (rank == 0) code = project->parsed() ? sb::run_project(project_options) : sb::run_compare(compare_options);
        } else if (doctor->parsed()) {
            code = sb::run_doctor(doctor_options, MPI_COMM_WORLD);
        } else if (report->parsed()) {
            if (rank == 0) code = sb::run_report(report_options);
        }
#ifdef SCALEBENCH_HAVE_CUDA
        else if (gemm->parsed()) {
            code = sb::run_gemm(gemm_options, MPI_COMM_WORLD);
        }
#endif
        // A table that could not be printed whole (report > /dev/full) is a failed write: exit 1.
        sb::flush_stdout();
    } catch (const sb::AgreedError& e) {
        if (rank == 0) fmt::print(stderr, "scalebench: error: {}\n", e.what());
        sb::record_incomplete(e.what());  // when the run had begun
        sb::shutdown_fault_handling();
        return sb::finalize_with_deadline(2);
    } catch (const sb::UserError& e) {
        const auto& p = sb::process_info();
        fmt::print(stderr, "scalebench: error on rank {} ({}): {}\n", p.world_rank, p.host, e.what());
        sb::record_incomplete(e.what());
        if (size > 1) MPI_Abort(MPI_COMM_WORLD, 2);
        sb::shutdown_fault_handling();
        return sb::finalize_with_deadline(2);
    } catch (const std::exception& e) {
        const auto& p = sb::process_info();
        fmt::print(stderr, "scalebench: internal error on rank {} ({}): {}\n", p.world_rank, p.host, e.what());
        sb::record_incomplete(e.what());
        if (size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
        sb::shutdown_fault_handling();
        return sb::finalize_with_deadline(1);
    }
    sb::shutdown_fault_handling();
    return sb::finalize_with_deadline(code);
}
