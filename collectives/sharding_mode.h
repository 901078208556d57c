// The sharding modes of sharded data parallel (DESIGN: Sharded data parallel; collectives/sharding.h
// holds the shard and its collectives), on their own so the config can name them.
#pragma once

namespace sb {

// none: DDP (all-reduce, every rank holds all state); optimizer: ZeRO-1; gradients: ZeRO-2;
// parameters: ZeRO-3 (FSDP's FULL_SHARD).
enum class ShardingMode { none, optimizer, gradients, parameters };
// Inline, so the config's readers (and the fuzz target built from them) need none of the shard's code.
inline const char* sharding_mode_name(ShardingMode mode) {
    switch (mode) {
        case ShardingMode::none: return "none";
        case ShardingMode::optimizer: return "optimizer";
        case ShardingMode::gradients: return "gradients";
        case ShardingMode::parameters: return "parameters";
    }
    return "?";
}

}  // namespace sb
