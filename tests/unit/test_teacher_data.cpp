// The synthetic teacher task: samples are a pure function of (seed, batch slot, row), so
// shards of a global batch reassemble it exactly; labels are spread over the classes;
// and the task is learnable: an MLP trained with AdamW gets well below chance loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "models/cpu/cpu_ops.h"
#include "models/mlp.h"
#include "models/teacher_data.h"
#include "base/errors.h"

namespace sb {
namespace {

const TeacherTask kTask{32, 8, 16, 1234};

struct Shard {
    std::vector<float> x;
    std::vector<int32_t> labels;
};

Shard shard(const TeacherTask& task, int64_t slot, int64_t first, int rows) {
    Shard s{std::vector<float>(static_cast<size_t>(rows) * task.input_dim), std::vector<int32_t>(rows)};
    make_shard(task, slot, first, rows, s.x.data(), s.labels.data());
    return s;
}

TEST(TeacherData, DeterministicAndKeyedBySeedAndSlot) {
    const Shard a = shard(kTask, 3, 0, 64), b = shard(kTask, 3, 0, 64);
    EXPECT_EQ(a.x, b.x);
    EXPECT_EQ(a.labels, b.labels);
    const Shard other_slot = shard(kTask, 4, 0, 64);
    EXPECT_NE(a.x, other_slot.x);
    TeacherTask reseeded = kTask;
    reseeded.seed = 99;
    const Shard other_seed = shard(reseeded, 3, 0, 64);
    EXPECT_NE(a.x, other_seed.x);
    EXPECT_NE(a.labels, other_seed.labels);
    // Inputs are standard normal.
    double sum = 0, sq = 0;
    for (float v : a.x) {
        sum += v;
        sq += v * v;
    }
    EXPECT_NEAR(sum / a.x.size(), 0.0, 0.05);
    EXPECT_NEAR(sq / a.x.size(), 1.0, 0.1);
}

TEST(TeacherData, TwoShardsEqualTheWholeBatch) {
    const Shard whole = shard(kTask, 5, 0, 96);
    const Shard first = shard(kTask, 5, 0, 40), second = shard(kTask, 5, 40, 56);
    std::vector<float> x = first.x;
    x.insert(x.end(), second.x.begin(), second.x.end());
    std::vector<int32_t> labels = first.labels;
    labels.insert(labels.end(), second.labels.begin(), second.labels.end());
    EXPECT_EQ(x, whole.x);
    EXPECT_EQ(labels, whole.labels);
}

TEST(TeacherData, LabelsInRangeAndSpreadOverClasses) {
    for (const TeacherTask& task : {kTask, TeacherTask{256, 16, 32, 1234}, TeacherTask{64, 2, 4, 7}}) {
        SCOPED_TRACE(task.num_classes);
        const Shard s = shard(task, 0, 0, 4096);
        std::vector<int> counts(task.num_classes, 0);
        for (int32_t l : s.labels) {
            ASSERT_GE(l, 0);
            ASSERT_LT(l, task.num_classes);
            ++counts[l];
        }
        const double uniform = 4096.0 / task.num_classes;
        const int most = *std::max_element(counts.begin(), counts.end());
        const int nonempty = static_cast<int>(std::count_if(counts.begin(), counts.end(), [](int c) { return c > 0; }));
        EXPECT_LT(most, 4096);  // not all one class
        EXPECT_LT(most, 3.0 * uniform) << "one class takes most samples";
        EXPECT_GE(nonempty, task.num_classes * 3 / 4);
    }
}

TEST(TeacherData, DatasetHoldsThisRanksRowsOfEveryBatch) {
    CpuOps ops;
    const int global = 48, local = 16, batches = 3;
    // Rank 1 of 3.
    TeacherDataset data(ops, kTask, batches, global, local, local);
    for (int64_t step = 0; step < 7; ++step) {
        const Shard expect = shard(kTask, step % batches, local, local);
        const Tensor x = data.inputs(step);
        ASSERT_EQ(x.rows, local);
        ASSERT_EQ(x.cols, kTask.input_dim);
        ASSERT_EQ(x.dtype, DType::f32);
        std::vector<float> host(x.numel());
        ops.download(host.data(), x.data, x.bytes());
        EXPECT_EQ(host, expect.x) << step;
        std::vector<int32_t> labels(local);
        ops.download(labels.data(), data.labels(step), local * sizeof(int32_t));
        EXPECT_EQ(labels, expect.labels) << step;
    }
    EXPECT_THROW(TeacherDataset(ops, kTask, batches, global, 40, local), UserError);  // rows past the batch
    EXPECT_THROW(TeacherDataset(ops, TeacherTask{32, 1, 16, 1}, batches, global, 0, local), UserError);
}

TEST(TeacherData, MlpLearnsTheTaskWithAdamw) {
    const auto start = std::chrono::steady_clock::now();
    CpuOps ops;
    const int batch = 64, batches = 32, steps = 300;
    TeacherDataset data(ops, kTask, batches, batch, 0, batch);
    Mlp model(ops, MlpShape{kTask.input_dim, {64}, kTask.num_classes, Activation::relu});
    const size_t n = model.num_params();
    std::vector<float> params(n), grads(n), m(n, 0.0f), v(n, 0.0f);
    model.init_params(params.data(), 1);
    model.bind(FlatBuffers{params.data(), params.data(), grads.data()}, batch);
    OptimizerConfig cfg;
    cfg.lr = 3e-3f;
    cfg.weight_decay = 0.01f;
    std::vector<float> losses;
    for (int step = 0; step < steps; ++step) {
        float loss = 0;
        model.forward_backward(data.inputs(step), data.labels(step), &loss, 1.0f, nullptr);
        ops.adamw_step(params.data(), grads.data(), m.data(), v.data(), n, cfg, step + 1, Tensor{});
        losses.push_back(loss);
    }
    const double chance = std::log(static_cast<double>(kTask.num_classes));
    EXPECT_NEAR(losses.front(), chance, 0.3 * chance);  // starts near chance
    double last = 0;  // mean over the last pass through the pool
    for (int i = steps - batches; i < steps; ++i) last += losses[i];
    last /= batches;
    EXPECT_LT(last, 0.6 * chance) << "first loss " << losses.front();
    // Held-out samples (a batch slot never trained on): the rule generalises, not just memorised.
    const Shard held = shard(kTask, 1000, 0, batch);
    float held_loss = 0;
    model.forward_backward(Tensor{const_cast<float*>(held.x.data()), DType::f32, batch, kTask.input_dim},
                           held.labels.data(), &held_loss, 1.0f, nullptr);
    EXPECT_LT(held_loss, 0.6 * chance);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 5.0);
    RecordProperty("final_loss", std::to_string(last));
    std::printf("teacher task: loss %.3f -> %.3f, held-out %.3f (chance %.3f) in %.2f s\n", losses.front(), last,
                held_loss, chance, seconds);
}

}  // namespace
}  // namespace sb
