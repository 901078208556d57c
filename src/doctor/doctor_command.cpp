// `scalebench doctor`: the readings gathered to rank 0, judged and printed.
#include "src/doctor/doctor_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "collectives/sweep.h"
#include "src/core/flag_reading.h"
#include "src/commands/project_command.h"
#include "src/commands/runner.h"
#include "src/core/config.h"
#include "src/core/data_dir.h"
#include "base/errors.h"
#include "src/core/files.h"
#include "src/core/results.h"
#include "src/core/workload.h"
#include "src/doctor/checks.h"
#include "src/doctor/live_reader.h"
#include "src/doctor/output.h"
#include "src/doctor/sources.h"
#include "src/system/backend.h"
#include "src/system/environment.h"
#ifdef SCALEBENCH_HAVE_CUDA
#include "src/doctor/live_cuda.h"
#endif

namespace sb {

using doctor::SystemSnapshot;

void add_doctor_options(CLI::App& sub, DoctorOptions& o) {
    sub.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    sub.add_flag("--json", o.json, "print the checks, bands and snapshot as JSON instead of the table");
    sub.add_option("--report", o.report, "write a Markdown report of the checks to this file");
    sub.add_option("--snapshot-out", o.snapshot_out, "write the readings (the snapshot the checks judge) as JSON");
    sub.add_option("--from-snapshot", o.from_snapshot,
                   "judge a recorded snapshot (from --snapshot-out) instead of reading this machine");
    sub.add_flag("--share-gpu", o.share_gpu,
                 "let several ranks drive one GPU (each its own NCCL host identity): the collective and training "
                 "tiers run through NCCL's network transport; their figures are not hardware figures");
    sub.add_option("--train-config", o.train_config,
                   "workload YAML of the training tier (default: configs/mlp-large.yaml with a GPU, configs/ci-small.yaml "
                   "without)");
    sub.add_option("--train-steps", o.train_steps, "measured steps of the training tier at each world size")
        ->capture_default_str();
    sub.add_option("--max-bytes", o.max_bytes, "largest size of the collective tier's sweeps (K, M, G as nccl-tests)")
        ->capture_default_str();
    sub.add_option("--deadline", o.deadline_s, "seconds each collective sweep may take before it counts as hung")
        ->capture_default_str();
    sub.add_option("--load-seconds", o.load_s, "seconds of GEMMs the clocks and power are read under")
        ->capture_default_str();
    sub.add_option("--skip", o.skip, "tiers to leave out (reported as skipped): transfer, collective, training")
        ->delimiter(',')
        ->check(CLI::IsMember({"transfer", "collective", "training"}));
    sub.add_option("--profile-dir", o.profile_dir, "hardware profiles the bands come from (default: configs/hardware)");
}

namespace {

bool skipping(const DoctorOptions& o, const std::string& tier) {
    return std::find(o.skip.begin(), o.skip.end(), tier) != o.skip.end();
}

// Bad flags, before any work (the same verdict on every rank); `snapshot_text` receives the
// --from-snapshot file, read once here by the shared input reader.
std::string options_problem(const DoctorOptions& o, size_t* max_bytes, std::string* snapshot_text) {
    try {
        *max_bytes = parse_size(o.max_bytes, "--max-bytes");
    } catch (const UserError& e) {
        return e.what();
    }
    if (*max_bytes < 4096) return fmt::format("--max-bytes {}: at least 4K", o.max_bytes);
    // --train-steps, --deadline and --load-seconds were read in their ranges (src/core/flag_reading.cpp).
    try {
        if (!o.from_snapshot.empty()) note_input(o.from_snapshot, "snapshot");
        // The training tier's workload, read and checked before the first tier runs.
        if (!o.train_config.empty()) validate_config(load_config_file(o.train_config));
    } catch (const UserError& e) {
        return o.train_config.empty() || std::string(e.what()).find(o.train_config) != std::string::npos
                   ? e.what()
                   : fmt::format("--train-config {}: {}", o.train_config, e.what());
    }
    for (const auto& [flag, path] : {std::pair{"--report", o.report}, std::pair{"--snapshot-out", o.snapshot_out}})
        if (!path.empty())
            if (std::string why = output_path_problem(path, flag, OutputKind::whole_file); !why.empty()) return why;
    if (!o.from_snapshot.empty()) {
        try {  // the shared input reader's checks and message (a FIFO, /dev/zero, a folder, past its bound)
            *snapshot_text = read_input_file(o.from_snapshot, "snapshot", kMaxSnapshotBytes);
        } catch (const UserError& e) {
            return fmt::format("--from-snapshot {}", e.what());
        }
    }
    return "";
}

// The bands of the hardware `s` shows, from the profiles (--profile-dir or the shipped ones).
doctor::ExpectedBands bands_of(const DoctorOptions& o, const SystemSnapshot& s) {
    const std::string profile_dir = o.profile_dir.empty() ? shipped_config_dir("hardware") : o.profile_dir;
    std::vector<HardwareProfile> profiles;
    if (!profile_dir.empty()) profiles = doctor::load_profiles(profile_dir);
    std::vector<doctor::PublishedBusbw> published;
    const std::string published_file = shipped_path("results/published/nccl_allreduce.yaml");
    if (!published_file.empty() && std::filesystem::is_regular_file(published_file))
        published = doctor::load_published_busbw(published_file);
    doctor::ExpectedBands bands = doctor::expected_bands(s, profiles, published);
    if (profiles.empty()) bands.why_none = "no hardware profiles found (give --profile-dir)";
    return bands;
}

// Rank 0: the checks of `s`, printed and written; returns the exit code.
int judge_and_print(const DoctorOptions& o, const SystemSnapshot& s) {
    const doctor::ExpectedBands bands = bands_of(o, s);
    const std::vector<doctor::Check> checks = doctor::run_checks(s, bands);
    if (o.json) fmt::print("{}\n", json_text(doctor::checks_json(checks, bands, s), 1));
    else fmt::print("{}", doctor::format_table(checks, bands, s));
    std::fflush(stdout);
    if (!o.report.empty()) write_whole_file(o.report, doctor::format_markdown(checks, bands, s));
    if (!o.snapshot_out.empty()) write_whole_file(o.snapshot_out, json_text(nlohmann::json(s), 1) + "\n");
    return doctor::exit_code(checks);
}

// Every rank's and every host's readings, merged on rank 0.
void merge(SystemSnapshot& into, const SystemSnapshot& host) {
    for (const auto& g : host.gpus) into.gpus.push_back(g);
    for (const auto& p : host.pairs) into.pairs.push_back(p);
    for (const auto& c : host.copies) into.copies.push_back(c);
    if (into.versions.driver.empty() && into.versions.nccl.empty()) into.versions = host.versions;
    for (const auto& h : host.hosts) into.hosts.push_back(h);
    if (into.load_skipped.empty()) into.load_skipped = host.load_skipped;
    if (into.gpu_unavailable.empty()) into.gpu_unavailable = host.gpu_unavailable;
    if (into.transfer_skipped.empty()) into.transfer_skipped = host.transfer_skipped;
}

// The training tier: the workload at 1 and N ranks through the runner; its scaling table
// goes to stderr (stdout holds the doctor's answer). Rank 0's reading.
doctor::TrainingReading run_training_tier(const DoctorOptions& o, bool on_gpu, const std::string& scratch,
                                          MPI_Comm world) {
    int rank = 0, size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(world, &rank));
    SB_CHECK_MPI(MPI_Comm_size(world, &size));
    std::string path = o.train_config;
    const std::string preset = on_gpu ? "configs/mlp-large.yaml" : "configs/ci-small.yaml";
    if (path.empty()) path = shipped_path(preset).empty() ? preset : shipped_path(preset);
    TrainConfig cfg = load_config_everywhere(path, world);
    cfg.scaling = size > 1 ? std::vector<int>{1, size} : std::vector<int>{1};
    cfg.steps = o.train_steps;
    cfg.warmup = std::min(cfg.warmup, 3);
    cfg.out = scratch + "/train.jsonl";
    std::string error;
    try {
        validate_config(cfg);
        validate_for_world(cfg, size);
    } catch (const UserError& e) {
        error = fmt::format("--train-config {}: {}", path, e.what());
    }
    agree_on_errors(world, error);
    std::unique_ptr<Ops> ops = create_ops(cfg.backend, cfg.precision, world, path + ": key 'backend'",
                                          path + ": key 'precision'");
    cfg = with_conv_engine_resolved(cfg, *ops);
    check_memory_footprint({cfg}, *ops, world);
    const nlohmann::json environment = run_environment(*ops, world);
    std::fflush(stdout);
    const int saved = dup(STDOUT_FILENO);
    dup2(STDERR_FILENO, STDOUT_FILENO);
    const bool passed = run_training_sweep(cfg, *ops, world, environment);
    std::fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    doctor::TrainingReading t;
    if (rank != 0) return t;
    t.preset = std::filesystem::path(path).stem().string();
    t.checks_passed = passed;
    std::ifstream in(cfg.out);
    std::string line;
    while (std::getline(in, line)) {
        const nlohmann::json r = parse_json_or_discarded(line);
        if (!r.is_object() || !r.contains("world_size") || !r.contains("samples_per_s")) continue;
        const int n = r["world_size"].get<int>();
        if (n == 1) {
            t.samples_per_s_1 = r["samples_per_s"].get<double>();
            t.step_ms_1 = r["step_ms"]["median"].get<double>();
        }
        if (n == size) {
            t.world_size = n;
            t.samples_per_s_n = r["samples_per_s"].get<double>();
            t.efficiency = r["scaling_efficiency"].is_number() ? r["scaling_efficiency"].get<double>() : 1.0;
            t.step_ms = r["step_ms"]["median"].get<double>();
            t.exposed_comm_ms = r["exposed_comm_ms"]["median"].get<double>();
            t.gradient_bytes = r.value("gradient_bytes", 0.0);
            t.checks_passed = t.checks_passed && r.value("checks_passed", false);
        }
    }
    return t;
}

bool collective_failed(const SystemSnapshot& s) {
    for (const auto& r : s.collectives) {
        if (r.label != "as_is") continue;
        if (r.timed_out || !r.error.empty() || r.rows.empty()) return true;
        for (const auto& row : r.rows)
            if (row.wrong > 0) return true;
    }
    return false;
}

// Topology, configuration and transfer: each host's first rank reads its GPUs (the other
// ranks return an empty part); `me` gets the rank's device.
SystemSnapshot read_host_part(const DoctorOptions& o, const ProcessInfo& p, int rank, doctor::RankReading& me,
                              MPI_Comm world) {
    SystemSnapshot host_part;
    std::string error;
#ifdef SCALEBENCH_HAVE_CUDA
    const int gpus = doctor::visible_gpu_count();
    if (gpus > 0) me.device = o.share_gpu ? shared_gpu_device(p.local_rank, gpus) : p.local_rank;
    if (gpus == 0) {
        // GPUs sysfs shows but CUDA cannot reach (fabric manager down, driver mismatch): unjudged, not absent.
        if (p.local_rank == 0) host_part = doctor::read_sysfs_host(p.host);
        host_part.gpu_unavailable = "CUDA sees no GPU: " + doctor::cuda_unavailable_reason();
        host_part.transfer_skipped = host_part.gpu_unavailable;
    } else if (!o.share_gpu && p.local_rank >= gpus)
        error = fmt::format("rank {} on {}: {} ranks on the host but {} GPUs visible (one rank per GPU, or --share-gpu)",
                            rank, p.host, p.local_size, gpus);
    agree_on_errors(world, error);
    if (p.local_rank == 0 && gpus > 0) {
        if (rank == 0) fmt::print(stderr, "doctor: reading the GPUs of each host, copies and a {:.0f} s load\n", o.load_s);
        host_part = doctor::read_host(p.host, o.load_s);
        if (!(o.load_s > 0)) host_part.load_skipped = "left out (--load-seconds 0)";
    }
    if (skipping(o, "transfer")) {
        host_part.copies.clear();
        host_part.transfer_skipped = "left out (--skip transfer)";
    }
#else
    (void)o, (void)rank, (void)me;
    agree_on_errors(world, error);
    if (p.local_rank == 0) host_part = doctor::read_sysfs_host(p.host);  // what sysfs alone shows
    host_part.gpu_unavailable = "this build has no CUDA (SCALEBENCH_CUDA=OFF): the GPU readings need it";
    host_part.transfer_skipped = host_part.gpu_unavailable;
#endif
    return host_part;
}

// The collective tier on every rank: the sweep as the machine is, sizes growing towards the
// band's low end (rank 0's bands of the readings so far; none for ranks sharing a GPU), then the
// control with NCCL_P2P_DISABLE=1, grown until level. Rank 0 keeps the runs in `s`.
void run_collective_tier(const DoctorOptions& o, SystemSnapshot& s, const doctor::RankReading& me,
                         const ProcessInfo& p, size_t max_bytes, const std::string& scratch, MPI_Comm world) {
    int rank = 0;
    SB_CHECK_MPI(MPI_Comm_rank(world, &rank));
#ifdef SCALEBENCH_HAVE_CUDA
    if (me.device < 0) {
        s.collective_skipped = "no GPU: NCCL's collectives need one";
        return;
    }
    double target = rank == 0 && !s.shared_gpu ? bands_of(o, s).busbw.lo : 0;
    SB_CHECK_MPI(MPI_Bcast(&target, 1, MPI_DOUBLE, 0, world));
    // The ranks of this host on this rank's GPU: one, or round-robin with --share-gpu.
    const int gpus = doctor::visible_gpu_count();
    const int device_ranks =
        o.share_gpu && gpus > 0 ? p.local_size / gpus + (me.device < p.local_size % gpus ? 1 : 0) : 1;
    for (const bool control : {false, true}) {
        const double aim = control ? 0 : target;
        if (rank == 0)
            fmt::print(stderr, "doctor: NCCL collectives from 1 MiB doubling up to {} bytes, until busbw {}{}\n",
                       max_bytes, aim > 0 ? fmt::format("reaches {:.1f} GB/s or levels off", aim) : "levels off",
                       control ? ", with NCCL_P2P_DISABLE=1 (the control)" : "");
        doctor::CollectiveRun run = doctor::run_allreduce_sweep(control ? "p2p_disabled" : "as_is", control, me.device,
                                                                device_ranks, max_bytes, aim, o.deadline_s, scratch,
                                                                world);
        if (rank == 0) s.collectives.push_back(run);
    }
#else
    (void)o, (void)me, (void)p, (void)max_bytes, (void)scratch, (void)rank;
    s.collective_skipped = "this build has no CUDA: the NCCL collectives need it (the CPU ranks' MPI all-reduce is "
                           "`scalebench comm --backend mpi`)";
#endif
}

}  // namespace

int run_doctor(const DoctorOptions& o, MPI_Comm world) {
    int rank = 0, size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(world, &rank));
    SB_CHECK_MPI(MPI_Comm_size(world, &size));
    size_t max_bytes = 0;
    std::string snapshot_text;  // rank 0's
    agree_on_errors(world, rank == 0 ? options_problem(o, &max_bytes, &snapshot_text) : "");
    max_bytes = parse_size(o.max_bytes, "--max-bytes");  // every rank's (rank 0 checked it)
    int code = 0;
    if (!o.from_snapshot.empty()) {
        if (rank == 0) code = judge_and_print(o, doctor::parse_snapshot(snapshot_text, o.from_snapshot));
        SB_CHECK_MPI(MPI_Bcast(&code, 1, MPI_INT, 0, world));
        return code;
    }
    if (o.share_gpu) enable_shared_gpu(world);
    const ProcessInfo& p = process_info();

    // One scratch folder for the run, named by rank 0 (NCCL logs, the training records).
    long long id = static_cast<long long>(getpid());
    SB_CHECK_MPI(MPI_Bcast(&id, 1, MPI_LONG_LONG, 0, world));
    const std::string scratch =
        (std::filesystem::temp_directory_path() / fmt::format("scalebench-doctor-{}", id)).string();
    std::filesystem::create_directories(scratch);

    doctor::RankReading me;
    me.rank = rank;
    me.host = p.host;
    me.bound_cpus = doctor::bound_cpus();
    me.env = doctor::transport_env();
    const SystemSnapshot host_part = read_host_part(o, p, rank, me, world);
    SystemSnapshot s;
    s.taken = utc_timestamp();
    s.world_size = size;
    s.shared_gpu = o.share_gpu;
    const std::vector<nlohmann::json> parts =
        gather_json({{"rank", me}, {"host", p.local_rank == 0 ? nlohmann::json(host_part) : nlohmann::json()}}, world);
    for (const nlohmann::json& part : parts) {
        s.ranks.push_back(part["rank"].get<doctor::RankReading>());
        if (!part["host"].is_null()) merge(s, part["host"].get<SystemSnapshot>());
    }

    // Collective: the three collectives as the machine is, then the control without P2P.
    if (skipping(o, "collective")) {
        s.collective_skipped = "left out (--skip collective)";
    } else if (size < 2) {
        s.collective_skipped = "one rank: no all-reduce between ranks (launch one rank per GPU, or several ranks on "
                               "one GPU with --share-gpu)";
    } else {
        run_collective_tier(o, s, me, p, max_bytes, scratch, world);
    }
    int failed = rank == 0 && collective_failed(s) ? 1 : 0;
    SB_CHECK_MPI(MPI_Bcast(&failed, 1, MPI_INT, 0, world));

    // Training: the workload at 1 and N ranks, unless the all-reduce under it is broken.
    if (skipping(o, "training")) {
        s.training_skipped = "left out (--skip training)";
    } else if (failed) {
        s.training_skipped = "the collective tier failed: a training run needs a working all-reduce";
    } else {
        if (rank == 0) fmt::print(stderr, "doctor: training at {}\n", size > 1 ? fmt::format("1 and {} ranks", size) : "1 rank");
        s.training = run_training_tier(o, me.device >= 0, scratch, world);
    }

    if (rank == 0) code = judge_and_print(o, s);
    SB_CHECK_MPI(MPI_Bcast(&code, 1, MPI_INT, 0, world));
    SB_CHECK_MPI(MPI_Barrier(world));
    std::error_code ec;
    if (p.local_rank == 0) std::filesystem::remove_all(scratch, ec);
    return code;
}

}  // namespace sb
