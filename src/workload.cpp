#include "src/workload.h"

#include "models/mlp.h"
#include "models/teacher_data.h"

namespace sb {

std::unique_ptr<Model> create_model(const TrainConfig& cfg, Ops& ops) {
    MlpShape shape{cfg.mlp.input_dim, cfg.mlp.hidden, cfg.mlp.num_classes, cfg.mlp.activation};
    return std::make_unique<Mlp>(ops, shape);
}

std::unique_ptr<Dataset> create_dataset(const TrainConfig& cfg, Ops& ops, int global_batch, int rank,
                                        int local_rows) {
    TeacherTask task{cfg.mlp.input_dim, cfg.mlp.num_classes, cfg.mlp.teacher_hidden, cfg.seed};
    return std::make_unique<TeacherDataset>(ops, task, cfg.dataset_batches, global_batch, rank * local_rows,
                                            local_rows);
}

}  // namespace sb
