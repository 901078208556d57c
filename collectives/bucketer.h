// The gradient bucketer (DESIGN: Step), as PyTorch DDP: parameters are grouped, in
// reverse order (the order backward produces them), into buckets of about bucket_mb;
// a parameter is never split. Since the flat gradient buffer is in forward order, each
// bucket is one contiguous span and is all-reduced (average) in place with one call,
// started the moment its last gradient lands. Buckets start in order. With a 16-bit
// comm_dtype (DDP's bf16/fp16 compress hooks) each bucket is cast into a 16-bit copy,
// all-reduced there and cast back into the fp32 gradients once it has completed. With a
// ShardedState attached (collectives/sharding.h) each bucket is reduce-scattered into the
// rank's gradient shard instead of all-reduced.
// A step started without communication (DDP's no_sync) runs the same buckets and casts but
// skips the collectives: the step that communication cost is measured against.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "collectives/communicator.h"
#include "models/model.h"

namespace sb {

class ShardedState;

struct Bucket {
    size_t offset = 0;  // elements into the gradient buffer
    size_t count = 0;
    std::vector<int> param_indices;  // in the order they become ready
};

// Pure assignment, testable on its own.
std::vector<Bucket> assign_buckets(const std::vector<ParamInfo>& params, size_t bucket_bytes,
                                   size_t element_bytes);
// The layout a Bucketer with `bucket_mb` uses (sizes in fp32 gradient bytes, whatever the
// comm dtype), without a communicator: the projection replays it.
std::vector<Bucket> bucket_layout(const std::vector<ParamInfo>& params, double bucket_mb);

class Bucketer : public GradientSink {
public:
    Bucketer(const std::vector<ParamInfo>& params, double bucket_mb, Communicator& comm, float* grads, Ops& ops,
             DType comm_dtype = DType::f32);

    // From now on each bucket is reduce-scattered into `state`'s gradient shard (fp32 only).
    void shard_into(ShardedState& state);
    // Every parameter pending again; with communicate false, this step's buckets issue no
    // collective (each rank keeps its own gradients).
    void start_step(bool communicate = true);
    void gradient_ready(int param_index) override;  // launches buckets that became complete
    void wait_all();                              // later work waits for every bucket
    int launched() const { return next_to_launch_; }
    const std::vector<Bucket>& buckets() const { return buckets_; }
    size_t total_elements() const;
    DType comm_dtype() const { return comm_dtype_; }
    size_t comm_buffer_bytes() const { return compressed_.bytes(); }  // the 16-bit copy, if any

private:
    void launch_ready();
    Tensor fp32_view(const Bucket& b) const;
    Tensor compressed_view(const Bucket& b) const;
    void* span_of(const Bucket& b) const;  // what the all-reduce of bucket b reduces

    Communicator& comm_;
    float* grads_;
    Ops& ops_;
    DType comm_dtype_;
    ShardedState* sharded_ = nullptr;
    DeviceBuffer compressed_;  // 16-bit copy of the gradients when comm_dtype != f32
    std::vector<Bucket> buckets_;
    std::vector<int> bucket_of_param_;
    std::vector<int> pending_;        // per bucket: gradients still to come
    std::vector<char> reported_;      // per parameter: gradient reported this step
    std::vector<std::unique_ptr<CommRequest>> requests_;
    int next_to_launch_ = 0;
    bool communicate_ = true;
};

}  // namespace sb
