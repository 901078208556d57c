// The transformer on CUDA against the CPU backend from the same initial weights: three SGD
// steps of both archs, with dropout on (the counter-based masks of models/dropout.h are the
// same on both backends, so the two compute the same function), in fp32 and bf16; the
// decoder's vocabulary padded (96 to 128, 1001 to 1024) and, once, not (1001 columns).
// Skips without a GPU; runs under `mpirun -np 1` like the other GPU tests.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "collectives/mpi_communicator.h"
#include "collectives/nccl_communicator.h"
#include "models/cpu/cpu_ops.h"
#include "models/cuda/cuda_ops.h"
#include "src/system/environment.h"
#include "src/commands/runner.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/test_util.h"

namespace sb {
namespace {

struct Case {
    TransformerArch arch;
    Precision precision;
    double tolerance;  // on the parameter update after the steps, relative
    int heads = 4;     // of hidden 64: 16-wide heads (unfused attention); 1: a 64-wide head, fused in bf16
    int vocab = 96;    // the decoder pads it to a multiple of vocab_multiple (1: unpadded, odd rows)
    int vocab_multiple = 128;
};

TrainConfig tiny_transformer(const Case& c) {
    TrainConfig cfg;
    cfg.model = "transformer";
    TransformerShape& s = cfg.transformer.shape;
    s.arch = c.arch;
    s.layers = 2, s.hidden = 64, s.heads = c.heads, s.ffn = 128, s.vocab = c.vocab, s.seq_len = 32, s.max_positions = 64;
    s.vocab_multiple = c.vocab_multiple;
    s.dropout = s.attention_dropout = 0.1f;
    s.layernorm_eps = 1e-5f;
    cfg.batch_size = 4;
    cfg.scaling_mode = ScalingMode::strong;
    cfg.precision = c.precision;
    cfg.optimizer.kind = OptimizerConfig::Kind::sgd;
    cfg.optimizer.lr = 0.05f;
    cfg.optimizer.momentum = 0.0f;
    cfg.bucket_mb = 0.05;
    cfg.dataset_batches = 2;
    validate_config(cfg);
    return cfg;
}

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> d(a.size());
    for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
    return d;
}

class CudaTransformerStep : public ::testing::TestWithParam<Case> {};

TEST_P(CudaTransformerStep, MatchesTheCpuBackendFromTheSameWeights) {
    SKIP_WITHOUT_GPU();
    const Case c = GetParam();
    const TrainConfig cfg = tiny_transformer(c);
    TrainConfig cpu_cfg = cfg;
    cpu_cfg.precision = Precision::fp32;
    CpuOps cpu;
    CudaOps cuda(c.precision, process_info().local_rank);
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
    const double err =
        test::relative_error(minus(trainer.params_host(), initial), minus(reference.params_host(), initial));
    EXPECT_LE(err, c.tolerance) << transformer_arch_name(c.arch) << " " << precision_name(c.precision);
}

INSTANTIATE_TEST_SUITE_P(ArchsAndPrecisions, CudaTransformerStep,
                         ::testing::Values(Case{TransformerArch::bert, Precision::fp32, 1e-4},
                                           Case{TransformerArch::gpt, Precision::fp32, 1e-4},
                                           Case{TransformerArch::bert, Precision::bf16, 5e-2},
                                           Case{TransformerArch::gpt, Precision::bf16, 5e-2},
                                           Case{TransformerArch::bert, Precision::bf16, 5e-2, 1},
                                           Case{TransformerArch::gpt, Precision::bf16, 5e-2, 1},
                                           Case{TransformerArch::bert, Precision::bf16, 5e-2, 4, 1001},
                                           Case{TransformerArch::gpt, Precision::bf16, 5e-2, 4, 1001, 1},
                                           Case{TransformerArch::gpt, Precision::fp32, 1e-4, 4, 1001}),
                         [](const auto& info) {
                             return std::string(transformer_arch_name(info.param.arch)) + "_" +
                                    precision_name(info.param.precision) +
                                    (info.param.heads == 4 ? "" : "_heads" + std::to_string(info.param.heads)) +
                                    (info.param.vocab == 96 ? "" : "_vocab" + std::to_string(info.param.vocab)) +
                                    (info.param.vocab_multiple == 128 ? "" : "_unpadded");
                         });

}  // namespace
}  // namespace sb
