// The workload a TrainConfig names (DESIGN: Runner): the model, written once against Ops,
// and its synthetic data shard for one rank. The trainer, the projection and the tests
// build models only through here, so a new model is added in one place.
#pragma once

#include <memory>

#include "models/dataset.h"
#include "models/model.h"
#include "models/ops.h"
#include "models/token_data.h"
#include "src/core/config.h"

namespace sb {

// `rank` keys the dropout masks, so ranks drop different elements of their own samples (as
// DDP's processes, each with its own RNG, do); the weights are the same on every rank.
std::unique_ptr<Model> create_model(const TrainConfig& cfg, Ops& ops, int rank = 0);

// The convolution engine a ResNet of this config runs on `ops`: the config's choice, or for
// `auto` cudnn where ops.has_cudnn(), else im2col. cudnn on a backend that cannot run it (the
// CPU; CUDA in a build without cuDNN) is an AgreedError naming the file and key; a trace models
// it in any build.
ConvEngine resolve_conv_engine(const TrainConfig& cfg, const Ops& ops);

// `cfg` as it runs on `ops`: a ResNet's conv_engine set to resolve_conv_engine's answer (`auto`
// resolved; cudnn where `ops` cannot run it refused there). A command that trains calls it once,
// right after it builds its backend, and hands the result on: the memory check, the trainer, the
// record (its conv_engine and config) and the record's memory prediction all read that engine.
TrainConfig with_conv_engine_resolved(TrainConfig cfg, const Ops& ops);

// Tokens one sample holds (seq_len for a transformer, 1 otherwise): tokens/s in the records.
int tokens_per_sample(const TrainConfig& cfg);

// The synthetic token task a transformer config trains on (the exporter shares it).
TokenTask token_task(const TrainConfig& cfg);

// What a batch of the workload is, per row, as the model reads it: `cols` inputs of `dtype`
// and `labels_per_row` int32 labels (the projection's trace allocates one, generates nothing).
struct BatchShape {
    int64_t cols = 0;
    DType dtype = DType::f32;
    int64_t labels_per_row = 1;
};
BatchShape batch_shape(const TrainConfig& cfg);

// Rank `rank`'s rows [rank * local_rows, (rank + 1) * local_rows) of every global batch.
std::unique_ptr<Dataset> create_dataset(const TrainConfig& cfg, Ops& ops, int global_batch, int rank,
                                        int local_rows);

// The host memory create_dataset holds while it builds one rank's dataset, besides the
// dataset's own buffers (which the projection's trace counts as `data`): the teacher network
// and the generated batches of an MLP, the generated tokens of a transformer, one generated
// batch of images of a ResNet. The memory footprint check counts it.
double dataset_host_bytes(const TrainConfig& cfg, int local_rows);

}  // namespace sb
