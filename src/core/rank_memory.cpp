#include "src/core/rank_memory.h"

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
// A step on the tracing backend with gradients landing in slots: how many slots it needs.
size_t count_landing_slots(const TrainConfig& cfg, Ops& ops, Model& model, LandingCounter& counter, int local_batch) {
    const BatchShape batch = batch_shape(cfg);
    DeviceBuffer inputs(ops, static_cast<size_t>(local_batch * batch.cols) * dtype_size(batch.dtype));
    DeviceBuffer labels(ops, static_cast<size_t>(local_batch * batch.labels_per_row) * sizeof(int32_t));
    DeviceBuffer loss(ops, sizeof(float));
    model.forward_backward(inputs.tensor(batch.dtype, local_batch, batch.cols), labels.as<int32_t>(),
                           loss.as<float>(), 1.0f, &counter);
    return counter.slots_needed();
}
}  // namespace

size_t landing_slots(const TrainConfig& cfg) {
    // The order of the backward's writes does not depend on the batch: one row is traced.
    TraceOps ops(cfg.precision);
    std::unique_ptr<Model> model = create_model(cfg, ops);
    DeviceBuffer flat(ops, model->num_params() * sizeof(float));
    LandingCounter counter(model->params(), bucket_layout(model->params(), cfg.bucket_mb), flat.as<float>());
    model->bind(FlatBuffers{flat.as<float>(), flat.get(), nullptr, &counter}, 1);
    return count_landing_slots(cfg, ops, *model, counter, 1);
}

RankMemory predict_rank_memory(const TrainConfig& cfg, int world_size, int local_batch) {
    TraceOps ops(cfg.precision);
    std::unique_ptr<Model> model = create_model(cfg, ops);
    const double n = static_cast<double>(model->num_params());
    const double compute_copy = compute_dtype(cfg.precision) == DType::f32 ? 0 : dtype_size(compute_dtype(cfg.precision));
    const double state_buffers = cfg.optimizer.kind == OptimizerConfig::Kind::adamw ? 2 : 1;
    RankMemory m;

    // As the trainer binds it: the flat buffers (fake), then the model's own allocations; with
    // gradients landing in slots, the model's binding for them.
    const std::vector<Bucket> buckets = bucket_layout(model->params(), cfg.bucket_mb);
    DeviceBuffer flat(ops, model->num_params() * sizeof(float));
    const bool landing = cfg.sharding == ShardingMode::gradients;
    LandingCounter counter(model->params(), buckets, flat.as<float>());
    const double before_bind = ops.allocated_bytes();
    model->bind(FlatBuffers{flat.as<float>(), flat.get(), landing ? nullptr : flat.as<float>(),
                            landing ? &counter : nullptr},
                local_batch);
    m.activations = ops.allocated_bytes() - before_bind + sizeof(float);  // and the loss
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
    const ShardLayout layout(buckets, world_size, 0);
    const double full = n + static_cast<double>(layout.tail_padding());
    const double shard = static_cast<double>(layout.shard_elements());
    bool padded = false;
    for (size_t b = 0; b < buckets.size(); ++b) padded = padded || layout.padded_count(b) != buckets[b].count;
    m.parameters = full * sizeof(float) + n * compute_copy;
    // Sharded by gradients they land in slots of the largest padded bucket, not in the full buffer.
    const double landed =
        landing ? static_cast<double>(count_landing_slots(cfg, ops, *model, counter, local_batch) *
                                      layout.largest_padded_count())
                : full;
    m.gradients = (landed + shard) * sizeof(float);
    m.optimizer_state = shard * sizeof(float) * state_buffers;
    m.comm_buffers = padded ? static_cast<double>(layout.largest_padded_count()) * sizeof(float) : 0;
    return m;
}

}  // namespace sb
