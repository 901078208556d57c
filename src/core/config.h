// The workload configuration of `scalebench train`: the built-in default, YAML loading
// with validation of every key, type and range (errors name file:line:column and key),
// and the resolved form written into every result record. Implemented by concern:
// config_keys.h (schema and ranges), config_yaml.cpp (reading), config_checks.cpp (checks
// after flags), config_json.cpp (the record's form); enum spellings in choices.h.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collectives/sharding_mode.h"
#include "models/ops.h"
#include "models/resnet.h"
#include "models/transformer.h"
#include "src/core/choices.h"
#include "src/core/results.h"

namespace sb {


// Limits that keep products of sizes far inside 64 bits (a global batch is at most
// kMaxBatchSize * kMaxWorldSize = 2^44 rows) and a typo from asking for an absurd run.
constexpr int kMaxBatchSize = 1 << 24;   // batch_size, --batch-size, project --batch
constexpr int kMaxWorldSize = 1 << 20;   // ranks: a scaling entry, project's GPUs x nodes
constexpr int64_t kMaxGlobalBatch = (int64_t{1} << 31) - 1;  // a run's batch over all ranks: rows are indexed with int

struct MlpConfig {
    int input_dim = 256;
    std::vector<int> hidden = {512, 512, 512};  // widths of the hidden layers
    int num_classes = 16;
    Activation activation = Activation::relu;
    int teacher_hidden = 32;  // width of the fixed random teacher that labels the data
};

// model: transformer. The defaults are bert-base; with arch: gpt, max_positions and
// layernorm_eps that the file leaves out take GPT-2's values (1024, 1e-5).
struct TransformerConfig {
    TransformerShape shape;
    float mask_prob = 0.15f;  // bert: share of positions masked per sequence (a fixed count)
};

struct TrainConfig {
    std::string source = "<built-in default>";  // file the config came from
    std::string model = "mlp";
    MlpConfig mlp;
    TransformerConfig transformer;
    ResNetShape resnet;  // model: resnet; the defaults are ResNet-50 on 224x224 ImageNet-sized images
    int batch_size = 128;  // per rank (weak scaling) or global (strong scaling)
    ScalingMode scaling_mode = ScalingMode::weak;
    std::vector<int> scaling;  // world sizes to measure; empty = 1, 2, 4, ... and the launched world size
    int steps = 20;
    int warmup = 3;
    int dataset_batches = 8;  // distinct synthetic batches per rank, cycled over the steps
    Precision precision = Precision::fp32;
    OptimizerConfig optimizer;
    double bucket_mb = 25.0;
    DType grad_dtype = DType::f32;  // dtype gradients are all-reduced in (DDP's bf16/fp16 compress hooks)
    ShardingMode sharding = ShardingMode::none;  // ZeRO-1/2/3 (collectives/sharding.h); none: DDP
    uint64_t seed = 1234;
    BackendChoice backend = BackendChoice::auto_select;
    std::string out = default_output("train.jsonl");
    // CUDA: capture each step's forward, backward and bucket all-reduces as a CUDA graph
    // and replay it, so host launch overhead stays out of the figures (not with fp16).
    bool cuda_graphs = true;
    // ResNet convolutions: im2col + GEMM, or cuDNN; nullopt is `auto` (cuDNN where the
    // backend has it). Any build reads `cudnn` (records of cuDNN runs are configs too); a run
    // on a backend without cuDNN refuses it (resolve_conv_engine).
    std::optional<ConvEngine> conv_engine;
    // Several ranks may drive one GPU (each with its own NCCL host identity, so NCCL links
    // them through its network transport): for rehearsing launches and testing; the figures
    // are not hardware figures, and every record says so (shared_gpu).
    bool share_gpu = false;
    // stress: steps between comparisons of the ranks' parameter checksums; 0 = off.
    int sdc_check_every = 100;
    // Where each top-level key was set in the file, "FILE:LINE:COL" (not a config value:
    // error messages found after loading name the line the user wrote).
    std::map<std::string, std::string> key_marks;
};

// Which keys the command line set, key -> the flag ("steps" -> "--steps"): an error in
// such a value names the flag the user typed, not the config.
using FlagKeys = std::map<std::string, std::string>;

// Where the value of `key` came from, for an error message: the flag, else the file's
// line ("c.yaml:3:10: key 'backend'"), else the config ("<built-in default>: key 'backend'").
std::string key_origin(const TrainConfig& cfg, const FlagKeys& flags, const std::string& key);

// Parses YAML text; `source` names the file in error messages. Throws UserError
// "FILE:LINE:COL: key 'a.b': reason" on any unknown key, wrong type or bad value.
TrainConfig parse_config(const std::string& yaml_text, const std::string& source);
// Reads and parses a file; a missing or unreadable file is a UserError naming it.
TrainConfig load_config_file(const std::string& path);
// Checks cross-field rules that hold for any world size (after flags were applied).
void validate_config(const TrainConfig& cfg, const FlagKeys& flags = {});
// Checks the rules that need the launched world size (scaling entries, divisibility).
void validate_for_world(const TrainConfig& cfg, int world_size, const FlagKeys& flags = {});

// The world sizes a launch of `launched` ranks measures: the config's scaling list, or by
// default 1, 2, 4, ... below `launched` and `launched` itself (a scaling curve from one launch).
std::vector<int> world_sizes(const TrainConfig& cfg, int launched);

// Per-rank batch for a sub-world of n ranks.
int per_rank_batch(const TrainConfig& cfg, int world_size);

nlohmann::json to_json(const TrainConfig& cfg);

}  // namespace sb
