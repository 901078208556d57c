// The sharding modes of sharded data parallel (DESIGN: Sharded data parallel; collectives/sharding.h
// holds the shard and its collectives), on their own so the config can name them.
#pragma once

namespace sb {

// none: DDP (all-reduce, every rank holds all state); optimizer: ZeRO-1; gradients: ZeRO-2;
// parameters: ZeRO-3 (FSDP's FULL_SHARD).
enum class ShardingMode { none, optimizer, gradients, parameters };
const char* sharding_mode_name(ShardingMode mode);

}  // namespace sb
