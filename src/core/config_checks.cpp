// The config's checks on resolved values, after command-line flags were applied
// (validate_config, validate_for_world in src/core/config.h): the same ranges as the YAML
// reader (src/core/config_keys.h), each error naming the flag or the file's line. Also what
// the config says about a world size (world_sizes, per_rank_batch), and the range helpers.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/errors.h"
#include "src/core/choices.h"
#include "src/core/config.h"
#include "src/core/config_keys.h"
#include "src/core/files.h"

namespace sb {

// Every known key as a full path, to catch a key put in the wrong section.
std::vector<std::string> all_key_paths() {
    std::vector<std::string> out;
    for (const auto& k : kTopKeys) out.push_back(k);
    for (const auto& k : kMlpKeys) out.push_back("mlp." + k);
    for (const auto& k : kTransformerKeys) out.push_back("transformer." + k);
    for (const auto& k : kResNetKeys) out.push_back("resnet." + k);
    for (const auto& k : kOptimizerKeys) out.push_back("optimizer." + k);
    return out;
}


namespace {

// ---- validate_config: the same rules on the resolved values, reported without a line.
class Checker {
public:
    Checker(const TrainConfig& cfg, const FlagKeys& flags) : cfg_(cfg), flags_(flags) {}

    void integer(const std::string& key, int64_t v, IntRange range) const { report(key, int_range_problem(v, range)); }
    void real(const std::string& key, double v, const std::string& shown, RealRange range) const {
        report(key, real_range_problem(v, shown, range));
    }
    void real(const std::string& key, float v, RealRange range) const { real(key, v, number_text(v), range); }

    void report(const std::string& key, const std::string& problem) const {
        if (!problem.empty()) throw UserError(fmt::format("{}: {}", key_origin(cfg_, flags_, key), problem));
    }

private:
    const TrainConfig& cfg_;
    const FlagKeys& flags_;
};

// Why `sharding` cannot run with the rest of the config, or "".
std::string sharding_problem(const TrainConfig& cfg) {
    if (cfg.sharding == ShardingMode::none) return "";
    if (cfg.grad_dtype != DType::f32)
        return fmt::format("{} reduce-scatters fp32 gradients; grad_dtype {} applies to the all-reduce (sharding: "
                           "none) only", sharding_mode_name(cfg.sharding), grad_dtype_name(cfg.grad_dtype));
    if (cfg.precision == Precision::fp16)
        return fmt::format("{} with precision fp16: loss scaling decides on every gradient, which a rank holding a "
                           "shard does not see; use bf16", sharding_mode_name(cfg.sharding));
    return "";
}

}  // namespace

std::string key_origin(const TrainConfig& cfg, const FlagKeys& flags, const std::string& key) {
    const std::string top = key.substr(0, key.find_first_of(".["));
    if (auto flag = flags.find(key); flag != flags.end()) return flag->second;
    if (auto flag = flags.find(top); flag != flags.end()) return flag->second;  // scaling[1] of --scaling
    if (auto mark = cfg.key_marks.find(top); mark != cfg.key_marks.end())
        return fmt::format("{}: key '{}'", mark->second, key);
    return fmt::format("{}: key '{}'", cfg.source, key);
}

void validate_config(const TrainConfig& cfg, const FlagKeys& flags) {
    Checker check(cfg, flags);
    if (!find_choice(cfg.model, model_choices())) check.report("model", bad_choice_reason(cfg.model, model_choices()));
    check.integer("mlp.input_dim", cfg.mlp.input_dim, kWidthRange);
    if (cfg.mlp.hidden.empty()) check.report("mlp.hidden", "must be a non-empty list");
    if (static_cast<int64_t>(cfg.mlp.hidden.size()) > kMaxHiddenLayers)
        check.report("mlp.hidden", fmt::format("must have at most {} entries, got {}", kMaxHiddenLayers,
                                               cfg.mlp.hidden.size()));
    for (size_t i = 0; i < cfg.mlp.hidden.size(); ++i)
        check.integer(fmt::format("mlp.hidden[{}]", i), cfg.mlp.hidden[i], kWidthRange);
    check.integer("mlp.num_classes", cfg.mlp.num_classes, kClassesRange);
    check.integer("mlp.teacher_hidden", cfg.mlp.teacher_hidden, kWidthRange);
    const TransformerShape& ts = cfg.transformer.shape;
    check.integer("transformer.layers", ts.layers, kLayersRange);
    check.integer("transformer.hidden", ts.hidden, kWidthRange);
    check.integer("transformer.heads", ts.heads, kHeadsRange);
    check.integer("transformer.ffn", ts.ffn, kWidthRange);
    check.integer("transformer.vocab", ts.vocab, kVocabRange);
    check.integer("transformer.seq_len", ts.seq_len, kSeqRange);
    check.integer("transformer.max_positions", ts.max_positions, kSeqRange);
    check.integer("transformer.type_vocab", ts.type_vocab, kTypeVocabRange);
    check.real("transformer.dropout", ts.dropout, kUnitHalfOpen);
    check.real("transformer.attention_dropout", ts.attention_dropout, kUnitHalfOpen);
    check.real("transformer.layernorm_eps", ts.layernorm_eps, kPositive);
    check.real("transformer.mask_prob", cfg.transformer.mask_prob, kUnitOpen);
    if (ts.hidden % ts.heads != 0)
        check.report("transformer.heads", fmt::format("hidden {} is not divisible by heads {}", ts.hidden, ts.heads));
    if (ts.seq_len > ts.max_positions)
        check.report("transformer.seq_len",
                     fmt::format("seq_len {} exceeds max_positions {}", ts.seq_len, ts.max_positions));
    const ResNetShape& rs = cfg.resnet;
    if (rs.blocks.empty() || static_cast<int64_t>(rs.blocks.size()) > kMaxStages)
        check.report("resnet.blocks", fmt::format("must have 1 to {} entries, got {}", kMaxStages, rs.blocks.size()));
    for (size_t i = 0; i < rs.blocks.size(); ++i)
        check.integer(fmt::format("resnet.blocks[{}]", i), rs.blocks[i], kStageBlocksRange);
    check.integer("resnet.width", rs.width, kChannelsRange);
    check.integer("resnet.image_size", rs.image_size, kImageRange);
    check.integer("resnet.num_classes", rs.num_classes, kClassesRange);
    check.real("resnet.bn_eps", rs.bn_eps, kPositive);
    const ResNetShapeProblem shape_problem = resnet_shape_problem(rs);
    check.report("resnet." + shape_problem.key, shape_problem.reason);
    check.integer("batch_size", cfg.batch_size, kBatchRange);
    // An empty list means "the launched world size" and is valid.
    check.report("scaling", repeated_entry(cfg.scaling));
    for (size_t i = 0; i < cfg.scaling.size(); ++i) {
        std::string key = fmt::format("scaling[{}]", i);
        check.integer(key, cfg.scaling[i], kWorldRange);
        if (i > 0 && cfg.scaling[i] < cfg.scaling[i - 1])
            check.report(key, fmt::format("world sizes must be strictly increasing, got {} after {}", cfg.scaling[i],
                                          cfg.scaling[i - 1]));
    }
    check.integer("steps", cfg.steps, kStepsRange);
    check.integer("warmup", cfg.warmup, kWarmupRange);  // with steps' limit, warmup + steps fits an int
    check.integer("dataset_batches", cfg.dataset_batches, kDatasetBatchesRange);
    const OptimizerConfig& opt = cfg.optimizer;
    check.real("optimizer.lr", opt.lr, kPositive);
    check.real("optimizer.momentum", opt.momentum, kUnitHalfOpen);
    check.real("optimizer.weight_decay", opt.weight_decay, kNonNegative);
    check.real("optimizer.beta1", opt.beta1, kUnitHalfOpen);
    check.real("optimizer.beta2", opt.beta2, kUnitHalfOpen);
    check.real("optimizer.eps", opt.eps, kPositive);
    check.real("bucket_mb", cfg.bucket_mb, number_text(cfg.bucket_mb), kBucketMbRange);
    check.report("sharding", sharding_problem(cfg));
    if (cfg.out.empty()) check.report("out", "must be a non-empty string");
    if (const size_t at = invalid_utf8_at(cfg.out); at != std::string::npos)
        check.report("out", fmt::format("is not UTF-8 text (byte {} of the path), which records, being JSON, cannot hold",
                                        at + 1));
}

std::vector<int> world_sizes(const TrainConfig& cfg, int launched) {
    if (!cfg.scaling.empty()) return cfg.scaling;
    std::vector<int> sizes;
    for (int n = 1; n < launched; n *= 2) sizes.push_back(n);
    sizes.push_back(launched);
    return sizes;
}

void validate_for_world(const TrainConfig& cfg, int world_size, const FlagKeys& flags) {
    SB_REQUIRE(world_size >= 1, "world size must be positive");
    for (int n : cfg.scaling) {
        if (n > world_size)
            throw UserError(fmt::format("{}: scaling entry {} exceeds the launched world size {} (mpirun -np {})",
                                        key_origin(cfg, flags, "scaling"), n, world_size, world_size));
    }
    // Weak scaling multiplies the batch by the ranks of the largest world measured; the
    // datasets index a global batch's rows with int, so the product is bounded here, in 64
    // bits, before any work.
    const std::vector<int> measured = world_sizes(cfg, world_size);
    const int largest = *std::max_element(measured.begin(), measured.end());
    const int64_t global = cfg.scaling_mode == ScalingMode::weak ? int64_t{cfg.batch_size} * largest : cfg.batch_size;
    if (global > kMaxGlobalBatch)
        throw UserError(fmt::format("{}: batch_size {} on {} ranks is a global batch of {}; at most {} (scaling_mode: weak "
                                    "multiplies the batch by the ranks)",
                                    key_origin(cfg, flags, "batch_size"), cfg.batch_size, largest, global,
                                    kMaxGlobalBatch));
    if (cfg.scaling_mode == ScalingMode::strong) {
        for (int n : world_sizes(cfg, world_size)) {
            if (cfg.batch_size % n != 0)
                throw UserError(fmt::format("{}: batch_size {} is not divisible by world size {} (scaling_mode: strong)",
                                            key_origin(cfg, flags, "batch_size"), cfg.batch_size, n));
        }
    }
}

int per_rank_batch(const TrainConfig& cfg, int world_size) {
    SB_REQUIRE(world_size >= 1, "world size must be positive");
    return cfg.scaling_mode == ScalingMode::weak ? cfg.batch_size : cfg.batch_size / world_size;
}

}  // namespace sb
