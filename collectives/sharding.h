// Sharded data parallel (DESIGN: Sharded data parallel): the sharding modes, the layout of a
// rank's shard of the flat fp32 state, and the sharded optimizer state with its collectives.
//
// The shard follows the gradient buckets. Each bucket (one contiguous span of the flat buffer)
// is cut into world_size equal slices of ceil(count / world_size) elements; rank r owns slice r
// of every bucket. A rank's shard is its slices back to back: contiguous in the rank's memory,
// so the optimizer runs once over it. A bucket is reduce-scattered (average) into the shard's
// gradient the moment its last gradient lands, and the updated master shard is all-gathered
// bucket by bucket into the full fp32 parameters the model reads.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "collectives/bucketer.h"
#include "collectives/communicator.h"
#include "models/ops.h"

namespace sb {

// none: DDP (all-reduce, every rank holds all state); optimizer: ZeRO-1; gradients: ZeRO-2;
// parameters: ZeRO-3 (FSDP's FULL_SHARD).
enum class ShardingMode { none, optimizer, gradients, parameters };
const char* sharding_mode_name(ShardingMode mode);

// Which slices of the flat buffer one rank owns, bucket by bucket.
class ShardLayout {
public:
    ShardLayout(const std::vector<Bucket>& buckets, int world_size, int rank);

    int world_size() const { return world_size_; }
    int rank() const { return rank_; }
    size_t buckets() const { return slices_.size(); }
    // Elements every rank owns of bucket b (the bucket padded up to world_size slices).
    size_t slice(size_t b) const { return slices_[b]; }
    // Where bucket b's slice sits in this rank's shard.
    size_t shard_offset(size_t b) const { return shard_offsets_[b]; }
    // Where this rank's slice of bucket b starts in the flat buffer.
    size_t flat_offset(size_t b) const { return bucket_offsets_[b] + static_cast<size_t>(rank_) * slices_[b]; }
    // Elements of a bucket's padded span: slice * world_size >= the bucket's count.
    size_t padded_count(size_t b) const { return slices_[b] * static_cast<size_t>(world_size_); }
    size_t shard_elements() const { return shard_elements_; }
    // Elements past the flat buffer's end that a padded collective reads (the buffer keeps
    // them, zero): the last rank's padding of the bucket that ends the buffer.
    size_t tail_padding() const { return tail_padding_; }
    // The largest padded span: the all-gather's staging buffer.
    size_t largest_padded_count() const { return largest_padded_; }

private:
    int world_size_ = 1, rank_ = 0;
    std::vector<size_t> slices_, shard_offsets_, bucket_offsets_, bucket_counts_;
    size_t shard_elements_ = 0, tail_padding_ = 0, largest_padded_ = 0;
};

// One rank's shard of the fp32 master parameters, gradients and optimizer state, and the
// collectives that fill and spread it. The full flat buffers (parameters the model reads,
// gradients the backward writes) are the trainer's; they carry tail_padding() zero elements.
class ShardedState {
public:
    ShardedState(const std::vector<Bucket>& buckets, Communicator& comm, Ops& ops, bool adamw);

    const ShardLayout& layout() const { return layout_; }
    // Copies this rank's slices of the full host parameters (tail padding read as zero).
    void load(const std::vector<float>& host_params);
    // Starts bucket b's reduce-scatter (average) of the full gradients into the shard.
    std::unique_ptr<CommRequest> reduce_scatter_bucket(size_t b, const float* grads);
    // The optimizer on this rank's shard (step is 1-based, for AdamW's bias correction).
    void update(const OptimizerConfig& cfg, int64_t step);
    // All-gathers every bucket's updated slices into the full fp32 parameters; later work
    // waits for them.
    void all_gather_params(float* params);
    // The whole fp32 master parameters on the host (collective): the unsharded view, for
    // tests and checks.
    std::vector<float> gather_master_host(size_t num_params);

    // Bytes this state holds, by kind.
    size_t master_bytes() const { return master_.bytes(); }
    size_t gradient_bytes() const { return grads_.bytes(); }
    size_t optimizer_state_bytes() const { return state_a_.bytes() + state_b_.bytes(); }
    size_t staging_bytes() const { return staging_.bytes(); }

private:
    ShardLayout layout_;
    std::vector<Bucket> buckets_;
    Communicator& comm_;
    Ops& ops_;
    DeviceBuffer master_, grads_, state_a_, state_b_;
    DeviceBuffer staging_;  // a padded bucket's all-gather lands here, then its count is copied out
};

}  // namespace sb
