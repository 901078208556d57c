// `scalebench comm` (see comm_command.h): the flags, the plan checked before any work, and
// the run over the scaling sub-worlds that prints nccl-tests' blocks and writes records.
#include "src/commands/comm_command.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "src/core/flag_reading.h"
#include "collectives/mpi_communicator.h"
#include "src/system/backend.h"
#include "src/system/environment.h"
#include "src/system/run_records.h"
#include "base/errors.h"
#include "src/core/files.h"
#include "src/core/results.h"

namespace sb {

void add_comm_options(CLI::App& sub, CommOptions& o) {
    // A flag given twice takes its last value, as in `scalebench train`.
    sub.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    sub.add_option("--op", o.op,
                   "all_reduce, reduce_scatter, all_gather, broadcast, reduce, alltoall, sendrecv or all")
        ->capture_default_str();
    sub.add_option("-b,--minbytes", o.min_bytes, "smallest size in bytes; K, M, G suffixes are powers of 1024")
        ->capture_default_str();
    sub.add_option("-e,--maxbytes", o.max_bytes, "largest size in bytes")->capture_default_str();
    sub.add_option("-i,--stepbytes", o.step_bytes, "fixed increment between sizes (default 1M)");
    sub.add_option("-f,--stepfactor", o.step_factor, "multiplication factor between sizes (instead of -i)");
    sub.add_option("-n,--iters", o.iters, "launches timed as one interval per size")->capture_default_str();
    sub.add_option("-w,--warmup_iters", o.warmup_iters, "untimed launches per warm-up size")->capture_default_str();
    sub.add_option("-c,--check", o.check, "checked runs per measurement (0: no check)")->capture_default_str();
    sub.add_option("-d,--datatype", o.datatype, "float, half, bfloat16 or all")->capture_default_str();
    sub.add_option("--redop", o.redop, "sum, avg, max, min or all (for the reducing collectives)")
        ->capture_default_str();
    sub.add_option("-r,--root", o.root, "root rank of broadcast and reduce")->capture_default_str();
    sub.add_option("--inplace", o.inplace, "both, in or out: the placements measured")
        ->check(CLI::IsMember({"both", "in", "out"}))
        ->capture_default_str();
    sub.add_option("--backend", o.backend, "nccl (GPU buffers), mpi (host buffers) or auto (nccl where every rank "
                                           "sees a GPU)")
        ->check(CLI::IsMember({"auto", "nccl", "mpi"}))
        ->capture_default_str();
    sub.add_option("--scaling", o.scaling, "world sizes swept in this launch, e.g. 2,4,8 (the first n ranks)")
        ->delimiter(',');
    sub.add_option("--out", o.out, "JSONL file the records are appended to")->capture_default_str();
    sub.add_flag("--share-gpu", o.share_gpu,
                 "let several ranks drive one GPU (each its own NCCL host identity): the figures are not hardware "
                 "figures");
}

CommPlan plan_comm(const CommOptions& o, int world_size) {
    CommPlan p;
    if (o.op == "all") {
        p.collectives = all_collectives();
    } else if (const Collective* c = find_collective(o.op)) {
        p.collectives = {c};
    } else {
        std::string names;
        for (const Collective* c : all_collectives()) names += std::string(c->name) + ", ";
        throw UserError(fmt::format("--op '{}': expected one of {}or all", o.op, names));
    }
    p.dtypes = o.datatype == "all" ? std::vector<DType>{DType::f32, DType::f16, DType::bf16}
                                   : std::vector<DType>{parse_comm_dtype(o.datatype)};
    p.redops = o.redop == "all" ? std::vector<ReduceOp>{ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}
                                : std::vector<ReduceOp>{parse_reduce_op(o.redop)};

    p.min_bytes = parse_size(o.min_bytes, "-b");
    p.max_bytes = parse_size(o.max_bytes, "-e");
    if (o.step_bytes && o.step_factor) throw UserError("-i and -f: give one of them, a fixed step or a factor");
    if (o.step_factor && *o.step_factor < 2)
        throw UserError(fmt::format("-f {}: a factor below 2 never grows the size; use -i for a fixed step",
                                    *o.step_factor));
    p.step_bytes = o.step_bytes ? parse_size(*o.step_bytes, "-i") : size_t{1} << 20;
    p.step_factor = o.step_factor.value_or(1);
    p.sweep.sizes = sweep_sizes(p.min_bytes, p.max_bytes, p.step_bytes, p.step_factor);
    for (DType d : p.dtypes)
        if (p.max_bytes < dtype_size(d))
            throw UserError(fmt::format("-e {}: smaller than one {} element ({} bytes)", p.max_bytes,
                                        nccl_type_name(d), dtype_size(d)));

    // -n, -w and -c were read in their ranges (src/core/flag_reading.cpp).
    p.sweep.iters = o.iters;
    p.sweep.warmup_iters = o.warmup_iters;
    p.sweep.check_iters = o.check;
    p.sweep.out_of_place = o.inplace != "in";
    p.sweep.in_place = o.inplace != "out";
    p.sweep.root = o.root;

    p.scaling = o.scaling.empty() ? std::vector<int>{world_size} : o.scaling;
    for (int n : p.scaling)
        if (n < 1 || n > world_size)
            throw UserError(fmt::format("--scaling {}: world sizes must lie between 1 and the {} launched ranks", n,
                                        world_size));
    const int smallest = *std::min_element(p.scaling.begin(), p.scaling.end());
    const bool rooted = std::any_of(p.collectives.begin(), p.collectives.end(), [](const Collective* c) { return c->rooted; });
    if (rooted && (o.root < 0 || o.root >= smallest))
        throw UserError(fmt::format("-r {}: the root must be a rank of every world size swept (0 to {})", o.root,
                                    smallest - 1));

    if (o.backend == "nccl") {
        if (!cuda_built()) throw UserError("--backend nccl: this scalebench was built without CUDA and NCCL");
        p.backend = BackendChoice::cuda;
    } else {
        p.backend = o.backend == "mpi" ? BackendChoice::cpu : BackendChoice::auto_select;
    }
    p.out = o.out;
    return p;
}

CommBuffers largest_buffers(const CommPlan& p) {
    CommBuffers largest;
    for (int n : p.scaling)
        for (const Collective* c : p.collectives)
            for (DType dtype : p.dtypes) {
                const size_t elt = dtype_size(dtype);
                for (size_t bytes : p.sweep.sizes) {
                    const CollectiveCounts k = c->counts(bytes / elt, elt, n);
                    // Out of place a send and a recv buffer; in place recv holds either.
                    const double need = static_cast<double>(k.send + std::max(k.send, k.recv)) * elt;
                    if (need > largest.bytes)
                        largest = {need, fmt::format("{}, {}, world size {}", c->name, nccl_type_name(dtype), n)};
                }
            }
    return largest;
}

std::string comm_memory_problem(const CommPlan& p, double free_bytes, const std::string& who, const std::string& where) {
    const CommBuffers need = largest_buffers(p);
    if (free_bytes <= 0 || need.bytes <= free_bytes) return "";
    const double gib = 1024.0 * 1024.0 * 1024.0;
    return fmt::format("-e {}: the sweep's buffers need {:.0f} bytes ({:.2f} GiB) per rank ({}: send and receive "
                       "buffers), but {} has {:.0f} bytes ({:.2f} GiB, {}): use a smaller -e",
                       p.max_bytes, need.bytes, need.bytes / gib, need.sweep, who, free_bytes, free_bytes / gib, where);
}

namespace {

std::string utc_timestamp() {
    std::time_t now = std::time(nullptr);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    return text;
}


nlohmann::json placement_json(const Measurement& m) {
    if (!m.ran) return nullptr;
    return {{"time_us", m.time_us},
            {"time_us_max", m.time_us_max},
            {"algbw_gbps", m.algbw_gbps},
            {"busbw_gbps", m.busbw_gbps},
            {"wrong", m.checked ? nlohmann::json(m.wrong) : nlohmann::json(nullptr)}};
}

// One size of a sweep as soon as it is measured (the sweep's `comm` record follows at its end).
nlohmann::json comm_size_record(const SweepResult& r, const SweepRow& row, const std::string& backend) {
    return {{"schema_version", kSchemaVersion},
            {"subcommand", "comm_size"},
            {"run_id", run_id()},
            {"timestamp", utc_timestamp()},
            {"world_size", r.nranks},
            {"backend", backend},
            {"shared_gpu", shared_gpu_enabled()},
            {"op", r.collective->name},
            {"dtype", nccl_type_name(r.dtype)},
            {"redop", r.collective->reduces ? reduce_op_name(r.redop) : "none"},
            {"size_bytes", row.bytes},
            {"count", row.count},
            {"out_of_place", placement_json(row.out_of_place)},
            {"in_place", placement_json(row.in_place)}};
}

nlohmann::json comm_record(const SweepResult& r, const CommPlan& p, const std::string& backend, int launched,
                           const nlohmann::json& environment) {
    nlohmann::json rows = nlohmann::json::array();
    for (const SweepRow& row : r.rows)
        rows.push_back({{"size_bytes", row.bytes},
                        {"count", row.count},
                        {"out_of_place", placement_json(row.out_of_place)},
                        {"in_place", placement_json(row.in_place)}});
    const double factor = r.collective->bus_factor(r.nranks);
    nlohmann::json fit = nullptr;
    if (r.fit.valid)
        fit = {{"alpha_us", r.fit.alpha_us},
               {"beta_gbps", r.fit.beta_gbps},
               {"beta_busbw_gbps", r.fit.beta_gbps * factor},
               {"r2", r.fit.r2},
               {"points", r.fit.points},
               {"placement", p.sweep.out_of_place ? "out_of_place" : "in_place"},
               {"weighting", "relative"}};
    return {{"schema_version", kSchemaVersion},
            {"subcommand", "comm"},
            {"run_id", run_id()},
            {"timestamp", utc_timestamp()},
            {"world_size", r.nranks},
            {"launched_world_size", launched},
            {"backend", backend},
            {"shared_gpu", shared_gpu_enabled()},
            {"op", r.collective->name},
            {"dtype", nccl_type_name(r.dtype)},
            {"redop", r.collective->reduces ? reduce_op_name(r.redop) : "none"},
            {"root", r.root},
            {"busbw_factor", factor},
            {"min_bytes", p.min_bytes},
            {"max_bytes", p.max_bytes},
            {"step_bytes", p.step_factor > 1 ? nlohmann::json(nullptr) : nlohmann::json(p.step_bytes)},
            {"step_factor", p.step_factor > 1 ? nlohmann::json(p.step_factor) : nlohmann::json(nullptr)},
            {"warmup_iters", p.sweep.warmup_iters},
            {"iters", p.sweep.iters},
            {"check_iters", p.sweep.check_iters},
            {"in_place", p.sweep.in_place && p.sweep.out_of_place ? "both" : p.sweep.in_place ? "in" : "out"},
            {"rows", rows},
            {"avg_busbw_gbps", r.avg_busbw_gbps},
            {"out_of_bounds", r.wrong_measurements},
            {"checks_passed", r.wrong_measurements == 0},
            {"fit", fit},
            {"environment", environment}};
}

// The lines nccl-tests prints before its table, for one block.
std::string preamble(const Collective& c, const CommPlan& p, const std::string& backend, int n, int launched,
                     const std::vector<nlohmann::json>& devices) {
    std::string text = fmt::format("# scalebench comm (nccl-tests format): backend {}, world size {} of {} launched\n",
                                   backend, n, launched);
    text += fmt::format("# Collective test starting: {}_perf\n", c.name);
    text += fmt::format("# nThread 1 nGpus 1 minBytes {} maxBytes {} step: {}({}) warmup iters: {} iters: {} agg "
                        "iters: 1 validation: {} graph: 0\n",
                        p.min_bytes, p.max_bytes, p.step_factor > 1 ? p.step_factor : p.step_bytes,
                        p.step_factor > 1 ? "factor" : "bytes", p.sweep.warmup_iters, p.sweep.iters,
                        p.sweep.check_iters);
    text += "#\n# Using devices\n";
    for (int r = 0; r < n && r < static_cast<int>(devices.size()); ++r) {
        const nlohmann::json& d = devices[static_cast<size_t>(r)];
        char line[512];
        std::snprintf(line, sizeof line, "#  Rank %2d Group %2d Pid %6d on %10s device %2s [%s] %s\n", r, 0,
                      d.value("pid", 0), d.value("host", std::string()).c_str(),
                      d.value("device", std::string("-")).c_str(), d.value("bus", std::string("-")).c_str(),
                      d.value("name", std::string()).c_str());
        text += line;
    }
    return text + "#\n" + format_table_header();
}

// This rank's line of "Using devices": the GPU of the CUDA backend, or host memory.
nlohmann::json device_line(Ops& ops) {
    const ProcessInfo& p = process_info();
    nlohmann::json line = {{"pid", static_cast<int>(::getpid())}, {"host", p.host}};
    const nlohmann::json gpu = device_environment(ops);
    if (gpu.is_object() && gpu.contains("name")) {
        line["device"] = std::to_string(gpu.value("device", p.local_rank));
        line["bus"] = gpu.value("pci_bus_id", std::string("-"));
        line["name"] = gpu["name"];
    } else {
        line["device"] = "-";
        line["bus"] = "cpu";
        line["name"] = "host memory";
    }
    return line;
}

}  // namespace

int run_comm(const CommOptions& opts, MPI_Comm world) {
    int rank = 0, size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(world, &rank));
    SB_CHECK_MPI(MPI_Comm_size(world, &size));
    CommPlan plan;
    std::string error;
    try {
        plan = plan_comm(opts, size);
        if (rank == 0) error = results_file_problem(plan.out, "--out");
    } catch (const UserError& e) {
        error = e.what();
    }
    agree_on_errors(world, error);

    if (opts.share_gpu) enable_shared_gpu(world);
    std::unique_ptr<Ops> ops = create_ops(plan.backend, Precision::fp32, world);
    const auto [free_bytes, where] = memory_free_to_rank(*ops);
    const ProcessInfo& me = process_info();
    agree_on_errors(world, comm_memory_problem(plan, free_bytes, fmt::format("rank {} on {}", rank, me.host), where));
    begin_run({plan.out}, "comm", world);
    const nlohmann::json environment = run_environment(*ops, world);
    const std::vector<nlohmann::json> devices = gather_json(device_line(*ops), world);

    // On the compute stream, as nccl-tests: a collective costs the NCCL call and nothing else.
    std::unique_ptr<Communicator> world_comm = create_communicator(*ops, world, CollectiveStream::compute);
    const std::string backend = world_comm->name();
    int wrong = 0;
    for (int n : plan.scaling) {
        MPI_Comm sub = split_first_ranks(world, n);  // host-side reductions of the figures
        std::unique_ptr<Communicator> comm = world_comm->split_first(n);
        if (sub == MPI_COMM_NULL) continue;  // not in this world size: wait for the next split
        for (const Collective* c : plan.collectives) {
            const std::vector<ReduceOp> redops = c->reduces ? plan.redops : std::vector<ReduceOp>{ReduceOp::sum};
            for (DType dtype : plan.dtypes)
                for (ReduceOp redop : redops) {
                    SweepOptions o = plan.sweep;
                    o.dtype = dtype;
                    o.redop = redop;
                    if (rank == 0) {
                        if (shared_gpu_enabled()) std::printf("# %s\n", kSharedGpuNote);
                        std::fputs(preamble(*c, plan, backend, n, size, devices).c_str(), stdout);
                        flush_stdout();
                    }
                    const SweepResult r = run_sweep(*c, o, *ops, *comm, sub, [&](const SweepResult& res, const SweepRow& row) {
                        if (rank != 0) return;
                        append_record(plan.out, comm_size_record(res, row, backend));  // kept if the sweep is cut short
                        std::fputs(format_row(res, row).c_str(), stdout);
                        flush_stdout();
                    });
                    if (r.wrong_measurements > 0) wrong = 1;
                    if (rank == 0) {
                        std::fputs(format_footer(r).c_str(), stdout);
                        std::printf("# Collective test concluded: %s_perf\n\n", c->name);
                        flush_stdout();
                        append_record(plan.out, comm_record(r, plan, backend, size, environment));
                    }
                }
        }
        SB_CHECK_MPI(MPI_Comm_free(&sub));
    }
    int any_wrong = 0;
    SB_CHECK_MPI(MPI_Allreduce(&wrong, &any_wrong, 1, MPI_INT, MPI_MAX, world));
    end_run(any_wrong ? 3 : 0);
    if (rank == 0) std::printf("# results appended to %s\n", plan.out.c_str());
    return any_wrong ? 3 : 0;
}

}  // namespace sb
