// End-to-end tests through the real binary, as a user runs it: the default run alone
// and under mpirun, the scaling sweep, report, and bad input exiting 2 with one clear
// line and no result file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "src/core/results.h"
#include "tests/e2e/e2e_util.h"

namespace {

using sb::e2e::kSmall;
using sb::e2e::mpirun;
using sb::e2e::Result;
using sb::e2e::slurp;

std::filesystem::path scratch() { return sb::e2e::scratch("e2e"); }

Result run(const std::string& args, const std::string& launcher = "") {
    const auto dir = scratch();
    const std::string cmd = launcher + " " + SCALEBENCH_BINARY + " " + args + " >" + (dir / "out").string() + " 2>" +
                            (dir / "err").string() + " </dev/null";
    Result r;
    int status = std::system(cmd.c_str());
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(dir / "out");
    r.err = slurp(dir / "err");
    return r;
}

std::string write_file(const std::string& name, const std::string& text) {
    auto p = scratch() / name;
    std::ofstream(p) << text;
    return p.string();
}

size_t count(const std::string& haystack, const std::string& needle) {
    size_t n = 0;
    for (size_t pos = haystack.find(needle); pos != std::string::npos; pos = haystack.find(needle, pos + 1)) ++n;
    return n;
}

TEST(Cli, DefaultRunAloneTrainsPrintsTheTableAndWritesARecord) {
    const std::string out = (scratch() / "alone.jsonl").string();
    std::filesystem::remove(out);
    Result r = run("--backend cpu --steps 3 --warmup 1 --out " + out);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("samples/s"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("results appended to " + out), std::string::npos);
    auto records = sb::read_records(out).records;
    ASSERT_EQ(records.size(), 1u);
    EXPECT_EQ(records[0]["world_size"], 1);
    EXPECT_EQ(records[0]["subcommand"], "train");
    EXPECT_EQ(records[0]["config"]["source"], "<built-in default>");
}

TEST(Cli, ScalingSweepUnderMpirunWritesOneRecordPerSizeAndReportShowsThem) {
    const std::string out = (scratch() / "sweep.jsonl").string();
    std::filesystem::remove(out);
    Result r = run("train" + kSmall + " --scaling 1,2 --out " + out, mpirun(2));
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_EQ(count(r.out, "samples/s"), 1u) << "the header is printed once, by rank 0:\n" << r.out;
    auto records = sb::read_records(out).records;
    ASSERT_EQ(records.size(), 2u);
    EXPECT_EQ(records[0]["world_size"], 1);
    EXPECT_EQ(records[1]["world_size"], 2);
    EXPECT_EQ(records[1]["environment"]["hostnames"].size(), 2u);
    EXPECT_TRUE(records[1]["replica_check"]["passed"].get<bool>());

    Result md = run("report " + out);
    ASSERT_EQ(md.code, 0) << md.err;
    EXPECT_EQ(count(md.out, "| mlp | fp32 | weak |"), 2u) << md.out;
    Result csv = run("report --csv " + out);
    ASSERT_EQ(csv.code, 0) << csv.err;
    EXPECT_EQ(count(csv.out, "\n"), 3u) << csv.out;  // header + 2 rows
    EXPECT_EQ(csv.out.rfind("system,backend,model", 0), 0u) << csv.out;
}

TEST(Cli, BadConfigKeyExits2WithFileLineColumnOnceAndWritesNothing) {
    const std::string cfg = write_file("bad.yaml", "steps: 3\nbatch_size: 8\nbukcet_mb: 4\n");
    const std::string out = (scratch() / "never.jsonl").string();
    std::filesystem::remove(out);
    Result r = run("--config " + cfg + " --out " + out, mpirun(2));
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_EQ(count(r.err, cfg + ":3:1:"), 1u) << r.err;
    EXPECT_NE(r.err.find("bukcet_mb"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(Cli, OtherBadInputExits2) {
    const std::string out = (scratch() / "never2.jsonl").string();
    std::filesystem::remove(out);
    Result missing = run("--config /nonexistent/x.yaml --out " + out);
    EXPECT_EQ(missing.code, 2);
    EXPECT_NE(missing.err.find("/nonexistent/x.yaml"), std::string::npos) << missing.err;

    Result too_many = run(kSmall + " --scaling 1,2,4 --out " + out, mpirun(2));
    EXPECT_EQ(too_many.code, 2) << too_many.err;
    EXPECT_NE(too_many.err.find("4"), std::string::npos) << too_many.err;

    Result steps = run(kSmall + " --steps 0 --out " + out);
    EXPECT_EQ(steps.code, 2) << steps.err;
    EXPECT_NE(steps.err.find("steps"), std::string::npos) << steps.err;

    Result compressed = run(kSmall + " --grad-dtype bf16 --out " + out);
    EXPECT_EQ(compressed.code, 2) << compressed.err;
    EXPECT_NE(compressed.err.find("--grad-dtype: bf16 needs the cuda backend"), std::string::npos) << compressed.err;

    Result flag = run("--no-such-flag");
    EXPECT_EQ(flag.code, 2) << flag.err;
    Result graphs = run(kSmall + " --cuda-graphs maybe --out " + out);
    EXPECT_EQ(graphs.code, 2) << graphs.err;
    EXPECT_NE(graphs.err.find("--cuda-graphs"), std::string::npos) << graphs.err;
    EXPECT_FALSE(std::filesystem::exists(out));
}

// --cuda-graphs sets the config key the record carries; the CPU backend has no graphs.
TEST(Cli, CudaGraphsFlagReachesTheRecord) {
    const std::string out = (scratch() / "graphs.jsonl").string();
    std::filesystem::remove(out);
    Result r = run(kSmall + " --steps 2 --warmup 1 --cuda-graphs false --out " + out);
    ASSERT_EQ(r.code, 0) << r.err;
    const auto records = sb::read_records(out).records;
    ASSERT_EQ(records.size(), 1u);
    EXPECT_EQ(records[0]["config"]["cuda_graphs"], false);
    EXPECT_EQ(records[0]["cuda_graphs"], false);
}

TEST(Cli, BackendCudaWithoutAGpuIsAClearError) {
    if (std::system("nvidia-smi -L >/dev/null 2>&1") == 0) GTEST_SKIP() << "a GPU is visible on this machine";
    Result r = run(kSmall + " --backend cuda --out " + (scratch() / "cuda.jsonl").string());
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("--backend: backend cuda, but"), std::string::npos) << r.err;
}

TEST(Cli, HelpOnEverySubcommand) {
    for (std::string sub : {"", "train ", "report "}) {
        Result r = run(sub + "--help");
        EXPECT_EQ(r.code, 0) << sub;
        EXPECT_NE(r.out.find("Usage"), std::string::npos) << sub << r.out;
    }
}

}  // namespace
