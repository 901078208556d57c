// The per-op profile (src/projection/op_profile.h): the profiled steps, the records and reading them back.
#include "src/projection/op_profile.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "src/system/backend.h"
#include "base/errors.h"
#include "src/core/results.h"
#include "src/commands/runner.h"

namespace sb {

int profiled_warmup(const TrainConfig& cfg) {
    // The first step sizes the backend's scratch and GEMM plans; on CUDA a cudaFree there
    // would wait for a held stream, so it is never a timed step.
    return std::max(cfg.warmup, 1);
}

std::vector<OpTiming> summarize_op_samples(const std::vector<std::vector<TimedOps::Sample>>& steps) {
    // The step with the most ops is the whole step: fp16 skips the optimizer after an
    // overflow, and such a step says nothing of the ops it left out.
    const auto full = std::max_element(steps.begin(), steps.end(),
                                       [](const auto& a, const auto& b) { return a.size() < b.size(); });
    SB_REQUIRE(full != steps.end(), "summarize_op_samples: no measured steps");
    auto same_ops = [&](const std::vector<TimedOps::Sample>& step) {
        return step.size() == full->size() &&
               std::equal(step.begin(), step.end(), full->begin(),
                          [](const auto& a, const auto& b) { return op_key(a.op) == op_key(b.op); });
    };
    std::vector<OpTiming> out;
    std::vector<std::vector<double>> times;
    std::map<std::string, size_t> index_of;  // op_key -> position in out
    for (size_t i = 0; i < full->size(); ++i) {
        auto [it, added] = index_of.emplace(op_key((*full)[i].op), out.size());
        if (added) {
            out.push_back({(*full)[i].op, i, 0, {}});
            times.emplace_back();
        }
        ++out[it->second].calls_per_step;
    }
    for (const auto& step : steps)
        if (same_ops(step))
            for (const auto& sample : step) times[index_of.at(op_key(sample.op))].push_back(sample.ms);
    for (size_t i = 0; i < out.size(); ++i) out[i].ms = summarize(times[i]);
    return out;
}

OpProfile profile_training_ops(const TrainConfig& cfg, Ops& backend) {
    TrainConfig eager = cfg;
    eager.cuda_graphs = false;  // a replayed graph has no ops to time (TimedOps has no graphs anyway)
    TimedOps timed(backend);
    std::unique_ptr<Communicator> comm = create_communicator(timed, MPI_COMM_SELF);
    DataParallelTrainer trainer(eager, timed, *comm);
    std::vector<std::vector<TimedOps::Sample>> steps;
    for (int s = 0; s < profiled_warmup(cfg) + cfg.steps; ++s) {
        if (s == profiled_warmup(cfg)) timed.start_recording();
        trainer.step(s);
        if (s >= profiled_warmup(cfg)) steps.push_back(timed.take_samples());
    }
    timed.stop_recording();
    OpProfile profile;
    profile.model = trainer.model().name();
    profile.num_params = trainer.model().num_params();
    profile.local_batch = trainer.local_batch();
    profile.ops = summarize_op_samples(steps);
    profile.measured_steps = profile.ops.empty() ? 0 : profile.ops.front().ms.count / profile.ops.front().calls_per_step;
    return profile;
}

namespace {

nlohmann::json to_json(const TracedOp& op) {
    return {{"kind", op.kind},   {"variant", op.variant}, {"dtype", dtype_name(op.dtype)},
            {"tensor_core", op.tensor_core}, {"m", op.m}, {"n", op.n}, {"k", op.k}, {"batch", op.batch},
            {"trans_a", op.trans_a}, {"trans_b", op.trans_b}, {"flops", op.flops}, {"bytes", op.bytes}};
}

DType dtype_of_name(const std::string& name) {
    for (DType d : {DType::f32, DType::bf16, DType::f16, DType::i32})
        if (name == dtype_name(d)) return d;
    throw UserError(fmt::format("op dtype '{}' is none of f32, bf16, f16, int32", name));
}

double finite_at_least(const nlohmann::json& value, double lowest, const char* what) {
    const double v = value.get<double>();
    if (!std::isfinite(v) || v < lowest) throw UserError(fmt::format("{} is {}, not a finite number >= {}", what, v, lowest));
    return v;
}

}  // namespace

std::vector<nlohmann::json> op_profile_records(const OpProfile& profile, const TrainConfig& cfg, const Ops& backend,
                                               const nlohmann::json& environment) {
    TrainConfig eager = cfg;
    eager.cuda_graphs = false;
    const std::string emulated = emulated_arch_of_environment(environment);
    std::vector<nlohmann::json> records;
    for (const OpTiming& t : profile.ops) {
        const double median_s = t.ms.median * 1e-3;
        records.push_back({
            {"schema_version", kSchemaVersion},
            {"subcommand", "op_profile"},
            {"run_id", run_id()},
            {"timestamp", utc_timestamp()},
            {"backend", backend.name()},
            {"precision", precision_name(backend.precision())},
            {"model", profile.model},
            {"num_params", profile.num_params},
            {"local_batch", profile.local_batch},
            {"warmup_steps", profiled_warmup(cfg)},
            {"measured_steps", profile.measured_steps},
            {"cuda_graphs", false},
            {"emulated_arch", emulated.empty() ? nlohmann::json() : nlohmann::json(emulated)},
            {"op", to_json(t.op)},
            {"label", op_label(t.op)},
            {"first_index", t.first_index},
            {"calls_per_step", t.calls_per_step},
            {"ms", to_json(t.ms)},
            {"ms_per_step", t.ms.median * t.calls_per_step},
            {"achieved_gbps", median_s > 0 ? nlohmann::json(t.op.bytes / median_s / 1e9) : nlohmann::json()},
            {"achieved_tflops", median_s > 0 && t.op.flops > 0 ? nlohmann::json(t.op.flops / median_s / 1e12)
                                                              : nlohmann::json()},
            {"config", to_json(eager)},
            {"environment", environment},
        });
    }
    return records;
}

ProfiledOp profiled_op_of_record(const nlohmann::json& r) {
    if (r.value("subcommand", "") != "op_profile") throw UserError("not an op_profile record");
    ProfiledOp p;
    const nlohmann::json& o = r.at("op");
    TracedOp& op = p.op;
    op.kind = o.at("kind").get<std::string>();
    if (op.kind.empty()) throw UserError("op kind is empty");
    op.variant = o.at("variant").get<std::string>();
    op.dtype = dtype_of_name(o.at("dtype").get<std::string>());
    op.tensor_core = o.at("tensor_core").get<bool>();
    op.m = o.at("m").get<int64_t>();
    op.n = o.at("n").get<int64_t>();
    op.k = o.at("k").get<int64_t>();
    op.batch = o.at("batch").get<int64_t>();
    op.trans_a = o.at("trans_a").get<bool>();
    op.trans_b = o.at("trans_b").get<bool>();
    op.flops = finite_at_least(o.at("flops"), 0.0, "op flops");
    op.bytes = finite_at_least(o.at("bytes"), 0.0, "op bytes");
    if (op.m < 0 || op.n < 0 || op.k < 0 || op.batch < 1)
        throw UserError(fmt::format("op shape {}x{}x{} x{} has a negative size", op.m, op.n, op.k, op.batch));
    if (op.tensor_core && (op.m < 1 || op.n < 1 || op.k < 1 || op.flops <= 0))
        throw UserError(fmt::format("{}: a tensor-core op needs a positive shape and FLOPs", op_label(op)));
    // The trace counts a GEMM as 2mnk per product: other FLOPs were not counted by it.
    const double gemm_flops = 2.0 * static_cast<double>(op.m) * op.n * op.k * op.batch;
    if (op.kind == "gemm" && std::abs(op.flops - gemm_flops) > 1e-9 * gemm_flops)
        throw UserError(fmt::format("{}: {} FLOPs, not 2mnk = {}", op_label(op), op.flops, gemm_flops));
    p.precision = parse_precision(r.at("precision").get<std::string>());
    p.ms = r.at("ms").at("median").get<double>();
    if (!std::isfinite(p.ms) || p.ms <= 0)
        throw UserError(fmt::format("{}: median time {} ms is not a positive time", op_label(op), p.ms));
    p.calls_per_step = r.at("calls_per_step").get<int>();
    if (p.calls_per_step < 1)
        throw UserError(fmt::format("{}: calls_per_step {} is not a positive count", op_label(op), p.calls_per_step));
    return p;
}

std::string emulated_arch_of_environment(const nlohmann::json& environment) {
    if (!environment.is_object() || !environment.contains("gpu") || !environment["gpu"].is_object()) return "";
    const nlohmann::json limits = environment["gpu"].value("device_limits", nlohmann::json::object());
    if (!limits.is_object() || limits.value("source", std::string("device")) == "device") return "";
    return limits.value("arch", std::string("unknown"));
}

std::string emulated_arch_of_record(const nlohmann::json& record) {
    if (record.contains("emulated_arch") && record["emulated_arch"].is_string()) return record["emulated_arch"].get<std::string>();
    return emulated_arch_of_environment(record.value("environment", nlohmann::json::object()));
}

namespace {

void print_profile(const OpProfile& profile) {
    std::vector<const OpTiming*> by_share;
    double step_ms = 0;
    int calls = 0;
    for (const auto& t : profile.ops) {
        by_share.push_back(&t);
        step_ms += t.ms.median * t.calls_per_step;
        calls += t.calls_per_step;
    }
    std::stable_sort(by_share.begin(), by_share.end(), [](const OpTiming* a, const OpTiming* b) {
        return a->ms.median * a->calls_per_step > b->ms.median * b->calls_per_step;
    });
    fmt::print("{:<52} {:>6} {:>10} {:>10} {:>7} {:>9} {:>9}\n", "op (by share of the step)", "calls", "median ms",
               "ms/step", "share", "GB/s", "TFLOP/s");
    for (const OpTiming* t : by_share) {
        const double s = t->ms.median * 1e-3, per_step = t->ms.median * t->calls_per_step;
        fmt::print("{:<52} {:>6} {:>10.4f} {:>10.3f} {:>6.1f}% {:>9.1f} {:>9}\n", op_label(t->op), t->calls_per_step,
                   t->ms.median, per_step, 100.0 * per_step / step_ms, t->op.bytes / s / 1e9,
                   t->op.flops > 0 ? fmt::format("{:.1f}", t->op.flops / s / 1e12) : std::string("-"));
    }
    fmt::print("sum of the op medians: {:.3f} ms per step ({} ops of {} kinds and shapes; each timed alone, so no "
               "overlap and no launch gaps are in it)\n",
               step_ms, calls, profile.ops.size());
}

}  // namespace

void run_op_profile(const TrainConfig& cfg, Ops& backend, MPI_Comm world, const nlohmann::json& environment,
                    const std::string& out) {
    int rank = 0;
    SB_CHECK_MPI(MPI_Comm_rank(world, &rank));
    if (rank == 0) {
        fmt::print("\nscalebench train --profile-ops: {} warm-up and {} measured steps on rank 0 alone, batch {}, "
                   "eagerly (CUDA graphs off: a replayed graph has no ops to time); each op timed alone between two "
                   "markers{}\n",
                   profiled_warmup(cfg), cfg.steps, per_rank_batch(cfg, 1),
                   backend.name() == "cuda" ? ", the stream held while it is issued (device time, no launch gaps)" : "");
        const OpProfile profile = profile_training_ops(cfg, backend);
        print_profile(profile);
        for (const auto& record : op_profile_records(profile, cfg, backend, environment)) append_record(out, record);
        if (profile.measured_steps < cfg.steps)
            fmt::print("{} of the {} measured steps issued fewer ops (fp16 skips the optimizer after an overflow) and "
                       "are not in the profile\n", cfg.steps - profile.measured_steps, cfg.steps);
        fmt::print("{} op_profile records appended to {}\n", profile.ops.size(), out);
    }
    SB_CHECK_MPI(MPI_Barrier(world));  // the other ranks wait for rank 0's profile
}

}  // namespace sb
