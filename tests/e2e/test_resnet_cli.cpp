// The ResNet through the real binary under mpirun -np 2, as CI runs it: configs/ci-resnet.yaml
// trains, the replicas stay identical (BatchNorm statistics are per rank, as DDP without
// SyncBatchNorm, but the all-reduced gradients are not), and the records say what ran and
// predict the memory of what ran.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "src/core/results.h"
#include "tests/e2e/e2e_util.h"

namespace {

using sb::e2e::mpirun;

TEST(ResNetCli, CiResNetUnderMpirunWritesRecords) {
    const auto dir = sb::e2e::scratch("e2e-resnet");
    const std::string out = (dir / "rn.jsonl").string();
    std::filesystem::remove(out);
    const std::string cmd = mpirun(2) + SCALEBENCH_BINARY + " train --config " +
                            SCALEBENCH_SOURCE_DIR + "/configs/ci-resnet.yaml --scaling 1,2 --steps 20 --out " + out +
                            " >" + (dir / "out").string() + " 2>" + (dir / "err").string() + " </dev/null";
    const int status = std::system(cmd.c_str());
    const std::string stdout_text = sb::e2e::slurp(dir / "out"), stderr_text = sb::e2e::slurp(dir / "err");
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << stdout_text << stderr_text;
    EXPECT_NE(stdout_text.find("resnet model, 9362 parameters"), std::string::npos) << stdout_text;
    auto records = sb::read_records(out).records;
    ASSERT_EQ(records.size(), 2u);
    for (const auto& rec : records) {
        EXPECT_EQ(rec["model"], "resnet");
        EXPECT_EQ(rec["num_params"], 9362);
        EXPECT_EQ(rec["config"]["resnet"]["blocks"].size(), 2u);
        // auto on CPU ranks, resolved once: the config, the engine and the memory prediction agree.
        EXPECT_EQ(rec["config"]["conv_engine"], "im2col");
        EXPECT_EQ(rec["conv_engine"], "im2col");
        const auto& mem = rec["memory_per_rank"];
        for (const char* kind : {"parameters", "gradients", "optimizer_state", "activations", "comm_buffers", "data"})
            EXPECT_DOUBLE_EQ(mem["measured"][kind].get<double>(), mem["predicted"][kind].get<double>()) << kind;
        EXPECT_NEAR(mem["peak_vs_predicted"].get<double>(), 1.0, 0.05) << mem.dump();
        EXPECT_TRUE(rec["replica_check"]["passed"].get<bool>());
        EXPECT_GT(rec["samples_per_s"].get<double>(), 0);
    }
    EXPECT_EQ(records[1]["world_size"], 2);
    // 2 warm-up + 20 steps on the learnable images: the loss is well below ln(10) = 2.30.
    const double first = records[1]["initial_loss"].get<double>(), last = records[1]["final_loss"].get<double>();
    EXPECT_NEAR(first, std::log(10.0), 0.7);
    EXPECT_LT(last, 0.6 * first);
    std::filesystem::remove_all(dir);
}

// conv_engine: cudnn on CPU ranks is refused before any step, naming the file and key.
TEST(ResNetCli, CudnnEngineOnCpuRanksExitsTwoNamingTheKey) {
    const auto dir = sb::e2e::scratch("e2e-resnet-cudnn");
    const std::string config = (dir / "cudnn.yaml").string(), out = (dir / "rn.jsonl").string();
    std::filesystem::remove(out);
    {
        std::ofstream f(config);
        f << sb::e2e::slurp(std::filesystem::path(SCALEBENCH_SOURCE_DIR) / "configs/ci-resnet.yaml")
          << "conv_engine: cudnn\n";
    }
    const std::string cmd = mpirun(2) + SCALEBENCH_BINARY + " train --config " +
                            config + " --backend cpu --out " + out + " >" + (dir / "out").string() + " 2>" +
                            (dir / "err").string() + " </dev/null";
    const int status = std::system(cmd.c_str());
    const std::string stderr_text = sb::e2e::slurp(dir / "err");
    ASSERT_TRUE(WIFEXITED(status)) << stderr_text;
    EXPECT_EQ(WEXITSTATUS(status), 2) << stderr_text;
    EXPECT_NE(stderr_text.find("conv_engine"), std::string::npos) << stderr_text;
    EXPECT_FALSE(std::filesystem::exists(out)) << "no record for a run refused";
    std::filesystem::remove_all(dir);
}

}  // namespace
