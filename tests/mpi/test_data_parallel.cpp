// Multi-rank tests (run under mpirun -np 2 and -np 4): the MPI communicator's
// collectives, data-parallel equivalence (N ranks with global batch B end with the
// parameters of 1 rank with batch B), bitwise-identical replicas, the loss falling on
// the learnable task, the first bucket's all-reduce starting before the backward ends, and
// the scaling sweep writing one record per world size.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "collectives/mpi_communicator.h"
#include "models/cpu/cpu_ops.h"
#include "src/core/config.h"
#include "src/core/results.h"
#include "src/commands/runner.h"
#include "tests/test_util.h"

namespace sb {
namespace {

int world_rank() { int r; MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }
int world_size() { int s; MPI_Comm_size(MPI_COMM_WORLD, &s); return s; }

TEST(MpiCommunicator, AllReduceSumAvgMaxMin) {
    MpiCommunicator comm(MPI_COMM_WORLD);
    const int n = comm.size(), r = comm.rank();
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
        std::vector<float> data(1000);
        for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>((r + 1) * (i % 7 + 1));
        comm.all_reduce(data.data(), data.data(), data.size(), DType::f32, op)->wait();
        for (size_t i = 0; i < data.size(); ++i) {
            const float k = static_cast<float>(i % 7 + 1);
            const float sum = k * n * (n + 1) / 2.0f;
            const float expected = op == ReduceOp::sum ? sum : op == ReduceOp::avg ? sum / n
                                 : op == ReduceOp::max ? k * n : k;
            ASSERT_FLOAT_EQ(data[i], expected) << reduce_op_name(op) << " element " << i;
        }
    }
}

TEST(MpiCommunicator, OutOfPlaceGatherScatterBroadcast) {
    MpiCommunicator comm(MPI_COMM_WORLD);
    const int n = comm.size(), r = comm.rank();
    std::vector<float> mine(3, static_cast<float>(r)), all(3 * n, -1);
    comm.all_gather(mine.data(), all.data(), 3, DType::f32)->wait();
    for (int i = 0; i < 3 * n; ++i) EXPECT_EQ(all[i], static_cast<float>(i / 3));
    std::vector<float> send(2 * n, 1.0f), recv(2, 0);
    comm.reduce_scatter(send.data(), recv.data(), 2, DType::f32, ReduceOp::sum)->wait();
    EXPECT_EQ(recv[0], static_cast<float>(n));
    std::vector<float> b(4, static_cast<float>(r));
    comm.broadcast(b.data(), 4, DType::f32, n - 1)->wait();
    EXPECT_EQ(b[3], static_cast<float>(n - 1));
}

TEST(MpiCommunicator, SplitFirstRanks) {
    MpiCommunicator comm(MPI_COMM_WORLD);
    auto sub = comm.split_first(1);
    if (comm.rank() == 0) {
        ASSERT_NE(sub, nullptr);
        EXPECT_EQ(sub->size(), 1);
    } else {
        EXPECT_EQ(sub, nullptr);
    }
}

TrainConfig small_config(OptimizerConfig::Kind kind) {
    TrainConfig cfg;
    cfg.mlp.input_dim = 24;
    cfg.mlp.hidden = {32, 16};
    cfg.mlp.num_classes = 5;
    cfg.mlp.teacher_hidden = 8;
    cfg.batch_size = 48;  // global: divisible by 1..4
    cfg.scaling_mode = ScalingMode::strong;
    cfg.optimizer.kind = kind;
    cfg.optimizer.lr = kind == OptimizerConfig::Kind::sgd ? 0.05f : 1e-3f;
    cfg.optimizer.weight_decay = 0.01f;
    cfg.bucket_mb = 0.001;  // several buckets
    cfg.dataset_batches = 3;
    return cfg;
}

using test::relative_error;

class DataParallel : public ::testing::TestWithParam<OptimizerConfig::Kind> {};

TEST_P(DataParallel, NRanksMatchOneRankWithTheGlobalBatchAndStayIdentical) {
    const TrainConfig cfg = small_config(GetParam());
    CpuOps ops;
    MpiCommunicator comm(MPI_COMM_WORLD);
    DataParallelTrainer trainer(cfg, ops, comm);
    ASSERT_GT(trainer.bucketer().buckets().size(), 1u);
    EXPECT_EQ(trainer.local_batch() * world_size(), cfg.batch_size);
    for (int s = 0; s < 8; ++s) trainer.step(s);
    const std::vector<float> params = trainer.params_host();

    // Bitwise identical replicas on every rank.
    std::vector<float> rank0 = params;
    MPI_Bcast(rank0.data(), static_cast<int>(rank0.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
    EXPECT_EQ(0, std::memcmp(rank0.data(), params.data(), params.size() * sizeof(float)))
        << "rank " << world_rank() << " differs from rank 0";

    if (world_rank() == 0) {
        MpiCommunicator self(MPI_COMM_SELF);
        DataParallelTrainer single(cfg, ops, self);
        EXPECT_EQ(single.local_batch(), cfg.batch_size);
        for (int s = 0; s < 8; ++s) single.step(s);
        const double err = relative_error(params, single.params_host());
        EXPECT_LE(err, 1e-5) << world_size() << " ranks vs 1 rank";
        EXPECT_GT(relative_error(params, std::vector<float>(params.size(), 0.0f)), 0.0);
    }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, DataParallel,
                         ::testing::Values(OptimizerConfig::Kind::sgd, OptimizerConfig::Kind::adamw));

TEST(DataParallelTraining, LossFallsOnTheLearnableTask) {
    TrainConfig cfg = small_config(OptimizerConfig::Kind::adamw);
    cfg.optimizer.lr = 3e-3f;
    CpuOps ops;
    MpiCommunicator comm(MPI_COMM_WORLD);
    DataParallelTrainer trainer(cfg, ops, comm);
    trainer.step(0);
    float first = trainer.last_loss();
    for (int s = 1; s < 150; ++s) trainer.step(s);
    float last = trainer.last_loss();
    float losses[2] = {first, last}, sum[2];
    MPI_Allreduce(losses, sum, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_LT(sum[1], 0.7f * sum[0]) << "mean loss " << sum[0] / world_size() << " -> " << sum[1] / world_size();
}

// The overlap on CPU ranks, read from the bucket timeline: with several buckets the first
// bucket's all-reduce starts (MPI_Iallreduce issued) well inside the backward: before 90% of
// the step's compute in the median step (a core other processes load may hold up one step).
TEST(DataParallelOverlap, TheFirstBucketStartsBeforeTheBackwardEnds) {
    TrainConfig cfg = small_config(OptimizerConfig::Kind::sgd);
    cfg.mlp.input_dim = 128;
    cfg.mlp.hidden = {256, 256, 128};  // a backward of many microseconds, several buckets
    cfg.bucket_mb = 0.1;
    CpuOps ops;
    MpiCommunicator comm(MPI_COMM_WORLD);
    DataParallelTrainer trainer(cfg, ops, comm);
    const size_t buckets = trainer.bucketer().buckets().size();
    ASSERT_GE(buckets, 3u);
    std::vector<double> first_start, compute;
    for (int s = 0; s < 9; ++s) {
        const StepTimes t = trainer.step(s);
        ASSERT_EQ(t.bucket_starts.size(), buckets) << "step " << s;
        for (size_t b = 1; b < buckets; ++b) EXPECT_GE(t.bucket_starts[b], t.bucket_starts[b - 1]);
        first_start.push_back(t.bucket_starts[0]);
        compute.push_back(t.compute);
    }
    EXPECT_LT(percentile(first_start, 50), 0.9 * percentile(compute, 50))
        << "bucket 0 started " << percentile(first_start, 50) << " ms after the step's start, the backward ended at "
        << percentile(compute, 50) << " ms (medians)";
}

TEST(ScalingSweep, WritesOneRecordPerWorldSize) {
    TrainConfig cfg = small_config(OptimizerConfig::Kind::adamw);
    cfg.scaling_mode = ScalingMode::weak;
    cfg.batch_size = 8;
    cfg.steps = 3;
    cfg.warmup = 1;
    cfg.scaling.clear();
    for (int n = 1; n <= world_size(); n *= 2) cfg.scaling.push_back(n);
    // Rank 0's process id in the name: launches at 2 and 4 ranks may run side by side.
    long pid = ::getpid();
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    const std::string path =
        (std::filesystem::temp_directory_path() / ("scalebench-sweep-test-" + std::to_string(pid) + ".jsonl")).string();
    if (world_rank() == 0) std::filesystem::remove(path);
    cfg.out = path;
    CpuOps ops;
    EXPECT_TRUE(run_training_sweep(cfg, ops, MPI_COMM_WORLD, nlohmann::json::object()));
    if (world_rank() == 0) {
        ReadResult r = read_records(path);
        ASSERT_EQ(r.records.size(), cfg.scaling.size());
        for (size_t i = 0; i < cfg.scaling.size(); ++i) {
            const auto& rec = r.records[i];
            EXPECT_EQ(rec["world_size"], cfg.scaling[i]);
            EXPECT_EQ(rec["global_batch"], 8 * cfg.scaling[i]);
            EXPECT_TRUE(rec["replica_check"]["passed"].get<bool>());
            EXPECT_GT(rec["samples_per_s"].get<double>(), 0);
            EXPECT_EQ(rec["step_ms"]["count"], 3);
            EXPECT_LE(rec["step_ms"]["min"].get<double>(), rec["step_ms"]["median"].get<double>());
            EXPECT_NEAR(rec["samples_per_s"].get<double>(),
                        rec["global_batch"].get<double>() / (rec["step_ms"]["median"].get<double>() / 1000), 1e-6);
        }
        EXPECT_DOUBLE_EQ(r.records[0]["scaling_efficiency"].get<double>(), 1.0);
        std::filesystem::remove(path);
    }
}

}  // namespace
}  // namespace sb
