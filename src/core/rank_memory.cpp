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

RankMemory predict_rank_memory(const TrainConfig& cfg, int world_size, int local_batch) {
    TraceOps ops(cfg.precision);
    std::unique_ptr<Model> model = create_model(cfg, ops);
    const double n = static_cast<double>(model->num_params());
    const double compute_copy = compute_dtype(cfg.precision) == DType::f32 ? 0 : dtype_size(compute_dtype(cfg.precision));
    const double state_buffers = cfg.optimizer.kind == OptimizerConfig::Kind::adamw ? 2 : 1;
    RankMemory m;

    // As the trainer binds it: the flat buffers (fake), then the model's own allocations.
    DeviceBuffer flat(ops, model->num_params() * sizeof(float));
    const double before_bind = ops.allocated_bytes();
    model->bind(FlatBuffers{flat.as<float>(), flat.get(), flat.as<float>()}, local_batch);
    m.activations = ops.allocated_bytes() - before_bind + sizeof(float);  // and the loss
    const BatchShape batch = batch_shape(cfg);
    m.data = cfg.dataset_batches * static_cast<double>(local_batch) *
             (static_cast<double>(batch.cols) * dtype_size(batch.dtype) +
              static_cast<double>(batch.labels_per_row) * sizeof(int32_t));

    const std::vector<Bucket> buckets = bucket_layout(model->params(), cfg.bucket_mb);
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
    m.gradients = full * sizeof(float) + shard * sizeof(float);
    m.optimizer_state = shard * sizeof(float) * state_buffers;
    m.comm_buffers = padded ? static_cast<double>(layout.largest_padded_count()) * sizeof(float) : 0;
    return m;
}

}  // namespace sb
