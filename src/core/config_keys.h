// The config's schema, shared by its YAML reader (config_yaml.cpp) and its checks after
// flags (config_checks.cpp): the keys of each section, and the range of every number.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/numbers.h"
#include "src/core/config.h"

namespace sb {

// ---- the range of every number of the config, with the reason for its bounds (shown when
// a value is refused). Flags that set a config key take the key's range (src/core/flag_reading.cpp).
constexpr int64_t kMaxWidth = int64_t{1} << 20;
constexpr int64_t kMaxSteps = 1000000000;
constexpr int64_t kMaxHiddenLayers = 1024;
constexpr int64_t kMaxWorld = kMaxWorldSize;
constexpr int64_t kMaxStages = 8;
constexpr double kMaxBucketMb = 4096.0;

constexpr IntRange kWidthRange{1, kMaxWidth, "a layer of 2^20 units is past any model measured; products of widths stay in 64 bits"};
constexpr IntRange kClassesRange{2, kMaxWidth, "a classifier needs two classes; the width bound holds above"};
constexpr IntRange kBatchRange{1, kMaxBatchSize, "2^24 rows per rank keeps a global batch over 2^20 ranks inside 2^44"};
constexpr IntRange kStepsRange{1, kMaxSteps, "steps plus warmup must fit a 32-bit int"};
constexpr IntRange kWarmupRange{0, kMaxSteps, "steps plus warmup must fit a 32-bit int"};
constexpr IntRange kDatasetBatchesRange{1, int64_t{1} << 20, "distinct batches are held in host memory; 2^20 is past any useful cycle"};
constexpr IntRange kWorldRange{1, kMaxWorld, "2^20 ranks is past any cluster; products with the batch stay in 64 bits"};
constexpr IntRange kSdcCheckEveryRange{0, kMaxSteps, "a step count: the steps bound"};
constexpr IntRange kLayersRange{1, 1024, "no published transformer has more than 1,024 layers"};
constexpr IntRange kHeadsRange{1, 1024, "heads divide hidden; 1,024 heads is past any published model"};
constexpr IntRange kVocabRange{3, int64_t{1} << 22, "bert reserves one id for [MASK]; 4M tokens is past any tokenizer"};
constexpr IntRange kSeqRange{2, int64_t{1} << 16, "attention is quadratic in it: 64K positions per sequence at most"};
constexpr IntRange kTypeVocabRange{1, 1024, "segment types: bert uses 2"};
constexpr IntRange kStageBlocksRange{1, 256, "blocks per ResNet stage: ResNet-152 uses 36"};
constexpr IntRange kChannelsRange{1, kMaxResNetChannels, "the widest stage's channels must fit the conv kernels' indexing"};
constexpr IntRange kImageRange{8, 4096, "three stride-2 stages need 8 pixels; 4096 is past any image model's input"};

constexpr RealRange kPositive{0.0, true, kNoUpperBound, false, "a rate, scale or epsilon: zero would do nothing"};
constexpr RealRange kNonNegative{0.0, false, kNoUpperBound, false, "a decay: negative would grow the weights"};
constexpr RealRange kUnitHalfOpen{0.0, false, 1.0, true, "a probability or moment decay: 1 would never update"};
constexpr RealRange kBucketMbRange{0.0, true, kMaxBucketMb, false, "4 GiB buckets are past any GPU's all-reduce buffer"};
constexpr RealRange kUnitOpen{0.0, true, 1.0, true, "a share of positions: none or all masked trains nothing"};

// ---- the keys of each section, in the order default.yaml lists them
inline const std::vector<std::string> kTopKeys = {"model", "mlp", "transformer", "resnet", "batch_size", "scaling_mode", "scaling", "steps",
                                           "warmup", "dataset_batches", "precision", "optimizer", "bucket_mb",
                                           "grad_dtype", "sharding", "seed", "backend", "share_gpu", "out", "cuda_graphs",
                                           "conv_engine", "sdc_check_every"};
inline const std::vector<std::string> kMlpKeys = {"input_dim", "hidden", "num_classes", "activation", "teacher_hidden"};
inline const std::vector<std::string> kTransformerKeys = {"arch", "layers", "hidden", "heads", "ffn", "vocab", "seq_len",
                                                  "max_positions", "type_vocab", "dropout", "attention_dropout",
                                                  "layernorm_eps", "mask_prob"};
inline const std::vector<std::string> kResNetKeys = {"blocks", "width", "image_size", "num_classes", "bn_eps"};
inline const std::vector<std::string> kOptimizerKeys = {"kind", "lr", "momentum", "weight_decay", "beta1", "beta2", "eps"};

// Every known key as a full path, to catch a key put in the wrong section.
std::vector<std::string> all_key_paths();

}  // namespace sb
