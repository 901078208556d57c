// End-to-end tests of `scalebench project` and `scalebench compare` through the real binary:
// the train-style table and one "projected" record per world size (readable by
// plot_scaling.py's fields), calibration lines, multi-node rows, the buyer's table with a
// verdict per scenario, and bad profiles or flags exiting 2 with FILE:LINE:COLUMN.
#include <gtest/gtest.h>
#include <iterator>
#include <sys/stat.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "src/core/results.h"
#include "tests/e2e/e2e_util.h"

namespace {

using sb::e2e::mpirun;
using sb::e2e::Result;
using sb::e2e::slurp;

const std::string kSource = SCALEBENCH_SOURCE_DIR;

Result run(const std::string& args) {
    return sb::e2e::run_shell(mpirun(1) + SCALEBENCH_BINARY + " " + args,
                              sb::e2e::scratch("project-e2e"));
}

std::string profiles() { return " --profile-dir " + kSource + "/configs/hardware"; }

// The shipped configs with every profile's framework cost per step (node.framework_step_ms, 3.25 ms of
// PyTorch DDP) at 0: CI's tiny MLP steps take under a millisecond, which that cost outweighs, so no
// multi-GPU configuration of it would qualify. The tests that use it judge the rules, not DDP.
std::string profiles_without_framework_cost() {
    const std::filesystem::path configs = sb::e2e::scratch("project-e2e") / "no-framework" / "configs";
    std::filesystem::remove_all(configs);
    std::filesystem::create_directories(configs.parent_path());
    std::filesystem::copy(kSource + "/configs", configs, std::filesystem::copy_options::recursive);
    for (const auto& e : std::filesystem::directory_iterator(configs / "hardware")) {
        std::ifstream in(e.path());
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const size_t at = text.find("\nnode:\n");
        EXPECT_NE(at, std::string::npos) << e.path();
        text.insert(at + 7, "  framework_step_ms: {value: 0, source: \"e2e: the rules without DDP's cost\"}\n");
        std::ofstream(e.path()) << text;
    }
    return " --profile-dir " + (configs / "hardware").string();
}

TEST(ProjectCli, PrintsTheTrainTableAndAppendsProjectedRecords) {
    const auto out = sb::e2e::scratch("project-e2e") / "projected.jsonl";
    std::filesystem::remove(out);
    const Result r = run("project --hardware a100-sxm4-40gb --config " + kSource + "/configs/ci-small.yaml --gpus 1,2,8 --nodes 1,2 --out " +
                         out.string() + profiles());
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("ranks    samples/s    per rank    step ms"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("calibration: none"), std::string::npos);
    const auto records = sb::read_records(out.string()).records;
    ASSERT_EQ(records.size(), 6u);  // 1, 2, 8 GPUs per node on 1 and 2 nodes
    const std::vector<int> worlds = {1, 2, 8, 2, 4, 16};
    for (size_t i = 0; i < records.size(); ++i) {
        const auto& rec = records[i];
        EXPECT_EQ(rec["subcommand"], "project");
        EXPECT_EQ(rec["projected"], true);
        EXPECT_EQ(rec["world_size"], worlds[i]);
        for (const char* key : {"step_ms", "compute_ms", "exposed_comm_ms", "optimizer_ms"})
            EXPECT_GT(rec[key]["median"].get<double>(), 0.0 - 1e-12) << key;
        EXPECT_GT(rec["samples_per_s"].get<double>(), 0.0);
        EXPECT_FALSE(rec["assumptions"].empty());
        EXPECT_EQ(rec["hardware"]["name"], "a100-sxm4-40gb");
        EXPECT_EQ(rec["environment"]["gpu"]["name"], "NVIDIA A100-SXM4-40GB");
    }
    EXPECT_DOUBLE_EQ(records[0]["scaling_efficiency"].get<double>(), 1.0);
    // Crossing nodes costs more than staying in one: 2 GPUs in two nodes scale worse.
    EXPECT_LT(records[3]["scaling_efficiency"].get<double>(), records[1]["scaling_efficiency"].get<double>());
}

TEST(ProjectCli, CalibratesFromCommittedRecordsOfTheSameGpu) {
    const auto out = sb::e2e::scratch("project-e2e") / "calibrated.jsonl";
    const std::string dir = kSource + "/results/h200-one-gpu/gemm/";
    const Result r = run("project --hardware h200-sxm --gpus 1 --calibrate " + dir + "gemm.jsonl," + dir +
                         "comm.jsonl --out " + out.string() + profiles());
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("calibration: bf16 GEMM efficiency at large shapes"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("calibration: memory efficiency 0.868"), std::string::npos) << r.out;
    const auto rec = sb::read_records(out.string()).records.back();
    EXPECT_EQ(rec["calibration"]["files"].size(), 2u);
}

TEST(ProjectCli, BadProfilesAndFlagsExit2WithWhere) {
    const auto dir = sb::e2e::scratch("project-e2e");
    const auto bad = dir / "bad.yaml";
    std::ofstream(bad) << "name: bad\ndescription: \"x\"\ngpu:\n  device_name: \"NVIDIA H200\"\n  tdp_w: {value: -1, source: \"x\"}\n";
    Result r = run("project --hardware " + bad.string() + " --out " + (dir / "x.jsonl").string());
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find(bad.string() + ":5:18: key 'gpu.tdp_w.value': must be in [10, 5000], got -1"), std::string::npos) << r.err;
    r = run("project --hardware no-such-profile" + profiles());
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--hardware no-such-profile: no such profile in"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("; profiles: a100-pcie-40gb"), std::string::npos) << r.err;
    r = run("project --hardware rtx4090-24gb-pcie4 --gpus 16" + profiles());
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--scaling 16: rtx4090-24gb-pcie4 has 8 GPUs per node"), std::string::npos) << r.err;
    r = run("compare --hardware h200-sxm,nope" + profiles());
    EXPECT_EQ(r.code, 2);
    EXPECT_FALSE(std::filesystem::exists(dir / "x.jsonl"));
}

TEST(CompareCli, BuyersTableWithAVerdictPerScenario) {
    const Result r = run("compare --hardware a100-sxm4-40gb,rtx4090-24gb-pcie4,rtx4090-24gb-pcie4-p2p,h200-sxm --config " +
                         kSource + "/configs/ci-small.yaml" + profiles());
    ASSERT_EQ(r.code, 0) << r.err;
    for (const char* text : {"per $10k", "per kW", "a100-sxm4-40gb", "rtx4090-24gb-pcie4-p2p", "small experiments",
                             "NLP fine-tuning", "large CV training", "multi-GPU training",
                             // the stock 4090's ranges (staged copy rate, staged overlap) give its band
                             "bands (every ranged number of the profile at its ends)",
                             "node.link_efficiency 0.26 [0.187-0.7]", "node.staged_overlap 0.5 [0-1]"})
        EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
    std::stringstream lines(r.out);  // readable at 100 columns
    for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 100u) << line;
}

TEST(CompareCli, AllProfilesWhatIfsAndUnknownNames) {
    Result r = run("compare --hardware all --precision fp16 --grad-dtype bf16 --config " + kSource + "/configs/ci-small.yaml" +
                   profiles());
    ASSERT_EQ(r.code, 0) << r.err;
    for (const char* name : {"a100-pcie-40gb", "h100-sxm", "h200-sxm", "rtx4090-48gb-pcie4-p2p"})
        EXPECT_NE(r.out.find(name), std::string::npos) << name << "\n" << r.out;
    EXPECT_NE(r.out.find("precision fp16"), std::string::npos) << r.out;
    // An unknown name lists the shipped profiles; a bad what-if names its flag.
    r = run("compare --hardware a100" + profiles());
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--hardware a100: no such profile in"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("profiles: a100-pcie-40gb, a100-pcie-80gb"), std::string::npos) << r.err;
    r = run("project --hardware h200-sxm --precision fp8" + profiles());
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--precision fp8: precision: unknown value 'fp8'"), std::string::npos) << r.err;
}

TEST(CompareCli, JsonCarriesTheTableBandsAndVerdicts) {
    const Result r = run("compare --json --hardware a100-sxm4-40gb,rtx4090-24gb-pcie4 --config " + kSource +
                         "/configs/ci-small.yaml" + profiles());
    ASSERT_EQ(r.code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);  // stdout is the JSON object alone
    ASSERT_EQ(j["profiles"].size(), 2u);
    EXPECT_EQ(j["profiles"][1]["name"], "rtx4090-24gb-pcie4");
    EXPECT_EQ(j["profiles"][1]["ranges"],
              nlohmann::json({"gpu.compute_error_pct", "node.link_efficiency", "node.staged_overlap",
                              "node.staged_host_gbps", "node.step_jitter_pct", "node.bucket_launch_us",
                              "node.framework_step_ms"}));
    for (const auto& g : j["profiles"][1]["by_gpus"]) {
        EXPECT_LE(g["samples_per_s_band"][0].get<double>(), g["samples_per_s"].get<double>() + 1e-9);
        EXPECT_GE(g["samples_per_s_band"][1].get<double>(), g["samples_per_s"].get<double>() - 1e-9);
        // Every figure carries its band, around its central value.
        for (const char* figure : {"samples_per_s", "scaling_efficiency", "speedup", "allreduce_busbw_gbps", "exposed_comm_ms"}) {
            EXPECT_LE(g["bands"][figure][0].get<double>(), g[figure].get<double>() + 1e-9) << figure;
            EXPECT_GE(g["bands"][figure][1].get<double>(), g[figure].get<double>() - 1e-9) << figure;
        }
    }
    ASSERT_EQ(j["verdicts"].size(), 4u);
    EXPECT_EQ(j["verdicts"][0]["scenario"], "small experiments");
    EXPECT_TRUE(j["verdicts"][0]["flips"].is_array());
}

TEST(CompareCli, NodesJudgeEveryMultiGpuScenarioOnThatManyNodes) {
    const std::string tiny = profiles_without_framework_cost();
    const std::string two = " --hardware a100-sxm4-40gb,rtx4090-48gb-pcie4 --nodes 2";
    Result r = run("compare" + two + " --config " + kSource + "/configs/ci-small.yaml" + tiny);
    ASSERT_EQ(r.code, 0) << r.err;
    for (const char* text : {"   2 nodes    eff.", "2 nodes: the full node on 2 nodes", "16 GPUs on 2 nodes x 8",
                             "NLP fine-tuning: ", "at 8 GPUs on 2 nodes x 4", "small experiments: "})
        EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
    std::stringstream lines(r.out);  // readable at 100 columns
    for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 100u) << line;
    // --json carries the configurations on the nodes.
    r = run("compare --json" + two + " --config " + kSource + "/configs/ci-small.yaml" + tiny);
    ASSERT_EQ(r.code, 0) << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["nodes"], 2);
    ASSERT_EQ(j["profiles"][0]["on_nodes"].size(), 4u);
    EXPECT_EQ(j["profiles"][0]["on_nodes"][3]["gpus"], 16);
    EXPECT_EQ(j["profiles"][0]["on_nodes"][3]["nodes"], 2);
    EXPECT_EQ(j["profiles"][0]["on_nodes"][3]["gpus_per_node"], 8);
    EXPECT_NE(j["verdicts"][3]["reason"].get<std::string>().find("16 GPUs on 2 nodes x 8"), std::string::npos);

    // The scenario presets: every multi-GPU scenario judged on the 2 nodes, one GPU on one.
    const auto dir = sb::e2e::scratch("project-e2e");
    const std::string preset = (dir / "nodes-production.yaml").string();
    std::ofstream(preset) << "scenario: nodes production\ngpus: 8\nrequires: [ecc, datacenter_use, vendor_driver, soak]\n"
                             "workloads: [ci-small.yaml]\n";
    const std::string one_gpu = (dir / "nodes-one-gpu.yaml").string();
    std::ofstream(one_gpu) << "scenario: nodes one gpu\ngpus: 1\nworkloads: [ci-small.yaml]\n";
    r = run("compare --json" + two + " --scenario " + preset + "," + one_gpu + tiny);
    ASSERT_EQ(r.code, 0) << r.err;
    j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["nodes"], 2);
    ASSERT_EQ(j["scenarios"].size(), 2u);
    EXPECT_EQ(j["scenarios"][0]["nodes"], 2);
    EXPECT_EQ(j["scenarios"][1]["nodes"], 1);
    EXPECT_NE(j["scenarios"][0]["cells"][0]["reason"].get<std::string>().find("at 16 GPUs on 2 nodes x 8"), std::string::npos);
    EXPECT_NE(j["scenarios"][1]["cells"][0]["reason"].get<std::string>().find("at 1 GPU ("), std::string::npos);
    EXPECT_EQ(j["workloads"][0]["profiles"][1]["on_nodes"].size(), 4u);
    // No soak of either GPU is committed: "not measured", never a pass.
    EXPECT_EQ(j["profiles"][0]["soak_verdict"]["status"], "not measured");
    EXPECT_NE(j["scenarios"][0]["cells"][0]["reason"].get<std::string>().find("soak not measured"), std::string::npos);
    r = run("compare" + two + " --scenario " + preset + "," + one_gpu + tiny);
    ASSERT_EQ(r.code, 0) << r.err;
    for (const char* text : {"--nodes 2: every multi-GPU scenario judges 2 nodes", "a100-sxm4-40gb: soak not measured",
                             "on 2 nodes: 2 GPUs", "(8 GPUs per node on 2 nodes or the node's largest below"})
        EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
    std::stringstream scenario_lines(r.out);
    for (std::string line; std::getline(scenario_lines, line);) EXPECT_LE(line.size(), 100u) << line;
    // --out: the records on the nodes too (2 profiles x 2 GPU counts x 2 node counts).
    const auto out = dir / "compare-nodes.jsonl";
    std::filesystem::remove(out);
    r = run("compare" + two + " --scenario " + preset + " --gpus 1,8 --out " + out.string() + tiny);
    ASSERT_EQ(r.code, 0) << r.err;
    const auto records = sb::read_records(out.string()).records;
    ASSERT_EQ(records.size(), 8u);
    EXPECT_EQ(records[3]["nodes"], 2);
    EXPECT_EQ(records[3]["world_size"], 16);

    // Bad counts exit 2 with one line naming the flag, before any work.
    for (const std::string bad : {"0", "-1", "two", "1,2"}) {
        r = run("compare --hardware a100-sxm4-40gb --config " + kSource + "/configs/ci-small.yaml --nodes " + bad +
                " --out " + (dir / "refused.jsonl").string() + tiny);
        EXPECT_EQ(r.code, 2) << bad;
        EXPECT_NE(r.err.find("--nodes"), std::string::npos) << bad << ": " << r.err;
        // One line of scalebench's (mpirun adds its own below it).
        const std::string first = r.err.substr(0, r.err.find('\n'));
        EXPECT_EQ(first.rfind("scalebench: error", 0), 0u) << bad << ": " << r.err;
        EXPECT_NE(first.find("--nodes"), std::string::npos) << bad << ": " << r.err;
        size_t said = 0;
        for (size_t at = r.err.find("scalebench: error"); at != std::string::npos; at = r.err.find("scalebench: error", at + 1))
            ++said;
        EXPECT_EQ(said, 1u) << bad << ": " << r.err;
        EXPECT_TRUE(r.out.empty()) << bad << ": " << r.out;
    }
    EXPECT_FALSE(std::filesystem::exists(dir / "refused.jsonl"));
}

TEST(ProjectCli, ShippedProfilesAndHostsAreFoundFromAnyDirectory) {
    // The command runs in a scratch folder (not the source tree) with no --profile-dir.
    const auto dir = sb::e2e::scratch("project-cwd");
    const std::string cmd = "cd " + dir.string() + " && " + mpirun(1) + SCALEBENCH_BINARY +
                            " project --hardware rtx4090-48gb-pcie4 --host threadripper-pro-1s-ddr4-3200 --gpus 1,2 --out " +
                            (dir / "p.jsonl").string() + " >" + (dir / "out").string() + " 2>" + (dir / "err").string() +
                            " </dev/null";
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(dir / "err");
    const std::string out = slurp(dir / "out");
    EXPECT_NE(out.find("host: threadripper-pro-1s-ddr4-3200 (--host), host memory 204.8 GB/s"), std::string::npos) << out;
    EXPECT_NE(out.find("gpu.clock_factor 1 [0.9-1]"), std::string::npos) << out;
}

TEST(ProjectCli, FootprintBatchMaxAndRowsThatDoNotFit) {
    const auto dir = sb::e2e::scratch("project-fit");
    const std::string out = " --out " + (dir / "p.jsonl").string();
    // A ResNet-50 batch of 512 needs more than a 24 GB 4090 holds with scalebench's step, whichever
    // convolution engine the build traces (cuDNN's takes 23.4 GiB at 448, im2col's more).
    Result r = run("project --hardware rtx4090-24gb-pcie4 --gpus 1 --batch 512 --config " + kSource +
                   "/configs/resnet50.yaml" + profiles() + out);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("DOES NOT FIT"), std::string::npos) << r.out;
    const auto records = sb::read_records((dir / "p.jsonl").string()).records;
    ASSERT_EQ(records.size(), 1u);
    EXPECT_FALSE(records[0]["fits_memory"].get<bool>());
    EXPECT_GT(records[0]["memory_per_gpu_gb"].get<double>(), 24.0);
    // --batch max: the largest that fits, and it fits.
    r = run("project --hardware rtx4090-24gb-pcie4 --gpus 1 --batch max --config " + kSource + "/configs/resnet50.yaml" +
            profiles() + out);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("): fits"), std::string::npos) << r.out;
    // Bad values exit 2 naming the flag, before any record is written.
    r = run("project --hardware rtx4090-24gb-pcie4 --batch lots" + profiles() + out);
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--batch-size lots: expected an integer, got 'lots' (or 'max')"), std::string::npos) << r.err;
    EXPECT_EQ(sb::read_records((dir / "p.jsonl").string()).records.size(), 2u);
}

TEST(ProjectCli, TheShardingModeComesFromTheConfigOrTheFlagAndItsFitFromTrainsPrediction) {
    const auto dir = sb::e2e::scratch("project-sharding");
    const std::string out = " --out " + (dir / "p.jsonl").string();
    const std::string xl = " --config " + kSource + "/configs/gpt2-xl.yaml";  // sharding: optimizer, batch 2
    Result r = run("project --hardware rtx4090-24gb-pcie4-p2p --gpus 2,8" + xl + profiles() + out);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("sharding: optimizer"), std::string::npos) << r.out;
    // The gradients reduce-scattered in fp32, the parameters gathered in bf16: half the bytes.
    EXPECT_NE(r.out.find("8 GPUs: reduce-scatter 6230.4 MB in "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("all-gather 3115.2 MB in "), std::string::npos) << r.out;
    auto records = sb::read_records((dir / "p.jsonl").string()).records;
    ASSERT_EQ(records.size(), 2u);
    for (const auto& rec : records) {
        EXPECT_EQ(rec["sharding"]["mode"], "optimizer");
        EXPECT_TRUE(rec["allreduce_ms"].is_null());  // as a sharded train record: its collectives are under sharding
        EXPECT_GT(rec["sharding"]["all_gather"]["ms"].get<double>(), 0.0);
    }
    EXPECT_FALSE(records[0]["fits_memory"].get<bool>());  // 2 ranks: 27.0 GiB of 24
    EXPECT_TRUE(records[1]["fits_memory"].get<bool>());   // 8 ranks: 18.3
    // The flag replaces the config's mode: a replica fits at no count.
    r = run("project --hardware rtx4090-24gb-pcie4-p2p --gpus 8 --sharding none" + xl + profiles() + out);
    ASSERT_EQ(r.code, 0) << r.err;
    records = sb::read_records((dir / "p.jsonl").string()).records;
    ASSERT_EQ(records.size(), 3u);
    EXPECT_EQ(records[2]["sharding"]["mode"], "none");
    EXPECT_FALSE(records[2]["fits_memory"].get<bool>());
    // ZeRO-3: the parameters gathered as the forward and again as the backward reads them, so the
    // bf16 all-gather moves about the fp32 reduce-scatter's bytes (the tied embedding, read by the
    // embedding and the head in both passes, more often); it fits where the replica does not.
    r = run("project --hardware rtx4090-24gb-pcie4-p2p --gpus 8 --sharding parameters" + xl + profiles() + out);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("as the forward and again as the backward reads it"), std::string::npos) << r.out;
    records = sb::read_records((dir / "p.jsonl").string()).records;
    ASSERT_EQ(records.size(), 4u);
    const nlohmann::json& zero3 = records[3]["sharding"];
    EXPECT_EQ(zero3["mode"], "parameters");
    EXPECT_GT(zero3["all_gather"]["bytes"].get<double>(), zero3["reduce_scatter"]["bytes"].get<double>()) << zero3.dump();
    EXPECT_LE(zero3["all_gather"]["bytes"].get<double>(), 1.25 * zero3["reduce_scatter"]["bytes"].get<double>());
    EXPECT_GT(zero3["gathered_buckets"].get<int>(), records[3]["buckets"].get<int>());
    EXPECT_TRUE(records[3]["fits_memory"].get<bool>());
    EXPECT_LT(records[3]["memory_per_gpu_gb"].get<double>(), records[1]["memory_per_gpu_gb"].get<double>());
    // What no command knows is refused naming the flag; nothing is written.
    r = run("compare --hardware rtx4090-24gb-pcie4 --sharding zero3" + xl + profiles());
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--sharding"), std::string::npos) << r.err;
    EXPECT_EQ(sb::read_records((dir / "p.jsonl").string()).records.size(), 4u);
}

TEST(ProjectCli, CommPrintsNcclTestsTableWithItsBand) {
    const Result r = run("project --hardware rtx4090-24gb-pcie4-p2p --comm --scaling 4,8" + profiles());
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("#        size        count     type  redop   root       time    algbw    busbw"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("# nGpus 4 per node, 1 node: 4 ranks"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("# Avg bus bandwidth    : "), std::string::npos) << r.out;
    // The 1 GiB row of 4 GPUs: busbw = algbw x 2(n-1)/n, inside its band, the band the P2P range's ends.
    std::istringstream lines(r.out);
    bool found = false;
    for (std::string line; std::getline(lines, line);) {
        if (line.rfind("   1073741824", 0) != 0) continue;
        std::istringstream f(line);
        double size, count, root, time, algbw, busbw;
        std::string type, redop, band;
        f >> size >> count >> type >> redop >> root >> time >> algbw >> busbw >> band;
        EXPECT_NEAR(busbw, algbw * 1.5, 0.02) << line;
        EXPECT_NEAR(size / (time * 1e-6) / 1e9, algbw, 0.01) << line;
        const double lo = std::stod(band.substr(0, band.find('-'))), hi = std::stod(band.substr(band.find('-') + 1));
        EXPECT_LE(lo, busbw);
        EXPECT_GE(hi, busbw);
        EXPECT_LT(lo, 13.0);  // the P2P module's published low end, 12.7 GB/s
        EXPECT_GT(hi, 25.0);  // and its high end, 25.95
        found = true;
        break;  // the 4-GPU block comes first
    }
    EXPECT_TRUE(found) << r.out;
}

// A host-staged profile's busbw is fitted to training speed-ups, not checked against an
// all_reduce_perf run: the table says so, and a P2P profile's table does not.
TEST(ProjectCli, CommLabelsAHostStagedBusbwFitted) {
    const Result staged = run("project --hardware rtx4090-24gb-pcie4 --comm --scaling 2" + profiles());
    ASSERT_EQ(staged.code, 0) << staged.err;
    EXPECT_NE(staged.out.find("# the host-staged busbw is a fitted figure, not validated"), std::string::npos)
        << staged.out;
    const Result p2p = run("project --hardware rtx4090-24gb-pcie4-p2p --comm --scaling 2" + profiles());
    ASSERT_EQ(p2p.code, 0) << p2p.err;
    EXPECT_EQ(p2p.out.find("fitted figure"), std::string::npos) << p2p.out;
}

TEST(ProjectCli, WhatIfsForSequenceLengthAndConvolutionEngine) {
    const auto dir = sb::e2e::scratch("project-whatif");
    const std::string out = " --out " + (dir / "p.jsonl").string();
    Result r = run("project --hardware h200-sxm --scaling 1 --conv-engine im2col --config " + kSource +
                   "/configs/resnet50.yaml" + profiles() + out);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("convolutions traced as im2col"), std::string::npos) << r.out;
    EXPECT_EQ(sb::read_records((dir / "p.jsonl").string()).records.back()["conv_engine"], "im2col");
    r = run("project --hardware h200-sxm --scaling 1 --seq-len 64 --config " + kSource + "/configs/bert-base.yaml" +
            profiles() + out);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(sb::read_records((dir / "p.jsonl").string()).records.back()["config"]["transformer"]["seq_len"], 64);
    r = run("project --hardware h200-sxm --seq-len 64 --config " + kSource + "/configs/resnet50.yaml" + profiles() + out);
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--seq-len 64: the workload is a resnet model, not a transformer"), std::string::npos) << r.err;
    r = run("project --hardware h200-sxm --conv-engine fft --config " + kSource + "/configs/resnet50.yaml" + profiles() + out);
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--conv-engine fft: auto, im2col or cudnn"), std::string::npos) << r.err;
}

TEST(CompareCli, WithoutAConfigEveryScenarioAnswersInTwoBudgetColumns) {
    const std::string tiny = profiles_without_framework_cost();
    const auto dir = sb::e2e::scratch("project-e2e");
    // A small preset (the shipped ones project ResNet-152 and BERT-large): one workload, production's requirements.
    const std::string preset = (dir / "tiny-production.yaml").string();
    std::ofstream(preset) << "scenario: tiny production\ngpus: 8\nrequires: [ecc, datacenter_use, vendor_driver]\n"
                             "workloads: [ci-small.yaml]\n";
    Result r = run("compare --hardware a100-sxm4-40gb,rtx4090-48gb-pcie4-p2p --scenario small-experiments," + preset +
                   tiny);
    ASSERT_EQ(r.code, 0) << r.err;
    for (const char* text : {"ample budget", "limited budget", "small experiments", "tiny production", "bert-base b32",
                             "node cost per profile, full node", "card tests, one GPU", "fp16 8192^3", "samples/s per $10k of the whole cost",
                             "rtx4090-48gb-pcie4-p2p: ECC optional (not on by default)", "needs a patched driver"})
        EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
    std::stringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 100u) << line;
    r = run("compare --json --hardware a100-sxm4-40gb,rtx4090-48gb-pcie4-p2p --scenario " + preset + tiny);
    ASSERT_EQ(r.code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["scenarios"].size(), 1u);
    ASSERT_EQ(j["scenarios"][0]["cells"].size(), 2u);  // one workload, two budgets
    EXPECT_EQ(j["scenarios"][0]["cells"][0]["winner"], "a100-sxm4-40gb");
    EXPECT_EQ(j["scenarios"][0]["cells"][1]["budget"], "limited");
    EXPECT_GT(j["profiles"][0]["node_cost_usd"]["server"].get<double>(), 0);
    // What-ifs: --gpus picks the counts projected; --out appends every projected record (2
    // profiles x 2 counts of the one workload), each with its band.
    const auto out = dir / "compare-out.jsonl";
    std::filesystem::remove(out);
    r = run("compare --hardware a100-sxm4-40gb,rtx4090-48gb-pcie4-p2p --scenario " + preset + " --gpus 1,2 --out " +
            out.string() + tiny);
    ASSERT_EQ(r.code, 0) << r.err;
    std::ifstream records(out);
    int count = 0;
    for (std::string line; std::getline(records, line); ++count) {
        const nlohmann::json rec = nlohmann::json::parse(line);
        EXPECT_TRUE(rec["projected"].get<bool>());
        EXPECT_LE(rec["world_size"].get<int>(), 2);
        EXPECT_EQ(rec["samples_per_s_band"].size(), 2u);
    }
    EXPECT_EQ(count, 4);
    r = run("compare --hardware a100-sxm4-40gb --scenario " + preset + " --gpus 16 --out " + (dir / "none.jsonl").string() +
            tiny);
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--scaling 16: a100-sxm4-40gb has 8 GPUs per node"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "none.jsonl"));
    // Unknown scenarios and bad presets exit 2 naming them, before any work.
    r = run("compare --hardware a100-sxm4-40gb --scenario nope" + tiny);
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--scenario nope: no such scenario; scenarios: large-cv"), std::string::npos) << r.err;
    std::ofstream(preset) << "scenario: bad\ngpus: 0\nworkloads: [ci-small.yaml]\n";
    r = run("compare --hardware a100-sxm4-40gb --scenario " + preset + tiny);
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("tiny-production.yaml:2:"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(ProjectCli, RecordsCarryTheirRunsIdAsTrainsDo) {
    const auto dir = sb::e2e::scratch("project-e2e");
    const auto out = dir / "run-ids.jsonl";
    std::filesystem::remove(out);
    const std::string workload = " --config " + kSource + "/configs/ci-small.yaml --scaling 1,2 --out " + out.string();
    for (int run_index = 0; run_index < 2; ++run_index) {
        const Result r = run("project --hardware a100-sxm4-40gb" + workload + profiles());
        ASSERT_EQ(r.code, 0) << r.err;
    }
    const Result r = run("compare --hardware a100-sxm4-40gb,h100-sxm" + workload + profiles());
    ASSERT_EQ(r.code, 0) << r.err;
    const auto records = sb::read_records(out.string()).records;
    ASSERT_EQ(records.size(), 8u);  // 2 projects of 2 world sizes, then 2 profiles x 2 in one compare
    std::vector<std::string> ids;
    for (const auto& rec : records) {
        ASSERT_TRUE(rec.contains("run_id") && rec["run_id"].is_string()) << rec.dump();
        ids.push_back(rec["run_id"].get<std::string>());
        EXPECT_EQ(ids.back().size(), 16u);
        EXPECT_EQ(ids.back().find_first_not_of("0123456789abcdef"), std::string::npos) << ids.back();
        EXPECT_FALSE(rec.value("timestamp", "").empty());
    }
    // One id per run: each run's records share it, and no two runs have the same.
    EXPECT_EQ(ids[0], ids[1]);
    EXPECT_EQ(ids[2], ids[3]);
    for (size_t i = 5; i < 8; ++i) EXPECT_EQ(ids[4], ids[i]) << i;  // the compare's four records
    EXPECT_NE(ids[0], ids[2]);
    EXPECT_NE(ids[2], ids[4]);
    EXPECT_NE(ids[0], ids[4]);
}

TEST(CompareCli, ReportPathsAreCheckedBeforeAnyWork) {
    const auto dir = sb::e2e::scratch("project-report-paths");
    const std::string guide = (dir / "guide.md").string();
    std::filesystem::remove(dir / "guide.json");
    // The report's JSON a FIFO: refused at once (a write would wait for a reader forever).
    ASSERT_EQ(::mkfifo((dir / "guide.json").c_str(), 0644), 0);
    Result r = run("compare --hardware all --report " + guide + profiles());
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--report " + (dir / "guide.json").string() + ": is a FIFO"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    std::filesystem::remove(dir / "guide.json");
    // A folder that cannot be written (even by root): refused naming the flag, before any work.
    r = run("compare --hardware all --report /proc/scalebench-guide.md" + profiles());
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--report /proc/scalebench-guide.md: cannot create"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    // Where the plots go is a file, not a folder.
    std::ofstream(dir / "guide-plots").close();
    r = run("compare --hardware all --report " + guide + profiles());
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("guide-plots, where its plots go, is not a folder"), std::string::npos) << r.err;
    std::filesystem::remove(dir / "guide-plots");
    // The report's JSON is the --out file, or a --calibrate input of the run: it would be overwritten.
    r = run("compare --hardware all --out " + (dir / "guide.json").string() + " --report " + guide + profiles());
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("is also the output --out "), std::string::npos) << r.err;
    const std::string calibration = kSource + "/results/h200-one-gpu/gemm/gemm.jsonl";
    const auto input = dir / "calibration.json";
    std::filesystem::copy_file(calibration, input, std::filesystem::copy_options::overwrite_existing);
    r = run("compare --hardware h200-sxm --calibrate " + input.string() + " --report " + (dir / "calibration.md").string() +
            profiles());
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("is the --calibrate file " + input.string() + "; writing it would replace it"), std::string::npos) << r.err;
    EXPECT_EQ(sb::e2e::slurp(input), sb::e2e::slurp(calibration));
    for (const char* left : {"guide.md", "guide.json", "calibration.md"})
        EXPECT_FALSE(std::filesystem::exists(dir / left)) << left;
}

}  // namespace
