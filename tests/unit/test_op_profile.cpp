// The per-op profile and the calibration it feeds (README: Projection, "Per-op calibration"):
// TimedOps forwards to the real backend and times each call as the op TraceOps records for
// it; a profile on the CPU backend has exactly the ops of the projection's trace, with its
// FLOPs and bytes; op_profile records change the projection where they should and by as
// much as they say (a kind measured at half the bandwidth doubles its ops' time), and bad
// records are refused with the file, the record and the reason.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "models/cpu/cpu_ops.h"
#include "models/timed_ops.h"
#include "models/trace_ops.h"
#include "src/core/config.h"
#include "base/errors.h"
#include "src/projection/hardware.h"
#include "src/projection/op_profile.h"
#include "src/projection/projection.h"
#include "src/core/results.h"

namespace sb {
namespace {

const std::string kSource = SCALEBENCH_SOURCE_DIR;

HardwareProfile h200() { return load_hardware_profile(kSource + "/configs/hardware/h200-sxm.yaml"); }

TEST(TimedOps, ForwardsEveryCallAndTimesTheOpsTheTraceRecords) {
    CpuOps cpu(Precision::fp32);
    TimedOps timed(cpu);
    DeviceBuffer a(timed, 6 * 4), b(timed, 6 * 4), out(timed, 6 * 4);
    const std::vector<float> x = {1, 2, 3, 4, 5, 6}, y = {10, 20, 30, 40, 50, 60};
    timed.upload(a.get(), x.data(), 24);
    timed.upload(b.get(), y.data(), 24);
    const Tensor ta = a.tensor(DType::f32, 2, 3), tb = b.tensor(DType::f32, 2, 3), tout = out.tensor(DType::f32, 2, 3);

    timed.add(ta, tb, tout);  // not recording: forwarded only
    EXPECT_TRUE(timed.samples().empty());
    timed.start_recording();
    timed.add(ta, tb, tout);
    timed.gemm(false, true, 1.0f, ta, tb, 0.0f, Tensor{out.get(), DType::f32, 2, 2});
    timed.advance_dropout_generation();  // not an op of the trace: forwarded, not timed
    timed.stop_recording();
    timed.add(ta, tb, tout);

    std::vector<float> sum(6);
    timed.download(sum.data(), out.get(), 24);
    EXPECT_EQ(sum, (std::vector<float>{11, 22, 33, 44, 55, 66}));
    // The same calls on TraceOps give the same ops: one accounting.
    TraceOps trace(Precision::fp32);
    trace.add(ta, tb, tout);
    trace.gemm(false, true, 1.0f, ta, tb, 0.0f, Tensor{out.get(), DType::f32, 2, 2});
    ASSERT_EQ(timed.samples().size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(op_key(timed.samples()[i].op), op_key(trace.trace()[i]));
        EXPECT_GE(timed.samples()[i].ms, 0.0);
    }
    EXPECT_EQ(timed.checksum(a.get(), 24), cpu.checksum(a.get(), 24));
    EXPECT_EQ(timed.name(), "cpu");
    EXPECT_FALSE(timed.has_graphs());
    EXPECT_FALSE(timed.hold_stream());
}

TEST(TimedOps, TheTimersMarkerSlotsAreItsOwn) {
    CpuOps cpu(Precision::fp32);
    TimedOps timed(cpu);
    timed.record_marker(0);
    timed.record_marker(1);
    EXPECT_GE(timed.elapsed_ms(0, 1), 0.0);
    EXPECT_THROW(timed.record_marker(TimedOps::kOpStartMarker), std::exception);
    EXPECT_THROW(timed.elapsed_ms(0, TimedOps::kOpEndMarker), std::exception);
}

TEST(OpProfile, SamplesGroupByOpInTheOrderOfTheirFirstCall) {
    TracedOp a, b, opt;
    a.kind = "add";
    a.bytes = 12;
    b.kind = "dropout";
    b.bytes = 8;
    opt.kind = "adamw_step";
    // Two steps of a, b, a, opt, and a step that skipped the optimizer (fp16 after an overflow).
    const std::vector<std::vector<TimedOps::Sample>> steps = {
        {{a, 1.0}, {b, 5.0}, {a, 3.0}, {opt, 9.0}}, {{a, 100.0}, {b, 100.0}, {a, 100.0}},
        {{a, 2.0}, {b, 7.0}, {a, 4.0}, {opt, 11.0}}};
    const std::vector<OpTiming> ops = summarize_op_samples(steps);
    ASSERT_EQ(ops.size(), 3u);
    EXPECT_EQ(ops[0].op.kind, "add");
    EXPECT_EQ(ops[0].calls_per_step, 2);
    EXPECT_EQ(ops[0].first_index, 0u);
    EXPECT_EQ(ops[0].ms.count, 4);  // the two whole steps only
    EXPECT_DOUBLE_EQ(ops[0].ms.median, 2.5);
    EXPECT_EQ(ops[1].calls_per_step, 1);
    EXPECT_EQ(ops[1].first_index, 1u);
    EXPECT_DOUBLE_EQ(ops[1].ms.median, 6.0);
    EXPECT_EQ(ops[2].op.kind, "adamw_step");
    EXPECT_EQ(ops[2].first_index, 3u);
    EXPECT_DOUBLE_EQ(ops[2].ms.median, 10.0);
}

TrainConfig tiny_gpt() {
    TrainConfig cfg = load_config_file(kSource + "/configs/ci-transformer.yaml");
    cfg.transformer.shape.arch = TransformerArch::gpt;
    cfg.transformer.shape.dropout = 0.1f;  // dropout kernels and attention's dropout variant too
    cfg.transformer.shape.attention_dropout = 0.1f;
    validate_config(cfg);
    return cfg;
}

// The profile is the trace, measured: on the CPU backend the profile has one entry per op of the trace, with
// the trace's FLOPs and bytes and as many calls as the trace has.
TEST(OpProfile, OnTheCpuItHasExactlyTheOpsOfTheTrace) {
    std::vector<TrainConfig> configs = {load_config_file(kSource + "/configs/ci-small.yaml"),
                                        load_config_file(kSource + "/configs/ci-transformer.yaml"), tiny_gpt()};
    configs[0].optimizer.kind = OptimizerConfig::Kind::sgd;  // both optimizers
    for (TrainConfig& cfg : configs) {
        cfg.backend = BackendChoice::cpu;
        cfg.warmup = 1;
        cfg.steps = 2;
        CpuOps cpu(Precision::fp32);
        const OpProfile profile = profile_training_ops(cfg, cpu);
        const StepTrace trace = trace_step(cfg, per_rank_batch(cfg, 1));

        std::map<std::string, int> traced_calls;
        std::vector<std::string> first_seen;
        for (const TracedOp& op : trace.ops)
            if (traced_calls[op_key(op)]++ == 0) first_seen.push_back(op_key(op));
        ASSERT_EQ(profile.ops.size(), traced_calls.size()) << cfg.source;
        for (size_t i = 0; i < profile.ops.size(); ++i) {
            const OpTiming& t = profile.ops[i];
            // The key holds kind, variant, dtype, shape, transposes, FLOPs and bytes.
            EXPECT_EQ(op_key(t.op), first_seen[i]) << cfg.source << ": op " << i;
            EXPECT_EQ(t.calls_per_step, traced_calls[op_key(t.op)]) << op_label(t.op);
            EXPECT_EQ(t.ms.count, t.calls_per_step * cfg.steps) << op_label(t.op);
            EXPECT_GE(t.ms.min, 0.0);
        }
        EXPECT_EQ(profile.num_params, trace.num_params);
        EXPECT_EQ(profile.local_batch, trace.local_batch);

        // The records read back as the same ops and times.
        const auto records = op_profile_records(profile, cfg, cpu, {{"hostnames", {"test"}}});
        ASSERT_EQ(records.size(), profile.ops.size());
        for (size_t i = 0; i < records.size(); ++i) {
            const ProfiledOp back = profiled_op_of_record(records[i]);
            EXPECT_EQ(op_key(back.op), op_key(profile.ops[i].op));
            EXPECT_DOUBLE_EQ(back.ms, profile.ops[i].ms.median);
            EXPECT_EQ(back.calls_per_step, profile.ops[i].calls_per_step);
            EXPECT_EQ(records[i]["cuda_graphs"], false);
            EXPECT_EQ(records[i]["config"]["cuda_graphs"], false);
        }
    }
}

// ---- calibration from op_profile records

// Writes op_profile records of `ops` as measured on `gpu` in a run of bert-base at batch 32, each
// taking `ms(op)`.
template <class Ms>
std::string write_profile(const std::string& name, const std::vector<TracedOp>& ops, Ms ms,
                          const std::string& gpu = "NVIDIA H200", Precision precision = Precision::bf16) {
    OpProfile profile;
    profile.model = "bert";
    profile.local_batch = 32;
    profile.measured_steps = 1;
    for (const TracedOp& op : ops) {
        const double t = ms(op);
        profile.ops.push_back({op, 0, 1, Summary{t, t, t, t, t, t, 1}});
    }
    const std::string path = (std::filesystem::temp_directory_path() /
                              fmt::format("scalebench-op-profile-{}-{}.jsonl", name, ::getpid())).string();
    std::filesystem::remove(path);
    TrainConfig cfg = load_config_file(kSource + "/configs/bert-base.yaml");
    cfg.precision = precision;
    for (const auto& r : op_profile_records(profile, cfg, TraceOps(precision), {{"gpu", {{"name", gpu}}}}))
        append_record(path, r);
    return path;
}

std::vector<TracedOp> distinct(const std::vector<TracedOp>& ops, const std::string& kind) {
    std::map<std::string, TracedOp> by_key;
    for (const TracedOp& op : ops)
        if (op.kind == kind) by_key.emplace(op_key(op), op);
    std::vector<TracedOp> out;
    for (const auto& [key, op] : by_key) out.push_back(op);
    return out;
}

StepTrace bert_base_trace(int batch) {
    return trace_step(load_config_file(kSource + "/configs/bert-base.yaml"), batch);
}

TEST(OpProfileCalibration, AKindMeasuredAtHalfTheBandwidthDoublesItsOpsTime) {
    const HardwareProfile hw = h200();
    const CostModel plain(hw);
    const double gap_ms = hw.kernel_gap_us.value * 1e-3;
    const StepTrace t32 = bert_base_trace(32);
    const std::vector<TracedOp> layernorms = distinct(t32.ops, "layernorm_forward");
    ASSERT_GE(layernorms.size(), 1u);
    // Measured at half the fraction of bandwidth the model assumes for it.
    const std::string file = write_profile("half-bandwidth", layernorms, [&](const TracedOp& op) {
        return op.bytes / (hw.peak.mem_bw_gbps * 1e9 * plain.memory_fraction(op) / 2) * 1e3 + gap_ms;
    });
    const CostModel calibrated(hw, calibrate(hw, {file}));
    ASSERT_EQ(calibrated.calibration.profiled_ops.size(), layernorms.size());

    // The profiled shapes (batch 32), and through the kind's fraction the shapes 8x larger
    // (batch 256) that no profiled shape is near: layernorm_forward's time doubles (less the
    // gap); every other op keeps its time.
    for (const StepTrace& t : {t32, bert_base_trace(256)}) {
        int doubled = 0;
        for (const TracedOp& op : t.ops) {
            const double before = plain.op_ms(op, t.precision), after = calibrated.op_ms(op, t.precision);
            if (op.kind == "layernorm_forward") {
                EXPECT_NEAR(after - gap_ms, 2.0 * (before - gap_ms), 1e-9 * before) << op_label(op);
                ++doubled;
            } else {
                EXPECT_DOUBLE_EQ(after, before) << op_label(op);
            }
        }
        EXPECT_EQ(doubled, 2);  // the embeddings' and the MLM head's (a layer's two are residual_layernorm_forward)
    }
    bool noted = false;
    for (const auto& note : calibrated.calibration.notes)
        noted = noted || note.find("op profile: layernorm_forward") != std::string::npos;
    EXPECT_TRUE(noted);

    // Another GPU's profile says nothing about this one.
    const std::string other = write_profile("other-gpu", layernorms, [](const TracedOp&) { return 1.0; },
                                            "NVIDIA A100-SXM4-80GB");
    const Calibration none = calibrate(hw, {other});
    EXPECT_TRUE(none.profiled_ops.empty());
    EXPECT_TRUE(none.notes.empty());
}

// A profile taken under SCALEBENCH_DEVICE_LIMITS names the architecture it emulated, and calibration
// counts it as neither the device's figures (other kernel variants ran) nor the emulated GPU's (the
// device's SMs, clocks and memory did): it is left out with a note saying so.
TEST(OpProfileCalibration, AProfileUnderEmulatedLimitsIsNeitherGpusFigure) {
    const std::vector<TracedOp> layernorms = distinct(bert_base_trace(32).ops, "layernorm_forward");
    OpProfile profile;
    profile.model = "bert";
    profile.local_batch = 32;
    profile.measured_steps = 1;
    for (const TracedOp& op : layernorms) profile.ops.push_back({op, 0, 1, Summary{0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 1}});
    TrainConfig cfg = load_config_file(kSource + "/configs/bert-base.yaml");
    cfg.precision = Precision::bf16;
    const nlohmann::json native = {{"gpu", {{"name", "NVIDIA H200"}, {"device_limits", {{"arch", "sm_90"}, {"source", "device"}}}}}};
    const nlohmann::json emulated = {
        {"gpu",
         {{"name", "NVIDIA H200"},
          {"device_limits",
           {{"arch", "sm_89"}, {"source", "CUDA C++ Programming Guide (8.9) (SCALEBENCH_DEVICE_LIMITS on sm_90)"}}}}}};
    EXPECT_EQ(emulated_arch_of_environment(native), "");
    EXPECT_EQ(emulated_arch_of_environment({{"hostnames", {"test"}}}), "");  // a CPU run: no limits at all
    EXPECT_EQ(emulated_arch_of_environment(emulated), "sm_89");

    const std::string path = (std::filesystem::temp_directory_path() /
                              fmt::format("scalebench-op-profile-emulated-{}.jsonl", ::getpid())).string();
    std::filesystem::remove(path);
    for (const auto& r : op_profile_records(profile, cfg, TraceOps(Precision::bf16), native)) {
        EXPECT_TRUE(r["emulated_arch"].is_null());
    }
    for (const auto& r : op_profile_records(profile, cfg, TraceOps(Precision::bf16), emulated)) {
        EXPECT_EQ(r["emulated_arch"], "sm_89");
        EXPECT_EQ(emulated_arch_of_record(r), "sm_89");
        append_record(path, r);
    }
    // Not the H200's figures, and not the RTX 4090's (sm_89) either.
    for (const char* profile_file : {"h200-sxm", "rtx4090-24gb-pcie4"}) {
        const HardwareProfile hw = load_hardware_profile(kSource + "/configs/hardware/" + profile_file + ".yaml");
        const Calibration cal = calibrate(hw, {path});
        EXPECT_TRUE(cal.profiled_ops.empty()) << profile_file;
        ASSERT_EQ(cal.notes.size(), 1u) << profile_file;
        EXPECT_NE(cal.notes[0].find(fmt::format("{} record(s) of NVIDIA H200 under sm_89 limits", layernorms.size())),
                  std::string::npos)
            << cal.notes[0];
    }
    std::filesystem::remove(path);
}

// A record's bytes are those of the trace it was made with: calibration takes the bytes the current
// trace of its run gives the op, so an op of the profiled shape takes the measured time whatever
// byte count the record carries.
TEST(OpProfileCalibration, AProfiledOpTakesTheBytesOfTheCurrentTrace) {
    const HardwareProfile hw = h200();
    const std::vector<TracedOp> layernorms = distinct(bert_base_trace(32).ops, "layernorm_forward");
    ASSERT_GE(layernorms.size(), 1u);
    std::vector<TracedOp> stale = layernorms;
    for (TracedOp& op : stale) op.bytes *= 2;  // another byte model's count
    const double measured_ms = 0.25;
    const std::string file = write_profile("stale-bytes", stale, [&](const TracedOp&) { return measured_ms; });
    const CostModel calibrated(hw, calibrate(hw, {file}));
    ASSERT_EQ(calibrated.calibration.profiled_ops.size(), layernorms.size());
    for (const TracedOp& op : layernorms) {
        EXPECT_NEAR(calibrated.op_ms(op, Precision::bf16), measured_ms, 1e-9) << op_label(op);
        bool found = false;
        for (const ProfiledOp& p : calibrated.calibration.profiled_ops)
            found = found || (p.op.m == op.m && p.op.n == op.n && p.op.bytes == op.bytes);
        EXPECT_TRUE(found) << op_label(op);
    }
}

TEST(OpProfileCalibration, AProfiledGemmShapeIsCarriedByTheShapeModelWithinFourTimes) {
    const HardwareProfile hw = h200();
    const CostModel plain(hw);
    const double peak = plain.peak_tflops(Precision::bf16) * 1e12, gap_ms = hw.kernel_gap_us.value * 1e-3;
    TracedOp gemm;
    gemm.kind = "gemm";
    gemm.variant = "bias";
    gemm.dtype = DType::bf16;
    gemm.tensor_core = true;
    gemm.trans_b = true;
    gemm.m = 4096;
    gemm.n = 2304;
    gemm.k = 768;
    auto sized = [](TracedOp op, int64_t m) {
        op.m = m;
        op.flops = 2.0 * m * op.n * op.k;
        op.bytes = 2.0 * (m * op.k + op.n * op.k + m * op.n);
        return op;
    };
    gemm = sized(gemm, 4096);
    const std::string file = write_profile("gemm", {gemm}, [&](const TracedOp& op) {
        return op.flops / (peak * 0.4) * 1e3 + gap_ms;  // 40% of peak
    });
    const CostModel calibrated(hw, calibrate(hw, {file}));
    // The measured shape: its measured efficiency.
    EXPECT_NEAR(calibrated.gemm_efficiency(gemm, Precision::bf16), 0.4, 1e-9);
    // 4x the rows: the same kernel's efficiency, carried by the shape model's ratio.
    const TracedOp four = sized(gemm, 4 * 4096);
    EXPECT_NEAR(calibrated.gemm_efficiency(four, Precision::bf16),
                0.4 * plain.gemm_shape_factor(four) / plain.gemm_shape_factor(gemm), 1e-9);
    // 8x the rows, another transpose, another precision: not near a measurement, the shape model.
    const TracedOp eight = sized(gemm, 8 * 4096);
    EXPECT_DOUBLE_EQ(calibrated.gemm_efficiency(eight, Precision::bf16), plain.gemm_efficiency(eight, Precision::bf16));
    TracedOp nn = gemm;
    nn.trans_b = false;
    EXPECT_DOUBLE_EQ(calibrated.gemm_efficiency(nn, Precision::bf16), plain.gemm_efficiency(nn, Precision::bf16));
    EXPECT_DOUBLE_EQ(calibrated.gemm_efficiency(gemm, Precision::fp16), plain.gemm_efficiency(gemm, Precision::fp16));
}

TEST(OpProfileCalibration, AttentionRunsAtItsMeasuredRateAtOtherSequenceLengths) {
    const HardwareProfile hw = h200();
    const CostModel plain(hw);
    const double gap_ms = hw.kernel_gap_us.value * 1e-3;
    const std::vector<TracedOp> attention = distinct(bert_base_trace(32).ops, "attention_forward");
    ASSERT_EQ(attention.size(), 1u);
    // Three times the model's time at seq 128.
    const double measured_ms = 3.0 * (plain.op_ms(attention[0], Precision::bf16) - gap_ms) + gap_ms;
    const std::string file = write_profile("attention", attention, [&](const TracedOp&) { return measured_ms; });
    const CostModel calibrated(hw, calibrate(hw, {file}));
    EXPECT_NEAR(calibrated.op_ms(attention[0], Precision::bf16), measured_ms, 1e-9);
    // Its achieved rate, as a fraction of peak.
    const double rate = attention[0].flops / ((measured_ms - gap_ms) * 1e-3) / (plain.peak_tflops(Precision::bf16) * 1e12);
    EXPECT_NEAR(calibrated.gemm_efficiency(attention[0], Precision::bf16), rate, 1e-9);
    // Sequence 1024 (8x, not near the profiled shape): the large-shape efficiency that rate
    // implies, carried by the shape model.
    TracedOp long_seq = attention[0];
    long_seq.m = long_seq.n = 1024;
    long_seq.flops *= 64;
    long_seq.bytes *= 64;
    EXPECT_NEAR(calibrated.gemm_efficiency(long_seq, Precision::bf16),
                rate / plain.gemm_shape_factor(attention[0]) * plain.gemm_shape_factor(long_seq), 1e-9);
    EXPECT_GT(calibrated.op_ms(long_seq, Precision::bf16), 2.0 * plain.op_ms(long_seq, Precision::bf16));
}

// A record that cannot be a measurement is refused, naming the file, the record and why,
// whatever GPU it claims (a bad file is not skipped silently).
TEST(OpProfileCalibration, BadRecordsAreRefusedWithTheReason) {
    const HardwareProfile hw = h200();
    const std::vector<TracedOp> gemms = distinct(bert_base_trace(8).ops, "gemm");
    const std::string good = write_profile("good", {gemms.front()}, [](const TracedOp&) { return 0.05; });
    const nlohmann::json record = read_records(good).records.at(0);
    auto refused = [&](const std::string& name, nlohmann::json bad, const std::string& reason) {
        const auto path = (std::filesystem::temp_directory_path() / ("scalebench-bad-op-" + name + ".jsonl")).string();
        std::filesystem::remove(path);
        append_record(path, record);
        append_record(path, bad);
        try {
            calibrate(hw, {path});
            ADD_FAILURE() << name << ": accepted";
        } catch (const UserError& e) {
            EXPECT_NE(std::string(e.what()).find(path + ": record 2: "), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
        }
    };
    nlohmann::json bad = record;
    bad.erase("op");
    refused("no-op", bad, "not a scalebench op_profile record");
    bad = record;
    bad["ms"]["median"] = -0.5;
    // The calibration table's range (src/projection/calibration_checks.cpp), whatever the GPU.
    refused("negative-time", bad, "key 'ms.median': must be in (0, 100000], got -0.5");
    bad["environment"]["gpu"]["name"] = "NVIDIA A100-SXM4-80GB";
    refused("other-gpu", bad, "key 'ms.median': must be in (0, 100000], got -0.5");
    bad = record;
    bad["op"]["flops"] = bad["op"]["flops"].get<double>() * 2;
    refused("flops", bad, "not 2mnk");
    bad = record;
    bad["op"]["dtype"] = "e4m3";
    refused("dtype", bad, "op dtype 'e4m3'");
    bad = record;
    bad["ms"]["median"] = 1e-6;  // a BERT GEMM in a nanosecond
    refused("faster-than-peak", bad, "not a time of this GPU");
}

}  // namespace
}  // namespace sb
