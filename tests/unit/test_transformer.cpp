// The transformer model (models/transformer.*) and its token data (models/token_data.*):
// parameter counts equal Hugging Face's for every preset, names and layout as HF's
// state_dict, the whole backward of both archs against central finite differences
// (with and without dropout), gradients reported once each and only when final, the
// FLOP count, the data's masking rules and shard purity, and the loss falling on the CPU.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "collectives/mpi_communicator.h"
#include "models/checksum.h"
#include "models/cpu/cpu_ops.h"
#include "models/rng.h"
#include "models/token_data.h"
#include "models/transformer.h"
#include "src/core/config.h"
#include "base/errors.h"
#include "src/commands/runner.h"
#include "src/core/workload.h"
#include "tests/test_util.h"

namespace sb {
namespace {

std::string preset_path(const std::string& name) { return std::string(SCALEBENCH_SOURCE_DIR) + "/configs/" + name; }

size_t count_params(const TransformerShape& shape) {
    CpuOps ops;
    return Transformer(ops, shape, 0, shape.seq_len).num_params();
}

// Hugging Face's parameter count written out from its modules (transformers
// modeling_bert.py / modeling_gpt2.py), independent of Transformer's own list.
// BertForMaskedLM: embeddings (word V x H, position P x H, token type T x H, LayerNorm 2H),
// per layer Q, K, V, attention output (4 (H^2 + H)), 2 LayerNorms (4H), intermediate
// (H F + F) and output (F H + H); the MLM head's transform (H^2 + H, LayerNorm 2H) and
// decoder bias V (decoder weight tied to the word embeddings; no pooler).
int64_t hf_bert_mlm_params(int64_t L, int64_t H, int64_t F, int64_t V, int64_t P, int64_t T) {
    const int64_t layer = 4 * (H * H + H) + 4 * H + (H * F + F) + (F * H + H);
    return V * H + P * H + T * H + 2 * H + L * layer + (H * H + H) + 2 * H + V;
}
// GPT2LMHeadModel: wte V x H, wpe P x H, per layer ln_1, ln_2 (4H), c_attn (3H^2 + 3H),
// attn c_proj (H^2 + H), c_fc (H F + F), mlp c_proj (F H + H); ln_f 2H; lm_head tied.
int64_t hf_gpt2_lm_params(int64_t L, int64_t H, int64_t F, int64_t V, int64_t P) {
    const int64_t layer = 4 * H + (3 * H * H + 3 * H) + (H * H + H) + (H * F + F) + (F * H + H);
    return V * H + P * H + L * layer + 2 * H;
}

TEST(Transformer, PresetParameterCountsEqualHuggingFace) {
    struct Case {
        const char* file;
        int64_t expected;
    };
    // bert-base-uncased BertForMaskedLM: 109,514,298 and gpt2 GPT2LMHeadModel: 124,439,808
    // (sum of p.numel() over model.parameters(), as HF reports them); bert-large and
    // gpt2-medium from the formulas above (gpt2-medium's 354,823,168 is also HF's figure).
    const Case cases[] = {
        {"bert-base.yaml", 109514298},
        {"gpt2-small.yaml", 124439808},
        {"bert-large.yaml", hf_bert_mlm_params(24, 1024, 4096, 30522, 512, 2)},
        {"gpt2-medium.yaml", hf_gpt2_lm_params(24, 1024, 4096, 50257, 1024)},
        {"gpt2-large.yaml", 774030080},  // HF gpt2-large
        {"gpt2-xl.yaml", 1557611200},    // HF gpt2-xl
        {"gpt2-2.7b.yaml", hf_gpt2_lm_params(32, 2560, 10240, 50257, 1024)},
    };
    EXPECT_EQ(hf_bert_mlm_params(12, 768, 3072, 30522, 512, 2), 109514298);  // the formula against HF's figure
    EXPECT_EQ(hf_gpt2_lm_params(12, 768, 3072, 50257, 1024), 124439808);
    EXPECT_EQ(hf_gpt2_lm_params(24, 1024, 4096, 50257, 1024), 354823168);
    for (const Case& c : cases) {
        SCOPED_TRACE(c.file);
        TrainConfig cfg = load_config_file(preset_path(c.file));
        validate_config(cfg);
        EXPECT_EQ(cfg.model, "transformer");
        EXPECT_EQ(cfg.precision, Precision::bf16);
        EXPECT_EQ(cfg.optimizer.kind, OptimizerConfig::Kind::adamw);
        EXPECT_EQ(static_cast<int64_t>(count_params(cfg.transformer.shape)), c.expected);
    }
}

TEST(Transformer, ParameterNamesAndLayoutFollowHuggingFace) {
    CpuOps ops;
    TransformerShape bert;
    bert.layers = 2;
    Transformer b(ops, bert, 0, bert.seq_len);
    std::map<std::string, ParamInfo> by_name;
    size_t offset = 0;
    for (const ParamInfo& p : b.params()) {
        EXPECT_EQ(p.offset, offset) << p.name;  // contiguous, no gaps
        offset += p.count();
        by_name[p.name] = p;
    }
    EXPECT_EQ(b.params().front().name, "bert.embeddings.word_embeddings.weight");
    EXPECT_EQ(b.params().back().name, "cls.predictions.bias");
    const ParamInfo q = by_name.at("bert.encoder.layer.1.attention.self.query.weight");
    const ParamInfo k = by_name.at("bert.encoder.layer.1.attention.self.key.weight");
    const ParamInfo v = by_name.at("bert.encoder.layer.1.attention.self.value.weight");
    const ParamInfo qb = by_name.at("bert.encoder.layer.1.attention.self.query.bias");
    EXPECT_EQ(k.offset, q.offset + 768 * 768);  // one [3H, H] matrix
    EXPECT_EQ(v.offset, k.offset + 768 * 768);
    EXPECT_EQ(qb.offset, v.offset + 768 * 768);
    EXPECT_EQ(by_name.at("bert.encoder.layer.1.attention.self.value.bias").offset, qb.offset + 2 * 768);
    EXPECT_EQ(by_name.at("bert.encoder.layer.0.intermediate.dense.weight").rows, 3072);  // [out, in]
    EXPECT_EQ(by_name.count("bert.embeddings.token_type_embeddings.weight"), 1u);
    EXPECT_EQ(by_name.count("cls.predictions.transform.LayerNorm.bias"), 1u);

    TransformerShape gpt = bert;
    gpt.arch = TransformerArch::gpt;
    gpt.max_positions = 1024;
    Transformer g(ops, gpt, 0, gpt.seq_len);
    EXPECT_EQ(g.params().front().name, "transformer.wte.weight");
    EXPECT_EQ(g.params().back().name, "transformer.ln_f.bias");
    for (const ParamInfo& p : g.params()) {
        if (p.name == "transformer.h.0.attn.c_attn.weight") {
            EXPECT_EQ(p.rows, 3 * 768);
            EXPECT_TRUE(Transformer::stored_transposed_from_hf(gpt, p));
        }
        if (p.name == "transformer.h.0.attn.c_attn.bias") EXPECT_FALSE(Transformer::stored_transposed_from_hf(gpt, p));
    }
    EXPECT_FALSE(Transformer::stored_transposed_from_hf(bert, by_name.at("bert.encoder.layer.0.output.dense.weight")));
}

TEST(Transformer, RejectsShapesItCannotBuild) {
    CpuOps ops;
    TransformerShape s;
    s.heads = 5;  // 768 % 5 != 0
    EXPECT_THROW(Transformer(ops, s, 0, s.seq_len), UserError);
    s = TransformerShape{};
    s.seq_len = 513;
    EXPECT_THROW(Transformer(ops, s, 0, s.seq_len), UserError);
}

TEST(Transformer, InitFollowsHuggingFace) {
    CpuOps ops;
    TransformerShape s;
    s.arch = TransformerArch::gpt;
    s.layers = 2, s.hidden = 64, s.heads = 4, s.ffn = 128, s.vocab = 500, s.seq_len = 8, s.max_positions = 16;
    Transformer m(ops, s, 0, s.seq_len);
    std::vector<float> a(m.num_params()), b(m.num_params());
    m.init_params(a.data(), 7);
    m.init_params(b.data(), 7);
    EXPECT_EQ(a, b);
    for (const ParamInfo& p : m.params()) {
        double sum2 = 0;
        for (size_t i = 0; i < p.count(); ++i) sum2 += static_cast<double>(a[p.offset + i]) * a[p.offset + i];
        const double rms = std::sqrt(sum2 / p.count());
        if (p.name.find("ln_") != std::string::npos && p.name.find(".weight") != std::string::npos)
            EXPECT_EQ(rms, 1.0) << p.name;
        else if (p.rows == 1)
            EXPECT_EQ(rms, 0.0) << p.name;
        else if (p.name.find("c_proj.weight") != std::string::npos)
            EXPECT_NEAR(rms, 0.02 / std::sqrt(4.0), 0.003) << p.name;  // 0.02 / sqrt(2 layers)
        else
            EXPECT_NEAR(rms, 0.02, 0.002) << p.name;
    }
}

// A tiny model on the CPU with its own flat buffers; every run() builds a fresh model on a
// fresh backend, so the dropout masks (generation 1) are the same in every evaluation.
struct Tiny {
    TransformerShape shape;
    int batch = 2;
    std::vector<float> params, grads;
    std::vector<int32_t> ids, labels;
    int labelled = 0;  // per sequence
    CpuOps ops;

    explicit Tiny(TransformerArch arch, float dropout) {
        shape.arch = arch;
        shape.layers = 2, shape.hidden = 8, shape.heads = 2, shape.ffn = 12, shape.vocab = 11;
        shape.seq_len = 5, shape.max_positions = 6, shape.type_vocab = 2;
        shape.dropout = dropout, shape.attention_dropout = dropout;
        shape.layernorm_eps = 1e-5f;
        TokenTask task;
        task.objective = arch == TransformerArch::bert ? TokenTask::Objective::masked_lm : TokenTask::Objective::next_token;
        task.vocab = shape.vocab, task.seq_len = shape.seq_len, task.mask_prob = 0.4f, task.seed = 3;
        labelled = labelled_positions(task);
        Transformer m(ops, shape, 99, labelled);
        params.resize(m.num_params());
        // Larger weights than the init so every path carries gradient well above fp32 noise.
        PortableRng rng(5);
        for (const ParamInfo& p : m.params())
            for (size_t i = 0; i < p.count(); ++i)
                params[p.offset + i] = static_cast<float>(p.name.find("LayerNorm.weight") != std::string::npos ||
                                                                  p.name.find("ln_") != std::string::npos
                                                              ? rng.uniform(0.7, 1.3)
                                                              : rng.uniform(-0.5, 0.5));
        grads.assign(params.size(), NAN);
        ids.resize(static_cast<size_t>(batch) * shape.seq_len);
        labels.resize(ids.size());
        make_token_shard(task, 0, 0, batch, ids.data(), labels.data());
    }

    float run(GradientSink* sink = nullptr) {
        CpuOps ops;
        Transformer m(ops, shape, 99, labelled);
        m.bind(FlatBuffers{params.data(), params.data(), grads.data()}, batch);
        float loss = 0;
        m.forward_backward(Tensor{ids.data(), DType::i32, batch, shape.seq_len}, labels.data(), &loss, 1.0f, sink);
        return loss;
    }
};

void check_whole_model(TransformerArch arch, float dropout) {
    SCOPED_TRACE(testing::Message() << transformer_arch_name(arch) << " dropout " << dropout);
    Tiny t(arch, dropout);
    t.run();
    const std::vector<float> analytic = t.grads;
    CpuOps ops;
    Transformer names(ops, t.shape, 0, t.labelled);
    test::expect_gradients_match_finite_differences(names.params(), t.params, analytic, 1e-2f, [&] { return t.run(); });
}

TEST(Transformer, BertBackwardMatchesFiniteDifferencesForEveryParameter) {
    check_whole_model(TransformerArch::bert, 0.0f);
}
TEST(Transformer, GptBackwardMatchesFiniteDifferencesForEveryParameter) { check_whole_model(TransformerArch::gpt, 0.0f); }
TEST(Transformer, BackwardWithDropoutMatchesFiniteDifferences) {
    check_whole_model(TransformerArch::bert, 0.2f);
    check_whole_model(TransformerArch::gpt, 0.2f);
}

TEST(Transformer, EveryGradientReportedOnceWhenFinalTiedEmbeddingLast) {
    for (TransformerArch arch : {TransformerArch::bert, TransformerArch::gpt}) {
        SCOPED_TRACE(transformer_arch_name(arch));
        Tiny t(arch, 0.1f);
        CpuOps ops;
        Transformer names(ops, t.shape, 0, t.labelled);
        test::RecordingSink sink;
        sink.params = &names.params();
        sink.grads = &t.grads;
        t.run(&sink);
        test::expect_each_gradient_reported_once_when_final(sink, t.grads);
        EXPECT_EQ(sink.order.back(), 0);  // the word embedding (index 0) is final only at the very end
    }
}

TEST(Transformer, DropoutMasksDifferPerStep) {
    Tiny t(TransformerArch::bert, 0.3f);
    CpuOps ops;
    Transformer m(ops, t.shape, 99, t.labelled);
    m.bind(FlatBuffers{t.params.data(), t.params.data(), t.grads.data()}, t.batch);
    const Tensor in{t.ids.data(), DType::i32, t.batch, t.shape.seq_len};
    float a = 0, b = 0;
    m.forward_backward(in, t.labels.data(), &a, 1.0f, nullptr);
    m.forward_backward(in, t.labels.data(), &b, 1.0f, nullptr);
    EXPECT_NE(a, b);
    t.shape.dropout = t.shape.attention_dropout = 0.0f;
    EXPECT_EQ(t.run(), t.run());  // and without dropout the model is deterministic
}

// The decoder's padded vocabulary (TransformerShape::vocab_multiple) is invisible: the same
// parameters, loss and gradients, bit for bit, as the unpadded decoder over three SGD steps,
// the parameters' checksum included.
TEST(Transformer, PaddedVocabularyIsInvisible) {
    for (TransformerArch arch : {TransformerArch::bert, TransformerArch::gpt}) {
        SCOPED_TRACE(transformer_arch_name(arch));
        Tiny padded(arch, 0.1f), plain(arch, 0.1f);
        ASSERT_EQ(padded.shape.padded_vocab(), 128);  // vocab 11 under the default multiple
        plain.shape.vocab_multiple = 1;
        ASSERT_EQ(plain.shape.padded_vocab(), plain.shape.vocab);
        CpuOps ops;
        EXPECT_EQ(Transformer(ops, padded.shape, 0, padded.labelled).num_params(),
                  Transformer(ops, plain.shape, 0, plain.labelled).num_params());
        for (int step = 0; step < 3; ++step) {
            SCOPED_TRACE(step);
            const float loss = padded.run();
            ASSERT_TRUE(std::isfinite(loss));
            EXPECT_EQ(loss, plain.run());
            EXPECT_EQ(padded.grads, plain.grads);  // NaN before the first step: every one written
            for (Tiny* t : {&padded, &plain})
                for (size_t i = 0; i < t->params.size(); ++i) t->params[i] -= 0.05f * t->grads[i];
        }
        EXPECT_EQ(checksum_host(padded.params.data(), padded.params.size() * sizeof(float)),
                  checksum_host(plain.params.data(), plain.params.size() * sizeof(float)));
    }
}

TEST(Transformer, PaddedVocabularyOfThePresetsIsLlmcsAndMegatrons) {
    TransformerShape s;
    EXPECT_EQ(s.padded_vocab(), 30592);  // bert: 30522 up to a multiple of 128
    s.vocab = 50257;
    EXPECT_EQ(s.padded_vocab(), 50304);  // gpt2: llm.c's padded vocabulary
    s.vocab = 256;
    EXPECT_EQ(s.padded_vocab(), 256);  // a multiple already: no padding
}

TEST(Transformer, FlopsPerSampleCountsEveryGemm) {
    CpuOps ops;
    TransformerShape s;  // bert-base
    const double S = 128, H = 768, F = 3072, V = 30522;
    const double fwd = 12 * (2 * S * H * 3 * H + 2 * S * H * H + 4 * S * H * F + 4 * S * S * H) + 2 * S * H * H +
                       2 * S * H * V;
    EXPECT_DOUBLE_EQ(Transformer(ops, s, 0, s.seq_len).flops_per_sample(), 3 * fwd);
    // Against the usual 6 N S estimate (N without embeddings' lookups): the same order.
    const double six_n = 6.0 * 109514298 * S;
    EXPECT_GT(Transformer(ops, s, 0, s.seq_len).flops_per_sample(), 0.8 * six_n);
    EXPECT_LT(Transformer(ops, s, 0, s.seq_len).flops_per_sample(), 1.2 * six_n);
}

// ---- token data

TEST(TokenData, MaskedLmMasksAFixedCountWithBertsRule) {
    TokenTask task;
    task.objective = TokenTask::Objective::masked_lm;
    task.vocab = 1000, task.seq_len = 128, task.mask_prob = 0.15f, task.seed = 9;
    EXPECT_EQ(masked_positions(task), 19);  // round(0.15 * 128)
    const int rows = 400;
    std::vector<int32_t> ids(rows * 128), labels(rows * 128);
    make_token_shard(task, 2, 0, rows, ids.data(), labels.data());
    int masked = 0, random = 0, kept = 0;
    for (int r = 0; r < rows; ++r) {
        int labelled = 0;
        for (int t = 0; t < 128; ++t) {
            const int32_t id = ids[r * 128 + t], label = labels[r * 128 + t];
            ASSERT_GE(id, 0);
            ASSERT_LT(id, task.vocab);
            if (label < 0) {
                EXPECT_NE(id, mask_token(task));  // [MASK] only where labelled
                continue;
            }
            ++labelled;
            EXPECT_LT(label, mask_token(task));
            if (id == mask_token(task)) ++masked;
            else if (id == label) ++kept;
            else ++random;
        }
        EXPECT_EQ(labelled, 19);
    }
    const double n = rows * 19.0;
    EXPECT_NEAR(masked / n, 0.8, 0.02);
    EXPECT_NEAR(random / n, 0.1, 0.02);  // a random draw equal to the label counts as kept (1/999)
    EXPECT_NEAR(kept / n, 0.1, 0.02);
}

TEST(TokenData, NextTokenLabelsAreTheShiftedChainAndPeaked) {
    TokenTask task;
    task.objective = TokenTask::Objective::next_token;
    task.vocab = 50257, task.seq_len = 64, task.seed = 4;
    std::vector<int32_t> ids(10 * 64), labels(10 * 64);
    make_token_shard(task, 0, 0, 10, ids.data(), labels.data());
    int likely = 0;
    for (int r = 0; r < 10; ++r)
        for (int t = 0; t < 64; ++t) {
            if (t + 1 < 64) EXPECT_EQ(labels[r * 64 + t], ids[r * 64 + t + 1]);
            likely += labels[r * 64 + t] == likely_successor(task, ids[r * 64 + t]);
        }
    EXPECT_NEAR(likely / 640.0, 0.7, 0.06);  // the peaked branch: learnable
}

TEST(TokenData, ShardsArePureFunctionsOfSlotAndRow) {
    for (auto objective : {TokenTask::Objective::masked_lm, TokenTask::Objective::next_token}) {
        TokenTask task;
        task.objective = objective;
        task.vocab = 37, task.seq_len = 9, task.seed = 11;
        std::vector<int32_t> whole_ids(12 * 9), whole_labels(12 * 9), part_ids(4 * 9), part_labels(4 * 9);
        make_token_shard(task, 3, 0, 12, whole_ids.data(), whole_labels.data());
        make_token_shard(task, 3, 8, 4, part_ids.data(), part_labels.data());
        EXPECT_TRUE(std::equal(part_ids.begin(), part_ids.end(), whole_ids.begin() + 8 * 9));
        EXPECT_TRUE(std::equal(part_labels.begin(), part_labels.end(), whole_labels.begin() + 8 * 9));
        std::vector<int32_t> other(12 * 9), other_labels(12 * 9);
        make_token_shard(task, 4, 0, 12, other.data(), other_labels.data());
        EXPECT_NE(other, whole_ids);  // another slot, another batch
    }
}

TEST(TokenData, DatasetServesInt32RowsOfItsRank) {
    TrainConfig cfg = load_config_file(preset_path("ci-transformer.yaml"));
    CpuOps ops;
    auto all = create_dataset(cfg, ops, 8, 0, 8);
    auto second = create_dataset(cfg, ops, 8, 1, 4);  // rank 1 of 2
    const Tensor a = all->inputs(5), b = second->inputs(5);
    EXPECT_EQ(b.dtype, DType::i32);
    EXPECT_EQ(b.rows, 4);
    EXPECT_EQ(b.cols, 16);
    const auto* pa = static_cast<const int32_t*>(a.data);
    const auto* pb = static_cast<const int32_t*>(b.data);
    EXPECT_TRUE(std::equal(pb, pb + 4 * 16, pa + 4 * 16));
    EXPECT_TRUE(std::equal(second->labels(5), second->labels(5) + 4 * 16, all->labels(5) + 4 * 16));
}

// ---- training

float train_losses(const std::string& arch, std::vector<float>& losses) {
    TrainConfig cfg = load_config_file(preset_path("ci-transformer.yaml"));
    if (arch == "gpt") {
        cfg.transformer.shape.arch = TransformerArch::gpt;
        cfg.transformer.shape.layernorm_eps = 1e-5f;
    }
    validate_config(cfg);
    CpuOps ops;
    MpiCommunicator comm(MPI_COMM_SELF);
    DataParallelTrainer trainer(cfg, ops, comm);
    for (int s = 0; s < 30; ++s) {
        trainer.step(s);
        losses.push_back(trainer.last_loss());
    }
    return losses.back();
}

TEST(Transformer, LossFallsOnTheCpuWithin30Steps) {
    for (const char* arch : {"bert", "gpt"}) {
        SCOPED_TRACE(arch);
        std::vector<float> losses;
        train_losses(arch, losses);
        const double first = (losses[0] + losses[1] + losses[2]) / 3, last = (losses[27] + losses[28] + losses[29]) / 3;
        EXPECT_NEAR(losses[0], std::log(64.0), 0.5);  // starts near uniform over the vocabulary
        EXPECT_LT(last, 0.75 * first) << "first " << first << " last " << last;
        for (float l : losses) EXPECT_TRUE(std::isfinite(l));
    }
}

}  // namespace
}  // namespace sb
