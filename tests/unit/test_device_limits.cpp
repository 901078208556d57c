// The claimed architectures' limits and the SCALEBENCH_DEVICE_LIMITS override, the attention
// kernels' shared memory and the variant each architecture takes, the trace of the target's
// variant, and the static resource check's parser and verdicts (models/device_limits.h).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "models/device_limits.h"
#include "models/trace_ops.h"
#include "base/errors.h"
#include "src/system/gpu_peaks.h"

namespace sb {
namespace {

constexpr int64_t KiB = 1024;

TEST(DeviceLimits, TableOfTheProgrammingGuide) {
    const auto& table = claimed_architectures();
    ASSERT_EQ(table.size(), 4u);
    EXPECT_EQ(claimed_architecture_list(), "sm_80, sm_86, sm_89, sm_90");
    struct Row {
        const char* arch;
        int64_t block_kib, sm_kib;
        int threads, blocks;
    };
    for (const Row& r : {Row{"sm_80", 163, 164, 2048, 32}, Row{"sm_86", 99, 100, 1536, 16},
                         Row{"sm_89", 99, 100, 1536, 24}, Row{"sm_90", 227, 228, 2048, 32}}) {
        SCOPED_TRACE(r.arch);
        const auto l = architecture_limits(r.arch);
        ASSERT_TRUE(l);
        EXPECT_EQ(l->smem_per_block_optin, r.block_kib * KiB);
        EXPECT_EQ(l->smem_per_sm, r.sm_kib * KiB);
        EXPECT_EQ(l->smem_reserved_per_block, 1 * KiB);
        EXPECT_EQ(l->max_threads_per_sm, r.threads);
        EXPECT_EQ(l->max_blocks_per_sm, r.blocks);
        EXPECT_EQ(l->regs_per_sm, 65536);
        EXPECT_NE(l->source.find("Technical Specifications per Compute Capability"), std::string::npos);
    }
    EXPECT_FALSE(architecture_limits("sm_75"));
    EXPECT_FALSE(architecture_limits("89"));
}

TEST(DeviceLimits, OverrideKeepsTheProductsFiguresAndRejectsUnknownValues) {
    DeviceLimits h200 = *architecture_limits("sm_90");
    h200.sm_count = 132;
    h200.l2_bytes = 60 << 20;
    h200.source = "device";
    EXPECT_EQ(effective_limits(h200, "").source, "device");
    const DeviceLimits l = effective_limits(h200, "sm_89");
    EXPECT_EQ(l.arch, "sm_89");
    EXPECT_EQ(l.smem_per_block_optin, 99 * KiB);
    EXPECT_EQ(l.max_threads_per_sm, 1536);
    EXPECT_EQ(l.sm_count, 132);
    EXPECT_EQ(l.l2_bytes, 60 << 20);
    EXPECT_NE(l.source.find("SCALEBENCH_DEVICE_LIMITS"), std::string::npos);
    try {
        effective_limits(h200, "sm_89x");
        ADD_FAILURE() << "accepted";
    } catch (const UserError& e) {
        EXPECT_EQ(std::string(e.what()),
                  "SCALEBENCH_DEVICE_LIMITS=sm_89x: not a claimed architecture; use one of sm_80, sm_86, sm_89, sm_90");
    }
}

TEST(DeviceLimits, ResidentBlocksByThreadsRegistersAndSharedMemory) {
    const DeviceLimits sm90 = *architecture_limits("sm_90"), sm80 = *architecture_limits("sm_80");
    const DeviceLimits sm89 = *architecture_limits("sm_89");
    // The one-block backward at head_dim 64: 256 threads of <= 128 registers, 107 KB.
    const int64_t short64 = attention_plan::backward_short_smem(2, 64);
    EXPECT_EQ(short64, 109568);
    EXPECT_EQ(resident_blocks(sm90, 256, 128, short64), 2);
    EXPECT_EQ(resident_blocks(sm80, 256, 128, short64), 1);  // 2 x 108 KB > 164 KB
    EXPECT_EQ(resident_blocks(sm89, 256, 128, short64), 0);  // 107 KB > 99 KB a block
    EXPECT_EQ(resident_blocks(sm89, 256, 256, 0), 0);        // more than 255 registers
    EXPECT_EQ(resident_blocks(sm89, 128, 32, 0), 12);        // 1536 threads an SM
    EXPECT_EQ(resident_blocks(sm89, 32, 16, 0), 24);         // 24 blocks an SM
    EXPECT_EQ(resident_blocks(sm90, 256, 255, 0), 1);        // 256 x 256 registers after rounding
    EXPECT_EQ(resident_blocks(sm89, 1024, 0, 0), 1);
    EXPECT_EQ(resident_blocks(sm89, 2048, 0, 0), 0);
}

TEST(DeviceLimits, AttentionSharedMemoryAndTheVariantEachArchitectureTakes) {
    using namespace attention_plan;
    // The sizes docs/transformer-kernels.md quotes: 107 KB and 171 KB one-block, the tiled kernels
    // at most 52 KB (head_dim 128), so they fit every claimed GPU.
    EXPECT_EQ(backward_short_smem(2, 64), 107 * KiB);
    EXPECT_EQ(backward_short_smem(2, 128), 171 * KiB);
    EXPECT_EQ(forward_smem(2, 64), 27 * KiB);
    EXPECT_EQ(forward_smem(2, 128), 51 * KiB);
    EXPECT_EQ(backward_dq_smem(2, 64), 36 * KiB);
    EXPECT_EQ(backward_dq_smem(2, 128), 51 * KiB);
    EXPECT_EQ(backward_dkdv_smem(2, 128), 51 * KiB + 256);
    Ops::AttentionShape s{};
    s.seq = 128;
    auto variant = [&](const char* arch, int d, int seq = 128) {
        s.head_dim = d;
        s.seq = seq;
        return std::string(backward_variant(*architecture_limits(arch), DType::bf16, s));
    };
    EXPECT_EQ(variant("sm_90", 64), kOneBlock);
    EXPECT_EQ(variant("sm_90", 128), kOneBlock);
    EXPECT_EQ(variant("sm_80", 64), kOneBlock);
    EXPECT_EQ(variant("sm_80", 128), kTiled);  // 171 KB > 163 KB
    EXPECT_EQ(variant("sm_86", 64), kTiled);   // 107 KB > 99 KB
    EXPECT_EQ(variant("sm_89", 64), kTiled);
    EXPECT_EQ(variant("sm_89", 128), kTiled);
    EXPECT_EQ(variant("sm_90", 64, 129), kTiled);  // beyond one block's sequence
    // Every launch planned for the smallest GPU fits it.
    const DeviceLimits sm89 = *architecture_limits("sm_89");
    for (const PlannedLaunch& p : planned_launches(sm89)) {
        EXPECT_LE(p.dynamic_smem, sm89.smem_per_block_optin) << p.kernel;
        EXPECT_EQ(p.kernel.find("short"), std::string::npos) << p.kernel;
    }
    // sm_90 plans the one-block kernel for both head dims, sm_80 for head_dim 64 only.
    auto shorts = [](const char* arch) {
        int n = 0;
        for (const PlannedLaunch& p : planned_launches(*architecture_limits(arch)))
            n += p.kernel.find("attention_backward_short_kernel") != std::string::npos;
        return n;
    };
    EXPECT_EQ(shorts("sm_90"), 4);  // bf16, fp16 x head_dim 64, 128
    EXPECT_EQ(shorts("sm_80"), 2);
    EXPECT_EQ(shorts("sm_86"), 0);
}

TEST(DeviceLimits, GpuArchitectureOfTheProjectionsProfiles) {
    EXPECT_EQ(gpu_architecture(*find_gpu_peak("NVIDIA H200")), "sm_90");
    EXPECT_EQ(gpu_architecture(*find_gpu_peak("NVIDIA A100-SXM4-80GB")), "sm_80");
    EXPECT_EQ(gpu_architecture(*find_gpu_peak("NVIDIA GeForce RTX 4090")), "sm_89");
    EXPECT_EQ(gpu_architecture(*find_gpu_peak("NVIDIA GeForce RTX 3090")), "sm_86");
    for (const std::string& name : known_gpu_names())
        EXPECT_FALSE(gpu_architecture(*find_gpu_peak(name)).empty()) << name;
}

// The trace names the variant the target would run: a short sequence on sm_89 is the tiled
// backward (7 products, a key of its own), on sm_90 the one-block kernel (5 products).
TEST(DeviceLimits, TraceRecordsTheTargetsVariant) {
    Ops::AttentionShape s{};
    s.batch = 2;
    s.seq = 128;
    s.heads = 12;
    s.head_dim = 64;
    s.dropout_p = 0.1f;
    auto traced = [&](const char* arch) {
        TraceOps ops(Precision::bf16, *architecture_limits(arch));
        const int64_t rows = int64_t{s.batch} * s.seq, width = int64_t{s.heads} * s.head_dim;
        const Tensor qkv{nullptr, DType::bf16, rows, 3 * width}, out{nullptr, DType::bf16, rows, width};
        ops.attention_backward(s, qkv, out, nullptr, out, qkv, 1);
        return ops.trace().back();
    };
    const TracedOp h200 = traced("sm_90"), rtx4090 = traced("sm_89"), a100 = traced("sm_80");
    EXPECT_EQ(h200.variant, "bidirectional+dropout+fused");
    EXPECT_EQ(a100.variant, "bidirectional+dropout+fused");
    EXPECT_EQ(rtx4090.variant, "bidirectional+dropout+fused+tiled");
    EXPECT_NE(op_key(h200), op_key(rtx4090));
    EXPECT_DOUBLE_EQ(rtx4090.flops / h200.flops, 7.0 / 5.0);
    EXPECT_EQ(TraceOps(Precision::bf16).device_limits()->arch, "sm_90");
}

// ---- the static check's parser and verdicts, on fixture reports

const char* kPtxasReport = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'void sb::kernels::big_kernel<__nv_bfloat16>(float*)' for 'sm_89'
ptxas info    : Function properties for void sb::kernels::big_kernel<__nv_bfloat16>(float*)
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 64 registers, used 1 barriers, 1024 bytes smem, 380 bytes cmem[0]
ptxas info    : Compiling entry function 'void sb::kernels::small_kernel(float*)' for 'sm_89'
ptxas info    : Function properties for void sb::kernels::small_kernel(float*)
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 16 registers, used 0 barriers, 360 bytes cmem[0]
ptxas info    : Compiling entry function 'void sb::kernels::big_kernel<__nv_bfloat16>(float*)' for 'sm_90'
ptxas info    : Function properties for void sb::kernels::big_kernel<__nv_bfloat16>(float*)
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 72 registers, used 1 barriers, 1024 bytes smem, 380 bytes cmem[0]
)";

// A kernel over the 48 KB of static shared memory every architecture allows.
const char* kOverStaticSmem = R"(
ptxas info    : Compiling entry function 'void sb::kernels::big_kernel<__nv_bfloat16>(float*)' for 'sm_80'
ptxas info    : Function properties for void sb::kernels::big_kernel<__nv_bfloat16>(float*)
    16 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 70 registers, used 1 barriers, 50176 bytes smem, 380 bytes cmem[0]
)";

TEST(KernelResourceReport, ParsesPtxasReport) {
    const std::vector<KernelResources> p = parse_resource_usage(kPtxasReport);
    ASSERT_EQ(p.size(), 3u);
    EXPECT_EQ(p[0].name, "void sb::kernels::big_kernel<__nv_bfloat16>(float*)");
    EXPECT_EQ(p[0].arch, "sm_89");
    EXPECT_EQ(p[0].registers, 64);
    EXPECT_EQ(p[0].static_smem, 1024);
    EXPECT_EQ(p[0].stack_bytes, 8);
    EXPECT_EQ(p[0].spill_bytes, 4);
    EXPECT_EQ(p[1].registers, 16);
    EXPECT_EQ(p[1].static_smem, 0);
    EXPECT_EQ(p[2].arch, "sm_90");
    EXPECT_EQ(p[2].registers, 72);
}

// A kernel made to need 100 KB cannot launch on sm_86/sm_89 (99 KB a block): the check fails
// there, and passes where the block fits.
TEST(KernelResourceCheck, FailsAKernelThatNeeds100KB) {
    const std::vector<KernelResources> report = parse_resource_usage(kPtxasReport);
    const std::vector<PlannedLaunch> plan = {{"big_kernel<__nv_bfloat16>", 256, 100 * KiB - 1024, 1}};
    const ResourceCheck on89 = check_resources(report, plan, *architecture_limits("sm_89"));
    ASSERT_EQ(on89.failures.size(), 1u);
    EXPECT_NE(on89.failures[0].find("does not fit"), std::string::npos) << on89.failures[0];
    EXPECT_NE(on89.failures[0].find("102400 bytes of shared memory"), std::string::npos) << on89.failures[0];
    ASSERT_EQ(on89.spills.size(), 1u);  // big_kernel's 4 bytes on sm_89
    const ResourceCheck on90 = check_resources(report, plan, *architecture_limits("sm_90"));
    EXPECT_TRUE(on90.failures.empty());
    ASSERT_EQ(on90.notes.size(), 1u);
    EXPECT_NE(on90.notes[0].find("2 block(s) per SM"), std::string::npos) << on90.notes[0];
    // A kernel of the plan missing from the report fails; so does static shared memory over 48 KB.
    const ResourceCheck on80 = check_resources(parse_resource_usage(kOverStaticSmem),
                                               {{"missing_kernel", 128, 0, 1}}, *architecture_limits("sm_80"));
    ASSERT_EQ(on80.failures.size(), 2u);
    EXPECT_NE(on80.failures[0].find("50176 bytes of static shared memory"), std::string::npos) << on80.failures[0];
    EXPECT_NE(on80.failures[1].find("missing_kernel: planned, but not in the resource report"), std::string::npos);
    // Fewer resident blocks than the kernel is tuned for is a note, not a failure.
    const ResourceCheck tuned = check_resources(report, {{"big_kernel<__nv_bfloat16>", 256, 100 * KiB, 3}},
                                                *architecture_limits("sm_90"));
    EXPECT_TRUE(tuned.failures.empty());
    ASSERT_EQ(tuned.notes.size(), 1u);
    EXPECT_NE(tuned.notes[0].find("2 block(s) per SM, fewer than the 3 it is tuned for"), std::string::npos)
        << tuned.notes[0];
}

}  // namespace
}  // namespace sb
