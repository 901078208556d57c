// The gradient bucketer (DESIGN: Step), as PyTorch DDP: parameters are grouped, in
// reverse order (the order backward produces them), into buckets of about bucket_mb;
// a parameter is never split. Since the flat gradient buffer is in forward order, each
// bucket is one contiguous span and is all-reduced (average) in place with one call,
// started the moment its last gradient lands. Buckets start in order. With a 16-bit
// comm_dtype (DDP's bf16/fp16 compress hooks) each bucket is cast into a 16-bit copy,
// all-reduced there and cast back into the fp32 gradients once it has completed. With a
// ShardedState attached (collectives/sharding.h) each bucket is reduce-scattered into the
// rank's gradient shard instead of all-reduced.
// Sharded with `gradients` (ZeRO-2) the gradients land in a few reusable slots instead of the
// flat buffer (land_in_slots): a bucket takes a slot as its first gradient is written and holds
// it until its reduce-scatter is waited for, so a rank holds only its shard between steps.
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
// Each of `params` parameters' bucket index.
std::vector<int> bucket_of_params(const std::vector<Bucket>& buckets, size_t params);

// How many landing slots a step needs, from the order in which a model's backward writes and
// reports its gradients: bind the model with this as its landing and run a step on the tracing
// backend with it as the sink. It counts the buckets that hold a slot at once, each from its
// first written gradient until it launches, plus one, so that a bucket's reduce-scatter
// overlaps the next bucket's backward. Gradients land in `stand_in` (the flat offsets).
class LandingCounter : public GradientSink, public GradientLanding {
public:
    LandingCounter(const std::vector<ParamInfo>& params, const std::vector<Bucket>& buckets, float* stand_in);
    float* gradient(int param_index) override;
    void gradient_ready(int param_index) override;
    size_t slots_needed() const { return most_held_ + 1; }

private:
    const std::vector<ParamInfo>& params_;
    std::vector<Bucket> buckets_;
    float* stand_in_;
    std::vector<int> bucket_of_param_, pending_;
    std::vector<char> holds_;  // per bucket: holds a slot, not launched yet
    size_t next_to_launch_ = 0, held_ = 0, most_held_ = 0;
};

class Bucketer : public GradientSink, public GradientLanding {
public:
    Bucketer(const std::vector<ParamInfo>& params, double bucket_mb, Communicator& comm, float* grads, Ops& ops,
             DType comm_dtype = DType::f32);

    // From now on each bucket is reduce-scattered into `state`'s gradient shard (fp32 only).
    void shard_into(ShardedState& state);
    // Sharded: from now on gradients land in `slots` slots of the largest padded bucket (the
    // model asks gradient(i) at each write); a slot is reused once its bucket's reduce-scatter
    // is waited for, the oldest launched first. The flat gradient buffer is not touched.
    void land_in_slots(size_t slots);
    float* gradient(int param_index) override;  // the slot of the parameter's bucket
    bool lands_in_slots() const { return !slots_.empty(); }
    size_t landing_slots() const { return slots_.size(); }
    size_t landing_bytes() const { return slots_.size() * (slots_.empty() ? 0 : slots_.front().bytes()); }
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
    int take_slot(int b);  // bucket b's landing slot, taken (after a wait) if it holds none
    const float* gradients_of(int b);  // bucket b's gradients: its slot, or its span of the flat buffer

    Communicator& comm_;
    float* grads_;
    Ops& ops_;
    DType comm_dtype_;
    ShardedState* sharded_ = nullptr;
    DeviceBuffer compressed_;  // 16-bit copy of the gradients when comm_dtype != f32
    std::vector<Bucket> buckets_;
    std::vector<int> bucket_of_param_;
    std::vector<size_t> param_offsets_;
    std::vector<DeviceBuffer> slots_;  // landing slots (sharding: gradients)
    std::vector<int> slot_of_bucket_;  // -1: none held
    std::vector<int> slot_holder_;     // the bucket holding each slot, -1: free
    std::vector<int> pending_;        // per bucket: gradients still to come
    std::vector<char> reported_;      // per parameter: gradient reported this step
    std::vector<std::unique_ptr<CommRequest>> requests_;
    int next_to_launch_ = 0;
    bool communicate_ = true;
};

}  // namespace sb
