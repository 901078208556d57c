#include "collectives/sharding.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/errors.h"

namespace sb {

ShardLayout::ShardLayout(const std::vector<Bucket>& buckets, int world_size, int rank)
    : world_size_(world_size), rank_(rank) {
    SB_REQUIRE(world_size >= 1 && rank >= 0 && rank < world_size,
               fmt::format("shard layout: rank {} of {} ranks", rank, world_size));
    const size_t w = static_cast<size_t>(world_size);
    size_t flat_end = 0, padded_end = 0;
    for (const Bucket& bucket : buckets) {
        const size_t slice = (bucket.count + w - 1) / w;
        slices_.push_back(slice);
        shard_offsets_.push_back(shard_elements_);
        bucket_offsets_.push_back(bucket.offset);
        bucket_counts_.push_back(bucket.count);
        shard_elements_ += slice;
        largest_padded_ = std::max(largest_padded_, slice * w);
        flat_end = std::max(flat_end, bucket.offset + bucket.count);
        padded_end = std::max(padded_end, bucket.offset + slice * w);
    }
    tail_padding_ = padded_end - flat_end;
}

ShardedState::ShardedState(const std::vector<Bucket>& buckets, Communicator& comm, Ops& ops, bool adamw,
                           bool holds_params)
    : layout_(buckets, comm.size(), comm.rank()), buckets_(buckets), comm_(comm), ops_(ops) {
    const size_t s = layout_.shard_elements();
    const auto zeroed = [&](DeviceBuffer& buffer) {
        buffer = DeviceBuffer(ops, s * sizeof(float));
        ops.fill(buffer.tensor(DType::f32, 1, static_cast<int64_t>(s)), 0.0f);
    };
    zeroed(grads_);
    zeroed(state_a_);
    if (adamw) zeroed(state_b_);
    bool padded = false;
    for (size_t b = 0; b < buckets_.size(); ++b) padded = padded || layout_.padded_count(b) != buckets_[b].count;
    if (padded && !holds_params) staging_ = DeviceBuffer(ops, layout_.largest_padded_count() * sizeof(float));
    if (holds_params) zeroed(params_);
}

void ShardedState::set_params_shard(const std::vector<float>& full) {
    SB_REQUIRE(holds_params(), "set_params_shard on a shard without parameters");
    // This rank's slices, back to back; a padded slice past the parameters' end reads zeros.
    std::vector<float> mine(layout_.shard_elements(), 0.0f);
    for (size_t b = 0; b < buckets_.size(); ++b) {
        const size_t from = std::min(layout_.flat_offset(b), full.size());
        const size_t count = std::min(layout_.slice(b), full.size() - from);
        std::copy_n(full.begin() + static_cast<std::ptrdiff_t>(from), count,
                    mine.begin() + static_cast<std::ptrdiff_t>(layout_.shard_offset(b)));
    }
    ops_.upload(params_.get(), mine.data(), mine.size() * sizeof(float));
}

std::unique_ptr<CommRequest> ShardedState::reduce_scatter_bucket(size_t b, const float* bucket_grads) {
    // The padded span reads past the bucket's count: in the flat buffer the next bucket's
    // gradients (final, as buckets launch from the end of the buffer down) or the buffer's zero
    // tail, in a landing slot zeros. What lands in the padding slots of the shard is never
    // gathered back.
    return comm_.reduce_scatter(bucket_grads, grads_.as<float>() + layout_.shard_offset(b), layout_.slice(b),
                                DType::f32, ReduceOp::avg);
}

void ShardedState::update(float* params, const OptimizerConfig& cfg, int64_t step) {
    for (size_t b = 0; b < buckets_.size(); ++b) {
        float* mine = params + layout_.flat_offset(b);
        const size_t at = layout_.shard_offset(b), count = layout_.slice(b);
        if (cfg.kind == OptimizerConfig::Kind::adamw)
            ops_.adamw_step(mine, grads_.as<float>() + at, state_a_.as<float>() + at, state_b_.as<float>() + at, count,
                            cfg, step, Tensor{});
        else
            ops_.sgd_step(mine, grads_.as<float>() + at, state_a_.as<float>() + at, count, cfg, Tensor{});
    }
}

void ShardedState::update_params_shard(const OptimizerConfig& cfg, int64_t step) {
    SB_REQUIRE(holds_params(), "update_params_shard on a shard without parameters");
    const size_t s = layout_.shard_elements();
    if (cfg.kind == OptimizerConfig::Kind::adamw)
        ops_.adamw_step(params_.as<float>(), grads_.as<float>(), state_a_.as<float>(), state_b_.as<float>(), s, cfg,
                        step, Tensor{});
    else
        ops_.sgd_step(params_.as<float>(), grads_.as<float>(), state_a_.as<float>(), s, cfg, Tensor{});
}

std::unique_ptr<CommRequest> ShardedState::gather_bucket(size_t b, float* dst) {
    return comm_.all_gather(params_.as<float>() + layout_.shard_offset(b), dst, layout_.slice(b), DType::f32);
}

void ShardedState::all_gather_params(float* params) {
    // A bucket whose count divides into the slices is gathered in place; a padded one lands in
    // the staging buffer and its count is copied out (the padding must not overwrite the next
    // bucket), one at a time since they share the staging buffer. Either way the parameters a
    // padded slice's update ran over are written back with their owners' values.
    std::vector<std::unique_ptr<CommRequest>> in_flight;
    for (size_t b = 0; b < buckets_.size(); ++b) {
        const float* mine = params + layout_.flat_offset(b);
        const Bucket& bucket = buckets_[b];
        if (layout_.padded_count(b) == bucket.count) {
            in_flight.push_back(comm_.all_gather(mine, params + bucket.offset, layout_.slice(b), DType::f32));
            continue;
        }
        comm_.all_gather(mine, staging_.get(), layout_.slice(b), DType::f32)->wait();
        const auto count = static_cast<int64_t>(bucket.count);
        ops_.cast(staging_.tensor(DType::f32, 1, count), Tensor{params + bucket.offset, DType::f32, 1, count});
    }
    for (auto& request : in_flight) request->wait();
}

ParameterSlots::ParameterSlots(const std::vector<ParamInfo>& params, const std::vector<Bucket>& buckets,
                               ShardedState& shard, Ops& ops, DType compute_dtype, size_t slots)
    : buckets_(buckets), shard_(shard), ops_(ops), dtype_(compute_dtype) {
    SB_REQUIRE(shard.holds_params() && slots >= 1, "parameter slots need a shard holding the parameters, and a slot");
    for (const ParamInfo& p : params) param_offsets_.push_back(p.offset);
    bucket_of_param_ = bucket_of_params(buckets_, params.size());
    const size_t elements = shard.layout().largest_padded_count();
    slots_.resize(slots);
    for (Slot& slot : slots_) {
        slot.master = DeviceBuffer(ops, elements * sizeof(float));
        // Zero, so a no-communication step that reads a slot never gathered computes on finite values.
        ops.fill(slot.master.tensor(DType::f32, 1, static_cast<int64_t>(elements)), 0.0f);
        if (dtype_ != DType::f32) {
            slot.weights = DeviceBuffer(ops, elements * dtype_size(dtype_));
            ops.fill(slot.weights.tensor(dtype_, 1, static_cast<int64_t>(elements)), 0.0f);
        }
    }
}

int ParameterSlots::slot_of(int param_index) {
    SB_REQUIRE(param_index >= 0 && static_cast<size_t>(param_index) < bucket_of_param_.size(),
               fmt::format("parameter {} out of range", param_index));
    const int b = bucket_of_param_[static_cast<size_t>(param_index)];
    int chosen = held_by(b);
    if (chosen < 0) {
        chosen = take_slot(b);
        if (gathering_) start_gather(slots_[static_cast<size_t>(chosen)]);
    }
    Slot& slot = slots_[static_cast<size_t>(chosen)];
    slot.last_read = ++reads_;
    if (slot.pending || !slot.read) {
        finish_gather(slot);
        slot.read = true;
        // The first read of a gathered bucket: gather the next one the pass reads while this one
        // computes (forward: down the buckets, backward: up), into the least recently read slot.
        const int step = b > last_first_read_ ? 1 : -1;
        last_first_read_ = b;
        const int next = b + step;
        if (gathering_ && next >= 0 && next < static_cast<int>(buckets_.size()) && held_by(next) < 0)
            start_gather(slots_[static_cast<size_t>(take_slot(next))]);
    }
    return chosen;
}

int ParameterSlots::held_by(int bucket) const {
    for (size_t s = 0; s < slots_.size(); ++s)
        if (slots_[s].bucket == bucket) return static_cast<int>(s);
    return -1;
}

int ParameterSlots::take_slot(int bucket) {
    // The least recently read slot (an empty one has never been read); a gather still landing in
    // it completes first.
    size_t chosen = 0;
    for (size_t s = 1; s < slots_.size(); ++s)
        if (slots_[s].last_read < slots_[chosen].last_read) chosen = s;
    Slot& slot = slots_[chosen];
    if (slot.pending) slot.pending->wait();
    slot.pending.reset();
    slot.bucket = bucket;
    slot.read = !gathering_;  // a no-communication step reads the slot as it stands
    slot.last_read = ++reads_;
    return static_cast<int>(chosen);
}

void ParameterSlots::start_gather(Slot& slot) {
    // The collective waits for the work queued before it, which reads what the slot held.
    slot.pending = shard_.gather_bucket(static_cast<size_t>(slot.bucket), slot.master.as<float>());
    slot.read = false;
    gathered_.push_back(slot.bucket);
}

void ParameterSlots::finish_gather(Slot& slot) {
    if (!slot.pending) return;
    slot.pending->wait();
    slot.pending.reset();
    if (slot.weights.get()) {
        const auto count = static_cast<int64_t>(buckets_[static_cast<size_t>(slot.bucket)].count);
        ops_.cast(slot.master.tensor(DType::f32, 1, count), slot.weights.tensor(dtype_, 1, count));
    }
}

size_t ParameterSlots::offset_in_slot(const Slot& slot, int param_index) const {
    return param_offsets_[static_cast<size_t>(param_index)] - buckets_[static_cast<size_t>(slot.bucket)].offset;
}

const float* ParameterSlots::master(int param_index) {
    const Slot& slot = slots_[static_cast<size_t>(slot_of(param_index))];
    return slot.master.as<float>() + offset_in_slot(slot, param_index);
}

void* ParameterSlots::weight(int param_index) {
    const Slot& slot = slots_[static_cast<size_t>(slot_of(param_index))];
    const size_t within = offset_in_slot(slot, param_index);
    if (!slot.weights.get()) return slot.master.as<float>() + within;
    return static_cast<char*>(slot.weights.get()) + within * dtype_size(dtype_);
}

void ParameterSlots::download_all(float* host) {
    // Outside a step: gathering whatever the last step was, and not counted as a step's.
    const bool gathering = gathering_;
    const std::vector<int> counted = gathered_;
    gathering_ = true;
    empty();
    for (const Bucket& bucket : buckets_) {
        const Slot& slot = slots_[static_cast<size_t>(slot_of(bucket.param_indices.front()))];
        ops_.download(host + bucket.offset, slot.master.get(), bucket.count * sizeof(float));
    }
    empty();
    gathering_ = gathering;
    gathered_ = counted;
}

double ParameterSlots::gathered_bytes_last_step() const {
    double bytes = 0;
    for (int b : gathered_last_step_) bytes += static_cast<double>(shard_.layout().padded_count(static_cast<size_t>(b)));
    return bytes * sizeof(float);
}

void ParameterSlots::gather_last_step_again() {
    // Into the first slot, one after the other; the slots are empty before and after.
    empty();
    for (int b : gathered_last_step_) shard_.gather_bucket(static_cast<size_t>(b), slots_.front().master.as<float>())->wait();
}

void ParameterSlots::end_step() {
    empty();
    if (gathering_) gathered_last_step_ = gathered_;  // a no-communication step gathers nothing
    gathered_.clear();
}

void ParameterSlots::empty() {
    for (Slot& slot : slots_) {
        if (slot.pending) slot.pending->wait();  // a prefetch nobody read
        slot.pending.reset();
        slot.bucket = -1;
        slot.last_read = 0;
        slot.read = false;
    }
    reads_ = 0;
    last_first_read_ = -1;
}

size_t ParameterSlots::bytes() const {
    size_t total = 0;
    for (const Slot& slot : slots_) total += slot.master.bytes() + slot.weights.bytes();
    return total;
}

ParameterSlotCounter::ParameterSlotCounter(const std::vector<ParamInfo>& params, const std::vector<Bucket>& buckets,
                                           float* stand_in, size_t element_bytes, std::function<size_t()> position)
    : params_(params), stand_in_(stand_in), element_bytes_(element_bytes), position_(std::move(position)) {
    bucket_of_param_ = bucket_of_params(buckets, params.size());
}

void ParameterSlotCounter::read(int param_index) {
    if (position_() != op_) {
        op_ = position_();
        read_by_op_.clear();
    }
    const int b = bucket_of_param_.at(static_cast<size_t>(param_index));
    if (std::find(read_by_op_.begin(), read_by_op_.end(), b) == read_by_op_.end()) read_by_op_.push_back(b);
    most_ = std::max(most_, read_by_op_.size());
}

const float* ParameterSlotCounter::master(int param_index) {
    read(param_index);
    return stand_in_ + params_[static_cast<size_t>(param_index)].offset;
}

void* ParameterSlotCounter::weight(int param_index) {
    read(param_index);
    return reinterpret_cast<char*>(stand_in_) + params_[static_cast<size_t>(param_index)].offset * element_bytes_;
}

}  // namespace sb
