// Numbers through the real binary (docs/reliability.md): a run whose loss stops being finite
// fails its check (exit 3) naming the step, in its record and on stderr; sizes and products
// past their limits and implausible numbers from flags, profiles and records are refused
// with exit 2, naming the flag, or the file and record.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/e2e/e2e_util.h"

namespace {

namespace fs = std::filesystem;
using sb::e2e::slurp;

fs::path scratch() { return sb::e2e::scratch("robust-checks"); }

sb::e2e::Result run(const std::string& args, int np = 1) {
    return sb::e2e::run_shell("timeout 120 " +
                                  (np > 1 ? std::string(SCALEBENCH_MPIRUN) + " -np " + std::to_string(np) + " " : "") +
                                  SCALEBENCH_BINARY + " " + args,
                              scratch() / "run");
}

TEST(RobustChecks, ALossThatStopsBeingFiniteFailsTheRunNamingTheStep) {
    const fs::path config = scratch() / "diverges.yaml", out = scratch() / "diverges.jsonl";
    std::ofstream(config) << "model: mlp\nmlp:\n  input_dim: 64\n  hidden: [128, 128]\n  num_classes: 10\n"
                             "batch_size: 32\nsteps: 6\nwarmup: 2\noptimizer:\n  kind: sgd\n  lr: 1.0e+30\n";
    fs::remove(out);
    const auto r = run("train --backend cpu --config " + config.string() + " --out " + out.string(), 2);
    EXPECT_EQ(r.code, 3) << r.err;
    EXPECT_NE(r.err.find("loss check FAILED at 2 ranks: the loss stopped being finite at step "), std::string::npos)
        << r.err;
    int trains = 0;
    std::istringstream lines(slurp(out));
    for (std::string line; std::getline(lines, line);) {
        const nlohmann::json rec = nlohmann::json::parse(line);
        if (rec["subcommand"] == "end") EXPECT_EQ(rec["exit_code"], 3);
        if (rec["subcommand"] != "train") continue;
        ++trains;
        EXPECT_EQ(rec["checks_passed"], false) << line;
        EXPECT_EQ(rec["loss_check"]["passed"], false) << line;
        const int step = rec["loss_check"]["first_nonfinite_step"].get<int>();
        EXPECT_GE(step, 1);
        EXPECT_LE(step, 8);
        EXPECT_NE(r.err.find("finite at step " + std::to_string(step) + " of 8"), std::string::npos) << r.err;
    }
    EXPECT_EQ(trains, 2);  // world sizes 1 and 2
    // A sane learning rate passes the same check.
    const auto ok = run("train --backend cpu --config " + std::string(SCALEBENCH_SOURCE_DIR) +
                        "/configs/ci-small.yaml --steps 2 --warmup 0 --out " + (scratch() / "ok.jsonl").string());
    EXPECT_EQ(ok.code, 0) << ok.err;
    EXPECT_NE(slurp(scratch() / "ok.jsonl").find("\"loss_check\":{\"first_nonfinite_step\":null,\"passed\":true}"),
              std::string::npos);
}

TEST(RobustChecks, AProjectionOfAHugeClusterStaysIn64BitsOrIsRefused) {
    const fs::path out = scratch() / "huge.jsonl";
    fs::remove(out);
    // 65536 nodes of 8 GPUs at 4096 per GPU: a global batch of 2^31, past a 32-bit int.
    auto r = run("project --hardware a100-sxm4-40gb --batch-size 4096 --nodes 65536 --gpus 8 --out " + out.string());
    ASSERT_EQ(r.code, 0) << r.err;
    std::istringstream lines(slurp(out));
    int projected = 0;
    for (std::string line; std::getline(lines, line);) {
        const nlohmann::json rec = nlohmann::json::parse(line);
        if (rec["subcommand"] != "project") continue;
        ++projected;
        EXPECT_EQ(rec["global_batch"].get<int64_t>(), int64_t{4096} * 8 * 65536);
        EXPECT_GT(rec["samples_per_s"].get<double>(), 0);
        EXPECT_GT(rec["scaling_efficiency"].get<double>(), 0);
        EXPECT_LE(rec["scaling_efficiency"].get<double>(), 1.0);
    }
    EXPECT_EQ(projected, 1);
    r = run("project --hardware a100-sxm4-40gb --nodes 1048576 --gpus 8");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--nodes 1048576: 1048576 nodes of 8 GPUs are more than the 1048576 GPUs"), std::string::npos)
        << r.err;
    r = run("project --hardware a100-sxm4-40gb --nodes 99999999");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--nodes 99999999: must be >= 1 and <= 1048576"), std::string::npos) << r.err;
    r = run("project --hardware a100-sxm4-40gb --batch-size 16777217");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--batch-size: must be <= 16777216, got 16777217"), std::string::npos) << r.err;
}

}  // namespace
