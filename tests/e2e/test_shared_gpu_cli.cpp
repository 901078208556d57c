// End to end on CPU ranks: the shared-GPU mode's marks (the flag and the config key put
// shared_gpu and the mode's NCCL settings in records and a line above the table; report
// marks the rows and --compare leaves them out; --profile-ops refuses the mode) and a bad
// SCALEBENCH_TEST_DELAY_RANK refused (the straggler tests: test_multirank_cli.cpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "src/core/results.h"
#include "tests/e2e/e2e_util.h"

namespace {

using sb::e2e::kSmall;
using sb::e2e::mpirun;
using sb::e2e::Result;
using sb::e2e::records_of;

std::filesystem::path dir() { return sb::e2e::scratch("shared-gpu-e2e"); }

std::string fresh(const std::string& name) { return sb::e2e::fresh_file(dir(), name); }

Result run(const std::string& command, const std::string& name) { return sb::e2e::run_shell(command, dir() / name); }

TEST(SharedGpuCli, TheFlagOrTheKeyMarksRecordsAndTheTable) {
    const std::string out = fresh("flag.jsonl");
    Result r = run(mpirun(2) + SCALEBENCH_BINARY + kSmall + " --share-gpu --scaling 1,2 --steps 3 --out " + out, "flag");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("shared GPU mode (--share-gpu)"), std::string::npos) << r.out;
    const auto train = records_of(out, "train");
    ASSERT_EQ(train.size(), 2u);
    for (const auto& rec : train) {
        EXPECT_EQ(rec["shared_gpu"], true);
        EXPECT_EQ(rec["config"]["share_gpu"], true);
        // The mode's NCCL settings are in the record: its buffer, sockets and connections made at
        // init, a host identity per rank.
        const nlohmann::json& vars = rec["environment"]["tuning_variables"];
        EXPECT_EQ(vars.value("NCCL_BUFFSIZE", ""), "16777216") << vars.dump();
        EXPECT_EQ(vars.value("NCCL_SOCKET_NTHREADS", ""), "4") << vars.dump();
        EXPECT_EQ(vars.value("NCCL_NSOCKS_PERTHREAD", ""), "4") << vars.dump();
        EXPECT_EQ(vars.value("NCCL_RUNTIME_CONNECT", ""), "0") << vars.dump();
        EXPECT_NE(vars.value("NCCL_HOSTID", "").find("-rank0"), std::string::npos) << vars.dump();
    }
    // A buffer size the user sets stays.
    const std::string own = fresh("own-buffsize.jsonl");
    r = run("NCCL_BUFFSIZE=8388608 " + mpirun(2) + SCALEBENCH_BINARY + kSmall + " --share-gpu --scaling 2 --steps 2 --out " +
                own, "own-buffsize");
    ASSERT_EQ(r.code, 0) << r.err;
    ASSERT_EQ(records_of(own, "train").size(), 1u);
    EXPECT_EQ(records_of(own, "train")[0]["environment"]["tuning_variables"].value("NCCL_BUFFSIZE", ""), "8388608");

    const std::string yaml = (dir() / "share.yaml").string();
    std::ofstream(yaml) << "model: mlp\nmlp: {input_dim: 16, hidden: [16], num_classes: 4, teacher_hidden: 4}\n"
                           "batch_size: 8\nsteps: 2\nwarmup: 1\nbackend: cpu\nshare_gpu: true\n";
    const std::string keyed = fresh("key.jsonl");
    r = run(mpirun(2) + SCALEBENCH_BINARY + " --config " + yaml + " --scaling 2 --out " + keyed, "key");
    ASSERT_EQ(r.code, 0) << r.err;
    ASSERT_EQ(records_of(keyed, "train").size(), 1u);
    EXPECT_EQ(records_of(keyed, "train")[0]["shared_gpu"], true);

    const std::string plain = fresh("plain.jsonl");
    r = run(mpirun(2) + SCALEBENCH_BINARY + kSmall + " --scaling 2 --steps 3 --out " + plain, "plain");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.find("shared GPU"), std::string::npos) << r.out;
    EXPECT_EQ(records_of(plain, "train")[0]["shared_gpu"], false);
    EXPECT_FALSE(records_of(plain, "train")[0]["environment"]["tuning_variables"].contains("NCCL_BUFFSIZE"));

    // report: the rows say so and a line above the table explains; --compare leaves them out.
    r = run(std::string(SCALEBENCH_BINARY) + " report " + out + " " + plain, "report");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("come from ranks sharing a GPU"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" shared GPU |"), std::string::npos) << r.out;
    r = run(std::string(SCALEBENCH_BINARY) + " report --compare " + out + " " + plain, "compare");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find("2 record(s) of ranks sharing a GPU (shared_gpu) left out of the comparison"),
              std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("shared GPU"), std::string::npos) << r.out;
    r = run(std::string(SCALEBENCH_BINARY) + " report --compare " + out, "compare-only-shared");
    EXPECT_EQ(r.code, 2) << r.out;
    // project --calibrate leaves them out, and says so.
    r = run(std::string(SCALEBENCH_BINARY) + " project --hardware h200-sxm --config " + SCALEBENCH_SOURCE_DIR +
                "/configs/ci-small.yaml --gpus 1,2 --calibrate " + out,
            "calibrate");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("2 record(s) of ranks sharing a GPU (shared_gpu) not used"), std::string::npos) << r.out;
}

TEST(SharedGpuCli, ProfileOpsRefusesTheMode) {
    const Result r = run(std::string(SCALEBENCH_BINARY) + kSmall + " --share-gpu --steps 2 --profile-ops " +
                             fresh("ops.jsonl") + " --out " + fresh("p.jsonl"),
                         "profile");
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("--profile-ops with --share-gpu"), std::string::npos) << r.err;
}

TEST(StragglerCli, ABadDelayIsRefusedNamingTheVariable) {
    const Result r = run("SCALEBENCH_TEST_DELAY_RANK=one:20 " + std::string(SCALEBENCH_BINARY) + kSmall +
                             " --steps 2 --out " + fresh("bad.jsonl"),
                         "bad");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.err.find("SCALEBENCH_TEST_DELAY_RANK='one:20'"), std::string::npos) << r.err;
}

}  // namespace
