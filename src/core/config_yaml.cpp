// The config's YAML reader (parse_config, load_config_file in src/core/config.h): every
// key, type and range checked through the typed reader (src/core/yaml_reader.h; yaml-cpp's
// as<int>() is too lenient), the first problem reported as one UserError line
// "FILE:LINE:COL: key 'mlp.hidden[2]': reason".
#include <map>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "src/core/config.h"
#include "src/core/files.h"
#include "src/core/yaml_fields.h"
#include "src/core/yaml_reader.h"

namespace sb {
namespace {

// Reads one YAML document into a TrainConfig: the top-level keys, then one section each for
// mlp, transformer, resnet and optimizer.
class ConfigReader : public YamlReader {
public:
    using YamlReader::YamlReader;

    // World sizes: strictly increasing, so none is measured twice.
    std::vector<int> scaling_list(const YAML::Node& value, const YAML::Node& key_node, const std::string& key) const {
        std::vector<int> out = int_list(value, key_node, key, kWorldRange, kMaxWorld);
        if (const std::string repeated = repeated_entry(out); !repeated.empty()) fail(where(value, key_node), key, repeated);
        for (size_t i = 1; i < out.size(); ++i) {
            if (out[i] < out[i - 1])
                fail(value[i].Mark(), fmt::format("{}[{}]", key, i),
                     fmt::format("world sizes must be strictly increasing, got {} after {}", out[i], out[i - 1]));
        }
        return out;
    }


    void read_document(const YAML::Node& root, TrainConfig& cfg) {
        if (root.IsNull())
            fail_at(YAML::Mark(),
                    "the config holds no keys: a config is a YAML map of keys (no --config runs the built-in default)");
        if (!root.IsMap())
            fail_at(root.Mark(), fmt::format("the config must be a map of keys, got {}", node_kind(root)));
        for_each_key(root, "", kTopKeys, [&](const std::string& key, const YAML::Node& key_node,
                                             const YAML::Node& value) {
            const YAML::Mark mark = where(value, key_node);
            cfg.key_marks[key] = fmt::format("{}:{}:{}", source_, mark.line + 1, mark.column + 1);
            if (key == "model") cfg.model = choice(value, key_node, key, model_choices());
            else if (key == "mlp") read_mlp(value, key_node, cfg.mlp);
            else if (key == "transformer") read_transformer(value, key_node, cfg.transformer);
            else if (key == "resnet") read_resnet(value, key_node, cfg.resnet);
            else if (key == "batch_size") cfg.batch_size = static_cast<int>(integer(value, key_node, key, kBatchRange));
            else if (key == "scaling_mode") cfg.scaling_mode = choice(value, key_node, key, scaling_mode_choices());
            else if (key == "scaling") cfg.scaling = scaling_list(value, key_node, key);
            else if (key == "steps") cfg.steps = static_cast<int>(integer(value, key_node, key, kStepsRange));
            else if (key == "warmup") cfg.warmup = static_cast<int>(integer(value, key_node, key, kWarmupRange));
            else if (key == "dataset_batches")
                cfg.dataset_batches = static_cast<int>(integer(value, key_node, key, kDatasetBatchesRange));
            else if (key == "precision") cfg.precision = choice(value, key_node, key, precision_choices());
            else if (key == "optimizer") read_optimizer(value, key_node, cfg.optimizer);
            else if (key == "bucket_mb") cfg.bucket_mb = real(value, key_node, key, kBucketMbRange);
            else if (key == "grad_dtype") cfg.grad_dtype = choice(value, key_node, key, grad_dtype_choices());
            else if (key == "sharding") cfg.sharding = choice(value, key_node, key, sharding_choices());
            else if (key == "seed") cfg.seed = unsigned_integer(value, key_node, key);
            else if (key == "backend") cfg.backend = choice(value, key_node, key, backend_choices());
            else if (key == "share_gpu") cfg.share_gpu = boolean(value, key_node, key);
            else if (key == "out") cfg.out = non_empty_text(value, key_node, key);
            else if (key == "cuda_graphs") cfg.cuda_graphs = boolean(value, key_node, key);
            else if (key == "conv_engine") cfg.conv_engine = choice(value, key_node, key, conv_engine_choices());
            else if (key == "sdc_check_every")
                cfg.sdc_check_every = static_cast<int>(integer(value, key_node, key, kSdcCheckEveryRange));
        });
    }

private:
    void read_mlp(const YAML::Node& value, const YAML::Node& key_node, MlpConfig& mlp) {
        expect_map(value, key_node, "mlp");
        for_each_key(value, "mlp", kMlpKeys, [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
            std::string path = "mlp." + key;
            if (key == "input_dim") mlp.input_dim = static_cast<int>(integer(v, k, path, kWidthRange));
            else if (key == "hidden") mlp.hidden = int_list(v, k, path, kWidthRange, kMaxHiddenLayers);
            else if (key == "num_classes") mlp.num_classes = static_cast<int>(integer(v, k, path, kClassesRange));
            else if (key == "activation") mlp.activation = choice(v, k, path, activation_choices());
            else if (key == "teacher_hidden") mlp.teacher_hidden = static_cast<int>(integer(v, k, path, kWidthRange));
        });
    }

    void read_transformer(const YAML::Node& value, const YAML::Node& key_node, TransformerConfig& tc) {
        expect_map(value, key_node, "transformer");
        TransformerShape& s = tc.shape;
        std::map<std::string, YAML::Mark> given;
        for_each_key(value, "transformer", kTransformerKeys,
                     [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                         std::string path = "transformer." + key;
                         given[key] = where(v, k);
                         if (key == "arch") s.arch = choice(v, k, path, arch_choices());
                         else if (key == "layers") s.layers = static_cast<int>(integer(v, k, path, kLayersRange));
                         else if (key == "hidden") s.hidden = static_cast<int>(integer(v, k, path, kWidthRange));
                         else if (key == "heads") s.heads = static_cast<int>(integer(v, k, path, kHeadsRange));
                         else if (key == "ffn") s.ffn = static_cast<int>(integer(v, k, path, kWidthRange));
                         else if (key == "vocab") s.vocab = static_cast<int>(integer(v, k, path, kVocabRange));
                         else if (key == "seq_len") s.seq_len = static_cast<int>(integer(v, k, path, kSeqRange));
                         else if (key == "max_positions")
                             s.max_positions = static_cast<int>(integer(v, k, path, kSeqRange));
                         else if (key == "type_vocab")
                             s.type_vocab = static_cast<int>(integer(v, k, path, kTypeVocabRange));
                         else if (key == "dropout") s.dropout = real32(v, k, path, kUnitHalfOpen);
                         else if (key == "attention_dropout") s.attention_dropout = real32(v, k, path, kUnitHalfOpen);
                         else if (key == "layernorm_eps") s.layernorm_eps = real32(v, k, path, kPositive);
                         else if (key == "mask_prob") tc.mask_prob = real32(v, k, path, kUnitOpen);
                     });
        // GPT-2's own values where the file leaves them to the arch.
        if (s.arch == TransformerArch::gpt) {
            if (!given.count("max_positions")) s.max_positions = 1024;
            if (!given.count("layernorm_eps")) s.layernorm_eps = 1e-5f;
        }
        const YAML::Mark section = key_node.Mark();
        const auto mark_of = [&](const char* key) { return given.count(key) ? given.at(key) : section; };
        if (s.hidden % s.heads != 0)
            fail(mark_of("heads"), "transformer.heads",
                 fmt::format("hidden {} is not divisible by heads {}", s.hidden, s.heads));
        if (s.seq_len > s.max_positions)
            fail(mark_of("seq_len"), "transformer.seq_len",
                 fmt::format("seq_len {} exceeds max_positions {}", s.seq_len, s.max_positions));
    }

    void read_resnet(const YAML::Node& value, const YAML::Node& key_node, ResNetShape& s) {
        expect_map(value, key_node, "resnet");
        std::map<std::string, YAML::Mark> given;
        for_each_key(value, "resnet", kResNetKeys, [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
            std::string path = "resnet." + key;
            given[key] = where(v, k);
            if (key == "blocks") s.blocks = int_list(v, k, path, kStageBlocksRange, kMaxStages);
            else if (key == "width") s.width = static_cast<int>(integer(v, k, path, kChannelsRange));
            else if (key == "image_size") s.image_size = static_cast<int>(integer(v, k, path, kImageRange));
            else if (key == "num_classes") s.num_classes = static_cast<int>(integer(v, k, path, kClassesRange));
            else if (key == "bn_eps") s.bn_eps = real32(v, k, path, kPositive);
        });
        const ResNetShapeProblem problem = resnet_shape_problem(s);
        if (!problem.reason.empty())
            fail(given.count(problem.key) ? given.at(problem.key) : key_node.Mark(), "resnet." + problem.key,
                 problem.reason);
    }

    void read_optimizer(const YAML::Node& value, const YAML::Node& key_node, OptimizerConfig& opt) {
        expect_map(value, key_node, "optimizer");
        for_each_key(value, "optimizer", kOptimizerKeys,
                     [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                         std::string path = "optimizer." + key;
                         if (key == "kind") opt.kind = choice(v, k, path, optimizer_choices());
                         else if (key == "lr") opt.lr = real32(v, k, path, kPositive);
                         else if (key == "momentum") opt.momentum = real32(v, k, path, kUnitHalfOpen);
                         else if (key == "weight_decay") opt.weight_decay = real32(v, k, path, kNonNegative);
                         else if (key == "beta1") opt.beta1 = real32(v, k, path, kUnitHalfOpen);
                         else if (key == "beta2") opt.beta2 = real32(v, k, path, kUnitHalfOpen);
                         else if (key == "eps") opt.eps = real32(v, k, path, kPositive);
                     });
    }
};

}  // namespace

TrainConfig parse_config(const std::string& yaml_text, const std::string& source) {
    TrainConfig cfg;
    cfg.source = source;
    ConfigReader reader(source);
    reader.read_document(load_yaml_document(yaml_text, source, "config"), cfg);
    return cfg;
}

TrainConfig load_config_file(const std::string& path) { return parse_config(read_text_file(path, "config file"), path); }

}  // namespace sb
