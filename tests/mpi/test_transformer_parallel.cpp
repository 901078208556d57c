// The transformer under data parallelism (run with mpirun -np 2 and 4): N ranks with
// global batch B end with the parameters of one rank with batch B (dropout 0), for both
// archs, with bitwise-identical replicas. Exact because every rank's masked-LM loss
// averages the same number of labelled tokens (models/token_data.h).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>

#include "collectives/mpi_communicator.h"
#include "models/cpu/cpu_ops.h"
#include "src/core/config.h"
#include "src/commands/runner.h"
#include "tests/test_util.h"

namespace sb {
namespace {

int world_rank() { int r; MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }
int world_size() { int s; MPI_Comm_size(MPI_COMM_WORLD, &s); return s; }

TrainConfig transformer_config(TransformerArch arch) {
    TrainConfig cfg;
    cfg.model = "transformer";
    TransformerShape& s = cfg.transformer.shape;
    s.arch = arch;
    s.layers = 2, s.hidden = 16, s.heads = 2, s.ffn = 32, s.vocab = 40, s.seq_len = 8, s.max_positions = 8;
    s.dropout = s.attention_dropout = 0.0f;
    s.layernorm_eps = 1e-5f;
    cfg.transformer.mask_prob = 0.25f;
    cfg.batch_size = 12;  // global: divisible by 1..4
    cfg.scaling_mode = ScalingMode::strong;
    cfg.optimizer.kind = OptimizerConfig::Kind::adamw;
    cfg.optimizer.lr = 3e-3f;
    cfg.optimizer.weight_decay = 0.01f;
    cfg.bucket_mb = 0.005;  // several buckets
    cfg.dataset_batches = 3;
    validate_config(cfg);
    return cfg;
}

class TransformerDataParallel : public ::testing::TestWithParam<TransformerArch> {};

TEST_P(TransformerDataParallel, NRanksMatchOneRankWithTheGlobalBatch) {
    const TrainConfig cfg = transformer_config(GetParam());
    CpuOps ops;
    MpiCommunicator comm(MPI_COMM_WORLD);
    DataParallelTrainer trainer(cfg, ops, comm);
    ASSERT_GT(trainer.bucketer().buckets().size(), 1u);
    for (int s = 0; s < 6; ++s) trainer.step(s);
    const std::vector<float> params = trainer.params_host();

    std::vector<float> rank0 = params;
    MPI_Bcast(rank0.data(), static_cast<int>(rank0.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
    EXPECT_EQ(0, std::memcmp(rank0.data(), params.data(), params.size() * sizeof(float)))
        << "rank " << world_rank() << " differs from rank 0";

    if (world_rank() == 0) {
        MpiCommunicator self(MPI_COMM_SELF);
        DataParallelTrainer single(cfg, ops, self);
        for (int s = 0; s < 6; ++s) single.step(s);
        const std::vector<float> one = single.params_host();
        EXPECT_LE(test::relative_error(params, one), 1e-5) << world_size() << " ranks vs 1 rank";
        // The parameters moved: the comparison is not between two untouched inits.
        DataParallelTrainer fresh(cfg, ops, self);
        EXPECT_GT(test::relative_error(fresh.params_host(), one), 1e-3);
    }
}

INSTANTIATE_TEST_SUITE_P(Archs, TransformerDataParallel,
                         ::testing::Values(TransformerArch::bert, TransformerArch::gpt),
                         [](const auto& info) { return std::string(transformer_arch_name(info.param)); });

}  // namespace
}  // namespace sb
