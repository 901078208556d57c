// Sharded data parallel (DESIGN: Sharded data parallel): the sharding modes, the layout of a
// rank's shard of the flat fp32 state, and the sharded optimizer state with its collectives.
//
// The shard follows the gradient buckets. Each bucket (one contiguous span of the flat buffer)
// is cut into world_size equal slices of ceil(count / world_size) elements; rank r owns slice r
// of every bucket. A bucket is reduce-scattered (average) into the rank's gradient shard (its
// slices back to back) the moment its last gradient lands; the rank updates its slices of the
// fp32 master parameters where they lie in the full flat buffer (which the model reads), with
// optimizer state for its slices only; then every bucket is all-gathered in place, so each rank
// holds all the updated parameters again.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "collectives/bucketer.h"
#include "collectives/communicator.h"
#include "collectives/sharding_mode.h"
#include "models/ops.h"

namespace sb {

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
    // Every bucket's padded span: the elements a step's reduce-scatters (and all-gathers) cover,
    // nccl-tests' size of those collectives.
    size_t padded_elements() const { return shard_elements_ * static_cast<size_t>(world_size_); }

private:
    int world_size_ = 1, rank_ = 0;
    std::vector<size_t> slices_, shard_offsets_, bucket_offsets_, bucket_counts_;
    size_t shard_elements_ = 0, tail_padding_ = 0, largest_padded_ = 0;
};

// One rank's shard of the gradients and optimizer state, and the collectives that fill it and
// spread the parameters it updates. The full flat buffers (parameters the model reads,
// gradients the backward writes) are the trainer's; they carry tail_padding() elements past
// the parameters, zero in the gradients.
class ShardedState {
public:
    ShardedState(const std::vector<Bucket>& buckets, Communicator& comm, Ops& ops, bool adamw);

    const ShardLayout& layout() const { return layout_; }
    // Starts bucket b's reduce-scatter (average) into the shard of its padded span of gradients,
    // which starts at `bucket_grads` (in the flat buffer or a landing slot).
    std::unique_ptr<CommRequest> reduce_scatter_bucket(size_t b, const float* bucket_grads);
    // The optimizer on this rank's slices of the full parameters, one call per bucket (step is
    // 1-based, for AdamW's bias correction). The last rank's slice of a padded bucket runs past
    // the bucket into parameters others own; all_gather_params writes those back.
    void update(float* params, const OptimizerConfig& cfg, int64_t step);
    // All-gathers every bucket's slices of the full fp32 parameters in place; later work
    // waits for them.
    void all_gather_params(float* params);

    // Bytes this state holds, by kind.
    size_t gradient_bytes() const { return grads_.bytes(); }
    size_t optimizer_state_bytes() const { return state_a_.bytes() + state_b_.bytes(); }
    size_t staging_bytes() const { return staging_.bytes(); }
    const float* gradient_shard() const { return grads_.as<float>(); }  // backend memory

private:
    ShardLayout layout_;
    std::vector<Bucket> buckets_;
    Communicator& comm_;
    Ops& ops_;
    DeviceBuffer grads_, state_a_, state_b_;
    DeviceBuffer staging_;  // a padded bucket's all-gather lands here, then its count is copied out
};

}  // namespace sb
