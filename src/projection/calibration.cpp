// Calibration (src/projection/projection.h): profile figures replaced by ones fitted from `gemm`,
// `comm`, one-GPU `train` and `op_profile` records of the same GPU.
#include "src/projection/calibration_checks.h"
#include "src/projection/projection.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "base/errors.h"
#include "src/core/results.h"

namespace sb {

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
                    const double shape = shape_model.gemm_shape_factor(r.at("m").get<int64_t>(), r.at("n").get<int64_t>(),
                                                                       r.at("k").get<int64_t>(), 1);
                    const double fraction = r["fraction_of_peak"].get<double>();  // in its range: checked above
                    bases[i].push_back(fraction / shape);
                    cal.gemms.push_back({i, r.at("m").get<int64_t>(), r.at("n").get<int64_t>(), r.at("k").get<int64_t>(), fraction});
                } else if (sub == "train" && r.value("world_size", 0) == 1 && r.contains("optimizer_ms")) {
                    // The optimizer step is one memory-bound kernel over the flat buffers: its
                    // measured time against the bytes the trace says it moves.
                    const TrainConfig cfg = config_of_record(r, fmt::format("{} record {} config", file, index + 1));
                    const StepTrace t = trace_step(cfg, r["local_batch"].get<int>());
                    double bytes = 0;
                    for (size_t i = t.optimizer_begin; i < t.ops.size(); ++i) bytes += t.ops[i].bytes;
                    const double ms = r.at("optimizer_ms").at("median").get<double>() -
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
                    const nlohmann::json fit = r.value("fit", nlohmann::json());
                    if (fit.is_object() && fit.contains("alpha_us"))
                    {
                        const double alpha = fit["alpha_us"].get<double>();
                        cal.collective_alpha_us = cal.collective_alpha_us < 0 ? alpha : std::min(cal.collective_alpha_us, alpha);
                    }
                    const nlohmann::json& last = r["rows"].back();
                    if (world == 1 && last.contains("out_of_place") && last["out_of_place"].is_object()) {
                        // One rank's out-of-place all-reduce is a device-to-device copy: bytes read and written.
                        const double bytes = last.at("size_bytes").get<double>();
                        const double us = last["out_of_place"].at("time_us").get<double>();
                        cal.memory_efficiency = std::min(1.0, 2.0 * bytes / (us * 1e-6) / 1e9 / hw.peak.mem_bw_gbps);
                        cal.notes.push_back(fmt::format("memory efficiency {:.3f} from {}: single-rank out-of-place all_reduce "
                                                        "of {} bytes (a device copy) in {:.1f} us",
                                                        cal.memory_efficiency, file, bytes, us));
                    } else if (world > 1 && world <= static_cast<int>(hw.gpus_per_node.value) && fit.is_object() &&
                               fit.contains("beta_busbw_gbps")) {
                        cal.ring_busbw_gbps = fit["beta_busbw_gbps"].get<double>();
                        if (!(cal.ring_busbw_gbps > 0))
                            throw UserError(fmt::format("{}: key 'fit.beta_busbw_gbps': 0 for {} ranks: a sweep "
                                                        "between ranks moves its bytes at some rate",
                                                        where, world));
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
        cal.gemm_base[i] = std::min(1.0, median_value(bases[i]));
        cal.notes.push_back(fmt::format("{} GEMM efficiency at large shapes {:.3f} from {} gemm record(s) in the files",
                                        kPrecisionNames[i], cal.gemm_base[i], bases[i].size()));
    }
    if (!optimizer_fractions.empty()) cal.optimizer_memory_efficiency = std::min(1.0, median_value(optimizer_fractions));
    for (const std::string& note : profiled_op_notes(CostModel(hw, cal))) cal.notes.push_back(note);
    if (cal.collective_alpha_us >= 0)
        cal.notes.push_back(fmt::format("all-reduce call latency {:.2f} us (comm fit alpha)", cal.collective_alpha_us));
    return cal;
}

}  // namespace sb
