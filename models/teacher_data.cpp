// The synthetic teacher task: a fixed random teacher network labels Gaussian inputs;
// samples are keyed by (seed, batch slot, row) with the portable generator.
#include "models/teacher_data.h"

#include <cmath>
#include <string>
#include <vector>

#include "models/rng.h"
#include "base/errors.h"

namespace sb {
namespace {

// Stream keys: the teacher's weights use a slot no batch can have.
constexpr uint64_t kTeacherStream = 0xFFFFFFFFFFFFFFFFULL;

struct Teacher {
    int in, hidden, classes;
    std::vector<double> w1;  // hidden x in,   N(0, 1/in): pre-activations of order 1
    std::vector<double> w2;  // classes x hidden, rows of unit norm
};

// Unit-norm output rows give every class the same chance to win the argmax, which keeps
// the labels roughly balanced (a row with a larger norm would take most samples).
Teacher make_teacher(const TeacherTask& task) {
    Teacher t{task.input_dim, task.teacher_hidden, task.num_classes, {}, {}};
    PortableRng rng(mix_seed(task.seed, kTeacherStream, 1));
    t.w1.resize(static_cast<size_t>(t.hidden) * t.in);
    const double s1 = 1.0 / std::sqrt(static_cast<double>(t.in));
    for (double& w : t.w1) w = s1 * rng.normal();
    t.w2.resize(static_cast<size_t>(t.classes) * t.hidden);
    for (int c = 0; c < t.classes; ++c) {
        double* row = &t.w2[static_cast<size_t>(c) * t.hidden];
        double norm = 0.0;
        for (int h = 0; h < t.hidden; ++h) {
            row[h] = rng.normal();
            norm += row[h] * row[h];
        }
        norm = std::sqrt(norm);
        for (int h = 0; h < t.hidden; ++h) row[h] /= norm;
    }
    return t;
}

void check_task(const TeacherTask& task) {
    if (task.input_dim <= 0 || task.num_classes < 2 || task.teacher_hidden <= 0)
        throw UserError("teacher task needs input_dim > 0, num_classes >= 2 and teacher_hidden > 0; got " +
                        std::to_string(task.input_dim) + ", " + std::to_string(task.num_classes) + ", " +
                        std::to_string(task.teacher_hidden));
}

void fill_rows(const Teacher& t, const TeacherTask& task, int64_t batch_slot, int64_t first_sample, int rows,
               float* host_x, int32_t* host_labels) {
    std::vector<double> h(t.hidden);
    for (int r = 0; r < rows; ++r) {
        PortableRng rng(mix_seed(task.seed, static_cast<uint64_t>(batch_slot), static_cast<uint64_t>(first_sample + r)));
        float* x = host_x + static_cast<size_t>(r) * t.in;
        for (int i = 0; i < t.in; ++i) x[i] = static_cast<float>(rng.normal());
        // The label is computed from the fp32 input actually stored.
        for (int j = 0; j < t.hidden; ++j) {
            const double* w = &t.w1[static_cast<size_t>(j) * t.in];
            double z = 0.0;
            for (int i = 0; i < t.in; ++i) z += w[i] * x[i];
            h[j] = std::tanh(z);
        }
        int best = 0;
        double best_score = -INFINITY;
        for (int c = 0; c < t.classes; ++c) {
            const double* w = &t.w2[static_cast<size_t>(c) * t.hidden];
            double s = 0.0;
            for (int j = 0; j < t.hidden; ++j) s += w[j] * h[j];
            if (s > best_score) {
                best_score = s;
                best = c;
            }
        }
        host_labels[r] = best;
    }
}

}  // namespace

void make_shard(const TeacherTask& task, int64_t batch_slot, int64_t first_sample, int rows, float* host_x,
                int32_t* host_labels) {
    check_task(task);
    SB_REQUIRE(rows >= 0 && first_sample >= 0 && batch_slot >= 0, "make_shard: negative batch slot, sample or rows");
    fill_rows(make_teacher(task), task, batch_slot, first_sample, rows, host_x, host_labels);
}

TeacherDataset::TeacherDataset(Ops& ops, const TeacherTask& task, int dataset_batches, int global_batch,
                               int rank_offset_rows, int local_rows)
    : Dataset("teacher dataset", dataset_batches, global_batch, rank_offset_rows, local_rows), task_(task),
      dtype_(compute_dtype(ops.precision())) {
    check_task(task);
    const Teacher teacher = make_teacher(task);
    const size_t per_batch = static_cast<size_t>(local_rows) * task.input_dim;
    std::vector<float> host_x(per_batch * dataset_batches);
    std::vector<int32_t> host_labels(static_cast<size_t>(local_rows) * dataset_batches);
    for (int b = 0; b < dataset_batches; ++b)
        fill_rows(teacher, task, b, rank_offset_rows, local_rows, host_x.data() + b * per_batch,
                  host_labels.data() + static_cast<size_t>(b) * local_rows);

    const int64_t total_rows = static_cast<int64_t>(local_rows) * dataset_batches;
    inputs_ = DeviceBuffer(ops, host_x.size() * dtype_size(dtype_));
    DeviceBuffer staging;  // fp32 copy on the backend when the compute dtype is narrower
    if (dtype_ == DType::f32) {
        ops.upload(inputs_.get(), host_x.data(), host_x.size() * sizeof(float));
    } else {
        staging = DeviceBuffer(ops, host_x.size() * sizeof(float));
        ops.upload(staging.get(), host_x.data(), host_x.size() * sizeof(float));
        ops.cast(staging.tensor(DType::f32, total_rows, task.input_dim),
                 inputs_.tensor(dtype_, total_rows, task.input_dim));
    }
    labels_ = DeviceBuffer(ops, host_labels.size() * sizeof(int32_t));
    ops.upload(labels_.get(), host_labels.data(), host_labels.size() * sizeof(int32_t));
    ops.synchronize();  // the host vectors and the staging buffer go away on return
}

double TeacherDataset::host_bytes(const TeacherTask& task, int dataset_batches, int local_rows) {
    const double rows = static_cast<double>(local_rows) * dataset_batches;
    const double teacher = static_cast<double>(task.teacher_hidden) * (task.input_dim + task.num_classes) * sizeof(double);
    return teacher + rows * (static_cast<double>(task.input_dim) * sizeof(float) + sizeof(int32_t));
}

Tensor TeacherDataset::inputs(int64_t step) const {
    const size_t offset = static_cast<size_t>(slot(step)) * local_rows_ * task_.input_dim * dtype_size(dtype_);
    return Tensor{static_cast<char*>(inputs_.get()) + offset, dtype_, local_rows_, task_.input_dim};
}

const int32_t* TeacherDataset::labels(int64_t step) const {
    return labels_.as<int32_t>() + slot(step) * local_rows_;
}

}  // namespace sb
