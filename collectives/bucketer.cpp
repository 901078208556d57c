#include "collectives/bucketer.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/errors.h"
#include "collectives/sharding.h"

namespace sb {

std::vector<Bucket> assign_buckets(const std::vector<ParamInfo>& params, size_t bucket_bytes,
                                   size_t element_bytes) {
    std::vector<Bucket> buckets;
    Bucket current;
    size_t current_bytes = 0;
    // Reverse order: the last layer's gradients are produced first by backward.
    for (int i = static_cast<int>(params.size()) - 1; i >= 0; --i) {
        const ParamInfo& p = params[static_cast<size_t>(i)];
        if (!current.param_indices.empty()) {
            const size_t expected_end = p.offset + p.count();
            SB_REQUIRE(expected_end == current.offset, "parameters must be contiguous in the flat buffer");
        }
        current.param_indices.push_back(i);
        current.offset = p.offset;
        current.count += p.count();
        current_bytes += p.count() * element_bytes;
        if (current_bytes >= bucket_bytes) {
            buckets.push_back(std::move(current));
            current = Bucket{};
            current_bytes = 0;
        }
    }
    if (!current.param_indices.empty()) buckets.push_back(std::move(current));
    return buckets;
}

std::vector<Bucket> bucket_layout(const std::vector<ParamInfo>& params, double bucket_mb) {
    const size_t bucket_bytes = static_cast<size_t>(bucket_mb * 1024.0 * 1024.0);
    return assign_buckets(params, bucket_bytes > 0 ? bucket_bytes : 1, sizeof(float));
}

std::vector<int> bucket_of_params(const std::vector<Bucket>& buckets, size_t params) {
    std::vector<int> bucket_of(params, -1);
    for (size_t b = 0; b < buckets.size(); ++b)
        for (int i : buckets[b].param_indices) bucket_of[static_cast<size_t>(i)] = static_cast<int>(b);
    return bucket_of;
}

LandingCounter::LandingCounter(const std::vector<ParamInfo>& params, const std::vector<Bucket>& buckets,
                               float* stand_in)
    : params_(params), buckets_(buckets), stand_in_(stand_in) {
    bucket_of_param_ = bucket_of_params(buckets_, params.size());
    for (const Bucket& b : buckets_) pending_.push_back(static_cast<int>(b.param_indices.size()));
    holds_.assign(buckets_.size(), 0);
}

float* LandingCounter::gradient(int param_index) {
    const int b = bucket_of_param_.at(static_cast<size_t>(param_index));
    if (static_cast<size_t>(b) >= next_to_launch_ && !holds_[static_cast<size_t>(b)]) {
        holds_[static_cast<size_t>(b)] = 1;
        most_held_ = std::max(most_held_, ++held_);
    }
    return stand_in_ + params_[static_cast<size_t>(param_index)].offset;
}

void LandingCounter::gradient_ready(int param_index) {
    --pending_[static_cast<size_t>(bucket_of_param_.at(static_cast<size_t>(param_index)))];
    while (next_to_launch_ < buckets_.size() && pending_[next_to_launch_] == 0) {
        if (holds_[next_to_launch_]) --held_;
        holds_[next_to_launch_++] = 0;
    }
}

Bucketer::Bucketer(const std::vector<ParamInfo>& params, double bucket_mb, Communicator& comm, float* grads,
                   Ops& ops, DType comm_dtype)
    : comm_(comm), grads_(grads), ops_(ops), comm_dtype_(comm_dtype) {
    buckets_ = bucket_layout(params, bucket_mb);
    bucket_of_param_ = bucket_of_params(buckets_, params.size());
    for (const ParamInfo& p : params) param_offsets_.push_back(p.offset);
    requests_.resize(buckets_.size());
    if (comm_dtype_ != DType::f32) compressed_ = DeviceBuffer(ops_, total_elements() * dtype_size(comm_dtype_));
    start_step();
}

void Bucketer::shard_into(ShardedState& state) {
    SB_REQUIRE(comm_dtype_ == DType::f32, "sharded gradients are reduce-scattered in fp32 only");
    SB_REQUIRE(state.layout().buckets() == buckets_.size(), "the shard layout follows other buckets");
    sharded_ = &state;
}

void Bucketer::land_in_slots(size_t slots) {
    SB_REQUIRE(sharded_ && slots >= 1, "gradients land in slots on a sharded bucketer, in one slot at least");
    const size_t elements = sharded_->layout().largest_padded_count();
    for (size_t s = 0; s < slots; ++s) slots_.emplace_back(ops_, elements * sizeof(float));
    slot_of_bucket_.assign(buckets_.size(), -1);
    slot_holder_.assign(slots, -1);
}

float* Bucketer::gradient(int param_index) {
    SB_REQUIRE(param_index >= 0 && static_cast<size_t>(param_index) < bucket_of_param_.size(),
               fmt::format("gradient({}) out of range", param_index));
    SB_REQUIRE(lands_in_slots(), "gradient() asked of a bucketer whose gradients stay in the flat buffer");
    const int b = bucket_of_param_[static_cast<size_t>(param_index)];
    SB_REQUIRE(b >= next_to_launch_,
               fmt::format("gradient of parameter {} written after its bucket was launched", param_index));
    const size_t within = param_offsets_[static_cast<size_t>(param_index)] - buckets_[static_cast<size_t>(b)].offset;
    return slots_[static_cast<size_t>(take_slot(b))].as<float>() + within;
}

int Bucketer::take_slot(int b) {
    if (slot_of_bucket_[static_cast<size_t>(b)] >= 0) return slot_of_bucket_[static_cast<size_t>(b)];
    // A free slot, else the one whose bucket launched first, once its reduce-scatter is done.
    int chosen = -1;
    for (size_t s = 0; s < slots_.size() && chosen < 0; ++s)
        if (slot_holder_[s] < 0) chosen = static_cast<int>(s);
    for (size_t s = 0; s < slots_.size() && chosen < 0; ++s) {
        const int holder = slot_holder_[s];
        if (holder < next_to_launch_ && (chosen < 0 || holder < slot_holder_[static_cast<size_t>(chosen)]))
            chosen = static_cast<int>(s);
    }
    SB_REQUIRE(chosen >= 0, fmt::format("every one of the {} gradient landing slots holds a bucket still filling "
                                        "(LandingCounter counts what a step needs)",
                                        slots_.size()));
    const int previous = slot_holder_[static_cast<size_t>(chosen)];
    if (previous >= 0) {
        if (auto& request = requests_[static_cast<size_t>(previous)]) {
            request->wait();
            request.reset();
        }
        slot_of_bucket_[static_cast<size_t>(previous)] = -1;
    }
    slot_holder_[static_cast<size_t>(chosen)] = b;
    slot_of_bucket_[static_cast<size_t>(b)] = chosen;
    // A padded bucket's reduce-scatter reads its padding too: zero, as the flat buffer's tail.
    const size_t count = buckets_[static_cast<size_t>(b)].count;
    const size_t padding = sharded_->layout().padded_count(static_cast<size_t>(b)) - count;
    if (padding > 0)
        ops_.fill(Tensor{slots_[static_cast<size_t>(chosen)].as<float>() + count, DType::f32, 1,
                         static_cast<int64_t>(padding)},
                  0.0f);
    return chosen;
}

const float* Bucketer::gradients_of(int b) {
    if (slots_.empty()) return grads_ + buckets_[static_cast<size_t>(b)].offset;
    return slots_[static_cast<size_t>(take_slot(b))].as<float>();
}

void Bucketer::start_step(bool communicate) {
    communicate_ = communicate;
    pending_.resize(buckets_.size());
    reported_.assign(bucket_of_param_.size(), 0);
    for (size_t b = 0; b < buckets_.size(); ++b) {
        SB_REQUIRE(!requests_[b], "start_step before the previous step's buckets were waited for");
        pending_[b] = static_cast<int>(buckets_[b].param_indices.size());
    }
    next_to_launch_ = 0;
}

void Bucketer::gradient_ready(int param_index) {
    SB_REQUIRE(param_index >= 0 && static_cast<size_t>(param_index) < bucket_of_param_.size(),
               fmt::format("gradient_ready({}) out of range", param_index));
    SB_REQUIRE(!reported_[static_cast<size_t>(param_index)],
               fmt::format("gradient of parameter {} reported twice in one step", param_index));
    reported_[static_cast<size_t>(param_index)] = 1;
    const int b = bucket_of_param_[static_cast<size_t>(param_index)];
    --pending_[static_cast<size_t>(b)];
    launch_ready();
    // Drive progress of the collectives in flight (MPI progresses only inside MPI calls).
    for (int i = 0; i < next_to_launch_; ++i)
        if (requests_[static_cast<size_t>(i)]) requests_[static_cast<size_t>(i)]->test();
}

void Bucketer::launch_ready() {
    while (next_to_launch_ < static_cast<int>(buckets_.size()) && pending_[static_cast<size_t>(next_to_launch_)] == 0) {
        const Bucket& bucket = buckets_[static_cast<size_t>(next_to_launch_)];
        void* span = span_of(bucket);
        if (comm_dtype_ != DType::f32) ops_.cast(fp32_view(bucket), compressed_view(bucket));
        if (communicate_)
            requests_[static_cast<size_t>(next_to_launch_)] =
                sharded_ ? sharded_->reduce_scatter_bucket(static_cast<size_t>(next_to_launch_),
                                                           gradients_of(next_to_launch_))
                         : comm_.all_reduce(span, span, bucket.count, comm_dtype_, ReduceOp::avg);
        ++next_to_launch_;
    }
}

void Bucketer::wait_all() {
    SB_REQUIRE(next_to_launch_ == static_cast<int>(buckets_.size()),
               fmt::format("wait_all with {} of {} buckets launched: some gradients were never reported",
                           next_to_launch_, buckets_.size()));
    for (size_t b = 0; b < buckets_.size(); ++b) {
        if (requests_[b]) requests_[b]->wait();
        requests_[b].reset();
        if (comm_dtype_ != DType::f32) ops_.cast(compressed_view(buckets_[b]), fp32_view(buckets_[b]));
    }
    slot_of_bucket_.assign(slot_of_bucket_.size(), -1);
    slot_holder_.assign(slot_holder_.size(), -1);
}

Tensor Bucketer::fp32_view(const Bucket& b) const {
    return Tensor{grads_ + b.offset, DType::f32, 1, static_cast<int64_t>(b.count)};
}

Tensor Bucketer::compressed_view(const Bucket& b) const {
    return Tensor{static_cast<char*>(compressed_.get()) + b.offset * dtype_size(comm_dtype_), comm_dtype_, 1,
                  static_cast<int64_t>(b.count)};
}

void* Bucketer::span_of(const Bucket& b) const {
    return comm_dtype_ == DType::f32 ? static_cast<void*>(grads_ + b.offset) : compressed_view(b).data;
}

size_t Bucketer::total_elements() const {
    size_t total = 0;
    for (const auto& b : buckets_) total += b.count;
    return total;
}

}  // namespace sb
