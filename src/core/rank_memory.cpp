#include "src/core/rank_memory.h"

#include <algorithm>

#include "collectives/bucketer.h"
#include "collectives/sharding.h"
#include "models/trace_ops.h"
#include "src/core/workload.h"

namespace sb {

nlohmann::json to_json(const RankMemory& m) {
    return {{"parameters", m.parameters},   {"gradients", m.gradients}, {"optimizer_state", m.optimizer_state},
            {"activations", m.activations}, {"comm_buffers", m.comm_buffers}, {"data", m.data},
            {"total", m.total()}};
}

namespace {
// The model bound on the tracing backend as the trainer binds it for `cfg`'s mode: on fake flat
// buffers, or sharded with its parameters read from gathered slots and (gradients, parameters)
// its gradients landing in slots, whose counters a traced step fills.
struct TracedBinding {
    TraceOps ops;
    std::unique_ptr<Model> model;
    std::vector<Bucket> buckets;
    DeviceBuffer flat;
    std::unique_ptr<LandingCounter> landing;
    std::unique_ptr<ParameterSlotCounter> home;
    double bound_bytes = 0;  // what the model allocated when bound

    TracedBinding(const TrainConfig& cfg, int local_batch) : ops(cfg.precision) {
        model = create_model(cfg, ops);
        buckets = bucket_layout(model->params(), cfg.bucket_mb);
        flat = DeviceBuffer(ops, model->num_params() * sizeof(float));
        if (cfg.sharding == ShardingMode::gradients || cfg.sharding == ShardingMode::parameters)
            landing = std::make_unique<LandingCounter>(model->params(), buckets, flat.as<float>());
        if (cfg.sharding != ShardingMode::none)
            home = std::make_unique<ParameterSlotCounter>(model->params(), buckets, flat.as<float>(),
                                                          dtype_size(compute_dtype(cfg.precision)),
                                                          [this] { return ops.position(); });
        const double before = ops.allocated_bytes();
        model->bind(FlatBuffers{home ? nullptr : flat.as<float>(), home ? nullptr : flat.get(),
                                landing ? nullptr : flat.as<float>(), landing.get(), home.get()},
                    local_batch);
        bound_bytes = ops.allocated_bytes() - before;
    }

    // One traced step: the slots it needs.
    ShardSlots count_slots(const TrainConfig& cfg, int local_batch) {
        if (!landing) return {};
        const BatchShape batch = batch_shape(cfg);
        DeviceBuffer inputs(ops, static_cast<size_t>(local_batch * batch.cols) * dtype_size(batch.dtype));
        DeviceBuffer labels(ops, static_cast<size_t>(local_batch * batch.labels_per_row) * sizeof(int32_t));
        DeviceBuffer loss(ops, sizeof(float));
        model->forward_backward(inputs.tensor(batch.dtype, local_batch, batch.cols), labels.as<int32_t>(),
                                loss.as<float>(), 1.0f, landing.get());
        return {landing->slots_needed(), cfg.sharding == ShardingMode::parameters ? home->slots_needed() : 0};
    }
};
}  // namespace

ShardSlots shard_slots(const TrainConfig& cfg) {
    // The order of the step's reads and writes does not depend on the batch: one row is traced.
    TracedBinding traced(cfg, 1);
    return traced.count_slots(cfg, 1);
}

RankMemory predict_rank_memory(const TrainConfig& cfg, int world_size, int local_batch) {
    TracedBinding traced(cfg, local_batch);
    const double n = static_cast<double>(traced.model->num_params());
    const double compute_copy = compute_dtype(cfg.precision) == DType::f32 ? 0 : dtype_size(compute_dtype(cfg.precision));
    const double state_buffers = cfg.optimizer.kind == OptimizerConfig::Kind::adamw ? 2 : 1;
    RankMemory m;
    m.activations = traced.bound_bytes + sizeof(float);  // and the loss
    const BatchShape batch = batch_shape(cfg);
    m.data = cfg.dataset_batches * static_cast<double>(local_batch) *
             (static_cast<double>(batch.cols) * dtype_size(batch.dtype) +
              static_cast<double>(batch.labels_per_row) * sizeof(int32_t));

    if (cfg.sharding == ShardingMode::none) {
        m.parameters = n * (sizeof(float) + compute_copy);
        m.gradients = n * sizeof(float);
        m.optimizer_state = n * sizeof(float) * state_buffers;
        m.comm_buffers = cfg.grad_dtype == DType::f32 ? 0 : n * dtype_size(cfg.grad_dtype);
        return m;
    }
    // Every rank's shard has the same size (rank 0's layout stands for all).
    const ShardLayout layout(traced.buckets, world_size, 0);
    const double full = n + static_cast<double>(layout.tail_padding());
    const double shard = static_cast<double>(layout.shard_elements());
    const double slot = static_cast<double>(layout.largest_padded_count());
    const ShardSlots slots = traced.count_slots(cfg, local_batch);
    // The master shard, and the slots the model reads from: the compute copy of each bucket's
    // padded span and its fp32 values (collectives/sharding.h, slot_fp32_elements), every
    // bucket's own, or sharding parameters shared slots of the largest of each.
    const std::vector<ParamInfo>& params = traced.model->params();
    double copies = 0, fp32 = 0, largest_fp32 = 0;
    for (size_t b = 0; b < traced.buckets.size(); ++b) {
        const double values = static_cast<double>(
            slot_fp32_elements(params, traced.buckets[b], layout.padded_count(b), compute_dtype(cfg.precision)));
        copies += static_cast<double>(layout.padded_count(b));
        fp32 += values;
        largest_fp32 = std::max(largest_fp32, values);
    }
    const double read = cfg.sharding == ShardingMode::parameters
                            ? static_cast<double>(slots.parameters) * (slot * compute_copy + largest_fp32 * sizeof(float))
                            : copies * compute_copy + fp32 * sizeof(float);
    m.parameters = shard * sizeof(float) + read;
    // Landing in slots of the largest padded bucket, the gradients need no full buffer.
    m.gradients = ((slots.landing ? static_cast<double>(slots.landing) * slot : full) + shard) * sizeof(float);
    m.optimizer_state = shard * sizeof(float) * state_buffers;
    m.comm_buffers = 0;
    return m;
}

}  // namespace sb
