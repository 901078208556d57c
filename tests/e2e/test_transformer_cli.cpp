// The transformer through the real binary under mpirun -np 2, as CI runs it:
// configs/ci-transformer.yaml trains, prints the table once and writes records whose
// model, parameter count, FLOPs and loss say what ran.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>

#include "src/core/results.h"
#include "tests/e2e/e2e_util.h"

namespace {

using sb::e2e::mpirun;

TEST(TransformerCli, CiTransformerUnderMpirunWritesRecords) {
    const auto dir = sb::e2e::scratch("e2e-transformer");
    const std::string out = (dir / "tf.jsonl").string();
    std::filesystem::remove(out);
    const std::string cmd = mpirun(2) + SCALEBENCH_BINARY + " train --config " +
                            SCALEBENCH_SOURCE_DIR + "/configs/ci-transformer.yaml --scaling 1,2 --steps 20 --out " +
                            out + " >" + (dir / "out").string() + " 2>" + (dir / "err").string() + " </dev/null";
    const int status = std::system(cmd.c_str());
    const std::string stdout_text = sb::e2e::slurp(dir / "out"), stderr_text = sb::e2e::slurp(dir / "err");
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << stdout_text << stderr_text;
    EXPECT_NE(stdout_text.find("transformer model, 20960 parameters"), std::string::npos) << stdout_text;
    auto records = sb::read_records(out).records;
    ASSERT_EQ(records.size(), 2u);
    for (const auto& rec : records) {
        EXPECT_EQ(rec["model"], "bert");
        EXPECT_EQ(rec["num_params"], 20960);
        EXPECT_EQ(rec["config"]["model"], "transformer");
        EXPECT_EQ(rec["config"]["transformer"]["hidden"], 32);
        EXPECT_TRUE(rec["replica_check"]["passed"].get<bool>());
        EXPECT_GT(rec["samples_per_s"].get<double>(), 0);
        EXPECT_DOUBLE_EQ(rec["tokens_per_s"].get<double>(), 16 * rec["samples_per_s"].get<double>());  // seq_len 16
        EXPECT_GT(rec["config"]["transformer"]["seq_len"], 0);
    }
    EXPECT_EQ(records[1]["world_size"], 2);
    // 2 warm-up + 20 steps on the learnable task: the loss is well below ln(64) = 4.16.
    const double first = records[1]["initial_loss"].get<double>(), last = records[1]["final_loss"].get<double>();
    EXPECT_NEAR(first, std::log(64.0), 0.5);
    EXPECT_LT(last, 0.8 * first);
    std::filesystem::remove_all(dir);
}

}  // namespace
