// The projection's parts one by one: TraceOps' FLOPs and bytes (transformer ops too), the
// trace of a training step against the runner's bucket layout, the roofline and alpha-beta
// cost model against hand-computed figures, the schedule's exposed communication, and the
// calibration read from the committed H200 records.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "collectives/bucketer.h"
#include "models/token_data.h"
#include "models/trace_ops.h"
#include "src/projection/hardware.h"
#include "src/projection/projection.h"
#include "base/errors.h"
#include "src/core/results.h"
#include "src/core/config.h"
#include "src/core/workload.h"
#include "src/projection/workload_projection.h"

namespace sb {
namespace {

const std::string kSource = SCALEBENCH_SOURCE_DIR;

HardwareProfile profile(const std::string& name) {
    return load_hardware_profile(kSource + "/configs/hardware/" + name + ".yaml");
}

TEST(TraceOps, GemmFlopsBytesAndShapeFollowTheTransposes) {
    TraceOps ops(Precision::bf16);
    const Tensor x{ops.alloc(64 * 32 * 2), DType::bf16, 64, 32};
    const Tensor w{ops.alloc(16 * 32 * 2), DType::bf16, 16, 32};
    const Tensor y{ops.alloc(64 * 16 * 2), DType::bf16, 64, 16};
    float bias[16];
    ops.gemm(false, true, 1.0f, x, w, 0.0f, y, bias);  // Y = X W^T + b
    ASSERT_EQ(ops.trace().size(), 1u);
    const TracedOp& op = ops.trace()[0];
    EXPECT_EQ(op.kind, "gemm");
    EXPECT_TRUE(op.tensor_core);
    EXPECT_EQ(op.m, 64);
    EXPECT_EQ(op.n, 16);
    EXPECT_EQ(op.k, 32);
    EXPECT_DOUBLE_EQ(op.flops, 2.0 * 64 * 16 * 32);
    EXPECT_DOUBLE_EQ(op.bytes, (64 * 32 + 16 * 32 + 64 * 16) * 2.0 + 16 * 4.0);
    EXPECT_FALSE(op.trans_a);
    EXPECT_TRUE(op.trans_b);
    EXPECT_EQ(op.variant, "bias");
    // dW = dY^T X into fp32 with accumulation: C read and written.
    const Tensor dw{ops.alloc(16 * 32 * 4), DType::f32, 16, 32};
    ops.gemm(true, false, 1.0f, y, x, 1.0f, dw);
    EXPECT_EQ(ops.trace()[1].m, 16);
    EXPECT_EQ(ops.trace()[1].k, 64);
    EXPECT_DOUBLE_EQ(ops.trace()[1].bytes, (64 * 16 + 64 * 32) * 2.0 + 2.0 * 16 * 32 * 4);
    EXPECT_TRUE(ops.trace()[1].trans_a);
    EXPECT_EQ(ops.trace()[1].variant, "accumulate");
    EXPECT_NE(op_key(ops.trace()[0]), op_key(ops.trace()[1]));
    EXPECT_EQ(op_label(ops.trace()[1]), "gemm 16x32x64 TN accumulate");
}

TEST(TraceOps, AllocReturnsDistinctNonNullAddressesAndCountsTheFootprint) {
    TraceOps ops(Precision::fp32);
    void* a = ops.alloc(100);
    void* b = ops.alloc(100);
    EXPECT_NE(a, nullptr);
    EXPECT_NE(a, b);
    EXPECT_GE(static_cast<char*>(b) - static_cast<char*>(a), 100);
    EXPECT_DOUBLE_EQ(ops.allocated_bytes(), 200.0);
    EXPECT_TRUE(ops.trace().empty());  // memory is not an op
}

TEST(TraceOps, RecordsEveryTransformerOp) {
    TraceOps ops(Precision::bf16);
    const int64_t rows = 2 * 128, hidden = 768;
    const Tensor x{ops.alloc(rows * hidden * 2), DType::bf16, rows, hidden};
    const Tensor y{ops.alloc(rows * hidden * 2), DType::bf16, rows, hidden};
    const Tensor qkv{ops.alloc(rows * 3 * hidden * 2), DType::bf16, rows, 3 * hidden};
    float* stats = static_cast<float*>(ops.alloc(rows * 8));
    ops.add(x, y, y);
    ops.layernorm_forward(x, stats, stats, 1e-5f, y, stats, stats);
    ops.layernorm_backward(x, y, stats, stats, stats, y, stats, stats);
    ops.embedding_forward(reinterpret_cast<int32_t*>(stats), x, y, true);
    ops.embedding_backward(reinterpret_cast<int32_t*>(stats), y, stats, 30522);
    ops.dropout(x, y, 0.1f, 7);
    Ops::AttentionShape shape{2, 128, 12, 64, false, 0.1f};
    void* saved = ops.alloc(ops.attention_saved_bytes(shape));
    ops.attention_forward(shape, qkv, x, saved, 1);
    ops.attention_backward(shape, qkv, x, saved, y, qkv, 1);
    const std::vector<std::string> kinds = {"add", "layernorm_forward", "layernorm_backward", "embedding_forward",
                                            "embedding_backward", "dropout", "attention_forward", "attention_backward"};
    ASSERT_EQ(ops.trace().size(), kinds.size());
    for (size_t i = 0; i < kinds.size(); ++i) {
        EXPECT_EQ(ops.trace()[i].kind, kinds[i]);
        EXPECT_GT(ops.trace()[i].bytes, 0.0) << kinds[i];
    }
    EXPECT_DOUBLE_EQ(ops.trace()[0].bytes, 3.0 * rows * hidden * 2);
    // Fused (bf16, head_dim 64): QK^T and PV, 4 b h s^2 d forward; at seq 128 the backward is
    // one kernel of five such products (S, dP, dV, dK, dQ). Saved: the LSE, one float per row;
    // each kernel reads or writes every operand once.
    const double fwd = 4.0 * 2 * 12 * 128.0 * 128 * 64, lse = 2 * 12 * 128 * 4;
    EXPECT_DOUBLE_EQ(ops.trace()[6].flops, fwd);
    EXPECT_DOUBLE_EQ(ops.trace()[7].flops, 2.5 * fwd);
    EXPECT_EQ(ops.attention_saved_bytes(shape), 2u * 12 * 128 * 4);
    EXPECT_DOUBLE_EQ(ops.trace()[6].bytes, static_cast<double>(qkv.bytes() + x.bytes()) + lse);
    EXPECT_DOUBLE_EQ(ops.trace()[7].bytes, static_cast<double>(2 * qkv.bytes() + x.bytes() + y.bytes()) + lse);
    EXPECT_EQ(ops.trace()[6].batch, 24);
    // What picks the kernel besides the shape, and the shape of the memory-bound ops.
    EXPECT_EQ(ops.trace()[6].variant, "bidirectional+dropout+fused");
    EXPECT_EQ(ops.trace()[3].variant, "accumulate");
    EXPECT_EQ(ops.trace()[1].m, rows);
    EXPECT_EQ(ops.trace()[1].n, hidden);
}

// BatchNorm's kernels pass over the batch twice (sums, then the elementwise pass), each pass
// reading x and, backward, grad_out: x twice, the residual and out once forward; x and grad_out
// twice, grad_x once backward; plus the per-channel parameters and statistics.
TEST(TraceOps, CountsBatchNormsTwoPassesOverItsInputs) {
    TraceOps ops(Precision::bf16);
    const int64_t rows = 512, channels = 64;
    const double act = rows * channels * 2.0, per_channel = channels * 4.0;
    const auto tensor = [&] { return Tensor{ops.alloc(rows * channels * 2), DType::bf16, rows, channels}; };
    const Tensor x = tensor(), out = tensor(), residual = tensor(), grad = tensor();
    float* f = static_cast<float*>(ops.alloc(channels * 4));
    ops.batchnorm_forward(x, f, f, 1e-5f, out, f, f);
    ops.batchnorm_relu_forward(x, f, f, 1e-5f, residual, out, f, f);
    ops.batchnorm_backward(x, grad, f, f, f, out, f, f);
    ops.batchnorm_relu_backward(x, grad, f, f, f, f, out, f, f);
    ASSERT_EQ(ops.trace().size(), 4u);
    EXPECT_DOUBLE_EQ(ops.trace()[0].bytes, 3 * act + 4 * per_channel);
    EXPECT_EQ(ops.trace()[1].variant, "residual");
    EXPECT_DOUBLE_EQ(ops.trace()[1].bytes, 4 * act + 4 * per_channel);
    EXPECT_DOUBLE_EQ(ops.trace()[2].bytes, 5 * act + 5 * per_channel);
    EXPECT_DOUBLE_EQ(ops.trace()[3].bytes, 5 * act + 6 * per_channel);
}

// The fused junction is one op each way (as CUDA runs it; the CPU composes three), its bytes
// every operand once: forward branch, residual, sum, out; backward sum, grad_out, the residual
// gradients given, grad_sum, grad_branch; plus gamma/beta and their gradients, mean and rstd.
TEST(TraceOps, CountsTheFusedResidualLayerNormOnce) {
    TraceOps ops(Precision::bf16);
    const int64_t rows = 256, hidden = 768;
    const double act = rows * hidden * 2.0, params = hidden * 4.0, stats = rows * 4.0;
    const auto tensor = [&] { return Tensor{ops.alloc(rows * hidden * 2), DType::bf16, rows, hidden}; };
    const Tensor a = tensor(), b = tensor(), c = tensor(), d = tensor();
    float* f = static_cast<float*>(ops.alloc(rows * 8));
    ops.residual_layernorm_forward(a, b, 0.1f, 7, f, f, 1e-5f, c, d, f, f);
    ops.residual_layernorm_backward(a, b, c, Tensor{}, f, f, f, 0.1f, 7, c, b, f, f);
    ops.residual_layernorm_backward(a, b, Tensor{}, c, f, f, f, 0.0f, 7, c, b, f, f);
    ASSERT_EQ(ops.trace().size(), 3u);
    EXPECT_EQ(ops.trace()[0].kind, "residual_layernorm_forward");
    EXPECT_EQ(ops.trace()[0].variant, "dropout");
    EXPECT_DOUBLE_EQ(ops.trace()[0].bytes, 4 * act + 2 * params + 2 * stats);
    EXPECT_EQ(ops.trace()[1].kind, "residual_layernorm_backward");
    EXPECT_EQ(ops.trace()[1].variant, "out_residual+dropout");
    EXPECT_DOUBLE_EQ(ops.trace()[1].bytes, 5 * act + 3 * params + 2 * stats);
    EXPECT_EQ(ops.trace()[2].variant, "sum_residual");
    EXPECT_EQ(ops.trace()[1].m, rows);
    EXPECT_EQ(ops.trace()[1].n, hidden);
}

TEST(TraceOps, CountsAttentionAsTheBackendRunsIt) {
    const int64_t rows = 2 * 128, hidden = 768;
    const double full = 4.0 * 2 * 12 * 128.0 * 128 * 64;  // Q K^T and P V over every (query, key)
    {
        // fp32: materialised P (saved), full-size products, four backward.
        TraceOps ops(Precision::fp32);
        const Tensor x{ops.alloc(rows * hidden * 4), DType::f32, rows, hidden};
        const Tensor qkv{ops.alloc(rows * 3 * hidden * 4), DType::f32, rows, 3 * hidden};
        Ops::AttentionShape shape{2, 128, 12, 64, true, 0.0f};
        EXPECT_EQ(ops.attention_saved_bytes(shape), 2u * 12 * 128 * 128 * 4);
        ops.attention_forward(shape, qkv, x, nullptr, 1);
        ops.attention_backward(shape, qkv, x, nullptr, x, qkv, 1);
        EXPECT_DOUBLE_EQ(ops.trace()[0].flops, full);
        EXPECT_DOUBLE_EQ(ops.trace()[1].flops, 2.0 * full);
        EXPECT_EQ(ops.trace()[0].variant, "causal");
    }
    {
        // bf16 causal at seq 128: the forward's two 64-row tiles a side, three of the four
        // computed. The one-block backward: of the 8 x 4 (16 keys, 32 queries) tiles of S, dP,
        // dV and dK the 20 that reach the diagonal (4, 4, 3, 3, 2, 2, 1, 1 per key tile), of
        // the 8 x 8 (16 queries, 16 keys) tiles of dQ the 36 on and below it.
        TraceOps ops(Precision::bf16);
        const Tensor x{ops.alloc(rows * hidden * 2), DType::bf16, rows, hidden};
        const Tensor qkv{ops.alloc(rows * 3 * hidden * 2), DType::bf16, rows, 3 * hidden};
        Ops::AttentionShape shape{2, 128, 12, 64, true, 0.0f};
        ops.attention_forward(shape, qkv, x, nullptr, 1);
        ops.attention_backward(shape, qkv, x, nullptr, x, qkv, 1);
        EXPECT_DOUBLE_EQ(ops.trace()[0].flops, 0.75 * full);
        EXPECT_DOUBLE_EQ(ops.trace()[1].flops, (4.0 * 20 / 32 + 36.0 / 64) / 2 * full);
        EXPECT_EQ(ops.trace()[0].variant, "causal+fused");
    }
    {
        // bf16 causal at seq 256: the dQ and dK/dV kernels, seven products over the ten of 16
        // 64 x 64 tiles on and below the diagonal; rowsum(dO * O) reads O and dO once more and
        // every kernel the LSE or the row sums.
        const int64_t rows256 = 2 * 256;
        TraceOps ops(Precision::bf16);
        const Tensor x{ops.alloc(rows256 * hidden * 2), DType::bf16, rows256, hidden};
        const Tensor qkv{ops.alloc(rows256 * 3 * hidden * 2), DType::bf16, rows256, 3 * hidden};
        Ops::AttentionShape shape{2, 256, 12, 64, true, 0.0f};
        ops.attention_backward(shape, qkv, x, nullptr, x, qkv, 1);
        EXPECT_DOUBLE_EQ(ops.trace()[0].flops, 10.0 / 16 * 7 * 2 * 2 * 12 * 256.0 * 256 * 64);
        EXPECT_DOUBLE_EQ(ops.trace()[0].bytes,
                         static_cast<double>(2 * qkv.bytes() + 3 * x.bytes()) + 4.0 * 2 * 12 * 256 * 4);
    }
}

// The loss reads the logits of its labelled rows only and writes every gradient row; the
// bias gradient over labelled rows reads only those rows of its input. Both read every label.
TEST(TraceOps, CountsTheLossAndTheLabelledBiasGradientOverLabelledRows) {
    TraceOps ops(Precision::bf16);
    const int64_t rows = 256, vocab = 30592, labelled = 38;
    const Tensor logits{ops.alloc(rows * vocab * 2), DType::bf16, rows, vocab};
    const auto* labels = static_cast<const int32_t*>(ops.alloc(rows * 4));
    float* f = static_cast<float*>(ops.alloc(vocab * 4));
    ops.softmax_cross_entropy(logits, labels, labelled, f, logits, 1.0f);
    ops.labelled_bias_grad(logits, labels, labelled, f);
    ops.bias_grad(logits, f);
    ASSERT_EQ(ops.trace().size(), 3u);
    const double row = vocab * 2.0;
    EXPECT_EQ(ops.trace()[0].kind, "softmax_cross_entropy");
    EXPECT_DOUBLE_EQ(ops.trace()[0].bytes, rows * 4.0 + labelled * row + rows * row);
    EXPECT_EQ(ops.trace()[1].kind, "labelled_bias_grad");
    EXPECT_DOUBLE_EQ(ops.trace()[1].bytes, rows * 4.0 + labelled * row + vocab * 4.0);
    EXPECT_EQ(ops.trace()[2].kind, "bias_grad");
    EXPECT_DOUBLE_EQ(ops.trace()[2].bytes, rows * row + vocab * 4.0);
    EXPECT_EQ(ops.trace()[1].m, rows);
    EXPECT_EQ(ops.trace()[1].n, vocab);
    EXPECT_ANY_THROW(ops.softmax_cross_entropy(logits, labels, rows + 1, f, logits, 1.0f));
}

// The traced BERT step tells its loss and decoder bias gradient batch x masked_positions
// labelled rows; GPT-2 labels every position (and has no decoder bias).
TEST(TraceStep, TheLossReadsTheRowsTheDataLabels) {
    for (const char* name : {"ci-transformer", "gpt2-small"}) {
        SCOPED_TRACE(name);
        const TrainConfig cfg = load_config_file(kSource + "/configs/" + name + ".yaml");
        const int batch = 4;
        const StepTrace t = trace_step(cfg, batch);
        const TransformerShape& s = cfg.transformer.shape;
        const bool bert = s.arch == TransformerArch::bert;
        const int64_t rows = int64_t{batch} * s.seq_len;
        const int64_t labelled = bert ? batch * masked_positions(token_task(cfg)) : rows;
        if (bert) ASSERT_LT(labelled, rows);
        const double elem = static_cast<double>(dtype_size(compute_dtype(cfg.precision)));
        const double logits_row = s.padded_vocab() * elem;
        int losses = 0, bias_grads = 0;
        for (const TracedOp& op : t.ops) {
            if (op.kind == "softmax_cross_entropy") {
                ++losses;
                EXPECT_EQ(op.m, rows);
                EXPECT_DOUBLE_EQ(op.bytes, rows * 4.0 + labelled * logits_row + rows * logits_row);
            }
            if (op.kind == "labelled_bias_grad") {
                ++bias_grads;
                EXPECT_DOUBLE_EQ(op.bytes, rows * 4.0 + labelled * logits_row + s.padded_vocab() * 4.0);
            }
        }
        EXPECT_EQ(losses, 1);
        EXPECT_EQ(bias_grads, bert ? 1 : 0);
    }
}

TrainConfig small_mlp() {
    TrainConfig cfg;
    cfg.mlp.input_dim = 64;
    cfg.mlp.hidden = {128, 128, 128};
    cfg.mlp.num_classes = 10;
    cfg.bucket_mb = 0.05;  // several buckets
    return cfg;
}

TEST(TraceStep, MirrorsTheRunnersStepAndBucketLayout) {
    const TrainConfig cfg = small_mlp();
    const StepTrace t = trace_step(cfg, 32);
    TraceOps ops(cfg.precision);
    const auto params = create_model(cfg, ops)->params();
    const std::vector<Bucket> buckets = bucket_layout(params, cfg.bucket_mb);
    ASSERT_GT(buckets.size(), 1u);
    ASSERT_EQ(t.collectives.size(), buckets.size());
    double total = 0;
    for (size_t b = 0; b < buckets.size(); ++b) {
        EXPECT_EQ(t.collectives[b].kind, Collective::all_reduce);
        EXPECT_DOUBLE_EQ(t.collectives[b].bytes, buckets[b].count * 4.0);
        total += t.collectives[b].bytes;
        if (b > 0) EXPECT_GE(t.collectives[b].issued_after, t.collectives[b - 1].issued_after);
        EXPECT_LE(t.collectives[b].issued_after, t.backward_end);
        EXPECT_EQ(t.collectives[b].waited_at, t.backward_end);  // the bucketer waits for every bucket there
    }
    EXPECT_DOUBLE_EQ(t.gradient_bytes, total);
    EXPECT_DOUBLE_EQ(total, 4.0 * t.num_params);
    // Backward reports gradients in reverse parameter order (bias before weight).
    std::vector<int> reverse(params.size());
    std::iota(reverse.rbegin(), reverse.rend(), 0);
    EXPECT_EQ(t.gradient_order, reverse);
    // 4 layers: forward 4 GEMMs, backward dW on 4 and dX on 3; then one AdamW step last.
    size_t gemms = 0;
    for (const auto& op : t.ops) gemms += op.kind == "gemm";
    EXPECT_EQ(gemms, 11u);
    EXPECT_EQ(t.ops.back().kind, "adamw_step");
    EXPECT_EQ(t.optimizer_begin, t.ops.size() - 1);
    double flops = 0;
    for (const auto& op : t.ops) flops += op.flops;
    EXPECT_DOUBLE_EQ(flops, t.flops_per_sample * 32);  // the model's own FLOP count, per sample
}

TEST(TraceStep, SixteenBitGradientsHalveTheBytesAndAddTheBucketersCasts) {
    TrainConfig cfg = small_mlp();
    cfg.precision = Precision::bf16;
    cfg.grad_dtype = DType::bf16;
    const StepTrace t = trace_step(cfg, 32);
    EXPECT_DOUBLE_EQ(t.gradient_bytes, 2.0 * t.num_params);
    size_t casts_after_wait = 0;
    for (size_t i = t.backward_end; i < t.optimizer_begin; ++i) casts_after_wait += t.ops[i].kind == "cast";
    EXPECT_EQ(casts_after_wait, t.collectives.size());  // one cast back per bucket after its wait
    for (size_t b = 0; b < t.collectives.size(); ++b) EXPECT_EQ(t.collectives[b].waited_at, t.backward_end + b);
}

TEST(CostModel, ShapeFactorIsWaveQuantizationTimesKFill) {
    const CostModel m(profile("h200-sxm"));  // 132 SMs
    // 132 tiles of 128x128: exactly one full wave.
    EXPECT_DOUBLE_EQ(m.gemm_shape_factor(128 * 12, 128 * 11, 128, 1), 128.0 / 256.0);
    // 133 tiles: a second wave with one tile in it.
    EXPECT_NEAR(m.gemm_shape_factor(128 * 133, 128, 8192, 1), 133.0 / 264.0 * 8192.0 / 8320.0, 1e-12);
}

TEST(CostModel, OpTimeIsTheRooflineMaximumPlusTheGap) {
    const HardwareProfile hw = profile("h200-sxm");
    const CostModel m(hw);
    TracedOp gemm;
    gemm.tensor_core = true;
    gemm.m = gemm.n = gemm.k = 8192;
    gemm.flops = 2.0 * 8192.0 * 8192 * 8192;
    gemm.bytes = 3.0 * 8192 * 8192 * 2;
    // The profile's measured bf16 8192^3 rate (results/h200-one-gpu/gemm/gemm.jsonl) for that very shape.
    const double compute_ms = gemm.flops / 731.9e12 * 1e3;
    EXPECT_NEAR(m.op_ms(gemm, Precision::bf16), compute_ms + hw.kernel_gap_us.value * 1e-3, 1e-9);
    EXPECT_FALSE(m.op_time(gemm, Precision::bf16).memory_bound);
    TracedOp stream;
    stream.bytes = 4.8e9;  // one millisecond at full bandwidth, at the device copy's rate
    EXPECT_NEAR(m.op_ms(stream, Precision::bf16), 4800.0 / 4170.0 + hw.kernel_gap_us.value * 1e-3, 1e-6);
    EXPECT_TRUE(m.op_time(stream, Precision::bf16).memory_bound);
}

TEST(CostModel, AClockFactorScalesTheRatesNotThePublishedEfficiency) {
    HardwareProfile hw = profile("rtx4090-48gb-pcie4");
    TracedOp gemm;
    gemm.tensor_core = true;
    gemm.m = gemm.n = gemm.k = 4096;
    gemm.flops = 2.0 * 4096.0 * 4096 * 4096;
    hw.kernel_gap_us.value = 0;
    const double stock = CostModel(hw).op_ms(gemm, Precision::fp16);
    hw.clock_factor.value = 0.9;
    EXPECT_NEAR(CostModel(hw).op_ms(gemm, Precision::fp16), stock / 0.9, 1e-9);
    // The published rate of this very shape at stock clocks: 168.38 TFLOP/s.
    EXPECT_NEAR(stock, gemm.flops / 168.38e12 * 1e3, 1e-9);
}

TEST(CostModel, RingAllReduceIsAlphaBetaOverTheLinkClass) {
    const HardwareProfile a100 = profile("a100-sxm4-40gb");
    const CostModel m(a100);
    const double bytes = 1e9;
    // The call's launch, 2(n-1) ring steps of link latency, and the bytes at the ring's busbw.
    const double busbw = 300e9 * a100.link_efficiency.value;
    const double expected_us =
        a100.bucket_launch_us.value + a100.link_latency_us.value * 2 * 7 + 2.0 * 7 / 8 * bytes / busbw * 1e6;
    EXPECT_NEAR(m.all_reduce_ms(bytes, 8, 1), expected_us * 1e-3, 1e-9);
    EXPECT_NEAR(m.all_reduce_busbw_gbps(bytes, 8, 1), busbw / 1e9, 2.0);  // latency costs a little
    // PCIe 4.0 x16 with P2P: the line rate (31.5 GB/s) times the efficiency, within one socket;
    // a ring over both sockets is bound by the link between them.
    const HardwareProfile p2p_hw = profile("rtx4090-24gb-pcie4-p2p");
    const CostModel p2p(p2p_hw);
    ASSERT_EQ(p2p_hw.sockets.value, 2);
    EXPECT_NEAR(p2p.ring_busbw_gbps(4), pcie_gbps(4, 16) * 0.8, 1e-9);
    EXPECT_NEAR(p2p.ring_busbw_gbps(8), std::min(pcie_gbps(4, 16) * 0.8, p2p_hw.inter_socket_gbps.value), 1e-9);
    EXPECT_LT(p2p.ring_busbw_gbps(8), p2p.ring_busbw_gbps(4));
    EXPECT_NEAR(pcie_gbps(4, 16), 31.5077, 1e-3);
    // Without P2P the ring is bound by the staged copy, or by host memory / 2n when that is lower:
    // its bandwidth, and the lower rate it serves staged copies at (node.staged_host_gbps).
    const HardwareProfile staged_hw = profile("rtx4090-24gb-pcie4");
    const CostModel staged(staged_hw);
    const double copy_rate = pcie_gbps(4, 16) * staged_hw.link_efficiency.value;
    ASSERT_GT(staged_hw.staged_host_gbps.value, 0);
    EXPECT_NEAR(staged.ring_busbw_gbps(8), std::min(copy_rate, staged_hw.staged_host_gbps.value / 16), 1e-9);
    // The staged ring slows as GPUs join it: the copy rate at 2 GPUs (the published 2-GPU rows),
    // host memory's staged rate shared by 4, then by 8.
    EXPECT_NEAR(staged.ring_busbw_gbps(2), copy_rate, 1e-9);
    EXPECT_NEAR(staged.ring_busbw_gbps(4), std::min(copy_rate, staged_hw.staged_host_gbps.value / 8), 1e-9);
    EXPECT_LT(staged.ring_busbw_gbps(4), staged.ring_busbw_gbps(2));
    EXPECT_LT(staged.ring_busbw_gbps(8), staged.ring_busbw_gbps(4));
    // A P2P profile has no staged bound; with_p2p_disabled takes the staged profile's.
    EXPECT_EQ(p2p_hw.staged_host_gbps.value, 0);
    EXPECT_EQ(with_p2p_disabled(p2p_hw, staged_hw).staged_host_gbps.value, staged_hw.staged_host_gbps.value);
    HardwareProfile thin = staged_hw;
    thin.staged_host_gbps.value = 0;
    thin.host_mem_bw_gbps.value = 50;
    EXPECT_NEAR(CostModel(thin).ring_busbw_gbps(8), 50.0 / 16, 1e-9);
    // Two GPUs behind one switch share its uplink for both staged copies: half each.
    HardwareProfile paired = staged_hw;
    paired.gpus_per_switch.value = 2;
    EXPECT_NEAR(CostModel(paired).ring_busbw_gbps(2), staged.ring_busbw_gbps(2) / 2, 1e-9);
    // The inter-socket link bounds the staged ring too, once it spans both sockets.
    HardwareProfile narrow = staged_hw;
    narrow.inter_socket_gbps.value = 1;
    EXPECT_NEAR(CostModel(narrow).ring_busbw_gbps(8), 1.0, 1e-9);
    EXPECT_NEAR(CostModel(narrow).ring_busbw_gbps(4), staged.ring_busbw_gbps(4), 1e-9);
    EXPECT_LT(staged.all_reduce_busbw_gbps(bytes, 8, 1), p2p.all_reduce_busbw_gbps(bytes, 8, 1));
    // One GPU: the call's fixed cost and NCCL's one-rank reduce kernel (ncclAvg), a read and
    // a write of the bytes at the memory bandwidth.
    EXPECT_NEAR(m.all_reduce_ms(bytes, 1, 1),
                a100.bucket_launch_us.value * 1e-3 + 2.0 * bytes / (a100.copy_gbps.value * 1e9) * 1e3, 1e-12);
}

// A collective is no faster than its own reads and writes of device memory, on N GPUs as on one
// (where NCCL's reduce kernel is all it does): with a copy rate of 50 GB/s, inside gpu.copy_gbps's
// allowed range and far below NVLink's busbw, the N-GPU ring is memory-bound, not link-bound. Were
// only the one-GPU reduce bound so, its baseline would be slower than each rank of N and mlp-large
// would scale past 100% (117% at 2 H200s).
TEST(CostModel, ACollectiveIsNoFasterThanItsDeviceMemoryTraffic) {
    HardwareProfile hw = profile("h200-sxm");
    hw.copy_gbps.value = 50;
    const CostModel m(hw);
    const double bytes = 512.0 * 1024 * 1024;
    for (int g : {1, 2, 8}) {
        const double memory_ms = m.collective_memory_bytes(Collective::all_reduce, bytes, g) / 50e9 * 1e3;
        EXPECT_NEAR(m.all_reduce_ms(bytes, g, 1), hw.bucket_launch_us.value * 1e-3 + memory_ms, 1e-9) << g << " GPUs";
    }
    EXPECT_NEAR(m.collective_memory_bytes(Collective::all_reduce, bytes, 1), 2 * bytes, 1e-3);
    EXPECT_NEAR(m.collective_memory_bytes(Collective::all_reduce, bytes, 8), 2 * 2 * 7.0 / 8 * bytes, 1e-3);
    EXPECT_NEAR(m.collective_ms(Collective::reduce_scatter, bytes, 8, 1),
                hw.bucket_launch_us.value * 1e-3 + 2 * 7.0 / 8 * bytes / 50e9 * 1e3, 1e-9);
    // The in-place all-gather of one GPU moves nothing: its fixed cost alone.
    EXPECT_NEAR(m.collective_ms(Collective::all_gather, bytes, 1, 1), hw.bucket_launch_us.value * 1e-3, 1e-12);
    // So no configuration of the projection, nor any corner of its ranges, scales past linear.
    const TrainConfig cfg = load_config_file(kSource + "/configs/mlp-large.yaml");
    std::vector<Projection> rows = project_workload(cfg, m, {1, 2, 4, 8}, {1});
    widen_to_ranges(rows, cfg, hw, Calibration{}, {1, 2, 4, 8}, {1});
    for (const Projection& p : rows) {
        EXPECT_LE(p.efficiency, 1.0) << p.step.world_size << " GPUs";
        EXPECT_LE(p.bands.efficiency.hi, 1.0 + 1e-12) << p.step.world_size << " GPUs";
    }
}

TEST(Straggler, TheExpectedMaximumOfNormalDraws) {
    // Tabulated expected maxima of n standard normals (Harter 1961; Teichroew 1956).
    EXPECT_EQ(expected_max_of_normals(1), 0.0);
    EXPECT_NEAR(expected_max_of_normals(2), 0.56419, 1e-4);  // 1 / sqrt(pi)
    EXPECT_NEAR(expected_max_of_normals(4), 1.02938, 1e-4);
    EXPECT_NEAR(expected_max_of_normals(8), 1.42360, 1e-4);
    EXPECT_NEAR(expected_max_of_normals(100), 2.50759, 1e-4);
}

TEST(Straggler, TheStepOfNRanksIsTheSlowestOfN) {
    // The same step on 1 and 8 GPUs with no communication cost: 8 ranks wait for the slowest, the
    // expected maximum of 8 draws of sigma step_jitter_pct of the step, charged as exposed communication.
    HardwareProfile hw = profile("h200-sxm");
    hw.link_latency_us.value = 0;
    hw.bucket_launch_us.value = 0;
    hw.comm_sms.value = 0;
    hw.framework_step_ms.value = 0;  // StepTerms.*'s
    const CostModel m(hw);
    StepTrace t;
    t.precision = Precision::bf16;
    TracedOp op;
    op.tensor_core = true;
    op.m = op.n = op.k = 8192;
    op.flops = 2.0 * 8192.0 * 8192 * 8192;
    t.ops = {op, op};
    t.backward_end = 2;
    t.optimizer_begin = 2;
    const ProjectedStep one = schedule_step(t, m, 1, 1), eight = schedule_step(t, m, 8, 1);
    EXPECT_EQ(one.straggler_ms, 0.0);
    EXPECT_NEAR(eight.straggler_ms, 1.42360 * hw.step_jitter_pct.value / 100 * one.step_ms, 1e-6);
    EXPECT_NEAR(eight.step_ms, one.step_ms + eight.straggler_ms, 1e-9);
    EXPECT_NEAR(eight.exposed_comm_ms - one.exposed_comm_ms, eight.straggler_ms, 1e-9);
}

// The step terms beside the schedule: the framework's cost at N > 1 ranks only, and the compute
// model's error scaling every op (so the one-GPU step by its factor, the all-reduce untouched).
TEST(StepTerms, TheFrameworkCostAtNAndTheComputeErrorOnEveryOp) {
    HardwareProfile hw = profile("h200-sxm");
    StepTrace t;
    t.precision = Precision::bf16;
    TracedOp op;
    op.tensor_core = true;
    op.m = op.n = op.k = 8192;
    op.flops = 2.0 * 8192.0 * 8192 * 8192;
    t.ops = {op, op};
    t.backward_end = 2;
    t.optimizer_begin = 2;
    const ProjectedStep one = schedule_step(t, CostModel(hw), 1, 1), eight = schedule_step(t, CostModel(hw), 8, 1);
    EXPECT_EQ(one.framework_ms, 0.0);
    EXPECT_EQ(eight.framework_ms, hw.framework_step_ms.value);
    EXPECT_NEAR(eight.step_ms, eight.compute_ms + eight.exposed_comm_ms + eight.optimizer_ms, 1e-9);
    HardwareProfile none = hw;
    none.framework_step_ms.value = 0;
    EXPECT_NEAR(eight.exposed_comm_ms - schedule_step(t, CostModel(none), 8, 1).exposed_comm_ms, eight.framework_ms, 1e-9);
    ASSERT_TRUE(hw.compute_error_pct.is_range());
    const HardwareProfile slow = at_range_end(hw, "gpu.compute_error_pct", true);
    const ProjectedStep one_slow = schedule_step(t, CostModel(slow), 1, 1);
    EXPECT_NEAR(one_slow.step_ms, one.step_ms * (1 + hw.compute_error_pct.hi / 100), 1e-9);
    // Both are ranges every shipped profile carries, so every band spans them.
    for (const auto& e : std::filesystem::directory_iterator(kSource + "/configs/hardware")) {
        const std::vector<std::string> keys = ranged_keys(load_hardware_profile(e.path().string()));
        for (const char* key : {"gpu.compute_error_pct", "node.framework_step_ms"})
            EXPECT_NE(std::find(keys.begin(), keys.end(), key), keys.end()) << e.path() << ": " << key;
    }
}

// The samples/s band without the compute model's error spans the profile's other ranges with that
// error at its central value, also where the value is no end of its range (the A100 SXM4's 0 in
// [-34, 83]): there it is no single point, and it lies inside the band with the error.
TEST(Bands, TheBandWithoutTheComputeErrorSpansTheOtherRanges) {
    const HardwareProfile hw = profile("a100-sxm4-40gb");
    const Sourced& e = hw.compute_error_pct;
    ASSERT_TRUE(e.is_range() && e.lo < e.value && e.value < e.hi) << "the case: an error range around its central value";
    const TrainConfig cfg = load_config_file(kSource + "/configs/ci-transformer.yaml");
    std::vector<Projection> rows = project_workload(cfg, CostModel(hw), {1, 2, 8}, {1});
    widen_to_ranges(rows, cfg, hw, Calibration{}, {1, 2, 8}, {1});
    HardwareProfile pinned = hw;
    pinned.compute_error_pct = {e.value, e.source, e.value, e.value, {}, {}};  // a point
    std::vector<Projection> expected = project_workload(cfg, CostModel(pinned), {1, 2, 8}, {1});
    widen_to_ranges(expected, cfg, pinned, Calibration{}, {1, 2, 8}, {1});
    for (size_t i = 0; i < rows.size(); ++i) {
        const Band without = rows[i].bands.samples_per_s_without_compute_error, with = rows[i].bands.samples_per_s;
        EXPECT_LT(without.lo, without.hi) << "a point at " << rows[i].step.world_size << " GPUs";
        EXPECT_DOUBLE_EQ(without.lo, expected[i].bands.samples_per_s.lo);
        EXPECT_DOUBLE_EQ(without.hi, expected[i].bands.samples_per_s.hi);
        EXPECT_LE(with.lo, without.lo);
        EXPECT_GE(with.hi, without.hi);
        EXPECT_GT(with.hi - with.lo, without.hi - without.lo) << "the error widens the band with it";
    }
}

// Real input caps an image workload at the host's published loader rate; synthetic input, a
// transformer and a host without a rate are not capped.
TEST(StepTerms, RealInputCapsAnImageWorkloadAtTheHostsLoader) {
    const HardwareProfile hw = profile("a100-sxm4-80gb");
    TrainConfig resnet = load_config_file(kSource + "/configs/resnet50.yaml");
    resnet.precision = Precision::fp16;
    resnet.conv_engine = ConvEngine::im2col;
    const Projection synthetic = project_workload(resnet, CostModel(hw), {8}, {1}).at(0);
    const Projection real = project_workload(resnet, CostModel(hw, {}, true), {8}, {1}).at(0);
    ASSERT_GT(synthetic.samples_per_s, hw.input_images_per_s.value) << "the ceiling binds at 8 GPUs";
    EXPECT_NEAR(real.samples_per_s, hw.input_images_per_s.value, 1e-6 * real.samples_per_s);
    EXPECT_GT(real.step.input_wait_ms, 0.0);
    EXPECT_EQ(real.record["input"], "real");
    EXPECT_EQ(synthetic.step.input_wait_ms, 0.0);
    EXPECT_EQ(CostModel(profile("h100-sxm"), {}, true).input_ceiling(resnet), 0.0) << "no rate published for that host";
    const TrainConfig bert = load_config_file(kSource + "/configs/bert-base.yaml");
    EXPECT_EQ(CostModel(hw, {}, true).input_ceiling(bert), 0.0) << "text: no loader ceiling modelled";
}

// The step-time spread and the call launch every profile carries by default are the H200's
// records' (their sources say which): recomputed here from the records themselves.
TEST(Straggler, TheDefaultSpreadAndLaunchAreTheH200RecordsOwn) {
    std::vector<double> spread, alpha;
    for (const auto& e : std::filesystem::recursive_directory_iterator(kSource + "/results")) {
        const std::string path = e.path().string();
        if (e.path().extension() != ".jsonl" || path.find("/results/h200-") == std::string::npos) continue;
        for (const nlohmann::json& r : read_records(path).records) {
            const std::string sub = r.value("subcommand", "");
            if (!emulated_arch_of_record(r).empty()) continue;  // another architecture's limits: not the H200's step
            if (sub == "train" && r.value("world_size", 0) == 1 && r.value("backend", "") == "cuda" &&
                r.contains("step_ms") && r["step_ms"].is_object() && r["step_ms"].contains("p90")) {
                const nlohmann::json& st = r["step_ms"];
                // The normal's sigma from its 10-90% spread (2 x 1.2816 sigma), over the median.
                spread.push_back(100 * (st["p90"].get<double>() - st["p10"].get<double>()) / 2.5631 / st["median"].get<double>());
            }
            if (sub == "comm" && r.value("world_size", 0) == 1 && r.contains("fit") && r["fit"].contains("alpha_us"))
                alpha.push_back(r["fit"]["alpha_us"].get<double>());
        }
    }
    ASSERT_GE(spread.size(), 50u);
    ASSERT_GE(alpha.size(), 10u);
    auto quantile = [](std::vector<double> v, double q) {
        std::sort(v.begin(), v.end());
        return v[static_cast<size_t>(q * (v.size() - 1) + 0.5)];
    };
    const HardwareProfile hw = profile("a100-sxm4-80gb");  // any profile: the defaults
    EXPECT_NEAR(hw.step_jitter_pct.value, quantile(spread, 0.5), 0.01);
    EXPECT_NEAR(hw.step_jitter_pct.lo, quantile(spread, 0.25), 0.01);
    EXPECT_NEAR(hw.step_jitter_pct.hi, quantile(spread, 0.75), 0.01);
    EXPECT_NEAR(hw.bucket_launch_us.value, quantile(alpha, 0.5), 0.1);
    EXPECT_NEAR(hw.bucket_launch_us.lo, *std::min_element(alpha.begin(), alpha.end()), 0.1);
    EXPECT_NEAR(hw.bucket_launch_us.hi, *std::max_element(alpha.begin(), alpha.end()), 0.1);
}

// `project --comm` says where a host-staged busbw is a fitted figure; a P2P or NVLink profile's busbw
// rests on its link efficiency's published all_reduce_perf sources.
TEST(CostModel, AHostStagedBusbwIsLabelledFitted) {
    for (const char* name : {"rtx4090-24gb-pcie4", "rtx4090-48gb-pcie4"})
        EXPECT_NE(busbw_provenance(profile(name)).find("fitted figure, not validated"), std::string::npos) << name;
    for (const char* name : {"rtx4090-24gb-pcie4-p2p", "a100-sxm4-80gb", "h200-sxm"})
        EXPECT_EQ(busbw_provenance(profile(name)), "") << name;
}

TEST(CostModel, TwoNodesAddTheNetworkPart) {
    const HardwareProfile hw = profile("a100-sxm4-40gb");
    const CostModel m(hw);
    const double bytes = 1e9;
    const double per_gpu = 25e9 * 8 / 8 * 0.96;
    const double ring_us = 2.0 * hw.network_latency_us.value + 1.0 * (bytes / 8) / per_gpu * 1e6;
    EXPECT_NEAR(m.all_reduce_ms(bytes, 8, 2) - m.all_reduce_ms(bytes, 8, 1), ring_us * 1e-3, 1e-9);
}

TEST(Schedule, ExposedCommunicationIsTheWaitAfterBackward) {
    // Three 1 ms ops of backward, a bucket issued after the first and one after the last,
    // then a 1 ms optimizer op. The ops are GEMMs and NCCL takes no SMs here: the schedule
    // alone (its cost to compute is the next test's).
    HardwareProfile hw = profile("a100-sxm4-40gb");
    hw.kernel_gap_us.value = 0;
    hw.link_latency_us.value = 0;
    hw.bucket_launch_us.value = 0;
    hw.step_jitter_pct.value = 0;  // the straggler is Straggler.*'s
    hw.comm_sms.value = 0;
    hw.framework_step_ms.value = 0;  // StepTerms.*'s
    const CostModel m(hw);
    StepTrace t;
    t.precision = Precision::fp32;
    TracedOp op;
    op.tensor_core = true;
    op.m = op.n = op.k = 8192;
    op.flops = 1e-3 * m.peak_tflops(Precision::fp32) * 1e12 * m.gemm_efficiency(op, Precision::fp32);  // 1 ms each
    t.ops = {op, op, op, op};
    t.backward_end = 3;
    t.optimizer_begin = 3;
    const double bytes_2ms = 2e-3 * m.ring_busbw_gbps(2) * 1e9;  // 2(n-1)/n = 1 at n = 2
    t.collectives = {{Collective::all_reduce, 1, 3, bytes_2ms}, {Collective::all_reduce, 3, 3, bytes_2ms}};
    const ProjectedStep s = schedule_step(t, m, 2, 1);
    // Bucket 0 runs 1..3 ms, bucket 1 3..5 ms; backward ends at 3 ms: 2 ms exposed.
    EXPECT_NEAR(s.compute_ms, 3.0, 1e-9);
    EXPECT_NEAR(s.exposed_comm_ms, 2.0, 1e-9);
    EXPECT_NEAR(s.optimizer_ms, 1.0, 1e-9);
    EXPECT_NEAR(s.step_ms, 6.0, 1e-9);
    EXPECT_NEAR(s.allreduce_ms, 4.0, 1e-9);
    // A comm stream still busy delays the next bucket: both issued at 1 ms -> 1..3, 3..5.
    t.collectives = {{Collective::all_reduce, 1, 3, bytes_2ms}, {Collective::all_reduce, 1, 3, bytes_2ms}};
    EXPECT_NEAR(schedule_step(t, m, 2, 1).exposed_comm_ms, 2.0, 1e-9);
    // One GPU: each bucket is a 0.71 ms read and write of its bytes (1..1.71, 1.71..2.42 ms),
    // done before backward ends: nothing exposed.
    EXPECT_NEAR(schedule_step(t, m, 1, 1).allreduce_ms, 2 * 2.0 * bytes_2ms / (m.memory_gbps() * 1e9) * 1e3, 1e-9);
    EXPECT_NEAR(schedule_step(t, m, 1, 1).exposed_comm_ms, 0.0, 1e-9);
}

TEST(Schedule, AnOverlappedAllReduceTakesItsShareFromCompute) {
    // One 2 ms bucket issued at the start of 4 ms of backward on 2 GPUs.
    HardwareProfile hw = profile("rtx4090-24gb-pcie4");  // host_staged
    hw.kernel_gap_us.value = 0;
    hw.l2_copy_gbps.value = 0;  // every byte from device memory
    hw.link_latency_us.value = 0;
    hw.bucket_launch_us.value = 0;
    hw.step_jitter_pct.value = 0;
    auto step = [&](const HardwareProfile& p, bool memory_bound) {
        const CostModel m(p);
        StepTrace t;
        t.precision = Precision::bf16;
        TracedOp op;
        if (memory_bound) {
            op.bytes = 1e-3 * m.memory_gbps() * 1e9;  // 1 ms
        } else {
            op.tensor_core = true;
            op.m = op.n = op.k = 8192;
            op.flops = 1e-3 * m.peak_tflops(Precision::bf16) * 1e12 * m.gemm_efficiency(op, Precision::bf16);
        }
        t.ops = {op, op, op, op};
        t.backward_end = t.optimizer_begin = 4;
        t.collectives = {{Collective::all_reduce, 0, 4, 2e-3 * m.ring_busbw_gbps(2) * 1e9}};
        return schedule_step(t, m, 2, 1);
    };
    // Full overlap: a GEMM loses the SMs NCCL holds (2 of 128) for the 2 ms the bucket runs.
    HardwareProfile full = hw;
    full.staged_overlap.value = 1;
    const double sm_rate = 1.0 - 2.0 / 128;
    EXPECT_NEAR(step(full, false).compute_ms, 4.0 + 2.0 * (1 - sm_rate), 1e-9);
    // A memory-bound op loses the share of device bandwidth the all-reduce moves: a read and a
    // write of every byte it sends or receives (2(n-1)/n of the bucket at n = 2).
    const CostModel m(full);
    const double share = 2.0 * m.ring_busbw_gbps(2) / m.memory_gbps();
    EXPECT_NEAR(step(full, true).compute_ms, 4.0 + 2.0 * share, 1e-9);
    // Serialized (staged_overlap 0): backward stops while the bucket runs.
    HardwareProfile serial = hw;
    serial.staged_overlap.value = 0;
    EXPECT_NEAR(step(serial, false).compute_ms, 6.0, 1e-9);
    // Half: compute runs at half the rate less the SMs for those 2 ms.
    HardwareProfile half = hw;
    half.staged_overlap.value = 0.5;
    EXPECT_NEAR(step(half, false).compute_ms, 4.0 + 2.0 * (1 - 0.5 * sm_rate), 1e-9);
    // A P2P link overlaps fully whatever staged_overlap says.
    HardwareProfile p2p = serial;
    p2p.link = LinkClass::pcie_p2p;
    EXPECT_NEAR(step(p2p, false).compute_ms, 4.0 + 2.0 * (1 - sm_rate), 1e-9);
}

TEST(Calibration, ReadsTheCommittedH200Records) {
    const HardwareProfile hw = profile("h200-sxm");
    const std::string dir = kSource + "/results/h200-one-gpu/gemm/";
    const Calibration cal = calibrate(hw, {dir + "gemm.jsonl", dir + "comm.jsonl"});
    const CostModel shape(hw);
    // bf16 8192^3 at 73.97% of peak (gemm.jsonl), divided by the shape factor there.
    EXPECT_NEAR(cal.gemm_base[static_cast<int>(Precision::bf16)],
                731.9 / 989.4 / shape.gemm_shape_factor(8192, 8192, 8192, 1), 0.002);
    // 256 MiB copied in 128.85 us: 2 x 268435456 / 128.85e-6 = 4.17 TB/s of 4.8.
    EXPECT_NEAR(cal.memory_efficiency, 2.0 * 268435456 / 128.85e-6 / 4.8e12, 0.002);
    EXPECT_NEAR(cal.collective_alpha_us, 8.83, 0.01);
    EXPECT_LT(cal.ring_busbw_gbps, 0);  // one GPU: no fabric was measured
    // Another GPU's records calibrate nothing.
    const Calibration none = calibrate(profile("a100-sxm4-40gb"), {dir + "gemm.jsonl", dir + "comm.jsonl"});
    EXPECT_TRUE(none.notes.empty());
}

TEST(Calibration, ATrainRecordsConfigIsTheWorkloadItRan) {
    // What the runner writes as a record's "config" reads back as the same workload, for
    // every preset (the measured-run validation predicts records through it); a ResNet's
    // convolutions are the engine the record says ran (`auto` resolved), im2col in a record
    // that predates the key.
    for (const auto& e : std::filesystem::directory_iterator(kSource + "/configs")) {
        if (e.path().extension() != ".yaml") continue;
        const TrainConfig cfg = load_config_file(e.path().string());
        const bool resnet = cfg.model == "resnet";
        const nlohmann::json record = {{"config", to_json(cfg)},
                                       {"conv_engine", resnet ? nlohmann::json("cudnn") : nlohmann::json()}};
        const TrainConfig back = config_of_record(record, "record");
        nlohmann::json a = to_json(cfg), b = to_json(back);
        a.erase("source");
        b.erase("source");
        if (resnet) a["conv_engine"] = "cudnn";
        EXPECT_EQ(a, b) << e.path();
        if (resnet) EXPECT_EQ(config_of_record({{"config", to_json(cfg)}}, "record").conv_engine, ConvEngine::im2col);
    }
}

TEST(Calibration, AResNetRecordProjectsTheConvolutionEngineThatRan) {
    // A hand-made record of a ResNet run: its config asks for "auto" and its top-level
    // conv_engine says which engine the runner chose. The workload read back is that engine's,
    // whatever this build's trace would pick for "auto".
    TrainConfig asked = load_config_file(kSource + "/configs/resnet50.yaml");
    asked.resnet.image_size = 64;  // a small step: the engines differ in every convolution all the same
    asked.batch_size = 8;
    validate_config(asked);
    ASSERT_FALSE(asked.conv_engine.has_value());
    const HardwareProfile hw = profile("h200-sxm");
    auto projected_compute_ms = [&](const TrainConfig& cfg) {
        return schedule_step(trace_step(cfg, cfg.batch_size), CostModel(hw), 1, 1).compute_ms;
    };
    for (ConvEngine ran : {ConvEngine::cudnn, ConvEngine::im2col}) {
        SCOPED_TRACE(conv_engine_name(ran));
        const nlohmann::json record = {{"subcommand", "train"}, {"model", "resnet"}, {"conv_engine", conv_engine_name(ran)},
                                       {"config", to_json(asked)}};
        ASSERT_EQ(record["config"]["conv_engine"], "auto");
        const TrainConfig back = config_of_record(record, "record");
        ASSERT_TRUE(back.conv_engine.has_value());
        EXPECT_EQ(*back.conv_engine, ran);
        TrainConfig explicit_engine = asked;
        explicit_engine.conv_engine = ran;
        EXPECT_DOUBLE_EQ(projected_compute_ms(back), projected_compute_ms(explicit_engine));
        // The cuDNN path's convolutions are conv_* ops; im2col's are im2col copies and GEMMs.
        bool conv_ops = false;
        for (const TracedOp& op : trace_step(back, back.batch_size).ops) conv_ops |= op.kind.rfind("conv_", 0) == 0;
        EXPECT_EQ(conv_ops, ran == ConvEngine::cudnn);
    }
    TrainConfig cudnn = asked, im2col = asked;
    cudnn.conv_engine = ConvEngine::cudnn;
    im2col.conv_engine = ConvEngine::im2col;
    EXPECT_NE(projected_compute_ms(cudnn), projected_compute_ms(im2col));  // the engine matters to the projection
    // A ResNet record without the engine predates the cuDNN engine: it ran im2col.
    const TrainConfig old = config_of_record({{"conv_engine", nullptr}, {"config", to_json(asked)}}, "record");
    ASSERT_TRUE(old.conv_engine.has_value());
    EXPECT_EQ(*old.conv_engine, ConvEngine::im2col);
}

TEST(Calibration, AOneGpuTrainRecordSetsTheOptimizersBandwidth) {
    // Calibrated from a train record, the model gives that record's optimizer phase back
    // (the fraction is its traced bytes over its measured time); other ops keep theirs.
    const HardwareProfile hw = profile("h200-sxm");
    const std::string file = kSource + "/results/h200-one-gpu/gemm/mlp-large.jsonl";
    const nlohmann::json r = read_records(file).records.at(0);
    const Calibration cal = calibrate(hw, {file});
    ASSERT_GT(cal.optimizer_memory_efficiency, 0.5);
    ASSERT_LT(cal.optimizer_memory_efficiency, 1.0);
    const CostModel calibrated(hw, cal), plain(hw);
    const TrainConfig cfg = config_of_record(r, file);
    const StepTrace t = trace_step(cfg, r["local_batch"].get<int>());
    const ProjectedStep s = schedule_step(t, calibrated, 1, 1);
    EXPECT_NEAR(s.optimizer_ms, r["optimizer_ms"]["median"].get<double>(), 1e-6);
    EXPECT_DOUBLE_EQ(s.compute_ms, schedule_step(t, plain, 1, 1).compute_ms);

    // A small model's optimizer step (microseconds) is launch and tail: it sets nothing.
    nlohmann::json small = r;
    small["config"]["mlp"]["hidden"] = {64};
    small["config"]["mlp"]["input_dim"] = 64;
    small["optimizer_ms"]["median"] = 0.012;
    const std::string small_file = (std::filesystem::temp_directory_path() / "scalebench_small_train.jsonl").string();
    std::filesystem::remove(small_file);
    append_record(small_file, small);
    const Calibration none = calibrate(hw, {small_file});
    EXPECT_LT(none.optimizer_memory_efficiency, 0);
    ASSERT_EQ(none.notes.size(), 1u);
    EXPECT_NE(none.notes[0].find("too short to be bandwidth-bound"), std::string::npos) << none.notes[0];
}

}  // namespace
}  // namespace sb

namespace sb {
namespace {

TEST(CostModel, AMeasuredGemmOfTheSameShapeOverridesTheShapeModel) {
    Calibration cal;
    cal.gemm_base[static_cast<int>(Precision::bf16)] = 0.8;
    cal.gemms.push_back({static_cast<int>(Precision::bf16), 1024, 8192, 8192, 0.55});
    const CostModel m(profile("h200-sxm"), cal);
    TracedOp op;
    op.tensor_core = true;
    op.m = 1024;
    op.n = 8192;
    op.k = 8192;
    EXPECT_DOUBLE_EQ(m.gemm_efficiency(op, Precision::bf16), 0.55);
    op.k = 4096;  // another shape: the shape model from the calibrated base
    EXPECT_DOUBLE_EQ(m.gemm_efficiency(op, Precision::bf16), 0.8 * m.gemm_shape_factor(1024, 8192, 4096, 1));
    op.k = 8192;  // another precision: not this measurement
    EXPECT_NE(m.gemm_efficiency(op, Precision::fp16), 0.55);
}

}  // namespace
}  // namespace sb

namespace sb {
namespace {

TEST(Calibration, AMalformedRecordIsAUserErrorNamingFileAndRecord) {
    const auto path = std::filesystem::temp_directory_path() / "scalebench-bad-gemm.jsonl";
    std::filesystem::remove(path);
    append_record(path.string(), {{"subcommand", "gemm"}, {"gpu", {{"name", "NVIDIA H200"}}}, {"dtype", "bf16"},
                                  {"fraction_of_peak", 0.7}, {"m", "big"}});
    try {
        calibrate(profile("h200-sxm"), {path.string()});
        FAIL() << "accepted a gemm record without its shape";
    } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find(path.string() + ": record 1: not a scalebench gemm record"),
                  std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace sb

namespace sb {
namespace {

// Every profile projects every preset workload (configs/*.yaml, the
// transformer presets included once they are there), with finite, positive figures.
TEST(ProjectWorkload, EveryProfileProjectsEveryPresetWorkload) {
    std::vector<std::string> workloads, profiles;
    for (const auto& e : std::filesystem::directory_iterator(kSource + "/configs"))
        if (e.path().extension() == ".yaml") workloads.push_back(e.path().string());
    for (const auto& e : std::filesystem::directory_iterator(kSource + "/configs/hardware"))
        profiles.push_back(e.path().string());
    ASSERT_GE(workloads.size(), 3u);
    for (const auto& w : workloads) {
        TrainConfig cfg = load_config_file(w);
        if (cfg.scaling_mode == ScalingMode::strong) cfg.batch_size = std::max(cfg.batch_size / 8, 1) * 8;
        const StepTrace one = trace_step(cfg, per_rank_batch(cfg, 1));  // traced once per workload
        for (const auto& p : profiles) {
            const CostModel model(load_hardware_profile(p));
            for (int g : {1, 2, 4, 8}) {
                const ProjectedStep s = schedule_step(one, model, g, 1);
                EXPECT_TRUE(std::isfinite(s.step_ms) && s.step_ms > 0) << w << " on " << p << " at " << g;
                EXPECT_GE(s.exposed_comm_ms, 0.0);
                EXPECT_NEAR(s.step_ms, s.compute_ms + s.exposed_comm_ms + s.optimizer_ms, 1e-9);
            }
            // Two nodes cost at least what one does.
            EXPECT_GE(schedule_step(one, model, 8, 2).step_ms, schedule_step(one, model, 8, 1).step_ms) << w << " on " << p;
        }
    }
}

TEST(Footprint, PartsFollowTheRunnersBuffers) {
    TrainConfig cfg = load_config_file(kSource + "/configs/resnet50.yaml");
    cfg.optimizer.kind = OptimizerConfig::Kind::adamw;
    const StepTrace adamw = trace_step(cfg, 8);
    cfg.optimizer.kind = OptimizerConfig::Kind::sgd;
    const StepTrace sgd = trace_step(cfg, 8);
    const double n = static_cast<double>(adamw.num_params);
    // fp32 master weights, the 16-bit copy, fp32 gradients; AdamW two moments, SGD one.
    EXPECT_DOUBLE_EQ(adamw.memory.parameters, n * (4 + 2));
    EXPECT_DOUBLE_EQ(adamw.memory.optimizer_state, n * 8);
    EXPECT_DOUBLE_EQ(sgd.memory.optimizer_state, n * 4);
    EXPECT_GE(adamw.memory.gradients, n * 4);
    // Activations grow with the batch; the fixed parts do not.
    const StepTrace twice = trace_step(cfg, 16);
    EXPECT_NEAR(twice.memory.activations, 2 * sgd.memory.activations, 0.05 * sgd.memory.activations);
    EXPECT_DOUBLE_EQ(twice.memory.parameters, sgd.memory.parameters);
    EXPECT_DOUBLE_EQ(footprint_bytes(sgd), sgd.memory.total() + kGemmWorkspaceBytes + kRuntimeReserveBytes);
    // The footprint is the prediction `train` refuses a run by, to the byte (one formula for both).
    const RankMemory predicted = predict_rank_memory(cfg, 1, 8);
    EXPECT_DOUBLE_EQ(sgd.memory.total(), predicted.total());
    EXPECT_DOUBLE_EQ(sgd.memory.activations, predicted.activations);
}

TEST(Footprint, BatchMaxIsTheLargestThatFits) {
    const TrainConfig cfg = load_config_file(kSource + "/configs/resnet50.yaml");
    const double gb = 24;
    const int max = max_fitting_batch(cfg, gb);
    ASSERT_GT(max, 1);
    EXPECT_LE(footprint_bytes(trace_step(cfg, max)), gb * kGiB);
    EXPECT_GT(footprint_bytes(trace_step(cfg, max + 1)), gb * kGiB);
    // Sharded, a rank's share shrinks as ranks join: more rows fit at 8 ranks than at 2.
    TrainConfig sharded = cfg;
    sharded.sharding = ShardingMode::optimizer;
    const int at_8 = max_fitting_batch(sharded, gb, 8);
    EXPECT_LE(footprint_bytes(predict_rank_memory(sharded, 8, at_8)), gb * kGiB);
    EXPECT_GT(footprint_bytes(predict_rank_memory(sharded, 8, at_8 + 1)), gb * kGiB);
    EXPECT_GE(at_8, max_fitting_batch(sharded, gb, 2));
    // Less memory than the runtime alone holds: not one row fits.
    EXPECT_EQ(max_fitting_batch(cfg, 1.0), 0);
}

}  // namespace
}  // namespace sb
