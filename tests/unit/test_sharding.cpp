// Sharded data parallel on one process: the shard layout (every bucket cut into equal
// slices, a rank's slices back to back, the padding past the buffer's end), the sharding key
// and its refusals, and the per-rank memory prediction of each mode.
#include <gtest/gtest.h>

#include "base/errors.h"
#include "collectives/bucketer.h"
#include "collectives/sharding.h"
#include "src/core/choices.h"
#include "src/core/config.h"
#include "src/core/rank_memory.h"
#include "src/core/workload.h"
#include "models/cpu/cpu_ops.h"
#include "models/trace_ops.h"

namespace sb {
namespace {

std::vector<Bucket> buckets_of(const std::vector<std::pair<size_t, size_t>>& offset_count) {
    std::vector<Bucket> out;
    for (const auto& [offset, count] : offset_count) out.push_back(Bucket{offset, count, {}});
    return out;
}

TEST(ShardLayout, EveryBucketIsCutIntoEqualSlicesAndTheRanksSlicesLieBackToBack) {
    // As the bucketer orders them: the end of the buffer first.
    const std::vector<Bucket> buckets = buckets_of({{12, 10}, {4, 8}, {0, 4}});
    const ShardLayout r0(buckets, 4, 0), r3(buckets, 4, 3);
    EXPECT_EQ(r0.slice(0), 3u);  // ceil(10 / 4)
    EXPECT_EQ(r0.slice(1), 2u);
    EXPECT_EQ(r0.slice(2), 1u);
    EXPECT_EQ(r0.shard_elements(), 6u);
    EXPECT_EQ(r3.shard_elements(), 6u);
    EXPECT_EQ(r3.shard_offset(0), 0u);
    EXPECT_EQ(r3.shard_offset(1), 3u);
    EXPECT_EQ(r3.shard_offset(2), 5u);
    EXPECT_EQ(r3.flat_offset(0), 12u + 9u);
    EXPECT_EQ(r3.flat_offset(1), 4u + 6u);
    EXPECT_EQ(r0.padded_count(0), 12u);
    EXPECT_EQ(r0.tail_padding(), 2u);  // bucket 0 ends the buffer at 22; its padded span at 24
    EXPECT_EQ(r0.largest_padded_count(), 12u);
}

TEST(ShardLayout, OneRankOwnsEverythingWithoutPadding) {
    const ShardLayout layout(buckets_of({{5, 7}, {0, 5}}), 1, 0);
    EXPECT_EQ(layout.shard_elements(), 12u);
    EXPECT_EQ(layout.tail_padding(), 0u);
    EXPECT_EQ(layout.flat_offset(1), 0u);
    EXPECT_THROW(ShardLayout(buckets_of({{0, 5}}), 2, 2), std::runtime_error);
}

TEST(ShardingConfig, TheKeyReadsEveryModeAndRecordsIt) {
    EXPECT_EQ(parse_config("sharding: optimizer\n", "t.yaml").sharding, ShardingMode::optimizer);
    EXPECT_EQ(parse_config("sharding: gradients\n", "t.yaml").sharding, ShardingMode::gradients);
    EXPECT_EQ(TrainConfig{}.sharding, ShardingMode::none);
    EXPECT_EQ(to_json(parse_config("sharding: gradients\n", "t.yaml"))["sharding"], "gradients");
    EXPECT_EQ(parse_sharding_mode("optimizer"), ShardingMode::optimizer);
    EXPECT_THROW(parse_sharding_mode("zero2"), UserError);
}

std::string refusal(const std::string& yaml) {
    try {
        validate_config(parse_config(yaml, "t.yaml"));
    } catch (const UserError& e) {
        return e.what();
    }
    return "";
}

TEST(ShardingConfig, WhatCannotRunIsRefusedNamingTheKey) {
    EXPECT_EQ(refusal("sharding: optimizer\n"), "");
    EXPECT_EQ(refusal("sharding: parameters\n"), "");
    EXPECT_NE(refusal("sharding: parameters\nprecision: fp16\n").find("parameters with precision fp16"),
              std::string::npos);
    EXPECT_NE(refusal("sharding: gradients\ngrad_dtype: bf16\n").find("grad_dtype bf16"), std::string::npos);
    EXPECT_NE(refusal("sharding: optimizer\nprecision: fp16\n").find("use bf16"), std::string::npos);
}

TrainConfig gpt_config() {
    TrainConfig cfg;
    cfg.model = "transformer";
    TransformerShape& s = cfg.transformer.shape;
    s.arch = TransformerArch::gpt;
    s.layers = 2, s.hidden = 32, s.heads = 2, s.ffn = 64, s.vocab = 50, s.seq_len = 16, s.max_positions = 16;
    cfg.bucket_mb = 0.01;
    return cfg;
}

TEST(RankMemory, ShardingDividesTheOptimizerStateAndAddsTheShards) {
    TrainConfig cfg = gpt_config();
    const RankMemory none = predict_rank_memory(cfg, 4, 2);
    cfg.sharding = ShardingMode::optimizer;
    const RankMemory sharded = predict_rank_memory(cfg, 4, 2);
    const double n = none.gradients / sizeof(float);
    EXPECT_DOUBLE_EQ(none.optimizer_state, 2 * 4 * n);  // AdamW's two fp32 moments
    EXPECT_GE(sharded.optimizer_state, none.optimizer_state / 4);
    EXPECT_LE(sharded.optimizer_state, none.optimizer_state / 4 + 2 * 4.0 * 4 * 64);  // a slice's padding per bucket
    EXPECT_GE(sharded.parameters, none.parameters);  // every parameter, and the padded tail
    EXPECT_GT(sharded.gradients, none.gradients);    // the gradient shard beside the full gradients
    EXPECT_DOUBLE_EQ(sharded.activations, none.activations);
    EXPECT_GT(none.activations, 0);
    EXPECT_LT(sharded.total(), none.total());
}

// Four one-parameter buckets (bucket 0 ends the buffer). Parameter 0's gradient is written first
// and reported last, as a tied embedding's: its bucket holds a slot through the whole backward;
// the others are written and reported in turn, one holding a slot at a time beside it.
TEST(LandingCounter, CountsTheBucketsHoldingASlotAtOncePlusOne) {
    std::vector<ParamInfo> params;
    for (int i = 0; i < 4; ++i) params.push_back({"p" + std::to_string(i), static_cast<size_t>(i) * 4, 1, 4});
    const std::vector<Bucket> buckets = assign_buckets(params, 16, sizeof(float));
    ASSERT_EQ(buckets.size(), 4u);
    std::vector<float> stand_in(16);
    LandingCounter counter(params, buckets, stand_in.data());
    EXPECT_EQ(counter.gradient(0), stand_in.data());  // at its flat offset
    for (int i = 3; i >= 1; --i) {
        EXPECT_EQ(counter.gradient(i), stand_in.data() + 4 * i);
        counter.gradient_ready(i);
    }
    counter.gradient_ready(0);
    EXPECT_EQ(counter.slots_needed(), 3u);  // two held at once, and one for the overlap

    // Written in order, reported in order: one held at a time.
    LandingCounter in_turn(params, buckets, stand_in.data());
    for (int i = 3; i >= 0; --i) {
        in_turn.gradient(i);
        in_turn.gradient_ready(i);
    }
    EXPECT_EQ(in_turn.slots_needed(), 2u);
}

// A slot holds the gathered compute copy of its bucket and fp32 values: in fp32 the whole padded
// span (the gather lands there), in bf16 only the vectors the models read in fp32.
TEST(ParameterSlots, HoldFp32ValuesOfTheVectorsBesideABf16Copy) {
    const std::vector<ParamInfo> params = {{"w", 0, 3, 4}, {"b", 12, 1, 4}, {"g", 16, 1, 2}};
    const Bucket bucket{0, 18, {2, 1, 0}};
    EXPECT_EQ(slot_fp32_elements(params, bucket, 20, DType::bf16), 6u);
    EXPECT_EQ(slot_fp32_elements(params, bucket, 20, DType::f32), 20u);
}

// sharding: gradients predicts the shard and its landing slots in place of the full gradients.
TEST(RankMemory, GradientsLandInSlotsInsteadOfTheFullBuffer) {
    TrainConfig cfg = gpt_config();
    cfg.sharding = ShardingMode::optimizer;
    const RankMemory optimizer = predict_rank_memory(cfg, 4, 2);
    cfg.sharding = ShardingMode::gradients;
    const RankMemory gradients = predict_rank_memory(cfg, 4, 2);
    const size_t slots = shard_slots(cfg).landing;
    EXPECT_GE(slots, 2u);
    EXPECT_LT(gradients.gradients, optimizer.gradients);
    EXPECT_DOUBLE_EQ(gradients.parameters, optimizer.parameters);
    EXPECT_DOUBLE_EQ(gradients.optimizer_state, optimizer.optimizer_state);
}

// sharding: parameters predicts the master shard and its gathered slots in place of the full
// parameters and compute copy; GPT-2 XL's 1.56 B parameters at 8 ranks, as docs/sharding.md quotes.
TEST(RankMemory, ParametersAreTheShardAndTheGatheredSlots) {
    TrainConfig cfg = gpt_config();
    cfg.sharding = ShardingMode::gradients;
    const RankMemory gradients = predict_rank_memory(cfg, 4, 2);
    cfg.sharding = ShardingMode::parameters;
    const RankMemory parameters = predict_rank_memory(cfg, 4, 2);
    const ShardSlots slots = shard_slots(cfg);
    EXPECT_GE(slots.parameters, 2u);  // what one op reads, and one
    EXPECT_LT(parameters.parameters, gradients.parameters);
    EXPECT_DOUBLE_EQ(parameters.gradients, gradients.gradients);
    EXPECT_DOUBLE_EQ(parameters.optimizer_state, gradients.optimizer_state);

    TrainConfig xl = load_config_file(std::string(SCALEBENCH_SOURCE_DIR) + "/configs/gpt2-xl.yaml");
    xl.sharding = ShardingMode::gradients;
    const RankMemory xl_gradients = predict_rank_memory(xl, 8, 2);
    xl.sharding = ShardingMode::parameters;
    const RankMemory xl_parameters = predict_rank_memory(xl, 8, 2);
    const double gib = 1024.0 * 1024.0 * 1024.0;
    EXPECT_NEAR(xl_gradients.parameters / gib, 3.63, 0.005);
    EXPECT_NEAR(xl_parameters.parameters / gib, 1.03, 0.005);
    EXPECT_NEAR(xl_gradients.total() / gib, 12.14, 0.005);
    EXPECT_NEAR(xl_parameters.total() / gib, 9.54, 0.005);
}

// A backend with cuDNN, as far as resolving `auto` goes (a CUDA build's CudaOps): in any build.
class CudnnBackend : public TraceOps {
public:
    CudnnBackend() : TraceOps(Precision::fp32) {}
    bool has_cudnn() const override { return true; }
};

// `conv_engine: auto` predicts the memory of the engine that runs: the config the command
// resolves once for its backend carries that engine into the prediction, on CPU ranks (im2col,
// whose patch matrices the cuDNN engine does not hold) and on a backend with cuDNN alike. The
// config as given would trace the build's own default instead (cuDNN in a cuDNN build).
TEST(RankMemory, AResNetWithAutoPredictsTheEngineThatRuns) {
    TrainConfig cfg = parse_config("model: resnet\nresnet:\n  blocks: [1, 1]\n  width: 8\n  image_size: 32\n"
                                   "  num_classes: 10\nprecision: fp32\n",
                                   "r.yaml");
    ASSERT_FALSE(cfg.conv_engine.has_value());  // auto
    auto predicted = [&](ConvEngine engine) {
        TrainConfig c = cfg;
        c.conv_engine = engine;
        return predict_rank_memory(c, 2, 8);
    };
    const RankMemory im2col = predicted(ConvEngine::im2col), cudnn = predicted(ConvEngine::cudnn);
    ASSERT_GT(im2col.activations, 1.5 * cudnn.activations) << "the engines' activations must differ for this test";
    CpuOps cpu;
    CudnnBackend with_cudnn;
    for (const auto& [ops, ran] : {std::pair<const Ops*, ConvEngine>{&cpu, ConvEngine::im2col},
                                   std::pair<const Ops*, ConvEngine>{&with_cudnn, ConvEngine::cudnn}}) {
        SCOPED_TRACE(ops->name() + std::string(" runs ") + conv_engine_name(ran));
        const TrainConfig resolved = with_conv_engine_resolved(cfg, *ops);
        ASSERT_EQ(resolved.conv_engine, ran);
        const RankMemory m = predict_rank_memory(resolved, 2, 8);
        const RankMemory& want = ran == ConvEngine::im2col ? im2col : cudnn;
        EXPECT_DOUBLE_EQ(m.activations, want.activations);
        EXPECT_DOUBLE_EQ(m.total(), want.total());
    }
    // The other models pass through unchanged.
    const TrainConfig gpt = gpt_config();
    EXPECT_FALSE(with_conv_engine_resolved(gpt, with_cudnn).conv_engine.has_value());
}

}  // namespace
}  // namespace sb
