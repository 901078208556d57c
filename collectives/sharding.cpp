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
    bool padded = false;
    for (size_t b = 0; b < buckets_.size(); ++b) padded = padded || layout_.padded_count(b) != buckets_[b].count;
    if (padded) staging_ = DeviceBuffer(ops, layout_.largest_padded_count() * sizeof(float));
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

}  // namespace sb
