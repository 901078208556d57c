// Sharded data parallel over MPI (run with mpirun -np 2 and 4): the reduce-scatter, the
// update of the own shard and the all-gather give every rank the parameters of the averaged
// step, and the trainer in each sharding mode ends with the losses and parameters of the
// unsharded trainer (MLP, GPT and ResNet), its ranks holding identical parameters.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <unistd.h>

#include "collectives/mpi_communicator.h"
#include "collectives/sharding.h"
#include "models/cpu/cpu_ops.h"
#include "src/commands/runner.h"
#include "src/core/config.h"
#include "src/core/rank_memory.h"
#include "src/core/results.h"
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
    const std::vector<float> initial = test::random_vector(count, 7);
    state.set_params_shard(initial);
    std::vector<float> grads(count + state.layout().tail_padding(), 0.0f), expected(count);
    for (size_t i = 0; i < count; ++i) {
        grads[i] = static_cast<float>((r + 1) * (i % 5 + 1));
        const double mean = (i % 5 + 1) * (n + 1) / 2.0;
        expected[i] = static_cast<float>(initial[i] - 0.5 * mean);
    }
    for (size_t b = 0; b < buckets.size(); ++b) state.reduce_scatter_bucket(b, grads.data() + buckets[b].offset)->wait();
    OptimizerConfig sgd;
    sgd.kind = OptimizerConfig::Kind::sgd;
    sgd.lr = 0.5f;
    sgd.momentum = 0.0f;
    state.update(sgd, 1);
    // Each bucket gathered from every rank's updated shard: the averaged step, every element.
    for (size_t b = 0; b < buckets.size(); ++b) {
        std::vector<float> gathered(state.layout().padded_count(b), -1.0f);
        state.gather_bucket(b, gathered.data(), DType::f32)->wait();
        for (size_t i = 0; i < buckets[b].count; ++i)
            ASSERT_NEAR(gathered[i], expected[buckets[b].offset + i], 1e-5) << "bucket " << b << " element " << i;
    }
}

// "bert" is the transformer family's BERT: its query, key and value, three parameters one GEMM
// writes, fall in different buckets.
TrainConfig family_config(const std::string& family) {
    const std::string model = family == "bert" ? "transformer" : family;
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
        cfg.bucket_mb = 0.0002;  // three buckets of its 1,413 parameters
    } else if (model == "transformer") {
        TransformerShape& s = cfg.transformer.shape;
        s.arch = family == "bert" ? TransformerArch::bert : TransformerArch::gpt;
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

// Sharding parameters: after a step without communication (which gathers nothing), the
// parameters read back are still gathered from the shards: this rank's slices are its shard.
void expect_read_back_from_the_shard(DataParallelTrainer& trainer, Ops& ops, int64_t step) {
    trainer.step(step, /*communicate=*/false);
    const std::vector<float> params = trainer.params_host();
    const ShardLayout& layout = trainer.sharded()->layout();
    std::vector<float> shard(layout.shard_elements());
    ops.download(shard.data(), trainer.sharded()->params_shard(), shard.size() * sizeof(float));
    for (size_t b = 0; b < layout.buckets(); ++b)
        for (size_t i = 0; i < layout.slice(b) && layout.flat_offset(b) + i < params.size(); ++i)
            ASSERT_EQ(params[layout.flat_offset(b) + i], shard[layout.shard_offset(b) + i]) << "bucket " << b;
}

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
    if (cfg.sharding == ShardingMode::parameters) expect_read_back_from_the_shard(trainer, ops, steps);
    return t;
}

struct Case {
    const char* model;
    ShardingMode mode;
};

std::ostream& operator<<(std::ostream& out, const Case& c) {
    return out << c.model << " " << sharding_mode_name(c.mode);
}

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
                                           Case{"bert", ShardingMode::gradients},
                                           Case{"resnet", ShardingMode::optimizer},
                                           Case{"resnet", ShardingMode::gradients},
                                           Case{"mlp", ShardingMode::parameters},
                                           Case{"transformer", ShardingMode::parameters},
                                           Case{"bert", ShardingMode::parameters},
                                           Case{"resnet", ShardingMode::parameters}),
                         [](const auto& info) {
                             return std::string(info.param.model) + "_" + sharding_mode_name(info.param.mode);
                         });

// The replica check in a sharded mode: a bit flipped in the values one rank reads changes its
// checksum only; that rank alone resynchronises from the master values gathered from the shards
// (no collective on one rank), and every checksum agrees again.
TEST(ShardedReplicas, AFlippedReadValueIsSeenAndOneRankResynchronisesAlone) {
    TrainConfig cfg = family_config("transformer");
    cfg.sharding = ShardingMode::gradients;
    validate_config(cfg);
    CpuOps ops;
    MpiCommunicator comm(MPI_COMM_WORLD);
    DataParallelTrainer trainer(cfg, ops, comm);
    trainer.step(0);
    const auto checksums = [&] {
        const uint64_t mine = trainer.params_checksum();
        std::vector<uint64_t> all(static_cast<size_t>(comm.size()));
        MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
        return all;
    };
    const std::vector<uint64_t> before = checksums();
    EXPECT_EQ(std::count(before.begin(), before.end(), before[0]), comm.size());
    if (comm.rank() == 1) trainer.flip_parameter_bit(3, 22);
    const std::vector<uint64_t> flipped = checksums();
    EXPECT_NE(flipped[1], flipped[0]);
    EXPECT_EQ(flipped[0], before[0]);
    std::vector<float> params = trainer.params_host();  // the masters: untouched by the flip
    if (comm.rank() == 1) trainer.set_params_host(params);
    EXPECT_EQ(checksums(), before);
    trainer.step(1);  // and the ranks step on together
    const std::vector<uint64_t> after = checksums();
    EXPECT_EQ(std::count(after.begin(), after.end(), after[0]), comm.size());
}

// The record of a sharded sweep: the collectives' bytes as docs/sharding.md gives them, their
// times alone, no all-reduce, and the measured memory beside the prediction; in `gradients`
// the gradients land in slots that hold less than the full buffer `optimizer` keeps, in
// `parameters` the parameters in slots that hold less than the full buffers.
class ShardedSweep : public ::testing::TestWithParam<ShardingMode> {};

TEST_P(ShardedSweep, RecordsEachCollectiveAndTheMemoryPerRank) {
    int n = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    TrainConfig cfg = family_config("transformer");
    cfg.sharding = GetParam();
    cfg.scaling = {n};
    cfg.steps = 2;
    cfg.warmup = 1;
    long pid = ::getpid();
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    const std::string path =
        (std::filesystem::temp_directory_path() / ("scalebench-sharded-sweep-" + std::to_string(pid) + ".jsonl")).string();
    cfg.out = path;
    CpuOps ops;
    EXPECT_TRUE(run_training_sweep(cfg, ops, MPI_COMM_WORLD, nlohmann::json::object()));
    if (world_rank() != 0) return;
    const ReadResult r = read_records(path);
    std::filesystem::remove(path);
    ASSERT_EQ(r.records.size(), 1u);
    const nlohmann::json& rec = r.records[0];
    const nlohmann::json& sh = rec["sharding"];
    EXPECT_EQ(sh["mode"], sharding_mode_name(GetParam()));
    const double params = rec["num_params"].get<double>(), buckets = rec["buckets"].get<double>();
    const double bytes = sh["reduce_scatter"]["bytes"].get<double>();
    EXPECT_DOUBLE_EQ(bytes, 4.0 * sh["shard_elements"].get<double>() * n);
    EXPECT_GE(bytes, 4 * params);
    EXPECT_LE(bytes, 4 * (params + buckets * (n - 1)));
    if (GetParam() != ShardingMode::parameters) {  // every bucket once, fp32 on CPU ranks
        EXPECT_DOUBLE_EQ(sh["all_gather"]["bytes"].get<double>(), bytes);
        EXPECT_EQ(sh["gathered_buckets"].get<double>(), buckets);
    }
    EXPECT_GT(sh["reduce_scatter"]["ms"].get<double>(), 0);
    EXPECT_GT(sh["all_gather"]["ms"].get<double>(), 0);
    EXPECT_TRUE(rec["allreduce_ms"].is_null());
    EXPECT_TRUE(rec["replica_check"]["passed"].get<bool>());
    const nlohmann::json& mem = rec["memory_per_rank"];
    for (const char* kind : {"parameters", "gradients", "optimizer_state", "activations", "comm_buffers", "data"})
        EXPECT_DOUBLE_EQ(mem["measured"][kind].get<double>(), mem["predicted"][kind].get<double>()) << kind;
    EXPECT_NEAR(mem["peak_vs_predicted"].get<double>(), 1.0, 0.05) << mem.dump();
    if (GetParam() == ShardingMode::parameters) {
        // Each bucket in the forward, most again in the backward; the tied embedding's bucket, read
        // by the embedding and the head in both passes, up to four times.
        EXPECT_GT(sh["gathered_buckets"].get<double>(), buckets) << sh.dump();
        EXPECT_LE(sh["gathered_buckets"].get<double>(), 2 * buckets + 2) << sh.dump();
        EXPECT_GT(sh["all_gather"]["bytes"].get<double>(), bytes) << sh.dump();
        EXPECT_GE(sh["parameter_slots"].get<int>(), 2);
    }
    // Each mode keeps less than the one before it: the gradients, then the parameters.
    if (GetParam() != ShardingMode::optimizer) {
        TrainConfig before = cfg;
        const char* kind = GetParam() == ShardingMode::gradients ? "gradients" : "parameters";
        before.sharding = GetParam() == ShardingMode::gradients ? ShardingMode::optimizer : ShardingMode::gradients;
        const nlohmann::json kept = to_json(predict_rank_memory(before, n, rec["local_batch"].get<int>()));
        EXPECT_LT(mem["measured"][kind].get<double>(), kept[kind].get<double>()) << kind << " " << mem.dump();
    }
}

INSTANTIATE_TEST_SUITE_P(Modes, ShardedSweep,
                         ::testing::Values(ShardingMode::optimizer, ShardingMode::gradients, ShardingMode::parameters),
                         [](const auto& info) { return std::string(sharding_mode_name(info.param)); });

}  // namespace
}  // namespace sb
