// Sharded data parallel over MPI (run with mpirun -np 2 and 4): the reduce-scatter, the
// update of the own shard and the all-gather give every rank the parameters of the averaged
// step, and the trainer in each sharding mode ends with the losses and parameters of the
// unsharded trainer (MLP, GPT and ResNet), its ranks holding identical parameters.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>

#include "collectives/mpi_communicator.h"
#include "collectives/sharding.h"
#include "models/cpu/cpu_ops.h"
#include "src/commands/runner.h"
#include "src/core/config.h"
#include "tests/test_util.h"

namespace sb {
namespace {

int world_rank() { int r; MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }

// Three buckets whose counts do not divide by 2 or 4 (padded slices, a padded tail).
TEST(ShardedState, ReduceScatterUpdateAndAllGatherGiveTheAveragedStep) {
    CpuOps ops;
    MpiCommunicator comm(MPI_COMM_WORLD);
    const int n = comm.size(), r = comm.rank();
    const std::vector<Bucket> buckets = {{16, 11, {}}, {5, 11, {}}, {0, 5, {}}};
    const size_t count = 27;
    ShardedState state(buckets, comm, ops, /*adamw=*/false);
    const size_t full = count + state.layout().tail_padding();
    const std::vector<float> initial = test::random_vector(count, 7);
    state.load(initial);

    std::vector<float> grads(full, 0.0f), expected(count);
    for (size_t i = 0; i < count; ++i) {
        grads[i] = static_cast<float>((r + 1) * (i % 5 + 1));
        const double mean = (i % 5 + 1) * (n + 1) / 2.0;
        expected[i] = static_cast<float>(initial[i] - 0.5 * mean);
    }
    for (size_t b = 0; b < buckets.size(); ++b) state.reduce_scatter_bucket(b, grads.data())->wait();
    OptimizerConfig sgd;
    sgd.kind = OptimizerConfig::Kind::sgd;
    sgd.lr = 0.5f;
    sgd.momentum = 0.0f;
    state.update(sgd, 1);
    std::vector<float> params(full, -1.0f);
    state.all_gather_params(params.data());
    for (size_t i = 0; i < count; ++i) ASSERT_NEAR(params[i], expected[i], 1e-5) << "element " << i << " rank " << r;
    EXPECT_EQ(state.gather_master_host(count), std::vector<float>(params.begin(), params.begin() + count));
}

TrainConfig family_config(const std::string& model) {
    TrainConfig cfg;
    cfg.model = model;
    cfg.batch_size = 12;  // global: divisible by 1..4
    cfg.scaling_mode = ScalingMode::strong;
    cfg.optimizer.kind = OptimizerConfig::Kind::adamw;
    cfg.optimizer.lr = 3e-3f;
    cfg.optimizer.weight_decay = 0.01f;
    cfg.dataset_batches = 3;
    cfg.bucket_mb = 0.003;  // several buckets
    if (model == "mlp") {
        cfg.mlp.input_dim = 24;
        cfg.mlp.hidden = {32, 16};
        cfg.mlp.num_classes = 5;
        cfg.mlp.teacher_hidden = 8;
    } else if (model == "transformer") {
        TransformerShape& s = cfg.transformer.shape;
        s.arch = TransformerArch::gpt;
        s.layers = 2, s.hidden = 16, s.heads = 2, s.ffn = 32, s.vocab = 40, s.seq_len = 8, s.max_positions = 8;
        s.dropout = s.attention_dropout = 0.0f;
        s.layernorm_eps = 1e-5f;
    } else {
        cfg.resnet.blocks = {1, 1};
        cfg.resnet.width = 4;
        cfg.resnet.image_size = 16;
        cfg.resnet.num_classes = 5;
        cfg.optimizer.kind = OptimizerConfig::Kind::sgd;
        cfg.optimizer.lr = 0.05f;
    }
    return cfg;
}

struct Trained {
    std::vector<float> losses, params;
};

Trained train(const TrainConfig& cfg, int steps) {
    CpuOps ops;
    MpiCommunicator comm(MPI_COMM_WORLD);
    DataParallelTrainer trainer(cfg, ops, comm);
    EXPECT_GT(trainer.bucketer().buckets().size(), 2u);
    Trained t;
    for (int s = 0; s < steps; ++s) {
        trainer.step(s);
        t.losses.push_back(trainer.last_loss());
    }
    t.params = trainer.params_host();
    return t;
}

struct Case {
    const char* model;
    ShardingMode mode;
};

class ShardedTraining : public ::testing::TestWithParam<Case> {};

TEST_P(ShardedTraining, EndsWithTheLossesAndParametersOfTheUnshardedStep) {
    TrainConfig cfg = family_config(GetParam().model);
    validate_config(cfg);
    const Trained ddp = train(cfg, 5);
    cfg.sharding = GetParam().mode;
    validate_config(cfg);
    const Trained sharded = train(cfg, 5);
    ASSERT_EQ(sharded.params.size(), ddp.params.size());
    for (size_t s = 0; s < ddp.losses.size(); ++s)
        EXPECT_NEAR(sharded.losses[s], ddp.losses[s], 1e-5 * std::abs(ddp.losses[s])) << "step " << s;
    EXPECT_LE(test::relative_error(sharded.params, ddp.params), 1e-5);
    EXPECT_GT(test::relative_error(sharded.params, train(family_config(GetParam().model), 1).params), 1e-4)
        << "five steps moved the parameters";
    // Every rank holds the same gathered parameters.
    std::vector<float> rank0 = sharded.params;
    MPI_Bcast(rank0.data(), static_cast<int>(rank0.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
    EXPECT_EQ(0, std::memcmp(rank0.data(), sharded.params.data(), rank0.size() * sizeof(float)))
        << "rank " << world_rank() << " differs from rank 0";
}

INSTANTIATE_TEST_SUITE_P(Modes, ShardedTraining,
                         ::testing::Values(Case{"mlp", ShardingMode::optimizer}, Case{"mlp", ShardingMode::gradients},
                                           Case{"transformer", ShardingMode::optimizer},
                                           Case{"transformer", ShardingMode::gradients},
                                           Case{"resnet", ShardingMode::optimizer}),
                         [](const auto& info) {
                             return std::string(info.param.model) + "_" + sharding_mode_name(info.param.mode);
                         });

}  // namespace
}  // namespace sb
