// Hostile input through the real binary, one case per class that only a whole command shows
// (docs/reliability.md, "Hostile input"): numbers a flag gives read as YAML reads them, an
// output that is an input refused before any work, a non-UTF-8 byte in a recorded environment
// variable kept (not the run thrown away), lists naming one thing twice refused (files by
// identity), test hooks that could never fire refused before any work, profile names that cannot
// break a terminal table, a projection whose convolution engine does not depend on the build.
// Each run is CI-sized (seconds).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "src/core/results.h"
#include "tests/e2e/e2e_util.h"

namespace {

using sb::e2e::mpirun;
using sb::e2e::Result;
namespace fs = std::filesystem;

const std::string kSource = SCALEBENCH_SOURCE_DIR;

fs::path scratch() { return sb::e2e::scratch("hostile-e2e"); }

Result run(const std::string& args, const std::string& env = "") {
    return sb::e2e::run_shell(env + mpirun(1) + SCALEBENCH_BINARY + " " + args,
                              scratch() / "run");
}

TEST(HostileCli, AFlagsNumberIsDecimalAndANonUtf8EnvironmentByteIsKept) {
    const fs::path out = scratch() / "train.jsonl";
    fs::remove(out);
    const Result r = run("train --config " + kSource + "/configs/ci-small.yaml --backend cpu --steps 02 --warmup 0 "
                         "--batch-size 010 --scaling 1 --out " + out.string(),
                         "NCCL_HOSTILE=\"$(printf '\\377')\" ");  // sh has no $'...'; printf's octal is POSIX
    ASSERT_EQ(r.code, 0) << r.err;
    const sb::ReadResult read = sb::read_records(out.string());
    ASSERT_EQ(read.records.size(), 1u);
    const nlohmann::json& rec = read.records[0];
    EXPECT_EQ(rec["local_batch"], 10);
    EXPECT_EQ(rec["config"]["steps"], 2);
    EXPECT_EQ(rec["environment"]["tuning_variables"]["NCCL_HOSTILE"], "\\xff");
}

TEST(HostileCli, AnOutputThatIsAnInputIsRefusedBeforeAnyWork) {
    const fs::path snapshot = scratch() / "s.json";
    fs::copy_file(kSource + "/tests/fixtures/doctor/slot-x8.json", snapshot, fs::copy_options::overwrite_existing);
    const std::string before = sb::e2e::slurp(snapshot);
    for (const char* flag : {"--report", "--snapshot-out"}) {
        const Result r = run("doctor --from-snapshot " + snapshot.string() + " " + flag + " " + snapshot.string());
        EXPECT_EQ(r.code, 2) << flag << ": " << r.err;
        EXPECT_NE(r.err.find("is the snapshot"), std::string::npos) << r.err;
        EXPECT_TRUE(r.out.empty()) << r.out;
    }
    EXPECT_EQ(sb::e2e::slurp(snapshot), before);
    const fs::path both = scratch() / "both.md";
    fs::remove(both);
    Result r = run("doctor --from-snapshot " + snapshot.string() + " --report " + both.string() + " --snapshot-out " +
                   both.string());
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("two outputs cannot share one file"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(both));
    const fs::path calibration = scratch() / "calibration.jsonl";
    fs::copy_file(kSource + "/results/h200-one-gpu/gemm/gemm.jsonl", calibration, fs::copy_options::overwrite_existing);
    const std::string calibration_before = sb::e2e::slurp(calibration);
    r = run("project --hardware h200-sxm --profile-dir " + kSource + "/configs/hardware --config " + kSource +
            "/configs/ci-small.yaml --calibrate " + calibration.string() + " --out " + calibration.string());
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("is the --calibrate file"), std::string::npos) << r.err;
    EXPECT_EQ(sb::e2e::slurp(calibration), calibration_before);
}

// A bad value every rank reads is refused once, by rank 0, with exit 2 (not once per rank).
TEST(HostileCli, AnErrorEveryRankFindsIsPrintedOnce) {
    const Result r = sb::e2e::run_shell("SCALEBENCH_COLLECTIVE_TIMEOUT_S=1e10 " + mpirun(2) + SCALEBENCH_BINARY +
                                            " report " + kSource + "/results/h200-one-gpu/gemm/gemm.jsonl",
                                        scratch() / "run");
    EXPECT_EQ(r.code, 2) << r.err;
    int lines = 0;
    std::istringstream err(r.err);
    for (std::string line; std::getline(err, line);) lines += line.rfind("scalebench:", 0) == 0;
    EXPECT_EQ(lines, 1) << r.err;
    EXPECT_NE(r.err.find("scalebench: error: SCALEBENCH_COLLECTIVE_TIMEOUT_S='1e10'"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(HostileCli, AListNamingOneThingTwiceIsRefused) {
    const std::string hw = " --profile-dir " + kSource + "/configs/hardware";
    Result r = run("project --hardware h200-sxm --config " + kSource + "/configs/ci-small.yaml --gpus 4,4,1" + hw);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("--scaling: 4 is given twice (entries 1 and 2)"), std::string::npos) << r.err;
    r = run("compare --hardware h200-sxm,h200-sxm --config " + kSource + "/configs/ci-small.yaml" + hw);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("--hardware: the profile name h200-sxm is given twice (entries 1 and 2)"), std::string::npos) << r.err;
    r = run("comm --backend mpi --scaling 1,1 -b 8 -e 8");
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("--scaling: 1 is given twice"), std::string::npos) << r.err;
    // Two profiles with one name, under two file names.
    const fs::path dir = scratch() / "profiles";
    fs::create_directories(dir);
    fs::copy_file(kSource + "/configs/hardware/h200-sxm.yaml", dir / "a.yaml", fs::copy_options::overwrite_existing);
    fs::copy_file(kSource + "/configs/hardware/h200-sxm.yaml", dir / "b.yaml", fs::copy_options::overwrite_existing);
    r = run("compare --hardware a,b --profile-dir " + dir.string() + " --config " + kSource + "/configs/ci-small.yaml");
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("--hardware: the profile name h200-sxm is given twice"), std::string::npos) << r.err;
    // report: one file under two spellings would show every row twice.
    const fs::path records = scratch() / "r.jsonl";
    fs::copy_file(kSource + "/results/h200-one-gpu/gemm/mlp-large.jsonl", records, fs::copy_options::overwrite_existing);
    r = run("report " + records.string() + " " + (records.parent_path() / "." / records.filename()).string());
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("is given twice (entries 1 and 2"), std::string::npos) << r.err;
    // Files of the other lists, by identity too: a scenario by its name and its path, a
    // calibration file under two spellings, a stress workload under two.
    r = run("compare --hardware h200-sxm,h100-sxm --scenario large-cv," + kSource + "/configs/scenarios/large-cv.yaml" + hw);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("--scenario: " + kSource + "/configs/scenarios/large-cv.yaml is given twice (entries 1 and 2"),
              std::string::npos)
        << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    fs::create_directories(records.parent_path() / "sub");
    r = run("project --hardware h200-sxm --calibrate " + records.string() + "," +
            (records.parent_path() / "sub" / ".." / records.filename()).string() + " --out " +
            (scratch() / "cal.jsonl").string() + hw);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("--calibrate: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("is given twice (entries 1 and 2, as " + records.string() + ")"), std::string::npos) << r.err;
    const fs::path stress_out = scratch() / "stress.jsonl";
    fs::remove(stress_out);
    r = run("stress --config " + kSource + "/configs/ci-small.yaml," + kSource + "/configs/../configs/ci-small.yaml" +
            " --backend cpu --duration 2s --interval 1s --out " + stress_out.string());
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("--config: " + kSource + "/configs/../configs/ci-small.yaml is given twice"), std::string::npos)
        << r.err;
    EXPECT_FALSE(fs::exists(stress_out));
}

// A test hook that could never fire is refused before any work, once, naming the variable:
// a CUDA fault off the CUDA backend, a rank that is not launched (2 ranks, and 1).
TEST(HostileCli, ATestHookThatCannotFireIsRefusedBeforeAnyWork) {
    const fs::path out = scratch() / "hooks.jsonl";
    fs::remove(out);
    const std::string train = std::string(SCALEBENCH_BINARY) + " train --config " + kSource +
                              "/configs/ci-small.yaml --backend cpu --steps 2 --warmup 0 --out " + out.string();
    const struct {
        std::string env;
        int np;
        std::string said;
    } cases[] = {
        {"SCALEBENCH_TEST_CUDA_FAULT=0:3", 1,
         "scalebench: error: SCALEBENCH_TEST_CUDA_FAULT='0:3': a CUDA fault needs the cuda backend, and this run's is cpu"},
        {"SCALEBENCH_TEST_DELAY_RANK=7:5", 2,
         "scalebench: error: SCALEBENCH_TEST_DELAY_RANK='7:5': rank 7 is not launched (the world holds 2 ranks, 0 to 1)"},
        {"SCALEBENCH_TEST_COMM_DELAY=5:10", 1,
         "scalebench: error: SCALEBENCH_TEST_COMM_DELAY='5:10': rank 5 is not launched (the world holds 1 rank, 0 to 0)"},
    };
    for (const auto& c : cases) {
        const Result r = sb::e2e::run_shell(c.env + " " + mpirun(c.np) + train, scratch() / "run");
        EXPECT_EQ(r.code, 2) << c.env << ": " << r.err;
        EXPECT_NE(r.err.find(c.said), std::string::npos) << r.err;
        int lines = 0;
        std::istringstream err(r.err);
        for (std::string line; std::getline(err, line);) lines += line.rfind("scalebench:", 0) == 0;
        EXPECT_EQ(lines, 1) << r.err;
        EXPECT_TRUE(r.out.empty()) << c.env << " printed before the refusal:\n" << r.out;
        EXPECT_FALSE(fs::exists(out)) << c.env << " wrote a record";
    }
}

// A name from a profile reaches the terminal's tables as one printable line: a newline, a `|`
// and an escape sequence in `name:` break neither project's table nor compare's.
TEST(HostileCli, AProfileNameCannotBreakATerminalTable) {
    const fs::path profile = scratch() / "evil.yaml";
    std::ifstream in(kSource + "/configs/hardware/h200-sxm.yaml");
    std::ostringstream text;
    for (std::string line; std::getline(in, line);)
        text << (line.rfind("name:", 0) == 0 ? std::string(R"(name: "evil|name\nnext=1+2\e[31mred")") : line) << "\n";
    std::ofstream(profile) << text.str();
    const std::string shown = "evil|name\\x0anext=1+2\\x1b[31mred";
    const std::string hw = " --profile-dir " + kSource + "/configs/hardware";
    const fs::path preset = scratch() / "tiny.yaml";  // the buyer's table of one small workload
    std::ofstream(preset) << "scenario: tiny\ngpus: 8\nworkloads: [ci-small.yaml]\n";
    for (const std::string& command :
         {"project --hardware " + profile.string() + " --out " + (scratch() / "evil.jsonl").string(),
          "compare --hardware " + profile.string() + ",h100-sxm --config " + kSource + "/configs/ci-small.yaml" + hw,
          "compare --hardware " + profile.string() + ",h100-sxm --scenario " + preset.string() + hw}) {
        const Result r = run(command);
        ASSERT_EQ(r.code, 0) << command << ": " << r.err;
        EXPECT_NE(r.out.find(shown), std::string::npos) << r.out;
        EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << command << " printed a raw escape";
        EXPECT_EQ(r.out.find("\nnext=1+2"), std::string::npos) << command << " broke a line on the name";
    }
}

// The projection's convolution engine does not depend on the build: conv_engine auto traces
// cuDNN's convolutions in a CPU build too (the trace records them without the library), as a
// cuDNN build's does; and compare's --conv-engine sets the ResNet workloads' engine among the
// scenario presets' transformers, refused only where no workload is a ResNet.
TEST(HostileCli, TheConvolutionEngineProjectedDoesNotDependOnTheBuild) {
    const std::string hw = " --profile-dir " + kSource + "/configs/hardware";
    const fs::path out = scratch() / "engine.jsonl";
    fs::remove(out);
    Result r = run("project --hardware h200-sxm --scaling 1 --config " + kSource + "/configs/resnet50.yaml --out " +
                   out.string() + hw);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("convolutions traced as cudnn"), std::string::npos) << r.out;
    EXPECT_EQ(sb::read_records(out.string()).records.back()["conv_engine"], "cudnn");
    r = run("compare --hardware h200-sxm,h100-sxm --conv-engine im2col --scenario small-experiments" + hw);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("convolutions traced as im2col"), std::string::npos) << r.out;
    const fs::path preset = scratch() / "transformers-only.yaml";
    std::ofstream(preset) << "scenario: transformers only\ngpus: 8\nworkloads: [ci-transformer.yaml]\n";
    r = run("compare --hardware h200-sxm,h100-sxm --conv-engine im2col --scenario " + preset.string() + hw);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("--conv-engine im2col: none of the scenarios' workloads is a ResNet"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
}

}  // namespace
