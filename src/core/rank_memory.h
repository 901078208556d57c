// Memory per rank (DESIGN: Sharded data parallel): what one rank holds, by kind, for a
// config, a world size and its sharding mode, predicted before the run from the model bound
// on the tracing backend (which allocates nothing) and the shard layout; the trainer sets the
// measured figure beside it (the backend's own allocation accounting, Ops::peak_bytes).
#pragma once

#include <nlohmann/json.hpp>

#include "src/core/config.h"

namespace sb {

struct RankMemory {
    double parameters = 0;       // the fp32 master parameters and the compute copy (sharded: the shard and the slots)
    double gradients = 0;        // the fp32 gradients the backward writes (in full or its landing slots), the shard
    double optimizer_state = 0;  // momentum, or AdamW's two moments (the shard's only when sharded)
    double activations = 0;      // what the model allocates when bound for the local batch
    double comm_buffers = 0;     // 16-bit gradient copies (grad_dtype)
    double data = 0;             // the dataset's batches on the backend
    double total() const {
        return parameters + gradients + optimizer_state + activations + comm_buffers + data;
    }
};
nlohmann::json to_json(const RankMemory& m);

// The slots a sharded step of `cfg` needs (each of the largest padded bucket), counted on the
// tracing backend: its gradients' landing slots (sharding gradients or parameters;
// LandingCounter, collectives/bucketer.h) and the slots its parameters are gathered into
// (sharding parameters; ParameterSlotCounter, collectives/sharding.h). Zero where not used.
struct ShardSlots {
    size_t landing = 0, parameters = 0;
};
ShardSlots shard_slots(const TrainConfig& cfg);

// One rank of `world_size` ranks training `cfg` (its sharding mode) at `local_batch` rows.
RankMemory predict_rank_memory(const TrainConfig& cfg, int world_size, int local_batch);

}  // namespace sb
