// A newcomer's first runs, through the real binary: the first run under mpirun
// measures a scaling curve; rank 0 shows progress only where a person watches; errors name
// what the user typed (the flag, the YAML line) and what to do; two CPU workloads soak
// together; more ranks than cores is said once; usage and header read right.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "src/core/results.h"
#include "tests/e2e/e2e_util.h"

namespace {

namespace fs = std::filesystem;
using sb::e2e::kSmall;
using sb::e2e::mpirun;
using sb::e2e::Result;
using sb::e2e::slurp;

fs::path scratch() { return sb::e2e::scratch("first-run"); }

Result run(const std::string& command) {
    return sb::e2e::run_shell(command, scratch());
}

const std::string kBin = SCALEBENCH_BINARY;

size_t count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

std::string write_file(const std::string& name, const std::string& text) {
    const fs::path p = scratch() / name;
    std::ofstream(p) << text;
    return p.string();
}

TEST(FirstRun, MpirunWithoutScalingMeasuresOneTwoFourAndTheLaunchedSize) {
    const std::string out = (scratch() / "curve.jsonl").string();
    fs::remove(out);
    const Result r = run(mpirun(3) + kBin + kSmall + " --steps 3 --warmup 1 --out " + out);
    ASSERT_EQ(r.code, 0) << r.err;
    std::vector<int> sizes;
    for (const auto& rec : sb::read_records(out).records) sizes.push_back(rec["world_size"].get<int>());
    EXPECT_EQ(sizes, (std::vector<int>{1, 2, 3}));
    EXPECT_NE(r.out.find("3 ranks launched"), std::string::npos) << r.out;
    EXPECT_EQ(count(r.out, "%\n"), 3u) << "an efficiency on every row:\n" << r.out;
}

TEST(FirstRun, OneRankHeaderSaysRank) {
    const Result r = run(kBin + kSmall + " --steps 2 --warmup 0 --out " + (scratch() / "one.jsonl").string());
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find(", 1 rank launched\n"), std::string::npos) << r.out;
}

// `script` gives mpirun a terminal: the progress line shows; into a file it does not.
TEST(FirstRun, ProgressLineOnlyWhereOutputIsATerminal) {
    if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "no script(1) to give a terminal";
    const std::string args = kSmall + " --steps 4000 --warmup 1 --scaling 1 --out " + (scratch() / "p.jsonl").string();
    const Result watched = run("script -qfc \"" + mpirun(1) + kBin + args + "\" /dev/null");
    ASSERT_EQ(watched.code, 0) << watched.err << watched.out;
    EXPECT_NE(watched.out.find("n = 1: step "), std::string::npos) << watched.out;
    EXPECT_NE(watched.out.find("steps/s"), std::string::npos) << watched.out;
    const Result logged = run(mpirun(1) + kBin + args);
    ASSERT_EQ(logged.code, 0) << logged.err;
    EXPECT_EQ(logged.out.find("steps/s"), std::string::npos) << logged.out;
    EXPECT_EQ(logged.out.find('\r'), std::string::npos);
}

TEST(FirstRun, ABadFlagValueIsNamedAsTheFlag) {
    Result r = run(kBin + kSmall + " --steps -3");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err, "scalebench: error: --steps: must be >= 1, got -3 (steps plus warmup must fit a 32-bit int) "
                     "(scalebench train --help lists the flags)\n");
    r = run(kBin + kSmall + " --batch-size 0");
    EXPECT_EQ(r.err, "scalebench: error: --batch-size: must be >= 1, got 0 (2^24 rows per rank keeps a global batch over "
                     "2^20 ranks inside 2^44) (scalebench train --help lists the flags)\n");
    r = run(kBin + kSmall + " --scaling 1,4");
    EXPECT_EQ(r.err, "scalebench: error: --scaling: scaling entry 4 exceeds the launched world size 1 (mpirun -np 1)\n");
    r = run(kBin + " stress" + kSmall + " --duration 2s --batch-size -1");
    EXPECT_EQ(r.err, "scalebench: error: --batch-size: must be >= 1, got -1 (2^24 rows per rank keeps a global batch over "
                     "2^20 ranks inside 2^44) (scalebench stress --help lists the flags)\n");
}

TEST(FirstRun, ParseErrorsAreOneLineWithThePrefix) {
    for (const std::string& args : {std::string(" --steps abc"), std::string(" --no-such-flag"), std::string(" stress")}) {
        const Result r = run(kBin + args);
        EXPECT_EQ(r.code, 2) << args;
        EXPECT_EQ(r.err.rfind("scalebench: error: ", 0), 0u) << r.err;
        EXPECT_EQ(count(r.err, "\n"), 1u) << r.err;
        EXPECT_NE(r.err.find("--help lists the flags"), std::string::npos) << r.err;
    }
}

TEST(FirstRun, UsageNamesTheProgram) {
    EXPECT_NE(run(kBin + " --help").out.find("Usage: scalebench [OPTIONS] SUBCOMMAND"), std::string::npos);
    EXPECT_NE(run(kBin + " train --help").out.find("Usage: scalebench train [OPTIONS]"), std::string::npos);
}

TEST(FirstRun, BackendCudaInAYamlNamesItsLine) {
    if (std::system("nvidia-smi -L >/dev/null 2>&1") == 0) GTEST_SKIP() << "a GPU is visible on this machine";
    const std::string config = write_file("cuda.yaml", "steps: 2\nbackend: cuda\n");
    const Result r = run(kBin + " --config " + config);
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find(config + ":2:10: key 'backend': backend cuda, but"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("use --backend cpu"), std::string::npos) << r.err;
}

TEST(FirstRun, AGpuPresetOnCpuRanksSaysWhichFlagMakesItRun) {
    const std::string preset = std::string(SCALEBENCH_SOURCE_DIR) + "/configs/mlp-large.yaml";
    Result r = run(kBin + " --config " + preset + " --backend cpu");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("mlp-large.yaml:15:12: key 'precision': precision bf16 on CPU ranks, but the cpu backend runs "
                         "fp32 only: add --precision fp32"),
              std::string::npos)
        << r.err;
}

TEST(FirstRun, StressTakesTwoCpuConfigsWhereOneSaysAuto) {
    const std::string a = write_file("a.yaml", "backend: cpu\nbatch_size: 8\nmlp: {input_dim: 16, hidden: [16]}\n");
    const std::string b = write_file("b.yaml", "backend: auto\nbatch_size: 8\nmlp: {input_dim: 32, hidden: [32]}\n");
    if (std::system("nvidia-smi -L >/dev/null 2>&1") == 0) GTEST_SKIP() << "auto resolves to cuda here";
    const std::string out = (scratch() / "two.jsonl").string();
    fs::remove(out);
    const Result r = run(kBin + " stress --config " + a + "," + b + " --duration 2s --interval 0.5s --out " + out);
    EXPECT_EQ(r.code, 0) << r.err;
    std::vector<int> workloads;
    for (const auto& rec : sb::read_records(out).records)
        if (rec.contains("workload")) workloads.push_back(rec["workload"].get<int>());
    EXPECT_NE(std::find(workloads.begin(), workloads.end(), 1), workloads.end()) << "the second workload never ran";
}

TEST(FirstRun, MoreRanksThanCoresWarnsOnce) {
    const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 8) GTEST_SKIP() << cores << " cores: too many ranks to start for this check";
    const Result r = run(mpirun(static_cast<int>(cores) + 1) + kBin + kSmall + " --steps 2 --warmup 0 --scaling 1 --out " +
                         (scratch() / "crowded.jsonl").string());
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(count(r.err, "scalebench: warning: more CPU ranks than cores ("), 1u) << r.err;
    const Result fits = run(mpirun(1) + kBin + kSmall + " --steps 2 --warmup 0 --out " + (scratch() / "fits.jsonl").string());
    EXPECT_EQ(fits.err.find("more CPU ranks than cores"), std::string::npos) << fits.err;
}

}  // namespace
