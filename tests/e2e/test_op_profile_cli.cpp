// `train --profile-ops` and `project --calibrate` with its records, through the real binary:
// the profile is written next to the train records (once, by rank 0, also under mpirun),
// says that it runs eagerly, and `project` takes the records (a CPU's are checked and then
// not used: they are no GPU's) and refuses a bad one with exit 2; an unwritable profile
// path stops the run before it trains.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <set>

#include "src/core/results.h"
#include "tests/e2e/e2e_util.h"

namespace {

using sb::e2e::mpirun;
using sb::e2e::Result;

const std::string kSource = SCALEBENCH_SOURCE_DIR;

Result run(const std::string& args, int ranks = 1) {
    const auto dir = sb::e2e::scratch("op-profile-e2e");
    const std::string cmd = mpirun(ranks) + SCALEBENCH_BINARY + " " + args + " >" + (dir / "out").string() + " 2>" +
                            (dir / "err").string() + " </dev/null";
    Result r;
    const int status = std::system(cmd.c_str());
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = sb::e2e::slurp(dir / "out");
    r.err = sb::e2e::slurp(dir / "err");
    return r;
}

std::string fresh(const std::string& name) { return sb::e2e::fresh_file(sb::e2e::scratch("op-profile-e2e"), name); }

const std::string kTransformer = " --config " + kSource + "/configs/ci-transformer.yaml --backend cpu --steps 2 --warmup 1";

TEST(OpProfileCli, TrainWritesItsRecordsAndTheProfileOfEveryOp) {
    const std::string out = fresh("train.jsonl"), ops = fresh("ops.jsonl");
    const Result r = run("train" + kTransformer + " --scaling 1,2 --out " + out + " --profile-ops " + ops, 2);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("eagerly (CUDA graphs off"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("sum of the op medians"), std::string::npos) << r.out;
    EXPECT_EQ(sb::read_records(out).records.size(), 2u);  // the sweep as without the flag
    const auto records = sb::read_records(ops).records;
    ASSERT_GT(records.size(), 10u);
    std::set<std::string> labels;
    for (const auto& rec : records) {
        EXPECT_EQ(rec["subcommand"], "op_profile");
        EXPECT_EQ(rec["model"], "bert");
        EXPECT_EQ(rec["local_batch"], 8);  // one rank's batch
        EXPECT_GE(rec["calls_per_step"].get<int>(), 1);
        EXPECT_EQ(rec["ms"]["count"].get<int>(), 2 * rec["calls_per_step"].get<int>());
        labels.insert(rec["label"].get<std::string>() + " " + rec["op"]["bytes"].dump());
    }
    EXPECT_EQ(labels.size(), records.size()) << "one record per op, written once";
    EXPECT_NE(r.out.find(std::to_string(records.size()) + " op_profile records appended to " + ops), std::string::npos);

    // project reads them: a CPU's profile is checked, and calibrates no GPU.
    const Result p = run("project --hardware h200-sxm --config " + kSource + "/configs/ci-transformer.yaml --gpus 1 --out " +
                         fresh("projected.jsonl") + " --calibrate " + ops + " --profile-dir " + kSource +
                         "/configs/hardware");
    ASSERT_EQ(p.code, 0) << p.out << p.err;
    EXPECT_NE(p.out.find("calibration: none"), std::string::npos) << p.out;

    // A record whose time cannot be a measurement is refused, with where and why.
    nlohmann::json bad = records.front();
    bad["ms"]["median"] = 0;
    sb::append_record(ops, bad);
    const Result refused = run("project --hardware h200-sxm --gpus 1 --out " + fresh("projected.jsonl") + " --calibrate " +
                               ops + " --profile-dir " + kSource + "/configs/hardware");
    EXPECT_EQ(refused.code, 2) << refused.out << refused.err;
    EXPECT_NE(refused.err.find(ops + ": record " + std::to_string(records.size() + 1) +
                               ": key 'ms.median': must be in (0, "),
              std::string::npos)
        << refused.err;
}

TEST(OpProfileCli, AnUnwritableProfilePathStopsTheRunBeforeItTrains) {
    const std::string out = fresh("never.jsonl");
    const Result r = run("train" + kTransformer + " --out " + out + " --profile-ops /proc/scalebench/ops.jsonl");
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("/proc/scalebench/ops.jsonl"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
