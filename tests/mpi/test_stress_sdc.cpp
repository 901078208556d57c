// Multi-rank tests of the silent-data-corruption checks (run under mpirun -np 2 and 4):
// replicas stay bitwise identical, a bit flipped in one rank's parameters is found by
// the next replica check naming that rank and its host, then resynchronised; a stress run
// with a planted flip catches it within K steps, records it and returns 3; the
// all-reduce recheck finds two reductions of identical inputs bitwise equal.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "collectives/mpi_communicator.h"
#include "models/cpu/cpu_ops.h"
#include "src/core/config.h"
#include "src/system/environment.h"
#include "src/core/results.h"
#include "src/commands/runner.h"
#include "src/commands/stress.h"

namespace sb {
namespace {

int world_rank() { int r; MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }
int world_size() { int s; MPI_Comm_size(MPI_COMM_WORLD, &s); return s; }

TrainConfig small_config() {
    TrainConfig cfg;
    cfg.mlp.input_dim = 32;
    cfg.mlp.hidden = {64};
    cfg.mlp.num_classes = 8;
    cfg.batch_size = 8;
    cfg.dataset_batches = 2;
    cfg.bucket_mb = 0.004;
    cfg.backend = BackendChoice::cpu;
    return cfg;
}

std::vector<RankIdentity> identities() {
    std::vector<RankIdentity> ids;
    const std::string host = process_info().host;  // every test rank runs on this host
    for (int r = 0; r < world_size(); ++r) ids.push_back({host + "", nlohmann::json::object()});
    return ids;
}

// The same path on every rank (one host), fresh for this launch.
std::string shared_path(const std::string& name) {
    int job = world_rank() == 0 ? static_cast<int>(::getpid()) : 0;
    MPI_Bcast(&job, 1, MPI_INT, 0, MPI_COMM_WORLD);
    const auto p = std::filesystem::temp_directory_path() /
                   ("scalebench-stress-" + std::to_string(job) + "-np" + std::to_string(world_size())) / name;
    if (world_rank() == 0) {
        std::filesystem::create_directories(p.parent_path());
        std::filesystem::remove(p);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return p.string();
}

TEST(ReplicaCheck, FlippedBitIsNamedByRankAndHostThenResynchronised) {
    const TrainConfig cfg = small_config();
    CpuOps ops(Precision::fp32);
    MpiCommunicator comm(MPI_COMM_WORLD);
    DataParallelTrainer trainer(cfg, ops, comm);
    for (int s = 0; s < 3; ++s) trainer.step(s);
    EXPECT_TRUE(check_replicas(trainer, MPI_COMM_WORLD, 3, 0, identities()).empty());

    const int victim = world_size() - 1;
    const uint64_t before = trainer.params_checksum();
    if (world_rank() == victim) {
        trainer.flip_parameter_bit(5, 0);  // the lowest mantissa bit: the smallest possible change
        EXPECT_NE(trainer.params_checksum(), before);
    }
    const auto events = check_replicas(trainer, MPI_COMM_WORLD, 3, 0, identities());
    // With two ranks there is no majority; the check then trusts the lowest rank.
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].rank, victim);
    EXPECT_EQ(events[0].host, process_info().host);
    EXPECT_EQ(events[0].step, 3);
    EXPECT_EQ(events[0].expected, fmt::format("{:016x}", before));
    EXPECT_NE(events[0].checksum, events[0].expected);
    // Resynchronised: the victim holds the majority's parameters again, and stays in step.
    EXPECT_EQ(trainer.params_checksum(), before);
    trainer.step(3);
    EXPECT_TRUE(check_replicas(trainer, MPI_COMM_WORLD, 4, 0, identities()).empty());
}

TEST(ReplicaCheck, MajorityDecidesWhichRankIsNamed) {
    if (world_size() < 3) GTEST_SKIP() << "needs three ranks for a majority";
    const TrainConfig cfg = small_config();
    CpuOps ops(Precision::fp32);
    MpiCommunicator comm(MPI_COMM_WORLD);
    DataParallelTrainer trainer(cfg, ops, comm);
    trainer.step(0);
    if (world_rank() == 0) trainer.flip_parameter_bit(0, 31);  // rank 0 is the odd one out
    const auto events = check_replicas(trainer, MPI_COMM_WORLD, 1, 0, identities());
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].rank, 0);
}

// A flip planted in the last rank after step 30, checks every 7 steps, in `mode`.
StressPlan planted_flip_plan(ShardingMode mode, const std::string& file) {
    StressPlan plan;
    plan.workloads = {small_config()};
    plan.workloads[0].sharding = mode;
    plan.duration_s = 1.2;
    plan.interval_s = 0.4;
    plan.sdc_check_every = 7;
    plan.out = shared_path(file);
    plan.planted_flip = PlantedFlip{world_size() - 1, 30};
    return plan;
}

// The replica events of every record but the run's summary (the last).
nlohmann::json interval_events(const ReadResult& read) {
    nlohmann::json found = nlohmann::json::array();
    for (size_t i = 0; i + 1 < read.records.size(); ++i)
        for (const auto& e : read.records[i]["sdc_events"]) found.push_back(e);
    return found;
}

TEST(Stress, PlantedBitFlipIsCaughtWithinKStepsRecordedAndExits3) {
    const StressPlan plan = planted_flip_plan(ShardingMode::none, "flip.jsonl");
    const int victim = plan.planted_flip->rank;
    CpuOps ops(Precision::fp32);
    const int code = run_stress_plan(plan, ops, MPI_COMM_WORLD, nlohmann::json::object());
    EXPECT_EQ(code, 3);
    if (world_rank() != 0) return;

    const ReadResult read = read_records(plan.out);
    EXPECT_TRUE(read.warnings.empty());
    ASSERT_GE(read.records.size(), 2u);
    for (size_t i = 0; i + 1 < read.records.size(); ++i) EXPECT_FALSE(read.records[i]["complete"].get<bool>());
    const nlohmann::json found = interval_events(read);
    ASSERT_EQ(found.size(), 1u) << found.dump() << ": one corruption, reported once";
    EXPECT_EQ(found[0]["rank"], victim);
    EXPECT_EQ(found[0]["host"], process_info().host);
    const int64_t step = found[0]["step"].get<int64_t>();
    EXPECT_GT(step, 30);
    EXPECT_LE(step, 30 + plan.sdc_check_every) << "caught within K steps";
    const nlohmann::json& last = read.records.back();
    EXPECT_TRUE(last["complete"].get<bool>());
    EXPECT_FALSE(last["checks_passed"].get<bool>());
    EXPECT_EQ(last["sdc_events"], found);
}

// Sharded, the values a rank reads are gathered afresh after every step's optimizer: a flip planted
// in them is checked in the same step, before the next gather overwrites it.
TEST(Stress, APlantedFlipInAShardedRunIsCaughtInItsStep) {
    const StressPlan plan = planted_flip_plan(ShardingMode::gradients, "sharded-flip.jsonl");
    CpuOps ops(Precision::fp32);
    EXPECT_EQ(run_stress_plan(plan, ops, MPI_COMM_WORLD, nlohmann::json::object()), 3);
    if (world_rank() != 0) return;
    const nlohmann::json found = interval_events(read_records(plan.out));
    ASSERT_EQ(found.size(), 1u) << found.dump();
    EXPECT_EQ(found[0]["rank"], plan.planted_flip->rank);
    EXPECT_EQ(found[0]["step"], 30);
}

TEST(Stress, CleanRunPassesWithIntervalRecordsAndAFinalSummary) {
    StressPlan plan;
    plan.workloads = {small_config(), small_config()};
    plan.workloads[1].batch_size = 4;
    plan.duration_s = 1.0;
    plan.interval_s = 0.25;
    plan.sdc_check_every = 5;
    plan.out = shared_path("clean.jsonl");
    CpuOps ops(Precision::fp32);
    EXPECT_EQ(run_stress_plan(plan, ops, MPI_COMM_WORLD, nlohmann::json::object()), 0);
    if (world_rank() != 0) return;
    const auto records = read_records(plan.out).records;
    ASSERT_GE(records.size(), 3u);
    for (size_t i = 0; i + 1 < records.size(); ++i) {
        EXPECT_EQ(records[i]["interval"], static_cast<int>(i));
        EXPECT_EQ(records[i]["workload"], static_cast<int>(i % 2)) << "workloads alternate interval by interval";
        EXPECT_EQ(records[i]["global_batch"], (i % 2 ? 4 : 8) * world_size());
        EXPECT_GT(records[i]["sdc_checks"].get<int>(), 0);
        EXPECT_TRUE(records[i]["sdc_events"].empty());
    }
    EXPECT_TRUE(records.back()["complete"].get<bool>());
    EXPECT_EQ(records.back()["workloads"].size(), 2u);
}

TEST(AllreduceRecheck, TwoReductionsOfIdenticalInputsAgreeBitwise) {
    const TrainConfig cfg = small_config();
    CpuOps ops(Precision::fp32);
    MpiCommunicator comm(MPI_COMM_WORLD);
    DataParallelTrainer trainer(cfg, ops, comm);
    trainer.step(0);
    EXPECT_EQ(trainer.recheck_gradient_allreduce(), 0u);
}

}  // namespace
}  // namespace sb
