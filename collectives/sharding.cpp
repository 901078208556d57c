#include "collectives/sharding.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/errors.h"
#include "collectives/host_dtype.h"

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

ShardedState::ShardedState(const std::vector<Bucket>& buckets, Communicator& comm, Ops& ops, bool adamw)
    : layout_(buckets, comm.size(), comm.rank()), buckets_(buckets), comm_(comm), ops_(ops) {
    const size_t s = layout_.shard_elements();
    const auto zeroed = [&](DeviceBuffer& buffer) {
        buffer = DeviceBuffer(ops, s * sizeof(float));
        ops.fill(buffer.tensor(DType::f32, 1, static_cast<int64_t>(s)), 0.0f);
    };
    zeroed(grads_);
    zeroed(state_a_);
    if (adamw) zeroed(state_b_);
    zeroed(params_);
}

void ShardedState::set_params_shard(const std::vector<float>& full) {
    // This rank's slices, back to back. The last rank's padding takes the next bucket's first
    // values, or zeros past the parameters' end; no parameter is read from it.
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
    // tail, in a landing slot zeros. What lands in the padding slots of the shard is never read
    // as a parameter.
    return comm_.reduce_scatter(bucket_grads, grads_.as<float>() + layout_.shard_offset(b), layout_.slice(b),
                                DType::f32, ReduceOp::avg);
}

void ShardedState::update(const OptimizerConfig& cfg, int64_t step) {
    const size_t s = layout_.shard_elements();
    if (cfg.kind == OptimizerConfig::Kind::adamw)
        ops_.adamw_step(params_.as<float>(), grads_.as<float>(), state_a_.as<float>(), state_b_.as<float>(), s, cfg,
                        step, Tensor{});
    else
        ops_.sgd_step(params_.as<float>(), grads_.as<float>(), state_a_.as<float>(), s, cfg, Tensor{});
}

std::unique_ptr<CommRequest> ShardedState::gather_bucket(size_t b, void* dst, DType dtype) {
    const size_t slice = layout_.slice(b);
    void* mine = static_cast<char*>(dst) + static_cast<size_t>(layout_.rank()) * slice * dtype_size(dtype);
    const auto count = static_cast<int64_t>(slice);
    ops_.cast(Tensor{params_.as<float>() + layout_.shard_offset(b), DType::f32, 1, count}, Tensor{mine, dtype, 1, count});
    return comm_.all_gather(mine, dst, slice, dtype);
}

std::unique_ptr<CommRequest> ShardedState::gather_master_piece(size_t b, size_t first, size_t count, float* dst) {
    return comm_.all_gather(params_.as<float>() + layout_.shard_offset(b) + first, dst, count, DType::f32);
}

namespace {
bool is_vector(const ParamInfo& p) { return p.rows == 1; }
}  // namespace

size_t slot_fp32_elements(const std::vector<ParamInfo>& params, const Bucket& bucket, size_t padded,
                          DType compute_dtype) {
    if (compute_dtype == DType::f32) return padded;
    size_t vectors = 0;
    for (int i : bucket.param_indices)
        if (is_vector(params[static_cast<size_t>(i)])) vectors += params[static_cast<size_t>(i)].count();
    return vectors;
}

ParameterSlots::ParameterSlots(const std::vector<ParamInfo>& params, const std::vector<Bucket>& buckets,
                               ShardedState& shard, Ops& ops, DType compute_dtype, size_t shared_slots)
    : params_(params), buckets_(buckets), shard_(shard), ops_(ops), dtype_(compute_dtype),
      resident_(shared_slots == 0) {
    SB_REQUIRE(dtype_ == DType::f32 || dtype_ == DType::bf16, "sharded parameters are gathered in fp32 or bf16");
    bucket_of_param_ = bucket_of_params(buckets_, params.size());
    for (size_t b = 0; b < buckets_.size(); ++b) forward_order_.push_back(static_cast<int>(b));
    std::sort(forward_order_.begin(), forward_order_.end(), [&](int x, int y) {
        return buckets_[static_cast<size_t>(x)].offset < buckets_[static_cast<size_t>(y)].offset;
    });
    // In fp32 a parameter's fp32 values lie where it lies in the bucket; with a compute copy the
    // bucket's vectors lie back to back, in the bucket's order.
    fp32_offset_.assign(params.size(), SIZE_MAX);
    std::vector<size_t> fp32_elements;
    for (size_t b = 0; b < buckets_.size(); ++b) {
        const Bucket& bucket = buckets_[b];
        size_t next = 0;
        for (int i : bucket.param_indices) {
            const ParamInfo& p = params[static_cast<size_t>(i)];
            if (dtype_ == DType::f32)
                fp32_offset_[static_cast<size_t>(i)] = p.offset - bucket.offset;
            else if (is_vector(p)) {
                fp32_offset_[static_cast<size_t>(i)] = next;
                next += p.count();
            }
        }
        fp32_elements.push_back(slot_fp32_elements(params, bucket, shard.layout().padded_count(b), dtype_));
    }
    // Resident, each slot holds its own bucket; shared, each the largest.
    slots_.resize(resident_ ? buckets_.size() : shared_slots);
    const size_t largest_fp32 = *std::max_element(fp32_elements.begin(), fp32_elements.end());
    for (size_t s = 0; s < slots_.size(); ++s) {
        Slot& slot = slots_[s];
        if (resident_) slot.bucket = static_cast<int>(s);
        const size_t values = resident_ ? fp32_elements[s] : largest_fp32;
        const size_t copy = resident_ ? shard.layout().padded_count(s) : shard.layout().largest_padded_count();
        // Zero, so a no-communication step that reads a slot never gathered computes on finite values.
        slot.fp32 = DeviceBuffer(ops, values * sizeof(float));
        ops.fill(slot.fp32.tensor(DType::f32, 1, static_cast<int64_t>(values)), 0.0f);
        if (dtype_ != DType::f32) {
            slot.weights = DeviceBuffer(ops, copy * dtype_size(dtype_));
            ops.fill(slot.weights.tensor(dtype_, 1, static_cast<int64_t>(copy)), 0.0f);
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
        // Resident, every bucket is held, so nothing is prefetched.
        const int step = b > last_first_read_ ? 1 : -1;
        last_first_read_ = b;
        const int next = b + step;
        if (gathering_ && next >= 0 && next < static_cast<int>(buckets_.size()) && held_by(next) < 0)
            start_gather(slots_[static_cast<size_t>(take_slot(next))]);
    }
    return chosen;
}

int ParameterSlots::held_by(int bucket) const {
    if (resident_) return bucket;
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

void* ParameterSlots::gathered_into(const Slot& slot) const {
    return slot.weights.get() ? slot.weights.get() : slot.fp32.get();
}

void ParameterSlots::start_gather(Slot& slot) {
    // The cast of this rank's slice and the collective follow the work queued before them, which
    // reads what the slot held.
    slot.pending = shard_.gather_bucket(static_cast<size_t>(slot.bucket), gathered_into(slot), dtype_);
    slot.read = false;
    gathered_.push_back(slot.bucket);
}

void ParameterSlots::finish_gather(Slot& slot) {
    if (!slot.pending) return;
    slot.pending->wait();
    slot.pending.reset();
    cast_vectors(slot);
}

void ParameterSlots::cast_vectors(Slot& slot) {
    if (!slot.weights.get()) return;
    const Bucket& bucket = buckets_[static_cast<size_t>(slot.bucket)];
    for (int i : bucket.param_indices) {
        const size_t at = fp32_offset_[static_cast<size_t>(i)];
        if (at == SIZE_MAX) continue;
        const auto count = static_cast<int64_t>(params_[static_cast<size_t>(i)].count());
        ops_.cast(Tensor{static_cast<char*>(slot.weights.get()) + offset_in_slot(slot, i) * dtype_size(dtype_), dtype_,
                         1, count},
                  Tensor{slot.fp32.as<float>() + at, DType::f32, 1, count});
    }
}

void ParameterSlots::gather_every_bucket() {
    SB_REQUIRE(resident_, "gather_every_bucket: the slots are shared");
    for (int b : forward_order_) {
        Slot& slot = slots_[static_cast<size_t>(b)];
        start_gather(slot);
        // A request marks its completion at its first test or wait (on NCCL an event on the
        // communication stream, after everything issued by then): tested now, a read waits for its
        // own bucket's gather, not for every gather issued before the read, so the gathers overlap
        // the forward.
        slot.pending->test();
    }
}

size_t ParameterSlots::offset_in_slot(const Slot& slot, int param_index) const {
    return params_[static_cast<size_t>(param_index)].offset - buckets_[static_cast<size_t>(slot.bucket)].offset;
}

const float* ParameterSlots::master(int param_index) {
    const Slot& slot = slots_[static_cast<size_t>(slot_of(param_index))];
    const size_t at = fp32_offset_[static_cast<size_t>(param_index)];
    SB_REQUIRE(at != SIZE_MAX, fmt::format("{} is read in fp32, but its slot holds fp32 values of vectors only",
                                           params_[static_cast<size_t>(param_index)].name));
    return slot.fp32.as<float>() + at;
}

void* ParameterSlots::weight(int param_index) {
    const Slot& slot = slots_[static_cast<size_t>(slot_of(param_index))];
    const size_t within = offset_in_slot(slot, param_index);
    if (!slot.weights.get()) return slot.fp32.as<float>() + within;
    return static_cast<char*>(slot.weights.get()) + within * dtype_size(dtype_);
}

void ParameterSlots::download_masters(float* host) {
    // Through the slot that holds the bucket (resident) or the first (shared, given up before
    // and after), counted as no step's gather: in fp32 each bucket at once, with a compute copy in
    // pieces that fit the copy, each rank's piece put in its place; a resident slot is then
    // gathered again, as the step left it.
    finish_all();
    const int n = shard_.layout().world_size();
    for (size_t b = 0; b < buckets_.size(); ++b) {
        Slot& slot = slots_[resident_ ? b : 0];
        const Bucket& bucket = buckets_[b];
        const size_t slice = shard_.layout().slice(b);
        if (!slot.weights.get()) {
            shard_.gather_bucket(b, slot.fp32.get(), DType::f32)->wait();
            ops_.download(host + bucket.offset, slot.fp32.get(), bucket.count * sizeof(float));
            continue;
        }
        // A copy too small for one fp32 value from every rank (a bucket of under 2N elements)
        // gathers through a buffer of N values instead.
        size_t piece = slot.weights.bytes() / sizeof(float) / static_cast<size_t>(n);
        DeviceBuffer small;
        float* through = slot.weights.as<float>();
        if (piece == 0) {
            small = DeviceBuffer(ops_, static_cast<size_t>(n) * sizeof(float));
            through = small.as<float>();
            piece = 1;
        }
        std::vector<float> pieces;
        for (size_t first = 0; first < slice; first += piece) {
            const size_t count = std::min(piece, slice - first);
            pieces.resize(count * static_cast<size_t>(n));
            shard_.gather_master_piece(b, first, count, through)->wait();
            ops_.download(pieces.data(), through, pieces.size() * sizeof(float));
            for (size_t r = 0; r < static_cast<size_t>(n); ++r)
                for (size_t k = 0; k < count; ++k) {
                    const size_t within = r * slice + first + k;  // past the count: padding
                    if (within < bucket.count) host[bucket.offset + within] = pieces[r * count + k];
                }
        }
        if (resident_) {
            slot.pending = shard_.gather_bucket(b, slot.weights.get(), dtype_);
            finish_gather(slot);
        }
    }
    finish_all();
}

void ParameterSlots::download_read_values(float* host) {
    // Resident, the slots as they stand; shared, each bucket gathered as a read gathers it, the
    // step's record of its gathers kept.
    const bool gathering = gathering_;
    const std::vector<int> counted = gathered_;
    gathering_ = true;
    finish_all();
    std::vector<uint16_t> copy;
    for (const Bucket& bucket : buckets_) {
        const Slot& slot = slots_[static_cast<size_t>(slot_of(bucket.param_indices.front()))];
        if (!slot.weights.get()) {
            ops_.download(host + bucket.offset, slot.fp32.get(), bucket.count * sizeof(float));
            continue;
        }
        copy.resize(bucket.count);
        ops_.download(copy.data(), slot.weights.get(), bucket.count * sizeof(uint16_t));
        for (size_t i = 0; i < bucket.count; ++i) host[bucket.offset + i] = bf16_to_float(copy[i]);
    }
    finish_all();
    gathering_ = gathering;
    gathered_ = counted;
}

void ParameterSlots::set_values(const std::vector<float>& full) {
    finish_all();
    if (!resident_) return;
    std::vector<uint16_t> copy;
    for (size_t b = 0; b < buckets_.size(); ++b) {
        Slot& slot = slots_[b];
        const float* values = full.data() + buckets_[b].offset;
        const size_t count = buckets_[b].count;
        if (!slot.weights.get()) {
            ops_.upload(slot.fp32.get(), values, count * sizeof(float));
            continue;
        }
        copy.resize(count);
        for (size_t i = 0; i < count; ++i) copy[i] = float_to_bf16(values[i]);  // as the device's cast rounds
        ops_.upload(slot.weights.get(), copy.data(), count * sizeof(uint16_t));
        cast_vectors(slot);
    }
}

void ParameterSlots::flip_read_bit(size_t index, int bit) {
    SB_REQUIRE(resident_, "sharding parameters keeps no replica to flip a bit of");
    SB_REQUIRE(dtype_ == DType::f32 || bit >= 16,
               fmt::format("bit {} of an fp32 value is not in its bf16 copy (bits 16 to 31 are)", bit));
    finish_all();
    const auto found = std::find_if(buckets_.begin(), buckets_.end(), [&](const Bucket& bucket) {
        return index >= bucket.offset && index < bucket.offset + bucket.count;
    });
    SB_REQUIRE(found != buckets_.end(), fmt::format("parameter element {} is in no bucket", index));
    Slot& slot = slots_[static_cast<size_t>(found - buckets_.begin())];
    const size_t element_bytes = dtype_size(dtype_);
    char* at = static_cast<char*>(gathered_into(slot)) + (index - found->offset) * element_bytes;
    uint32_t word = 0;  // the element's bytes, little-endian: a bf16 copy's are the fp32 value's high half
    ops_.download(&word, at, element_bytes);
    word ^= uint32_t{1} << (element_bytes == 2 ? bit - 16 : bit);
    ops_.upload(at, &word, element_bytes);
    cast_vectors(slot);  // the fp32 vectors follow the copy
}

double ParameterSlots::gathered_bytes_last_step() const {
    double elements = 0;
    for (int b : gathered_last_step_)
        elements += static_cast<double>(shard_.layout().padded_count(static_cast<size_t>(b)));
    return elements * static_cast<double>(dtype_size(dtype_));
}

void ParameterSlots::gather_last_step_again() {
    // Resident, each bucket into its own slot (the shards are unchanged, so is what it holds);
    // shared, into the first slot, the slots empty before and after.
    finish_all();
    for (int b : gathered_last_step_) {
        Slot& slot = slots_[resident_ ? static_cast<size_t>(b) : 0];
        shard_.gather_bucket(static_cast<size_t>(b), gathered_into(slot), dtype_)->wait();
    }
    finish_all();
}

void ParameterSlots::end_step() {
    finish_all();
    if (gathering_) gathered_last_step_ = gathered_;  // a no-communication step gathers nothing
    gathered_.clear();
}

void ParameterSlots::finish_all() {
    for (Slot& slot : slots_) {
        if (resident_) {
            finish_gather(slot);
            continue;
        }
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
    for (const Slot& slot : slots_) total += slot.fp32.bytes() + slot.weights.bytes();
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
