// Sharded data parallel (DESIGN: Sharded data parallel): the sharding modes, the layout of a
// rank's shard of the flat fp32 state, and the sharded optimizer state with its collectives.
//
// The shard follows the gradient buckets. Each bucket (one contiguous span of the flat buffer)
// is cut into world_size equal slices of ceil(count / world_size) elements; rank r owns slice r
// of every bucket. A bucket is reduce-scattered (average) into the rank's gradient shard (its
// slices back to back) the moment its last gradient lands; the rank updates its slices of the
// fp32 master parameters where they lie in the full flat buffer (which the model reads), with
// optimizer state for its slices only; then every bucket is all-gathered in place, so each rank
// holds all the updated parameters again. Sharding parameters, a rank holds only its slices of
// the master parameters, and the model reads each bucket from a slot it is gathered into
// (ParameterSlots); the gradients land in the bucketer's slots (sharding gradients too).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/bucketer.h"
#include "collectives/communicator.h"
#include "collectives/sharding_mode.h"
#include "models/model.h"
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

// One rank's shard of the gradients and optimizer state (and, sharding parameters, of the fp32
// master parameters), and the collectives that fill it and spread the parameters it updates. The full flat buffers (parameters the model reads,
// gradients the backward writes) are the trainer's; they carry tail_padding() elements past
// the parameters, zero in the gradients.
class ShardedState {
public:
    // With `holds_params` the shard holds this rank's slices of the master parameters too
    // (sharding: parameters), zero until set_params_shard.
    ShardedState(const std::vector<Bucket>& buckets, Communicator& comm, Ops& ops, bool adamw,
                 bool holds_params = false);

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

    // Sharding parameters: the optimizer on the master shard; bucket b's padded span gathered
    // from every rank's master shard into `dst` (padded_count(b) elements).
    bool holds_params() const { return params_.get() != nullptr; }
    void update_params_shard(const OptimizerConfig& cfg, int64_t step);
    std::unique_ptr<CommRequest> gather_bucket(size_t b, float* dst);
    void set_params_shard(const std::vector<float>& full);  // this rank's slices of the full values
    size_t params_shard_bytes() const { return params_.bytes(); }
    float* params_shard() const { return params_.as<float>(); }  // backend memory

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
    DeviceBuffer params_;   // sharding parameters: this rank's slices of the master parameters
};

// Sharding parameters (ZeRO-3): the model reads each parameter from a slot holding its bucket,
// all-gathered from the master shards (and cast to the compute copy), so a rank holds the
// parameters of a few buckets at a time. A bucket that has no slot takes the least recently read
// one; the first read of a gathered bucket starts the gather of the next bucket in the pass's
// direction (FSDP2's prefetch). Every slot is emptied after the optimizer, so each step gathers
// afresh (in the forward and again in the backward, once the forward's slots were reused).
class ParameterSlots : public ParameterHome {
public:
    ParameterSlots(const std::vector<ParamInfo>& params, const std::vector<Bucket>& buckets, ShardedState& shard,
                   Ops& ops, DType compute_dtype, size_t slots);
    const float* master(int param_index) override;
    void* weight(int param_index) override;
    void empty();                  // every slot given up (a gather in flight waited for): the next read gathers
    // Before the optimizer: empty() (waiting for any gather in flight), and the buckets the step
    // gathered kept as the last step's (a communicating step's).
    void end_step();
    // The buckets the last communicating step gathered, in order; their bytes (padded spans, fp32).
    const std::vector<int>& gathered_last_step() const { return gathered_last_step_; }
    double gathered_bytes_last_step() const;
    // The last step's gathers again, in its order, each waited for: the all-gather timed alone.
    void gather_last_step_again();
    void download_all(float* host);  // every bucket gathered in turn, its parameters copied out
    // Whether reads gather (false: the no-communication step reads the slots as they stand).
    void set_gathering(bool gathering) { gathering_ = gathering; }
    size_t bytes() const;
    size_t slots() const { return slots_.size(); }

private:
    struct Slot;
    int slot_of(int param_index);  // the slot holding the parameter's bucket, gathered if need be
    int held_by(int bucket) const;  // its slot, or -1
    int take_slot(int bucket);      // the least recently read slot, given to `bucket`
    void start_gather(Slot& slot);
    void finish_gather(Slot& slot);  // waits for a gather in flight, then casts the compute copy
    size_t offset_in_slot(const Slot& slot, int param_index) const;  // where the parameter starts in it

    std::vector<size_t> param_offsets_;
    std::vector<Bucket> buckets_;
    std::vector<int> bucket_of_param_;
    ShardedState& shard_;
    Ops& ops_;
    DType dtype_;
    struct Slot {
        DeviceBuffer master, weights;  // fp32 padded span; the compute copy (none in fp32)
        int bucket = -1;
        uint64_t last_read = 0;
        std::unique_ptr<CommRequest> pending;  // its gather, until finished
        bool read = false;                     // read since it was gathered
    };
    std::vector<Slot> slots_;
    uint64_t reads_ = 0;
    int last_first_read_ = -1;  // the bucket last read first after its gather: the pass's direction
    bool gathering_ = true;
    std::vector<int> gathered_, gathered_last_step_;
};

// How many parameter slots a step needs: bind the model with this as its home and run a step on
// the tracing backend (`position` is its op count). It counts the buckets one op reads, plus one
// for the prefetch, so neither a read nor a prefetch evicts what the same op reads.
class ParameterSlotCounter : public ParameterHome {
public:
    ParameterSlotCounter(const std::vector<ParamInfo>& params, const std::vector<Bucket>& buckets,
                         float* stand_in, size_t element_bytes, std::function<size_t()> position);
    const float* master(int param_index) override;
    void* weight(int param_index) override;
    size_t slots_needed() const { return most_ + 1; }

private:
    void read(int param_index);

    const std::vector<ParamInfo>& params_;
    std::vector<int> bucket_of_param_;
    float* stand_in_;
    size_t element_bytes_;
    std::function<size_t()> position_;
    size_t op_ = SIZE_MAX, most_ = 0;
    std::vector<int> read_by_op_;  // the distinct buckets the current op reads
};

}  // namespace sb
