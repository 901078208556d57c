#include "collectives/bucketer.h"

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

Bucketer::Bucketer(const std::vector<ParamInfo>& params, double bucket_mb, Communicator& comm, float* grads,
                   Ops& ops, DType comm_dtype)
    : comm_(comm), grads_(grads), ops_(ops), comm_dtype_(comm_dtype) {
    buckets_ = bucket_layout(params, bucket_mb);
    bucket_of_param_.assign(params.size(), -1);
    for (size_t b = 0; b < buckets_.size(); ++b)
        for (int i : buckets_[b].param_indices) bucket_of_param_[static_cast<size_t>(i)] = static_cast<int>(b);
    requests_.resize(buckets_.size());
    if (comm_dtype_ != DType::f32) compressed_ = DeviceBuffer(ops_, total_elements() * dtype_size(comm_dtype_));
    start_step();
}

void Bucketer::shard_into(ShardedState& state) {
    SB_REQUIRE(comm_dtype_ == DType::f32, "sharded gradients are reduce-scattered in fp32 only");
    SB_REQUIRE(state.layout().buckets() == buckets_.size(), "the shard layout follows other buckets");
    sharded_ = &state;
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
                sharded_ ? sharded_->reduce_scatter_bucket(static_cast<size_t>(next_to_launch_), grads_)
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
