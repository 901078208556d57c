// The config's schema, shared by its YAML reader (config_yaml.cpp) and its checks after
// flags (config_checks.cpp): the keys of each section, and the range of every number.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/core/config.h"

namespace sb {

// ---- limits that keep a typo from asking for an absurd allocation or run
constexpr int64_t kMaxWidth = int64_t{1} << 20;       // input_dim, hidden widths, classes
constexpr int64_t kMaxBatch = kMaxBatchSize;
constexpr int64_t kMaxSteps = 1000000000;             // steps and warmup: their sum fits an int
constexpr int64_t kMaxDatasetBatches = int64_t{1} << 20;
constexpr int64_t kMaxHiddenLayers = 1024;
constexpr int64_t kMaxWorld = kMaxWorldSize;           // a scaling entry
constexpr double kMaxBucketMb = 4096.0;

struct IntRange {
    int64_t lo;
    int64_t hi;
};
constexpr IntRange kWidthRange{1, kMaxWidth};
constexpr IntRange kClassesRange{2, kMaxWidth};
constexpr IntRange kBatchRange{1, kMaxBatch};
constexpr IntRange kStepsRange{1, kMaxSteps};
constexpr IntRange kWarmupRange{0, kMaxSteps};
constexpr IntRange kDatasetBatchesRange{1, kMaxDatasetBatches};
constexpr IntRange kWorldRange{1, kMaxWorld};
constexpr IntRange kSdcCheckEveryRange{0, kMaxSteps};
constexpr IntRange kLayersRange{1, 1024};
constexpr IntRange kHeadsRange{1, 1024};
constexpr IntRange kVocabRange{3, int64_t{1} << 22};  // bert reserves one id for [MASK]
constexpr IntRange kSeqRange{2, int64_t{1} << 16};
constexpr IntRange kTypeVocabRange{1, 1024};
constexpr IntRange kStageBlocksRange{1, 256};  // resnet.blocks entries
constexpr int64_t kMaxStages = 8;
constexpr IntRange kChannelsRange{1, kMaxResNetChannels};  // resnet.width
constexpr IntRange kImageRange{8, 4096};

// A real interval; open ends exclude the bound, has_hi = false means unbounded above.
struct RealRange {
    double lo;
    bool lo_open;
    bool has_hi;
    double hi;
    bool hi_open;
};
constexpr RealRange kPositive{0.0, true, false, 0.0, false};
constexpr RealRange kNonNegative{0.0, false, false, 0.0, false};
constexpr RealRange kUnitHalfOpen{0.0, false, true, 1.0, true};  // [0, 1)
constexpr RealRange kBucketMbRange{0.0, true, true, kMaxBucketMb, false};
constexpr RealRange kUnitOpen{0.0, true, true, 1.0, true};  // (0, 1)

// Shortest text that reads back to the same value (0.001, not 0.0010000000474974513).
std::string number_text(double v);
std::string number_text(float v);
// "" when v is in range, else the reason.
std::string int_range_problem(int64_t v, IntRange r);
std::string real_range_problem(double v, const std::string& shown, RealRange r);

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
