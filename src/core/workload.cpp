#include "src/core/workload.h"

#include "models/image_data.h"
#include "models/mlp.h"
#include "models/resnet.h"
#include "models/rng.h"
#include "models/teacher_data.h"
#include "models/token_data.h"
#include "models/trace_ops.h"
#include "models/transformer.h"
#include "base/errors.h"

namespace sb {

namespace {
constexpr uint64_t kDropoutStream = 0xD20F;  // dropout masks: a stream apart from weights and data
}

std::unique_ptr<Model> create_model(const TrainConfig& cfg, Ops& ops, int rank) {
    if (cfg.model == "transformer")
        return std::make_unique<Transformer>(ops, cfg.transformer.shape,
                                             mix_seed(cfg.seed, kDropoutStream, static_cast<uint64_t>(rank)),
                                             labelled_positions(token_task(cfg)));
    if (cfg.model == "resnet") return std::make_unique<ResNet>(ops, cfg.resnet, resolve_conv_engine(cfg, ops));
    MlpShape shape{cfg.mlp.input_dim, cfg.mlp.hidden, cfg.mlp.num_classes, cfg.mlp.activation};
    return std::make_unique<Mlp>(ops, shape);
}

ConvEngine resolve_conv_engine(const TrainConfig& cfg, const Ops& ops) {
    if (!cfg.conv_engine) return ops.has_cudnn() ? ConvEngine::cudnn : ConvEngine::im2col;
    const bool traced = dynamic_cast<const TraceOps*>(&ops) != nullptr;
    if (*cfg.conv_engine == ConvEngine::cudnn && !ops.has_cudnn() && !traced) {
#ifdef SCALEBENCH_HAVE_CUDNN
        const std::string why = "the " + ops.name() + " backend has no cuDNN (use auto or im2col there)";
#else
        const std::string why = "this scalebench was built without cuDNN (configure where cmake finds it, or use "
                                "auto or im2col)";
#endif
        // Agreed: every rank has the same build and backend, so every rank throws here.
        throw AgreedError(cfg.source + ": key 'conv_engine': cudnn: " + why);
    }
    return *cfg.conv_engine;
}

TrainConfig with_conv_engine_resolved(TrainConfig cfg, const Ops& ops) {
    if (cfg.model == "resnet") cfg.conv_engine = resolve_conv_engine(cfg, ops);
    return cfg;
}

int tokens_per_sample(const TrainConfig& cfg) {
    return cfg.model == "transformer" ? cfg.transformer.shape.seq_len : 1;
}

TokenTask token_task(const TrainConfig& cfg) {
    const TransformerShape& s = cfg.transformer.shape;
    TokenTask task;
    task.objective = s.arch == TransformerArch::bert ? TokenTask::Objective::masked_lm : TokenTask::Objective::next_token;
    task.vocab = s.vocab;
    task.seq_len = s.seq_len;
    task.mask_prob = cfg.transformer.mask_prob;
    task.seed = cfg.seed;
    return task;
}

BatchShape batch_shape(const TrainConfig& cfg) {
    if (cfg.model == "transformer") {
        const int64_t seq = cfg.transformer.shape.seq_len;
        return {seq, DType::i32, seq};
    }
    const DType dtype = compute_dtype(cfg.precision);
    if (cfg.model == "resnet") return {int64_t{cfg.resnet.image_size} * cfg.resnet.image_size * 3, dtype, 1};
    return {cfg.mlp.input_dim, dtype, 1};
}

double dataset_host_bytes(const TrainConfig& cfg, int local_rows) {
    const double rows = local_rows;
    const BatchShape batch = batch_shape(cfg);
    if (cfg.model == "transformer")  // ids and labels of every batch
        return rows * cfg.dataset_batches * static_cast<double>(batch.cols + batch.labels_per_row) * sizeof(int32_t);
    if (cfg.model == "resnet")  // one batch of fp32 images, the labels of every batch
        return rows * (static_cast<double>(batch.cols) * sizeof(float) + cfg.dataset_batches * sizeof(int32_t));
    return TeacherDataset::host_bytes(TeacherTask{cfg.mlp.input_dim, cfg.mlp.num_classes, cfg.mlp.teacher_hidden, cfg.seed},
                                      cfg.dataset_batches, local_rows);
}

std::unique_ptr<Dataset> create_dataset(const TrainConfig& cfg, Ops& ops, int global_batch, int rank,
                                        int local_rows) {
    if (cfg.model == "transformer")
        return std::make_unique<TokenDataset>(ops, token_task(cfg), cfg.dataset_batches, global_batch,
                                              rank * local_rows, local_rows);
    if (cfg.model == "resnet")
        return std::make_unique<ImageDataset>(ops, ImageTask{cfg.resnet.image_size, cfg.resnet.num_classes, cfg.seed},
                                              cfg.dataset_batches, global_batch, rank * local_rows, local_rows);
    TeacherTask task{cfg.mlp.input_dim, cfg.mlp.num_classes, cfg.mlp.teacher_hidden, cfg.seed};
    return std::make_unique<TeacherDataset>(ops, task, cfg.dataset_batches, global_batch, rank * local_rows,
                                            local_rows);
}

}  // namespace sb
