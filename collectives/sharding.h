// Sharded data parallel (DESIGN: Sharded data parallel): the sharding modes, the layout of a
// rank's shard of the flat fp32 state, and the sharded state with its collectives.
//
// The shard follows the gradient buckets. Each bucket (one contiguous span of the flat buffer)
// is cut into world_size equal slices of ceil(count / world_size) elements; rank r owns slice r
// of every bucket. A bucket is reduce-scattered (average) into the rank's gradient shard (its
// slices back to back) the moment its last gradient lands; the rank updates its shard of the
// fp32 master parameters, with optimizer state for its slices only. The model reads each bucket
// from a slot it is gathered into, in the compute dtype, from every rank's master shard
// (ParameterSlots): sharding optimizer state or gradients every bucket keeps a slot of its own,
// gathered again after each optimizer step; sharding parameters a few slots are shared, each
// bucket gathered as it is read. The gradients land in the bucketer's slots (sharding gradients
// or parameters).
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
    // The largest padded span: the size of a slot that buckets share.
    size_t largest_padded_count() const { return largest_padded_; }
    // Every bucket's padded span: the elements a step's reduce-scatters (and all-gathers) cover,
    // nccl-tests' size of those collectives.
    size_t padded_elements() const { return shard_elements_ * static_cast<size_t>(world_size_); }

private:
    int world_size_ = 1, rank_ = 0;
    std::vector<size_t> slices_, shard_offsets_, bucket_offsets_, bucket_counts_;
    size_t shard_elements_ = 0, tail_padding_ = 0, largest_padded_ = 0;
};

// One rank's shard of the gradients, the optimizer state and the fp32 master parameters, and the
// collectives that fill it and gather from it. The full gradient buffer (sharding optimizer state
// only) is the trainer's; it carries tail_padding() zero elements past the parameters.
class ShardedState {
public:
    ShardedState(const std::vector<Bucket>& buckets, Communicator& comm, Ops& ops, bool adamw);

    const ShardLayout& layout() const { return layout_; }
    // Starts bucket b's reduce-scatter (average) into the shard of its padded span of gradients,
    // which starts at `bucket_grads` (in the flat buffer or a landing slot).
    std::unique_ptr<CommRequest> reduce_scatter_bucket(size_t b, const float* bucket_grads);
    // The optimizer on the master shard (step is 1-based, for AdamW's bias correction).
    void update(const OptimizerConfig& cfg, int64_t step);
    // Bucket b's padded span gathered from every rank's master shard into `dst` (padded_count(b)
    // elements of `dtype`): this rank's slice cast into its place in `dst` on the compute stream,
    // then all-gathered in place. The compute dtype, as a step reads them; fp32 for the master values.
    std::unique_ptr<CommRequest> gather_bucket(size_t b, void* dst, DType dtype);
    // `count` fp32 master values from `first` on of every rank's slice of bucket b into `dst`,
    // rank r's at r * count: the master values through a buffer smaller than the bucket.
    std::unique_ptr<CommRequest> gather_master_piece(size_t b, size_t first, size_t count, float* dst);
    void set_params_shard(const std::vector<float>& full);  // this rank's slices of the full values
    size_t params_shard_bytes() const { return params_.bytes(); }
    float* params_shard() const { return params_.as<float>(); }  // backend memory

    // Bytes this state holds, by kind.
    size_t gradient_bytes() const { return grads_.bytes(); }
    size_t optimizer_state_bytes() const { return state_a_.bytes() + state_b_.bytes(); }
    const float* gradient_shard() const { return grads_.as<float>(); }  // backend memory

private:
    ShardLayout layout_;
    std::vector<Bucket> buckets_;
    Communicator& comm_;
    Ops& ops_;
    DeviceBuffer grads_, state_a_, state_b_;
    DeviceBuffer params_;  // this rank's slices of the master parameters
};

// The fp32 elements a slot holds for `bucket` (padded to `padded` elements): in fp32 its padded
// span, which the gather fills; with a 16-bit compute copy only its vectors (rows 1: biases and
// norms), which the models read in fp32, cast from the gathered copy.
size_t slot_fp32_elements(const std::vector<ParamInfo>& params, const Bucket& bucket, size_t padded,
                          DType compute_dtype);

// Where the model reads the parameters in a sharded mode: slots holding buckets gathered from the
// master shards in the compute dtype (ShardedState::gather_bucket), so every rank reads the same
// values, rounded in bf16 as FSDP2 with a bf16 param_dtype rounds them (biases and norms too).
//   - Resident (sharding optimizer state or gradients, ZeRO-1/2): every bucket has a slot of its
//     own. gather_every_bucket() starts every bucket's gather after the optimizer, in the order the
//     forward reads them, and a read waits for its bucket's gather only: the gathers overlap the
//     next forward.
//   - Shared (sharding parameters, ZeRO-3): `slots` slots; a bucket that has no slot takes the
//     least recently read one and is gathered into it; the first read of a gathered bucket starts
//     the gather of the next bucket in the pass's direction (FSDP2's prefetch). Every slot is
//     emptied after the optimizer, so each step gathers afresh (in the forward and again in the
//     backward, once the forward's slots were reused).
class ParameterSlots : public ParameterHome {
public:
    // `shared_slots` 0: resident; else that many shared slots.
    ParameterSlots(const std::vector<ParamInfo>& params, const std::vector<Bucket>& buckets, ShardedState& shard,
                   Ops& ops, DType compute_dtype, size_t shared_slots);
    const float* master(int param_index) override;  // fp32 values: a vector's, or any in fp32
    void* weight(int param_index) override;
    bool resident() const { return resident_; }
    // Before the optimizer: every gather in flight finished (shared: every slot given up), and
    // the buckets the step gathered kept as the last step's (a communicating step's).
    void end_step();
    // Resident: every bucket gathered afresh from the shards, in the forward's order.
    void gather_every_bucket();
    // The buckets the last communicating step gathered, in order; their bytes (padded spans, in
    // the compute dtype).
    const std::vector<int>& gathered_last_step() const { return gathered_last_step_; }
    double gathered_bytes_last_step() const;
    // The last step's gathers again, in its order, each waited for: the all-gather timed alone.
    void gather_last_step_again();
    // Every parameter copied out, outside a step: the fp32 master values, gathered from the
    // shards; or the values the model reads, as fp32 (resident: as this rank's slots hold them;
    // shared: each bucket gathered as a step gathers it).
    void download_masters(float* host);
    void download_read_values(float* host);
    // Before the shard is set from `full` (every parameter): every gather in flight finished, and
    // resident slots filled from `full` as a gather of it would fill them; shared ones given up.
    // No collective: one rank may resynchronise alone.
    void set_values(const std::vector<float>& full);
    // Resident: flips bit `bit` of flat element `index` as this rank's slot holds it (in bf16 the
    // copy's bit `bit` - 16: the same bit of the fp32 value), a test hook.
    void flip_read_bit(size_t index, int bit);
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
    void finish_gather(Slot& slot);  // waits for a gather in flight, then cast_vectors
    void cast_vectors(Slot& slot);   // the fp32 values of the bucket's vectors from the compute copy
    void finish_all();               // every gather in flight finished; shared: every slot given up
    void* gathered_into(const Slot& slot) const;  // the compute copy, or in fp32 the fp32 values
    size_t offset_in_slot(const Slot& slot, int param_index) const;  // where the parameter starts in it

    std::vector<ParamInfo> params_;
    std::vector<Bucket> buckets_;
    std::vector<int> bucket_of_param_;
    std::vector<int> forward_order_;  // bucket indices by their offset in the flat buffer
    std::vector<size_t> fp32_offset_;  // a parameter's place in its slot's fp32 values (SIZE_MAX: none)
    ShardedState& shard_;
    Ops& ops_;
    DType dtype_;
    bool resident_;
    struct Slot {
        DeviceBuffer fp32, weights;  // the fp32 values (slot_fp32_elements); the compute copy (none in fp32)
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
