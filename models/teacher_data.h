// The synthetic but learnable classification task (DESIGN: Step): x ~ N(0, I), label =
// argmax(W2 tanh(W1 x)) for a fixed random teacher. Every sample is a pure function of
// (seed, batch slot, row in the global batch), so any split of a global batch over
// ranks sees exactly the samples one rank would: data parallelism is exact.
#pragma once

#include <cstdint>
#include <vector>

#include "models/dataset.h"
#include "models/ops.h"

namespace sb {

struct TeacherTask {
    int input_dim = 0;
    int num_classes = 0;
    int teacher_hidden = 0;
    uint64_t seed = 0;
};

// Fills rows [first_sample, first_sample + rows) of global batch `batch_slot`:
// host_x is rows x input_dim (row-major), host_labels rows labels in [0, num_classes).
void make_shard(const TeacherTask& task, int64_t batch_slot, int64_t first_sample, int rows, float* host_x,
                int32_t* host_labels);

// A rank's share of a pool of `dataset_batches` global batches, built on the host once
// and uploaded: rank r of n holds rows [rank_offset_rows, rank_offset_rows + local_rows)
// of every global batch (rank_offset_rows = r * local_rows).
class TeacherDataset final : public Dataset {
public:
    TeacherDataset(Ops& ops, const TeacherTask& task, int dataset_batches, int global_batch, int rank_offset_rows,
                   int local_rows);

    // Backend tensors of batch (step % dataset_batches): inputs in compute dtype
    // (local_rows x input_dim), labels int32 (local_rows).
    Tensor inputs(int64_t step) const override;
    const int32_t* labels(int64_t step) const override;

    // The host memory the constructor holds at its peak: the teacher network's weights (fp64)
    // and the rank's batches as generated (fp32 inputs, int32 labels) before their upload.
    static double host_bytes(const TeacherTask& task, int dataset_batches, int local_rows);

    int local_rows() const { return local_rows_; }
    int dataset_batches() const { return dataset_batches_; }

private:

    TeacherTask task_;
    DType dtype_;
    DeviceBuffer inputs_;  // dataset_batches x local_rows x input_dim, compute dtype
    DeviceBuffer labels_;  // dataset_batches x local_rows, int32
};

}  // namespace sb
