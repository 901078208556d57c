// Whole training steps on CUDA against the CPU backend from the same initial weights,
// and data parallelism on CUDA with the NCCL communicator: N ranks (one GPU each) with
// global batch B end where 1 rank with batch B ends, with bitwise-identical replicas.
// Runs on one GPU under `mpirun -np 1`; the same binary runs on 2-8 GPUs with -np N.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <unistd.h>

#include "collectives/mpi_communicator.h"
#include "collectives/nccl_communicator.h"
#include "models/cpu/cpu_ops.h"
#include "models/cuda/cuda_ops.h"
#include "src/core/config.h"
#include "src/system/environment.h"
#include "src/core/results.h"
#include "src/commands/runner.h"
#include "tests/test_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace sb {
namespace {

TrainConfig small_config(OptimizerConfig::Kind kind, Precision precision) {
    TrainConfig cfg;
    cfg.mlp.input_dim = 96;
    cfg.mlp.hidden = {256, 128};
    cfg.mlp.num_classes = 10;
    cfg.mlp.activation = Activation::gelu;
    cfg.mlp.teacher_hidden = 16;
    cfg.batch_size = 64;
    cfg.scaling_mode = ScalingMode::strong;
    cfg.precision = precision;
    cfg.optimizer.kind = kind;
    cfg.optimizer.lr = kind == OptimizerConfig::Kind::sgd ? 0.05f : 1e-3f;
    cfg.optimizer.weight_decay = 0.01f;
    cfg.bucket_mb = 0.05;
    cfg.dataset_batches = 2;
    return cfg;
}

using test::relative_error;

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> d(a.size());
    for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
    return d;
}

int local_device() { return process_info().local_rank; }

struct Case {
    Precision precision;
    double tolerance;  // on the parameter update after the steps, relative
};

class CudaTrainingStep : public ::testing::TestWithParam<Case> {};

// SGD: the update is linear in the gradients, so its error is the gradients' error.
TEST_P(CudaTrainingStep, MatchesTheCpuBackendFromTheSameWeights) {
    SKIP_WITHOUT_GPU();
    const Case c = GetParam();
    const TrainConfig cfg = small_config(OptimizerConfig::Kind::sgd, c.precision);
    TrainConfig cpu_cfg = cfg;
    cpu_cfg.precision = Precision::fp32;
    CpuOps cpu;
    CudaOps cuda(c.precision, local_device());
    MpiCommunicator cpu_comm(MPI_COMM_SELF);
    NcclCommunicator nccl(MPI_COMM_SELF, cuda.stream());
    DataParallelTrainer reference(cpu_cfg, cpu, cpu_comm);
    DataParallelTrainer trainer(cfg, cuda, nccl);
    const std::vector<float> initial = reference.params_host();
    ASSERT_EQ(initial, trainer.params_host()) << "initial weights must be identical";
    for (int s = 0; s < 3; ++s) {
        reference.step(s);
        trainer.step(s);
        EXPECT_NEAR(trainer.last_loss(), reference.last_loss(), 10 * c.tolerance * reference.last_loss())
            << "step " << s;
    }
    const double err = relative_error(minus(trainer.params_host(), initial), minus(reference.params_host(), initial));
    EXPECT_LE(err, c.tolerance) << precision_name(c.precision);
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaTrainingStep,
                         ::testing::Values(Case{Precision::fp32, 1e-5}, Case{Precision::tf32, 1e-2},
                                           Case{Precision::bf16, 3e-2}, Case{Precision::fp16, 3e-2}),
                         [](const auto& info) { return std::string(precision_name(info.param.precision)); });

TEST(CudaDataParallel, NRanksMatchOneRankWithTheGlobalBatchAndStayIdentical) {
    SKIP_WITHOUT_GPU();
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (auto kind : {OptimizerConfig::Kind::sgd, OptimizerConfig::Kind::adamw}) {
        TrainConfig cfg = small_config(kind, Precision::fp32);
        cfg.batch_size = 48 * size;
        CudaOps cuda(Precision::fp32, local_device());
        NcclCommunicator world(MPI_COMM_WORLD, cuda.stream());
        DataParallelTrainer trainer(cfg, cuda, world);
        ASSERT_GT(trainer.bucketer().buckets().size(), 1u);
        for (int s = 0; s < 6; ++s) trainer.step(s);
        const std::vector<float> params = trainer.params_host();
        std::vector<float> rank0 = params;
        MPI_Bcast(rank0.data(), static_cast<int>(rank0.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
        EXPECT_EQ(0, std::memcmp(rank0.data(), params.data(), params.size() * sizeof(float)))
            << "rank " << rank << " differs from rank 0";
        if (rank == 0) {
            NcclCommunicator self(MPI_COMM_SELF, cuda.stream());
            DataParallelTrainer single(cfg, cuda, self);
            for (int s = 0; s < 6; ++s) single.step(s);
            EXPECT_LE(relative_error(params, single.params_host()), 1e-5) << size << " GPUs vs 1";
        }
    }
}

TEST(CudaDataParallel, SweepRecordHasGpuFiguresAndPassesTheReplicaCheck) {
    SKIP_WITHOUT_GPU();
    TrainConfig cfg = small_config(OptimizerConfig::Kind::adamw, Precision::bf16);
    cfg.scaling_mode = ScalingMode::weak;
    cfg.steps = 5;
    cfg.warmup = 2;
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    cfg.scaling = {size};
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    // A path of this launch's own (rank 0's pid), so suites running side by side never share it.
    int job = rank == 0 ? static_cast<int>(::getpid()) : 0;
    MPI_Bcast(&job, 1, MPI_INT, 0, MPI_COMM_WORLD);
    cfg.out = (std::filesystem::temp_directory_path() / fmt::format("scalebench-gpu-sweep-test-{}.jsonl", job)).string();
    if (rank == 0) std::remove(cfg.out.c_str());
    CudaOps cuda(Precision::bf16, local_device());
    EXPECT_TRUE(run_training_sweep(cfg, cuda, MPI_COMM_WORLD, nlohmann::json::object()));
    if (rank == 0) {
        auto records = read_records(cfg.out).records;
        ASSERT_EQ(records.size(), 1u);
        const auto& r = records[0];
        EXPECT_EQ(r["backend"], "cuda");
        EXPECT_TRUE(r["replica_check"]["passed"].get<bool>());
        EXPECT_GT(r["mfu"].get<double>(), 0.0);
        EXPECT_LT(r["mfu"].get<double>(), 1.0);
        const double device = r["device_step_ms"].get<double>();
        EXPECT_GT(device, 0.0);
        EXPECT_LE(device, r["step_ms"]["max"].get<double>() * 1.05);
        EXPECT_GE(r["telemetry_by_rank"].size(), 1u);
        std::remove(cfg.out.c_str());
    }
}

}  // namespace
}  // namespace sb

namespace sb {
namespace {

// DDP's bf16/fp16 compress hooks: the all-reduce runs on a 16-bit copy of each bucket.
// Against the fp32 all-reduce the parameter update agrees to 16-bit rounding.
TEST(CudaDataParallel, SixteenBitGradientAllReduceMatchesFp32WithinRounding) {
    SKIP_WITHOUT_GPU();
    for (DType grad_dtype : {DType::bf16, DType::f16}) {
        TrainConfig cfg = small_config(OptimizerConfig::Kind::sgd, Precision::fp32);
        CudaOps cuda(Precision::fp32, local_device());
        NcclCommunicator world(MPI_COMM_WORLD, cuda.stream());
        DataParallelTrainer full(cfg, cuda, world);
        cfg.grad_dtype = grad_dtype;
        DataParallelTrainer compressed(cfg, cuda, world);
        EXPECT_EQ(compressed.bucketer().comm_dtype(), grad_dtype);
        const std::vector<float> initial = full.params_host();
        for (int s = 0; s < 3; ++s) {
            full.step(s);
            compressed.step(s);
        }
        const double err = relative_error(minus(compressed.params_host(), initial), minus(full.params_host(), initial));
        EXPECT_LE(err, grad_dtype == DType::bf16 ? 1e-2 : 2e-3) << dtype_name(grad_dtype);
        EXPECT_GT(err, 0.0) << "a 16-bit all-reduce cannot be bit-identical to fp32";
    }
}

}  // namespace
}  // namespace sb

namespace sb {
namespace {

// CUDA graphs change how a step is issued, not what it computes: replayed steps end
// bitwise where eagerly issued ones do (same kernels, same order, same all-reduces), on
// every rank of the world, with the phase markers timed inside the replayed graph.
TEST(CudaGraphs, ReplayedStepsMatchEagerStepsBitwise) {
    SKIP_WITHOUT_GPU();
    for (Precision precision : {Precision::fp32, Precision::bf16}) {
        TrainConfig cfg = small_config(OptimizerConfig::Kind::adamw, precision);
        int size = 1;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        cfg.batch_size = 32 * size;
        CudaOps cuda(precision, local_device());
        NcclCommunicator world(MPI_COMM_WORLD, cuda.stream());
        cfg.cuda_graphs = false;
        DataParallelTrainer eager(cfg, cuda, world);
        cfg.cuda_graphs = true;
        DataParallelTrainer graphed(cfg, cuda, world);
        ASSERT_FALSE(eager.uses_graphs());
        ASSERT_TRUE(graphed.uses_graphs());
        for (int s = 0; s < 7; ++s) {  // step 0 eager, then graphs of both batches, each replayed 3 times
            eager.step(s);
            const StepTimes t = graphed.step(s);
            EXPECT_GT(t.compute, 0.0) << "step " << s;
            EXPECT_GE(t.exposed_comm, 0.0) << "step " << s;
            EXPECT_GT(t.optimizer, 0.0) << "step " << s;
            EXPECT_NEAR(t.step, t.compute + t.exposed_comm + t.optimizer, 1e-3 * t.step + 1e-3) << "step " << s;
            EXPECT_EQ(graphed.last_loss(), eager.last_loss()) << "step " << s;
        }
        const std::vector<float> a = eager.params_host(), b = graphed.params_host();
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << precision_name(precision);
    }
}

// A transformer with dropout: masks change every step also in replayed graphs (the
// dropout generation advances on the device), so graphs and eager steps give the same
// losses. The parameters agree to fp32 rounding, not bitwise: embedding gradients are
// summed with fp32 atomics, whose order varies from run to run.
TEST(CudaGraphs, TransformerWithDropoutReplaysBitwiseAsEager) {
    SKIP_WITHOUT_GPU();
    TrainConfig cfg = load_config_file(std::string(SCALEBENCH_SOURCE_DIR) + "/configs/ci-transformer.yaml");
    cfg.transformer.shape.dropout = 0.1f;
    cfg.transformer.shape.attention_dropout = 0.1f;
    cfg.precision = Precision::bf16;
    cfg.dataset_batches = 2;
    // Each trainer on its own backend: the dropout generation is a backend's counter.
    CudaOps cuda_eager(Precision::bf16, local_device()), cuda_graphed(Precision::bf16, local_device());
    NcclCommunicator world_eager(MPI_COMM_WORLD, cuda_eager.stream());
    NcclCommunicator world_graphed(MPI_COMM_WORLD, cuda_graphed.stream());
    cfg.cuda_graphs = false;
    DataParallelTrainer eager(cfg, cuda_eager, world_eager);
    cfg.cuda_graphs = true;
    DataParallelTrainer graphed(cfg, cuda_graphed, world_graphed);
    ASSERT_TRUE(graphed.uses_graphs());
    // Eager steps draw masks of generations 1, 2, ...; a replay that froze its masks
    // would part from them at once (a new mask moves the loss by far more than 1e-4).
    const std::vector<float> initial = eager.params_host();
    for (int s = 0; s < 7; ++s) {
        eager.step(s);
        graphed.step(s);
        EXPECT_NEAR(graphed.last_loss(), eager.last_loss(), 1e-4 * eager.last_loss()) << "step " << s;
    }
    EXPECT_LE(relative_error(minus(graphed.params_host(), initial), minus(eager.params_host(), initial)), 1e-3);
}

// Two trainers on one backend (stress alternates workloads so): each replays its own graphs.
TEST(CudaGraphs, TrainersSharingABackendReplayTheirOwnGraphs) {
    SKIP_WITHOUT_GPU();
    TrainConfig a = small_config(OptimizerConfig::Kind::adamw, Precision::fp32), b = a;
    b.seed = a.seed + 1;
    b.mlp.hidden = {128, 64};
    CudaOps shared(Precision::fp32, local_device()), reference(Precision::fp32, local_device());
    NcclCommunicator comm_shared(MPI_COMM_WORLD, shared.stream()), comm_reference(MPI_COMM_WORLD, reference.stream());
    TrainConfig a_eager = a, b_eager = b;  // a trainer keeps a reference to its config
    a_eager.cuda_graphs = b_eager.cuda_graphs = false;
    DataParallelTrainer ga(a, shared, comm_shared), gb(b, shared, comm_shared);
    DataParallelTrainer ea(a_eager, reference, comm_reference), eb(b_eager, reference, comm_reference);
    ASSERT_TRUE(ga.uses_graphs() && gb.uses_graphs());
    for (int s = 0; s < 5; ++s) {
        ga.step(s);
        gb.step(s);
        ea.step(s);
        eb.step(s);
    }
    for (auto [graphed, eager] : {std::pair{&ga, &ea}, std::pair{&gb, &eb}}) {
        const std::vector<float> x = graphed->params_host(), y = eager->params_host();
        ASSERT_EQ(x.size(), y.size());
        EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float)));
    }
}

TEST(CudaGraphs, Fp16LossScalingStaysEager) {
    SKIP_WITHOUT_GPU();
    TrainConfig cfg = small_config(OptimizerConfig::Kind::adamw, Precision::fp16);
    CudaOps cuda(Precision::fp16, local_device());
    NcclCommunicator world(MPI_COMM_WORLD, cuda.stream());
    DataParallelTrainer trainer(cfg, cuda, world);
    EXPECT_FALSE(trainer.uses_graphs()) << "fp16 reads the overflow flag on the host every step";
}

}  // namespace
}  // namespace sb
