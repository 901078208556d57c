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
using sb::e2e::mpirun;
using sb::e2e::slurp;

fs::path scratch() { return sb::e2e::scratch("robust-checks"); }

sb::e2e::Result run(const std::string& args, int np = 1) {
    return sb::e2e::run_shell("timeout 120 " + (np > 1 ? mpirun(np) : "") + SCALEBENCH_BINARY + " " + args,
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
    EXPECT_NE(r.err.find("--nodes: must be <= 1048576, got 99999999"), std::string::npos) << r.err;
    r = run("project --hardware a100-sxm4-40gb --batch-size 16777217");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--batch-size 16777217: must be <= 16777216, got 16777217"), std::string::npos) << r.err;
}

TEST(RobustChecks, ImplausibleNumbersInFlagsProfilesAndRecordsAreRefused) {
    // NaN and infinity are no numbers to the one number parser; the others are outside the range.
    for (const auto& [flag, says] : std::vector<std::pair<std::string, std::string>>{
             {"--years nan", "--years: expected a number, got 'nan'"},
             {"--years 0", "--years: must be in (0, 100], got 0 (years the node's power is paid for"},
             {"--years inf", "--years: expected a number, got 'inf'"},
             {"--usd-per-kwh nan", "--usd-per-kwh: expected a number, got 'nan'"},
             {"--usd-per-kwh -1", "--usd-per-kwh: must be in [0, 100], got -1 (dollars per kWh"}}) {
        const auto r = run("compare --hardware a100-sxm4-40gb " + flag);
        EXPECT_EQ(r.code, 2) << flag << "\n" << r.err;
        EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    }
    // Profiles: a field far outside any physical value, in either direction.
    const std::string shipped = slurp(std::string(SCALEBENCH_SOURCE_DIR) + "/configs/hardware/a100-sxm4-40gb.yaml");
    for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
             {"copy_gbps", "1e-300"}, {"kernel_gap_us", "1e300"}, {"price_usd", "1e-320"}}) {
        const size_t at = shipped.find("  " + key + ": {value: ");
        ASSERT_NE(at, std::string::npos) << key;
        const size_t begin = at + key.size() + 12, end = shipped.find(',', begin);
        const fs::path profile = scratch() / (key + ".yaml");
        std::ofstream(profile) << shipped.substr(0, begin) + value + shipped.substr(end);
        const auto r = run("project --hardware " + profile.string());
        EXPECT_EQ(r.code, 2) << key << "\n" << r.err;
        EXPECT_NE(r.err.find(profile.string() + ":"), std::string::npos) << r.err;
        // The key's own range and reason (src/projection/profile_ranges.cpp).
        EXPECT_NE(r.err.find(key + ".value': must be in ["), std::string::npos) << r.err;
        EXPECT_NE(r.err.find("], got " + value + " ("), std::string::npos) << r.err;
    }
    // Records given to --calibrate: the file and the record are named.
    for (const std::string& fraction : {std::string("0"), std::string("-0.5"), std::string("1e-300"), std::string("1.43")}) {
        const fs::path records = scratch() / "gemm.jsonl";
        std::ofstream(records) << "{\"subcommand\":\"gemm\",\"gpu\":{\"name\":\"NVIDIA A100-SXM4-40GB\"},\"dtype\":\"bf16\","
                                  "\"m\":4096,\"n\":4096,\"k\":4096,\"fraction_of_peak\":" << fraction << "}\n";
        const auto r = run("project --hardware a100-sxm4-40gb --calibrate " + records.string());
        EXPECT_EQ(r.code, 2) << fraction << "\n" << r.err;
        EXPECT_NE(r.err.find(records.string() + ": record 1: key 'fraction_of_peak': must be in [0.0001, 1.2]"),
                  std::string::npos) << r.err;
    }
}

// Refused once (rank 0 prints one line for every rank), exit 2, with no record written.
void expect_refused_once(const sb::e2e::Result& r, const std::string& says, const fs::path& out) {
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("scalebench: error: " + says), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("scalebench:", r.err.find("scalebench:") + 1), std::string::npos) << "said more than once:\n"
                                                                                          << r.err;
    EXPECT_FALSE(fs::exists(out)) << "a refused run wrote " << out;
}

TEST(RobustChecks, CommBuffersLargerThanMemoryAndEndlessLaunchCountsAreRefusedOnce) {
    const fs::path out = scratch() / "comm.jsonl";
    fs::remove(out);
    // 1 TiB all-reduced needs 2 TiB per rank (send and receive buffers): more than any CI host.
    auto r = run("comm --backend mpi -b 1024G -e 1024G --out " + out.string(), 2);
    expect_refused_once(r, "-e 1099511627776: the sweep's buffers need 2199023255552 bytes (2048.00 GiB) per rank "
                           "(all_reduce, float, world size 2: send and receive buffers), but rank ", out);
    EXPECT_NE(r.err.find("use a smaller -e"), std::string::npos) << r.err;
    // all_gather's receive buffer is the whole size, its send buffer a rank's share of it.
    r = run("comm --backend mpi --op all_gather -b 1024G -e 1024G --out " + out.string(), 2);
    expect_refused_once(r, "-e 1099511627776: the sweep's buffers need 1649267441664 bytes (1536.00 GiB) per rank "
                           "(all_gather, float, world size 2: send and receive buffers)", out);
    for (const auto& [flag, name] : {std::pair<std::string, std::string>{"-n", "--iters"}, {"-w", "--warmup_iters"},
                                     {"-c", "--check"}})
        expect_refused_once(run("comm --backend mpi -b 8 -e 8 " + flag + " 1000001 --out " + out.string(), 2),
                            name + ": must be <= 1000000, got 1000001 (", out);
}

TEST(RobustChecks, AnMlpTeacherTooLargeForMemoryIsRefusedNamingTheKey) {
    const fs::path out = scratch() / "teacher.jsonl", config = scratch() / "teacher.yaml";
    fs::remove(out);
    // The teacher labelling the data holds 2^20 x (16384 + 2) fp64 weights: 128 GiB, on the host,
    // while the model it labels for is 1 MiB.
    std::ofstream(config) << "model: mlp\nmlp:\n  input_dim: 16384\n  hidden: [16]\n  num_classes: 2\n"
                             "  teacher_hidden: 1048576\nbatch_size: 4\nsteps: 2\nwarmup: 0\n";
    const auto r = run("train --backend cpu --config " + config.string() + " --out " + out.string(), 2);
    expect_refused_once(r, config.string() + ": the mlp workload (262194 parameters) at batch 4 needs 128.0 GiB per "
                           "rank (parameters, gradients, optimizer state, activations and data; the data as generated "
                           "on the host, labelled by a teacher network of mlp.teacher_hidden 1048576), but rank ", out);
    EXPECT_NE(r.err.find("use a smaller model or batch (or mlp.teacher_hidden)"), std::string::npos) << r.err;
}

TEST(RobustChecks, StressWithMoreWorkloadsThanIntervalsIsRefusedUpFront) {
    const fs::path out = scratch() / "stress.jsonl";
    fs::remove(out);
    const std::string configs = std::string(SCALEBENCH_SOURCE_DIR) + "/configs/";  // three workloads, each once
    const auto r = run("stress --backend cpu --config " + configs + "ci-small.yaml," + configs + "default.yaml," + configs +
                       "ci-transformer.yaml" +
                       " --duration 2s --interval 1s --out " + out.string(), 2);
    expect_refused_once(r, "--duration 2s in intervals of 1s (--interval) gives 2 intervals, fewer than the 3 "
                           "workloads of --config", out);
}

// A soak whose loss stops being finite fails (exit 3) and stops after the interval that found
// it; the records say where, and a sane soak passes the same check.
TEST(RobustChecks, AStressRunWhoseLossStopsBeingFiniteFailsAndStops) {
    const fs::path config = scratch() / "diverges-stress.yaml", out = scratch() / "diverges-stress.jsonl";
    std::ofstream(config) << "model: mlp\nmlp:\n  input_dim: 64\n  hidden: [128, 128]\n  num_classes: 10\n"
                             "batch_size: 32\noptimizer:\n  kind: sgd\n  lr: 1.0e+30\n";
    const std::string small = std::string(SCALEBENCH_SOURCE_DIR) + "/configs/ci-small.yaml";
    fs::remove(out);
    const auto r = run("stress --backend cpu --config " + config.string() + "," + small +
                       " --duration 20s --interval 1s --out " + out.string(), 2);
    EXPECT_EQ(r.code, 3) << r.err;
    EXPECT_NE(r.err.find("stress: loss check FAILED: workload 0 (" + config.string() + ")'s loss is not finite after "
                         "global step "), std::string::npos) << r.err;
    std::vector<nlohmann::json> intervals, summaries;
    std::istringstream lines(slurp(out));
    for (std::string line; std::getline(lines, line);) {
        const nlohmann::json rec = nlohmann::json::parse(line);
        if (rec["subcommand"] == "end") EXPECT_EQ(rec["exit_code"], 3);
        if (rec["subcommand"] == "stress") (rec["complete"] == true ? summaries : intervals).push_back(rec);
    }
    ASSERT_EQ(intervals.size(), 1u) << "the run went on after its loss stopped being finite";
    EXPECT_TRUE(intervals[0]["loss"].is_null());
    EXPECT_EQ(intervals[0]["checks_passed"], false);
    EXPECT_EQ(intervals[0]["loss_check"]["passed"], false);
    EXPECT_EQ(intervals[0]["loss_check"]["nonfinite"]["workload"], 0);
    EXPECT_EQ(intervals[0]["loss_check"]["nonfinite"]["after_step"], intervals[0]["global_step"]);
    ASSERT_EQ(summaries.size(), 1u);
    EXPECT_EQ(summaries[0]["checks_passed"], false);
    EXPECT_EQ(summaries[0]["loss_check"], intervals[0]["loss_check"]);

    const fs::path ok = scratch() / "sane-stress.jsonl";
    fs::remove(ok);
    const auto sane = run("stress --backend cpu --config " + small + " --duration 1s --interval 1s --out " + ok.string());
    EXPECT_EQ(sane.code, 0) << sane.err;
    EXPECT_NE(slurp(ok).find("\"loss_check\":{\"nonfinite\":null,\"passed\":true}"), std::string::npos) << slurp(ok);
}

}  // namespace
