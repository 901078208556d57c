// The projection model (src/projection/projection.h).
#include "src/projection/projection.h"
#include "src/projection/calibration_checks.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "collectives/bucketer.h"
#include "collectives/communicator.h"
#include "base/errors.h"
#include "src/core/plausible.h"
#include "src/core/results.h"
#include "src/core/workload.h"

namespace sb {

namespace {

// A communicator that only records where the Bucketer issues each all-reduce.
class TraceCommunicator final : public Communicator {
public:
    TraceCommunicator(const TraceOps& ops, std::vector<TracedAllReduce>& out) : ops_(ops), out_(out) {}
    std::string name() const override { return "trace"; }
    int rank() const override { return 0; }
    int size() const override { return 1; }
    std::unique_ptr<CommRequest> all_reduce(const void*, void*, size_t count, DType dtype, ReduceOp) override {
        out_.push_back({ops_.position(), static_cast<double>(count * dtype_size(dtype))});
        return std::make_unique<Done>();
    }
    std::unique_ptr<CommRequest> reduce_scatter(const void*, void*, size_t, DType, ReduceOp) override { return none("reduce_scatter"); }
    std::unique_ptr<CommRequest> all_gather(const void*, void*, size_t, DType) override { return none("all_gather"); }
    std::unique_ptr<CommRequest> broadcast(void*, size_t, DType, int) override { return none("broadcast"); }
    std::unique_ptr<CommRequest> broadcast(const void*, void*, size_t, DType, int) override { return none("broadcast"); }
    std::unique_ptr<CommRequest> reduce(const void*, void*, size_t, DType, ReduceOp, int) override { return none("reduce"); }
    std::unique_ptr<CommRequest> alltoall(const void*, void*, size_t, DType) override { return none("alltoall"); }
    std::unique_ptr<CommRequest> sendrecv(const void*, void*, size_t, DType, int, int) override { return none("sendrecv"); }
    void barrier() override {}
    std::unique_ptr<Communicator> split_first(int) override {
        SB_REQUIRE(false, "the trace communicator does not split");
        return nullptr;
    }

private:
    struct Done final : CommRequest {
        bool test() override { return true; }
        void wait() override {}
    };
    std::unique_ptr<CommRequest> none(const char* what) {
        SB_REQUIRE(false, std::string("the training step issued a ") + what + ", which the projection does not model");
        return nullptr;
    }
    const TraceOps& ops_;
    std::vector<TracedAllReduce>& out_;
};

// Forwards to the Bucketer and records the order gradients become final.
class OrderSink final : public GradientSink {
public:
    explicit OrderSink(GradientSink& next) : next_(next) {}
    void gradient_ready(int i) override {
        order.push_back(i);
        next_.gradient_ready(i);
    }
    std::vector<int> order;

private:
    GradientSink& next_;
};

int precision_index(Precision p) { return static_cast<int>(p); }

}  // namespace

DeviceLimits profile_limits(const HardwareProfile& hw) {
    return architecture_limits(gpu_architecture(hw.peak)).value_or(TraceOps::default_trace_limits());
}

StepTrace trace_step(const TrainConfig& cfg, int local_batch, const DeviceLimits& limits) {
    SB_REQUIRE(local_batch > 0, "trace_step: local batch must be positive");
    TraceOps ops(cfg.precision, limits);
    StepTrace t;
    t.precision = cfg.precision;
    t.local_batch = local_batch;
    // As DataParallelTrainer's constructor: the model, its flat buffers, bound for the local batch.
    std::unique_ptr<Model> model = create_model(cfg, ops);
    const size_t n = model->num_params();
    const DType dtype = compute_dtype(cfg.precision);
    const bool adamw = cfg.optimizer.kind == OptimizerConfig::Kind::adamw;
    DeviceBuffer params(ops, n * sizeof(float)), grads(ops, n * sizeof(float)), state_a(ops, n * sizeof(float)),
        loss(ops, sizeof(float));
    DeviceBuffer state_b, weights;
    if (adamw) state_b = DeviceBuffer(ops, n * sizeof(float));
    if (dtype != DType::f32) weights = DeviceBuffer(ops, n * dtype_size(dtype));
    t.memory.parameters = static_cast<double>(n) * (sizeof(float) + (weights.get() ? dtype_size(dtype) : 0));
    t.memory.gradients = static_cast<double>(n) * sizeof(float);
    t.memory.optimizer_state = static_cast<double>(n) * sizeof(float) * (adamw ? 2 : 1);
    const double before_bind = ops.allocated_bytes();
    model->bind(FlatBuffers{params.as<float>(), weights.get() ? weights.get() : params.get(), grads.as<float>()},
                local_batch);
    t.memory.activations = ops.allocated_bytes() - before_bind;
    // One batch of one rank: the data is never read, only its shapes, so none is generated. The
    // dataset keeps dataset_batches of them on the device.
    const BatchShape batch = batch_shape(cfg);
    DeviceBuffer inputs(ops, static_cast<size_t>(local_batch * batch.cols) * dtype_size(batch.dtype));
    DeviceBuffer labels(ops, static_cast<size_t>(local_batch * batch.labels_per_row) * sizeof(int32_t));
    t.memory.data = static_cast<double>(cfg.dataset_batches) *
                    (static_cast<double>(local_batch * batch.cols) * dtype_size(batch.dtype) +
                     static_cast<double>(local_batch * batch.labels_per_row) * sizeof(int32_t));
    const double before_bucketer = ops.allocated_bytes();
    TraceCommunicator comm(ops, t.all_reduces);
    Bucketer bucketer(model->params(), cfg.bucket_mb, comm, grads.as<float>(), ops, cfg.grad_dtype);
    t.memory.gradients += ops.allocated_bytes() - before_bucketer;  // the 16-bit buckets
    ops.clear();

    // As DataParallelTrainer::issue_step (fp16 takes the path where the step is applied).
    const Tensor weights_copy = weights.get() ? weights.tensor(dtype, 1, static_cast<int64_t>(n)) : Tensor{};
    const double before_step = ops.allocated_bytes();
    bucketer.start_step();
    OrderSink sink(bucketer);
    model->forward_backward(inputs.tensor(batch.dtype, local_batch, batch.cols), labels.as<int32_t>(),
                            loss.as<float>(), 1.0f, &sink);
    t.backward_end = ops.position();
    bucketer.wait_all();
    if (cfg.precision == Precision::fp16) ops.unscale_and_check(grads.as<float>(), n, 1.0f);
    t.optimizer_begin = ops.position();
    if (adamw)
        ops.adamw_step(params.as<float>(), grads.as<float>(), state_a.as<float>(), state_b.as<float>(), n,
                       cfg.optimizer, 1, weights_copy);
    else
        ops.sgd_step(params.as<float>(), grads.as<float>(), state_a.as<float>(), n, cfg.optimizer, weights_copy);

    t.ops = ops.trace();
    // What the step allocated as it ran (the backend's per-call buffers) counts as activations.
    t.memory.activations += ops.allocated_bytes() - before_step;
    // The backend's scratch (models/cuda/cuda_ops.cu) holds small per-op partials: cuBLASLt fuses
    // every bias into the GEMM (a 16-bit C's bias rounded to C's dtype), so no GEMM product goes
    // through fp32 scratch; the partials are bounded by the traced ops' own buffers.
    t.model = model->name();
    t.num_params = n;
    t.flops_per_sample = model->flops_per_sample();
    t.gradient_order = sink.order;
    for (const auto& a : t.all_reduces) t.gradient_bytes += a.bytes;
    return t;
}

double footprint_bytes(const StepTrace& trace) {
    return trace.memory.total() + kGemmWorkspaceBytes + kRuntimeReserveBytes;
}

int max_fitting_batch(const TrainConfig& cfg, double memory_gb) {
    auto fits = [&](int batch) { return footprint_bytes(trace_step(cfg, batch)) <= memory_gb * kGiB; };
    if (!fits(1)) return 0;
    int lo = 1, hi = 2;  // fits(lo), and hi is the first power of two to test
    while (fits(hi)) {
        lo = hi;
        SB_REQUIRE(hi < (1 << 24), "max_fitting_batch: no memory limit reached");
        hi *= 2;
    }
    while (hi - lo > 1) {  // fits(lo), !fits(hi)
        const int mid = lo + (hi - lo) / 2;
        (fits(mid) ? lo : hi) = mid;
    }
    return lo;
}

TrainConfig config_of_record(const nlohmann::json& record, const std::string& where) {
    nlohmann::json c = record.at("config");
    c.erase("source");  // where the runner read it from, not a config key
    if (c.contains("scaling") && c["scaling"].empty()) c.erase("scaling");  // the default, written as []
    // The convolutions are the engine that ran, not this build's resolution of the config's auto
    // (the config reader checks the name).
    if (c.value("model", "") == "resnet") c["conv_engine"] = conv_engine_of_record(record);
    TrainConfig cfg = parse_config(c.dump(), where);
    validate_config(cfg);
    return cfg;
}

std::string conv_engine_of_record(const nlohmann::json& record) {
    return record.contains("conv_engine") && record["conv_engine"].is_string() ? record["conv_engine"].get<std::string>()
                                                                               : "im2col";
}

// ---------------------------------------------------------------- calibration

namespace {

const char* kPrecisionNames[4] = {"fp32", "tf32", "bf16", "fp16"};
constexpr double kMinOptimizerMs = 0.5;  // shortest optimizer phase a bandwidth fraction is taken from

std::string record_gpu(const nlohmann::json& r) {
    if (r.contains("gpu") && r["gpu"].is_object() && r["gpu"].contains("name")) return r["gpu"]["name"].get<std::string>();
    if (r.contains("environment") && r["environment"].contains("gpu") && r["environment"]["gpu"].is_object() &&
        r["environment"]["gpu"].contains("name"))
        return r["environment"]["gpu"]["name"].get<std::string>();
    return "";
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// The bytes the current trace gives each op of the run an op_profile record came from, by op_shape_key
// (one trace per run, kept in `traces`). A record's bytes are those of the trace it was made with;
// its time says what the op's bytes take under the current byte model.
using TracedBytes = std::map<std::string, double>;
const TracedBytes& current_bytes(std::map<std::string, TracedBytes>& traces, const nlohmann::json& r,
                                 const std::string& where) {
    const int batch = r.at("local_batch").get<int>();
    const std::string run = r.at("config").dump() + "|" + std::to_string(batch);
    if (auto it = traces.find(run); it != traces.end()) return it->second;
    // Traced under the limits the profile ran with (environment.gpu.device_limits), so its variants match.
    const nlohmann::json limits = r.value("environment", nlohmann::json::object())
                                      .value("gpu", nlohmann::json::object())
                                      .value("device_limits", nlohmann::json::object());
    const DeviceLimits traced = architecture_limits(limits.value("arch", std::string()))
                                    .value_or(TraceOps::default_trace_limits());
    TracedBytes bytes;
    for (const TracedOp& op : trace_step(config_of_record(r, where + " config"), batch, traced).ops)
        bytes.emplace(op_shape_key(op), op.bytes);
    return traces.emplace(run, std::move(bytes)).first->second;
}

// An op_profile record: checked whatever GPU made it (a bad record is an error, not skipped),
// kept when it is of this GPU, with the bytes the current trace gives its op where the run's trace
// still has it. `where` is "FILE: record N".
void add_profiled_op(Calibration& cal, const CostModel& shape_model, std::map<std::string, TracedBytes>& traces,
                     const nlohmann::json& r, bool this_gpu, const std::string& where) {
    ProfiledOp p;
    try {
        p = profiled_op_of_record(r);
    } catch (const UserError& e) {
        throw UserError(fmt::format("{}: not a usable op_profile record: {}", where, e.what()));
    } catch (const nlohmann::json::exception& e) {
        throw UserError(fmt::format("{}: not a scalebench op_profile record: {}", where, e.what()));
    }
    if (!this_gpu) return;  // per-op efficiencies are those of the GPU that ran them (README: Projection)
    const TracedBytes& current = current_bytes(traces, r, where);
    if (const auto it = current.find(op_shape_key(p.op)); it != current.end()) p.op.bytes = it->second;
    // No work in the unit its rate is measured in (an empty tensor): no rate.
    if (p.op.tensor_core ? p.op.flops <= 0 : p.op.bytes <= 0) return;
    // FLOPs are exact: a tensor-core op above the peak was not timed on this GPU.
    constexpr double kPeakTolerance = 1.05;
    const double efficiency = shape_model.measured_efficiency(p);
    if (p.op.tensor_core && efficiency > kPeakTolerance)
        throw UserError(fmt::format("{}: {} in {} ms is {:.2f}x the {} peak of {}: not a time of this GPU", where,
                                    op_label(p.op), p.ms, efficiency, precision_name(p.precision), shape_model.hw.device_name));
    cal.profiled_ops.push_back(std::move(p));
}

// What the profiled ops set, one line per kind.
std::vector<std::string> profiled_op_notes(const CostModel& m) {
    std::map<std::string, std::vector<const ProfiledOp*>> by_kind;
    for (const ProfiledOp& p : m.calibration.profiled_ops) by_kind[p.op.kind].push_back(&p);
    std::vector<std::string> notes;
    for (const auto& [kind, ops] : by_kind) {
        double lo = INFINITY, hi = 0;
        int calls = 0;
        for (const ProfiledOp* p : ops) {
            lo = std::min(lo, m.measured_efficiency(*p));
            hi = std::max(hi, m.measured_efficiency(*p));
            calls += p->calls_per_step;
        }
        const ProfiledOp& any = *ops.front();
        const std::string of = fmt::format("op profile: {} ({} shape(s), {} call(s) a step)", kind, ops.size(), calls);
        if (!any.op.tensor_core) {
            const double f = m.profiled_kind_efficiency(kind, any.precision);
            notes.push_back(fmt::format("{}: {:.3f} of memory bandwidth over all ({:.0f} GB/s; shapes {:.3f}-{:.3f}), "
                                        "used for this kind's ops unless a shape within {}x was profiled",
                                        of, f, f * m.hw.peak.mem_bw_gbps, lo, hi, CostModel::kCloseFactor));
        } else {
            notes.push_back(fmt::format("{}: {:.3f}-{:.3f} of the {} peak, carried by the shape model to ops within {}x "
                                        "of a profiled shape{}",
                                        of, lo, hi, precision_name(any.precision), CostModel::kCloseFactor,
                                        kind == "gemm" ? "; other GEMMs from the shape model"
                                                       : fmt::format("; others at the large-shape efficiency {:.3f} these imply",
                                                                     m.profiled_kind_efficiency(kind, any.precision))));
        }
    }
    return notes;
}

}  // namespace

Calibration calibrate(const HardwareProfile& hw, const std::vector<std::string>& files) {
    Calibration cal;
    cal.files = files;
    CostModel shape_model(hw);
    std::vector<double> bases[4];
    std::vector<double> optimizer_fractions;
    std::map<std::string, TracedBytes> traces;  // of the runs op_profile records came from
    for (const auto& file : files) {
        ReadResult read = read_records(file);
        if (read.records.empty()) throw UserError(fmt::format("{}: no records to calibrate from", file));
        size_t shared = 0;
        std::map<std::pair<std::string, std::string>, size_t> emulated;  // by (GPU, architecture emulated)
        for (size_t index = 0; index < read.records.size(); ++index) {
            const nlohmann::json& r = read.records[index];
            if (r.contains("shared_gpu") && r["shared_gpu"] == true) {  // not this hardware's figures
                ++shared;
                continue;
            }
            const std::string where = fmt::format("{}: record {}", file, index + 1);
            try {
                const std::string sub = r.value("subcommand", "");
                check_calibration_record(r, where);  // kind, backend and every number calibration reads
                const std::string gpu = record_gpu(r);
                // Under SCALEBENCH_DEVICE_LIMITS a record is neither its GPU's figure nor the emulated GPU's.
                const std::string emulated_arch = emulated_arch_of_record(r);
                if (!emulated_arch.empty()) ++emulated[{gpu.empty() ? "a GPU" : gpu, emulated_arch}];
                if (sub == "op_profile") {
                    add_profiled_op(cal, shape_model, traces, r, gpu == hw.device_name && emulated_arch.empty(),
                                    fmt::format("{}: record {}", file, index + 1));
                    continue;
                }
                if (gpu != hw.device_name || !emulated_arch.empty()) continue;  // another GPU's figures say nothing about this one
                if (sub == "gemm" && r.contains("fraction_of_peak") && r["fraction_of_peak"].is_number()) {
                    const std::string dtype = r.value("dtype", "");
                    const int i = static_cast<int>(std::find(kPrecisionNames, kPrecisionNames + 4, dtype) - kPrecisionNames);
                    if (i >= 4) continue;
                    const double shape = shape_model.gemm_shape_factor(r["m"].get<int64_t>(), r["n"].get<int64_t>(),
                                                                       r["k"].get<int64_t>(), 1);
                    // A measured GEMM runs at a fraction of peak: below 1e-4 (a 0.01% GEMM) or above 1.2
                    // the record or the peak is wrong.
                    const double fraction = plausible_field(r, "fraction_of_peak", {1e-4, false, 1.2}, where);
                    bases[i].push_back(fraction / shape);
                    cal.gemms.push_back({i, r["m"].get<int64_t>(), r["n"].get<int64_t>(), r["k"].get<int64_t>(), fraction});
                } else if (sub == "train" && r.value("world_size", 0) == 1 && r.contains("optimizer_ms")) {
                    // The optimizer step is one memory-bound kernel over the flat buffers: its
                    // measured time against the bytes the trace says it moves.
                    const TrainConfig cfg = config_of_record(r, fmt::format("{} record {} config", file, index + 1));
                    const StepTrace t = trace_step(cfg, r["local_batch"].get<int>());
                    double bytes = 0;
                    for (size_t i = t.optimizer_begin; i < t.ops.size(); ++i) bytes += t.ops[i].bytes;
                    const double ms = plausible_field(r["optimizer_ms"], "median", {0, true, 1e9}, where + ": optimizer_ms") -
                                      hw.kernel_gap_us.value * 1e-3 * static_cast<double>(t.ops.size() - t.optimizer_begin);
                    const double fraction = bytes / (ms * 1e-3) / 1e9 / hw.peak.mem_bw_gbps;
                    // A step of a few microseconds is launch and tail, not bandwidth: it says
                    // nothing about a large model's optimizer.
                    if (ms < kMinOptimizerMs) {
                        cal.notes.push_back(fmt::format("optimizer step of {} (train record {}: {}) not used: {:.3f} ms "
                                                        "is too short to be bandwidth-bound (< {} ms)",
                                                        file, index + 1, t.model, ms, kMinOptimizerMs));
                        continue;
                    }
                    optimizer_fractions.push_back(std::min(1.0, fraction));
                    cal.notes.push_back(fmt::format("optimizer step at {:.3f} of memory bandwidth in {} (train record {}: {}, "
                                                    "{:.3f} GB in {:.3f} ms)",
                                                    fraction, file, index + 1, t.model, bytes / 1e9, ms));
                } else if (sub == "comm" && r.value("op", "") == "all_reduce" && r.contains("rows") && r["rows"].is_array() &&
                           !r["rows"].empty()) {
                    const int world = r.value("world_size", 0);
                    const nlohmann::json& fit = r["fit"];
                    if (fit.is_object() && fit.contains("alpha_us"))
                    {
                        const double alpha = plausible_field(fit, "alpha_us", {0, false, 1e9}, where + ": fit");
                        cal.collective_alpha_us = cal.collective_alpha_us < 0 ? alpha : std::min(cal.collective_alpha_us, alpha);
                    }
                    const nlohmann::json& last = r["rows"].back();
                    if (world == 1 && last.contains("out_of_place") && last["out_of_place"].is_object()) {
                        // One rank's out-of-place all-reduce is a device-to-device copy: bytes read and written.
                        const double bytes = plausible_field(last, "size_bytes", {0, true, 1e15}, where + ": last row");
                        const double us = plausible_field(last["out_of_place"], "time_us", {0, true, 1e12},
                                                          where + ": last row: out_of_place");
                        cal.memory_efficiency = std::min(1.0, 2.0 * bytes / (us * 1e-6) / 1e9 / hw.peak.mem_bw_gbps);
                        cal.notes.push_back(fmt::format("memory efficiency {:.3f} from {}: single-rank out-of-place all_reduce "
                                                        "of {} bytes (a device copy) in {:.1f} us",
                                                        cal.memory_efficiency, file, bytes, us));
                    } else if (world > 1 && world <= static_cast<int>(hw.gpus_per_node.value) && fit.is_object() &&
                               fit.contains("beta_busbw_gbps")) {
                        cal.ring_busbw_gbps = plausible_field(fit, "beta_busbw_gbps", {0, true, 1e6}, where + ": fit");
                        cal.ring_busbw_world = world;
                        cal.notes.push_back(fmt::format("intra-node busbw {:.1f} GB/s from {} (all_reduce fit, {} ranks)",
                                                        cal.ring_busbw_gbps, file, world));
                    }
                }
            } catch (const nlohmann::json::exception& e) {
                throw UserError(fmt::format("{}: record {}: not a scalebench {} record: {}", file, index + 1,
                                            r.is_object() ? r.value("subcommand", std::string("?")) : "?", e.what()));
            }
        }
        if (shared > 0)
            cal.notes.push_back(fmt::format("{}: {} record(s) of ranks sharing a GPU (shared_gpu) not used: not "
                                            "hardware figures", file, shared));
        for (const auto& [of, count] : emulated)
            cal.notes.push_back(fmt::format("{}: {} record(s) of {} under {} limits (SCALEBENCH_DEVICE_LIMITS) not "
                                            "used: neither {}'s figures (other kernel variants ran) nor {}'s (the "
                                            "device's SMs, clocks and memory did)",
                                            file, count, of.first, of.second, of.first, of.second));
    }
    for (int i = 0; i < 4; ++i) {
        if (bases[i].empty()) continue;
        cal.gemm_base[i] = std::min(1.0, median(bases[i]));
        cal.notes.push_back(fmt::format("{} GEMM efficiency at large shapes {:.3f} from {} gemm record(s) in the files",
                                        kPrecisionNames[i], cal.gemm_base[i], bases[i].size()));
    }
    if (!optimizer_fractions.empty()) cal.optimizer_memory_efficiency = std::min(1.0, median(optimizer_fractions));
    for (const std::string& note : profiled_op_notes(CostModel(hw, cal))) cal.notes.push_back(note);
    if (cal.collective_alpha_us >= 0)
        cal.notes.push_back(fmt::format("all-reduce call latency {:.2f} us (comm fit alpha)", cal.collective_alpha_us));
    return cal;
}

// ---------------------------------------------------------------- cost model

double CostModel::gemm_shape_factor(int64_t m, int64_t n, int64_t k, int64_t batch) const {
    constexpr double kTile = 128.0, kFill = 128.0;
    // cuBLAS splits a long K over several blocks when the output tiles leave SMs idle (the
    // weight gradients of convolutions: 64 x 576 outputs over 800 k rows), each split at
    // least kMinSplitK deep; the partial products' reduction is small next to the operands.
    constexpr double kMinSplitK = 512.0;
    const double sms = hw.sm_count.value;
    const double tiles = std::ceil(m / kTile) * std::ceil(n / kTile) * static_cast<double>(batch);
    const double splits = std::max(1.0, std::min(std::floor(sms / tiles), std::floor(k / kMinSplitK)));
    const double blocks = tiles * splits;
    const double waves = std::ceil(blocks / sms);
    // A partly filled tile does full work: count the useful fraction of the tiles too.
    const double fill_mn = (static_cast<double>(m) * n * batch) / (tiles * kTile * kTile);
    const double k_per_block = k / splits;
    return blocks / (waves * sms) * fill_mn * (k_per_block / (k_per_block + kFill));
}

double CostModel::peak_tflops(Precision precision) const {
    const double clock = hw.clock_factor.value;
    switch (precision) {
        case Precision::fp32: return clock * hw.peak.fp32_tflops;
        case Precision::tf32: return clock * hw.peak.tf32_tflops;
        case Precision::bf16: return clock * hw.peak.bf16_tflops;
        case Precision::fp16: return clock * hw.peak.fp16_tflops;
    }
    return 0;
}

double CostModel::measured_efficiency(const ProfiledOp& p) const {
    // The time the op kept the GPU busy: its measured time less the gap op_ms adds back; at
    // least half the measured time, so an op that is nearly all launch still has a rate.
    const double busy_s = std::max(p.ms - hw.kernel_gap_us.value * 1e-3, 0.5 * p.ms) * 1e-3;
    if (p.op.tensor_core) return p.op.flops / busy_s / (peak_tflops(p.precision) * 1e12);
    return p.op.bytes / busy_s / (hw.peak.mem_bw_gbps * 1e9);
}

const ProfiledOp* CostModel::closest_profiled(const TracedOp& op, Precision precision) const {
    auto log_ratio = [](int64_t a, int64_t b) {
        return a == b ? 0.0 : a > 0 && b > 0 ? std::abs(std::log(static_cast<double>(a) / static_cast<double>(b)))
                                             : INFINITY;
    };
    const double limit = std::log(kCloseFactor) * (1 + 1e-12);
    const ProfiledOp* best = nullptr;
    double best_distance = INFINITY;
    for (const ProfiledOp& p : calibration.profiled_ops) {
        const TracedOp& q = p.op;
        if (q.kind != op.kind || q.variant != op.variant || q.dtype != op.dtype || q.tensor_core != op.tensor_core ||
            q.trans_a != op.trans_a || q.trans_b != op.trans_b || (op.tensor_core && p.precision != precision))
            continue;
        const double d[4] = {log_ratio(q.m, op.m), log_ratio(q.n, op.n), log_ratio(q.k, op.k),
                             log_ratio(q.batch, op.batch)};
        if (*std::max_element(d, d + 4) > limit) continue;
        // Of equally near shapes the one whose bytes are nearest (bias, accumulation).
        const double distance =
            d[0] + d[1] + d[2] + d[3] + (q.bytes > 0 && op.bytes > 0 ? 1e-6 * std::abs(std::log(q.bytes / op.bytes)) : 0);
        if (distance < best_distance) {
            best = &p;
            best_distance = distance;
        }
    }
    return best;
}

double CostModel::profiled_kind_efficiency(const std::string& kind, Precision precision, double min_bytes) const {
    // Work per step over time per step at the rate each call implies.
    double work = 0, at_full_rate = 0;
    for (const ProfiledOp& p : calibration.profiled_ops) {
        if (p.op.kind != kind || (p.op.tensor_core && p.precision != precision)) continue;
        if (!p.op.tensor_core && p.op.bytes < min_bytes) continue;
        const double w = (p.op.tensor_core ? p.op.flops : p.op.bytes) * p.calls_per_step;
        const double e = p.op.tensor_core ? measured_efficiency(p) / gemm_shape_factor(p.op) : measured_efficiency(p);
        work += w;
        at_full_rate += w / e;
    }
    return work > 0 ? work / at_full_rate : -1;
}

double CostModel::benchmarked_tflops(Precision precision) const {
    return peak_tflops(precision) / hw.clock_factor.value;
}

double CostModel::profile_gemm_base(Precision precision) const {
    std::vector<double> bases;
    for (const PublishedGemm& g : hw.gemm)
        if (g.precision == precision) bases.push_back(g.tflops / benchmarked_tflops(precision) / gemm_shape_factor(g.m, g.n, g.k, 1));
    SB_REQUIRE(!bases.empty(), fmt::format("{}: no {} GEMM rate", hw.source, precision_name(precision)));
    return median(bases);
}

double CostModel::gemm_fraction_cap(Precision precision) const {
    double cap = 1.0;
    for (const PublishedGemm& g : hw.gemm)
        if (g.precision == precision) cap = std::max(cap, g.tflops / benchmarked_tflops(precision));
    return cap;
}

double CostModel::gemm_efficiency(const TracedOp& op, Precision precision) const {
    const double cap = gemm_fraction_cap(precision);
    if (const ProfiledOp* near = closest_profiled(op, precision))
        return std::min(cap, measured_efficiency(*near) * gemm_shape_factor(op) / gemm_shape_factor(near->op));
    // Attention's products at its kind's measured rate (there is no `gemm` sweep of them).
    if (const double base = profiled_kind_efficiency(op.kind, precision); op.kind != "gemm" && base > 0)
        return std::min(cap, base * gemm_shape_factor(op));
    std::vector<double> same_shape;
    for (const auto& g : calibration.gemms)
        if (g.precision == precision_index(precision) && g.m == op.m && g.n == op.n && g.k == op.k && op.batch == 1)
            same_shape.push_back(g.fraction);
    if (same_shape.empty() && op.batch == 1)
        for (const PublishedGemm& g : hw.gemm)
            if (g.precision == precision && g.m == op.m && g.n == op.n && g.k == op.k)
                same_shape.push_back(g.tflops / benchmarked_tflops(precision));
    if (!same_shape.empty()) return std::min(cap, median(same_shape));
    double base = calibration.gemm_base[precision_index(precision)];
    if (base < 0) base = profile_gemm_base(precision);
    return std::min(cap, base * gemm_shape_factor(op));
}

double CostModel::memory_gbps() const {
    return calibration.memory_efficiency > 0 ? hw.peak.mem_bw_gbps * calibration.memory_efficiency : hw.copy_gbps.value;
}

double CostModel::l2_hit_fraction(const TracedOp& op) const {
    if (hw.l2_copy_gbps.value <= 0 || op.tensor_core || op.bytes <= 0) return 0;
    return std::min(1.0, hw.l2_mb.value * 1024.0 * 1024.0 / op.bytes);
}

double CostModel::memory_fraction(const TracedOp& op) const {
    if (!op.tensor_core) {
        if (const ProfiledOp* near = closest_profiled(op, Precision::fp32)) return measured_efficiency(*near);
        // A kernel far smaller than this op is bound by its launch, not by memory: it says nothing here.
        if (const double kind = profiled_kind_efficiency(op.kind, Precision::fp32, op.bytes / kSmallerKernelFactor);
            kind > 0)
            return kind;
        const bool optimizer = op.kind == "adamw_step" || op.kind == "sgd_step";
        if (optimizer && calibration.optimizer_memory_efficiency > 0) return calibration.optimizer_memory_efficiency;
        if (const double hit = l2_hit_fraction(op); hit > 0)
            return 1.0 / (hit / hw.l2_copy_gbps.value + (1 - hit) / memory_gbps()) / hw.peak.mem_bw_gbps;
    }
    return memory_gbps() / hw.peak.mem_bw_gbps;
}

CostModel::OpTime CostModel::op_time(const TracedOp& op, Precision precision) const {
    OpTime t;
    t.ms = op.bytes / (hw.peak.mem_bw_gbps * memory_fraction(op) * 1e9) * 1e3;
    if (op.tensor_core && op.flops > 0) {
        const double peak = peak_tflops(precision);
        SB_REQUIRE(peak > 0, fmt::format("{} has no {} rate", hw.peak.name, precision_name(precision)));
        const double compute_ms = op.flops / (peak * 1e12 * gemm_efficiency(op, precision)) * 1e3;
        if (compute_ms > t.ms) t = {compute_ms, false};
    }
    t.ms += hw.kernel_gap_us.value * 1e-3;
    return t;
}

double CostModel::ring_busbw_gbps(int g) const {
    if (calibration.ring_busbw_gbps > 0) return calibration.ring_busbw_gbps;
    if (hw.link == LinkClass::nvlink) return hw.link_gbps.value * hw.link_efficiency.value;
    // A ring all-reduce at busbw B moves B into and out of every GPU. Over PCIe each GPU's link
    // carries it at the link's efficiency.
    double busbw = pcie_gbps(static_cast<int>(hw.pcie_gen.value), static_cast<int>(hw.pcie_lanes.value)) *
                   hw.link_efficiency.value;
    if (hw.link == LinkClass::host_staged) {
        // Every hop is a copy to host memory (device to host) and one from it (host to device).
        // GPUs under one switch share its uplink for both; host memory takes a write and a read
        // of every GPU's B at once: 2 g B at most its bandwidth.
        busbw /= std::min<double>(hw.gpus_per_switch.value, std::max(g, 1));
        busbw = std::min(busbw, hw.host_mem_bw_gbps.value / (2.0 * std::max(g, 1)));
    }
    // A ring over GPUs of both sockets (they fill socket 0 first) crosses the link between them.
    const double per_socket = hw.gpus_per_node.value / hw.sockets.value;
    if (hw.sockets.value > 1 && g > per_socket) busbw = std::min(busbw, hw.inter_socket_gbps.value);
    return busbw;
}

double CostModel::all_reduce_ms(double bytes, int g, int nodes) const {
    SB_REQUIRE(g >= 1 && nodes >= 1, "all_reduce_ms: positive sizes");
    // The call's fixed cost: its launch and the smallest kernel (measured where calibrated).
    const double alpha_us = calibration.collective_alpha_us >= 0 ? calibration.collective_alpha_us : hw.bucket_launch_us.value;
    double us = alpha_us;
    if (g == 1 && nodes == 1) us += 2.0 * bytes / (memory_gbps() * 1e9) * 1e6;  // NCCL's one-rank reduce kernel
    if (g > 1) {
        // One node: ring all-reduce, 2(g-1) steps. Several: only its reduce-scatter and
        // all-gather run in the node (the same 2(g-1) steps, the same bytes per GPU).
        us += 2.0 * (g - 1) * hw.link_latency_us.value + 2.0 * (g - 1) / g * bytes / (ring_busbw_gbps(g) * 1e9) * 1e6;
    }
    if (nodes > 1) {
        SB_REQUIRE(hw.has_network(), "all_reduce_ms: multi-node needs a network");
        // Each GPU's 1/g of the data crosses the network on its share of the node's NICs.
        const double per_gpu = hw.nic_gbps.value * hw.nics_per_node.value / g * hw.network_efficiency.value;
        const double part = bytes / g;
        const double ring = 2.0 * (nodes - 1) * hw.network_latency_us.value +
                            2.0 * (nodes - 1) / nodes * part / (per_gpu * 1e9) * 1e6;
        // Double binary tree: log depth up and down, each byte sent up and down once.
        const double tree = 2.0 * std::ceil(std::log2(nodes)) * hw.network_latency_us.value +
                            2.0 * part / (per_gpu * 1e9) * 1e6;
        us += std::min(ring, tree);  // NCCL picks the faster algorithm per size
    }
    return us * 1e-3;
}

double CostModel::all_reduce_busbw_gbps(double bytes, int g, int nodes) const {
    const int n = g * nodes;
    return bytes / (all_reduce_ms(bytes, g, nodes) * 1e-3) / 1e9 * 2.0 * (n - 1) / n;
}

double CostModel::overlapped_compute_rate(double bytes, double comm_ms, int g, int nodes, bool memory_bound) const {
    const int n = g * nodes;
    // Bytes each GPU sends and receives: 2(n-1)/n of the buffer, each read from or written to its
    // memory once; one rank reads and writes the buffer once.
    const double crossing = n > 1 ? 2.0 * (n - 1) / n * bytes : bytes;
    const double memory_share = std::min(1.0, 2.0 * crossing / (comm_ms * 1e-3) / (memory_gbps() * 1e9));
    const double sm_share = std::min(1.0, hw.comm_sms.value / hw.sm_count.value);
    const double beside = hw.link == LinkClass::host_staged && g > 1 ? hw.staged_overlap.value : 1.0;
    return beside * (1.0 - (memory_bound ? memory_share : sm_share));
}

// ---------------------------------------------------------------- schedule

double expected_max_of_normals(int n) {
    SB_REQUIRE(n >= 1, "expected_max_of_normals: n >= 1");
    if (n == 1) return 0;
    // E[max] = integral of x n phi(x) Phi(x)^(n-1) dx, by the midpoint rule over [-12, 12].
    constexpr int kSteps = 24000;
    constexpr double kLo = -12, kHi = 12, kDx = (kHi - kLo) / kSteps;
    double sum = 0;
    for (int i = 0; i < kSteps; ++i) {
        const double x = kLo + (i + 0.5) * kDx;
        const double phi = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
        const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
        sum += x * n * phi * std::pow(cdf, n - 1) * kDx;
    }
    return sum;
}

ProjectedStep schedule_step(const StepTrace& trace, const CostModel& model, int g, int nodes) {
    ProjectedStep s;
    s.world_size = g * nodes;
    s.nodes = nodes;
    // The comm stream: bucket b starts when the op after which it was issued is done and the
    // stream is free; while it runs, compute progresses at the rate it leaves (overlapped_compute_rate).
    struct Busy {
        double start, end, bytes;
    };
    std::vector<Busy> comm;
    size_t next_bucket = 0, active = 0;
    double t = 0, comm_free = 0;
    auto issue = [&](size_t position) {
        for (; next_bucket < trace.all_reduces.size() && trace.all_reduces[next_bucket].issued_after <= position; ++next_bucket) {
            const double bytes = trace.all_reduces[next_bucket].bytes;
            const double ms = model.all_reduce_ms(bytes, g, nodes);
            const double start = std::max(comm_free, t);
            comm.push_back({start, comm_free = start + ms, bytes});
            s.allreduce_ms += ms;
        }
    };
    auto run = [&](const TracedOp& op) {
        const CostModel::OpTime cost = model.op_time(op, trace.precision);
        double work = cost.ms;  // at the full rate
        while (work > 0) {
            while (active < comm.size() && comm[active].end <= t) ++active;
            if (active == comm.size() || comm[active].start > t) {
                // Nothing on the comm stream until the next bucket starts (or at all).
                const double free_until = active < comm.size() ? comm[active].start : INFINITY;
                const double done = std::min(work, free_until - t);
                t += done;
                work -= done;
                continue;
            }
            const Busy& c = comm[active];
            const double rate = model.overlapped_compute_rate(c.bytes, c.end - c.start, g, nodes, cost.memory_bound);
            const double room = (c.end - t) * rate;  // the work that fits before this bucket ends
            if (work < room) {
                t += work / rate;
                work = 0;
            } else {
                t = c.end;
                work -= room;
            }
        }
    };
    issue(0);
    for (size_t i = 0; i < trace.backward_end; ++i) {
        run(trace.ops[i]);
        issue(i + 1);
    }
    s.compute_ms = t;
    issue(trace.backward_end);
    t = std::max(t, comm_free);  // the bucket waits, then the work issued after them
    for (size_t i = trace.backward_end; i < trace.optimizer_begin; ++i) t += model.op_ms(trace.ops[i], trace.precision);
    s.exposed_comm_ms = t - s.compute_ms;
    const double optimizer_start = t;
    for (size_t i = trace.optimizer_begin; i < trace.ops.size(); ++i) t += model.op_ms(trace.ops[i], trace.precision);
    s.optimizer_ms = t - optimizer_start;
    // The slowest of N ranks: each rank's step a normal draw around this one (sigma step_jitter_pct
    // of it); the others wait for it in the all-reduce, which the runner times as exposed communication.
    s.straggler_ms = expected_max_of_normals(s.world_size) * model.hw.step_jitter_pct.value / 100.0 * t;
    s.exposed_comm_ms += s.straggler_ms;
    s.step_ms = t + s.straggler_ms;
    return s;
}

std::vector<std::string> projection_assumptions(const CostModel& m) {
    std::vector<std::string> a = {
        "op time = max(FLOPs / (peak x GEMM efficiency), bytes / (memory bandwidth x memory efficiency)) + kernel gap",
        "GEMM efficiency = large-shape efficiency x wave quantization over 128x128 tiles on the SMs x K fill k/(k+128)",
        "non-GEMM ops are memory-bound: every operand read once, every result written once",
        "on one GPU each bucket's all-reduce (ncclAvg) reads and writes its bytes once (NCCL's one-rank reduce kernel)",
        "all-reduce: ring, 2(n-1) steps of link latency + 2(n-1)/n x bytes / busbw within a node; across nodes "
        "reduce-scatter and all-gather within the node around a ring or tree (the faster) between nodes",
        "buckets start in order on one comm stream when the op that made their last gradient is done",
        "exposed communication = wait for the last bucket after backward, plus the work issued after the waits "
        "(16-bit gradient casts back, fp16 unscale)",
        fmt::format("each bucket's all-reduce call costs its launch ({:g} us) besides 2(n-1) ring steps of link latency",
                    m.hw.bucket_launch_us.value),
        fmt::format("the step of N ranks is the slowest of N: the expected maximum of N normal draws of sigma {:g}% of the "
                    "step (0 at one rank, {:.2f} sigma at 8), charged as exposed communication",
                    m.hw.step_jitter_pct.value, expected_max_of_normals(8)),
        "one step of a steady state: no host launch gaps; data loading is outside the model (the runner's data is on "
        "the device)",
        fmt::format("link class {}: ring busbw {:.1f} GB/s within a node of {} GPUs", link_class_name(m.hw.link),
                    m.ring_busbw_gbps(static_cast<int>(m.hw.gpus_per_node.value)), static_cast<int>(m.hw.gpus_per_node.value)),
    };
    for (const auto& n : m.calibration.notes) a.push_back("calibration: " + n);
    if (m.calibration.notes.empty()) a.push_back("no calibration: every figure from the profile");
    return a;
}

}  // namespace sb
