// compare's verdict logic on hand-made profiles: a workload that does not fit never wins; a
// verdict that changes when a ranged number moves to an end of its range is reported as a flip
// naming the number, its end and the other winner; none is reported where no range decides.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "src/commands/project_command.h"
#include "src/core/config.h"
#include "src/core/errors.h"
#include "src/projection/hardware.h"
#include "src/projection/projection.h"

namespace sb {
namespace {

const std::string kSource = SCALEBENCH_SOURCE_DIR;

HardwareProfile profile(const std::string& name) {
    return load_hardware_profile(kSource + "/configs/hardware/" + name + ".yaml");
}

TrainConfig bert_base() {
    TrainConfig cfg = load_config_file(kSource + "/configs/bert-base.yaml");
    cfg.batch_size = 8;
    cfg.transformer.shape.seq_len = 128;
    validate_config(cfg);
    return cfg;
}

const Verdict& scenario(const std::vector<Verdict>& v, const std::string& name) {
    for (const Verdict& x : v)
        if (name == x.scenario) return x;
    ADD_FAILURE() << "no scenario " << name;
    return v.front();
}

TEST(CompareVerdicts, AWorkloadThatDoesNotFitNeverWins) {
    const TrainConfig cfg = bert_base();
    HardwareProfile cheap = profile("rtx4090-24gb-pcie4");
    cheap.name = "cheap-but-small";
    cheap.price_usd.value = 1;  // the best per dollar by far...
    cheap.memory_gb.value = 1;  // ...but the step needs more than 1 GiB
    HardwareProfile a100 = profile("a100-sxm4-40gb");
    const std::vector<HardwareProfile> profiles = {cheap, a100};
    const std::vector<Calibration> none(2);
    const std::vector<CompareRow> rows = compare_rows(cfg, profiles, none, "", false);
    ASSERT_FALSE(rows[0].fits());
    for (const Verdict& v : verdicts(rows)) {
        ASSERT_NE(v.winner, nullptr) << v.scenario;
        EXPECT_EQ(v.winner->hw.name, "a100-sxm4-40gb") << v.scenario;
    }
    // Alone, it wins nothing: "fits none".
    const std::vector<CompareRow> alone = compare_rows(cfg, {cheap}, {Calibration{}}, "", false);
    EXPECT_EQ(scenario(verdicts(alone), "small experiments").winner, nullptr);
}

TEST(CompareVerdicts, AFlipInsideABandIsReportedWithTheNumberAndItsEnd) {
    // The preset's batch of 32: four stock 4090s are faster than one (the scaling floor holds).
    const TrainConfig cfg = load_config_file(kSource + "/configs/bert-base.yaml");
    HardwareProfile staged = profile("rtx4090-24gb-pcie4");  // link_efficiency and staged_overlap are ranges
    staged.name = "staged";
    const HardwareProfile p2p = profile("rtx4090-24gb-pcie4-p2p");  // no ranges
    const std::vector<Calibration> none(2);
    // Price the staged node so that, per dollar at 4 GPUs, it scores below the P2P node at the
    // central values and above it with its staged copy at the high end of its range.
    auto per_10k_at4 = [&](const HardwareProfile& hw) {
        const CompareRow row = compare_rows(cfg, {hw}, {Calibration{}}, "", false).front();
        return row.per_10k(*row.at(4));
    };
    const double p2p_score = per_10k_at4(p2p);
    const double central = per_10k_at4(staged);
    const double high = per_10k_at4(at_range_end(staged, "node.link_efficiency", true));
    ASSERT_GT(high, central * 1.2) << "the range must matter at 4 GPUs";
    staged.price_usd.value *= std::sqrt(central * high) / p2p_score;
    const std::vector<HardwareProfile> profiles = {staged, p2p};
    const std::vector<CompareRow> rows = compare_rows(cfg, profiles, none, "", false);  // the verdicts point into them
    const std::vector<Verdict> central_verdicts = verdicts(rows);
    const Verdict& nlp = scenario(central_verdicts, "NLP fine-tuning");
    ASSERT_NE(nlp.winner, nullptr);
    // The P2P node's score (no ranges) lies outside the staged node's band's reach from below:
    // no tie; the P2P node wins at the central values.
    EXPECT_EQ(nlp.winner->hw.name, "rtx4090-24gb-pcie4-p2p") << nlp.reason;
    // With the staged copy at the high end of its range the staged node wins: reported as a flip.
    const std::vector<std::vector<std::string>> flips = verdict_flips(cfg, profiles, none, central_verdicts);
    const size_t at = static_cast<size_t>(&nlp - central_verdicts.data());
    EXPECT_NE(std::find(flips[at].begin(), flips[at].end(), "staged with node.link_efficiency at its high end (0.7)"),
              flips[at].end())
        << (flips[at].empty() ? "no flip" : flips[at].front());
    // One GPU needs no all-reduce: no range changes "small experiments".
    const size_t small = static_cast<size_t>(&scenario(central_verdicts, "small experiments") - central_verdicts.data());
    EXPECT_TRUE(flips[small].empty());
}

}  // namespace
}  // namespace sb

namespace sb {
namespace {

// A hand-made row: a profile (name, price, GPUs per node, driver) and its samples/s at 1, 2, 4, 8
// GPUs (up to the node), every configuration fitting, with the given band half-width (fraction).
CompareRow made_row(const std::string& name, double price, bool patched, std::vector<double> samples, double band = 0) {
    CompareRow r;
    r.hw = load_hardware_profile(kSource + "/configs/hardware/h200-sxm.yaml");
    r.hw.name = name;
    r.hw.price_usd.value = price;
    r.hw.patched_driver = patched;
    int g = 1;
    for (double s : samples) {
        Projection p;
        p.step.world_size = g;
        p.samples_per_s = s;
        p.efficiency = s / (g * samples.front());
        p.record = {{"fits_memory", true}, {"memory_per_gpu_gb", 1.0}};
        r.by_gpus.push_back(p);
        r.bands.push_back({s * (1 - band), s * (1 + band)});
        g *= 2;
    }
    return r;
}

TEST(CompareVerdicts, ATieInsideTheBandGoesToTheCheaperThenTheStockDriver) {
    // Same GPU, same price: the patched-driver node ties and loses to the stock one.
    std::vector<CompareRow> rows = {made_row("patched", 1000, true, {100.5}), made_row("stock", 1000, false, {100.0})};
    EXPECT_EQ(scenario(verdicts(rows), "small experiments").winner->hw.name, "stock");
    // Per dollar, B is 5% ahead of A but each lies inside the other's band (+-10%): a tie, and A
    // costs less per GPU.
    rows = {made_row("a", 1000, false, {100.0}, 0.10), made_row("b", 1100, false, {115.5}, 0.10)};
    const std::vector<Verdict> all = verdicts(rows);
    const Verdict& v = scenario(all, "small experiments");
    EXPECT_EQ(v.winner->hw.name, "a");
    EXPECT_NE(v.reason.find("ties with b"), std::string::npos) << v.reason;
    // A wide band that reaches B's score is not enough while B's is narrow: B's central value lies
    // inside A's band, A's not inside B's. The better score wins; so it does without bands.
    rows = {made_row("a", 1000, false, {100.0}, 0.30), made_row("b", 1100, false, {115.5})};
    EXPECT_EQ(scenario(verdicts(rows), "small experiments").winner->hw.name, "b");
    rows = {made_row("a", 1000, false, {100.0}), made_row("b", 1100, false, {115.5})};
    EXPECT_EQ(scenario(verdicts(rows), "small experiments").winner->hw.name, "b");
}

TEST(CompareVerdicts, AMultiGpuConfigurationSlowerThanOneGpuOfAnotherIsNoAnswer) {
    // Four cheap GPUs at 41% scaling (164 samples/s) are the best per dollar at 4 GPUs, but one GPU
    // of the other profile runs 200: the cheap node does not qualify for the multi-GPU scenarios.
    std::vector<CompareRow> rows = {made_row("cheap", 1000, false, {100, 120, 164, 200}),
                                    made_row("big", 10000, false, {200, 390, 780, 1560})};
    const std::vector<Verdict> v = verdicts(rows);
    EXPECT_EQ(scenario(v, "NLP fine-tuning").winner->hw.name, "big");
    EXPECT_EQ(scenario(v, "large CV training").winner->hw.name, "big");
    EXPECT_EQ(scenario(v, "small experiments").winner->hw.name, "cheap");  // one GPU: per dollar
    // Alone, the cheap node has no single GPU above it: its 4 GPUs are the answer.
    rows = {made_row("cheap", 1000, false, {100, 120, 164, 200})};
    EXPECT_EQ(scenario(verdicts(rows), "NLP fine-tuning").winner->hw.name, "cheap");
}

TEST(CompareVerdicts, TheWholeCostCountsServerShareAndPowerOverThePeriod) {
    HardwareProfile hw = load_hardware_profile(kSource + "/configs/hardware/h200-sxm.yaml");
    hw.price_usd.value = 30000;
    hw.server_usd.value = 80000;
    hw.host_power_w.value = 4600;
    hw.tdp_w.value = 700;
    const CostTerms terms{3, 0.15};
    const ConfigurationCost c = configuration_cost(hw, 4, terms);  // half of an 8-GPU node
    EXPECT_DOUBLE_EQ(c.gpus_usd, 120000);
    EXPECT_DOUBLE_EQ(c.server_usd, 40000);
    // (4 x 700 + 4600 / 2) W = 5.1 kW for 3 x 8766 h at 0.15 USD/kWh.
    EXPECT_NEAR(c.power_usd, 5.1 * 3 * 365.25 * 24 * 0.15, 1e-6);
    EXPECT_NEAR(c.total(), 120000 + 40000 + 20117.97, 0.01);
}

TEST(CompareVerdicts, TheLimitedBudgetCountsTheServerAndTheAmpleTheResult) {
    // Same GPU price: "cheap-server" holds the same GPUs in a far cheaper server, so it wins the
    // limited budget; "fast" runs 30% more per node and wins the ample one.
    std::vector<CompareRow> rows = {made_row("fast", 1000, false, {130, 260, 520, 1040}),
                                    made_row("cheap-server", 1000, false, {100, 200, 400, 800})};
    rows[0].hw.server_usd.value = 200000;
    rows[1].hw.server_usd.value = 5000;
    const ScenarioRule ample{"large CV training", 8, Score::samples_per_s, {}};
    const ScenarioRule limited{"large CV training", 8, Score::per_10k_whole_cost, {}};
    EXPECT_EQ(decide(rows, ample).winner->hw.name, "fast");
    const Verdict v = decide(rows, limited);
    EXPECT_EQ(v.winner->hw.name, "cheap-server");
    EXPECT_NE(v.reason.find("samples/s per $10k of the whole cost best at 8 GPUs"), std::string::npos) << v.reason;
}

TEST(CompareVerdicts, ProductionNeedsEccDatacenterSupportAndTheVendorDriver) {
    std::vector<CompareRow> rows = {made_row("geforce", 1000, false, {300}), made_row("patched", 1000, true, {300}),
                                    made_row("datacenter", 10000, false, {100})};
    rows[0].hw.ecc.value = "optional";
    rows[0].hw.datacenter_use.value = "no";
    const ScenarioRule production{"production", 1, Score::samples_per_s, {"ecc", "datacenter_use", "vendor_driver"}};
    const Verdict v = decide(rows, production);
    ASSERT_NE(v.winner, nullptr);
    EXPECT_EQ(v.winner->hw.name, "datacenter");  // three times slower, the only one that qualifies
    EXPECT_NE(v.reason.find("geforce: ECC optional (not on by default), no datacenter support or licence"),
              std::string::npos) << v.reason;
    EXPECT_NE(v.reason.find("patched: needs a patched driver"), std::string::npos) << v.reason;
    // None qualifying is said, not decided.
    const Verdict none = decide({rows[0], rows[1]}, production);
    EXPECT_EQ(none.winner, nullptr);
    EXPECT_NE(none.reason.find("none qualifies"), std::string::npos) << none.reason;
    // A profile recording no production facts does not qualify either.
    rows[2].hw.ecc = {};
    EXPECT_EQ(decide({rows[2]}, production).winner, nullptr);
}

TEST(CompareVerdicts, ShippedScenariosLoadAndBadOnesAreRefusedAtTheirLine) {
    const std::string configs = kSource + "/configs";
    for (const char* name : {"large-cv", "nlp-fine-tuning", "small-experiments", "multi-gpu", "production"}) {
        const Scenario sc = load_scenario(configs + "/scenarios/" + name + ".yaml", configs);
        EXPECT_EQ(sc.workloads.size(), 2u) << name;
    }
    const Scenario prod = load_scenario(configs + "/scenarios/production.yaml", configs);
    EXPECT_EQ(prod.rule.needs, (std::vector<std::string>{"ecc", "datacenter_use", "vendor_driver", "soak"}));
    const auto dir = std::filesystem::temp_directory_path() / "sb-scenario-test";
    std::filesystem::create_directories(dir);
    auto refused = [&](const std::string& text) {
        const std::string path = (dir / "bad.yaml").string();
        std::ofstream(path) << text;
        try {
            load_scenario(path, configs);
        } catch (const UserError& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_NE(refused("scenario: x\ngpus: 1\nworkloads: [nope.yaml]\n").find("bad.yaml:3:"), std::string::npos);
    EXPECT_NE(refused("scenario: x\ngpus: 1\nworkloads: [nope.yaml]\n").find("no workload config"), std::string::npos);
    EXPECT_NE(refused("scenario: x\ngpus: 1\nworkloads: [ci-small.yaml]\nrequires: [fast]\n").find("bad.yaml:4:"),
              std::string::npos);
    EXPECT_NE(refused("scenario: x\nworkloads: [ci-small.yaml]\n").find("key 'gpus': missing"), std::string::npos);
    EXPECT_NE(refused("scenario: x\ngpus: 1\nworkloads: [ci-small.yaml]\ncolour: red\n").find("colour"), std::string::npos);
    EXPECT_EQ(refused("scenario: x\ngpus: 1\nworkloads: [ci-small.yaml]\n"), "accepted");
}

TEST(CompareCards, ProjectedPerProfileAndMeasuredWhereTheGpusRecordsAre) {
    const std::string configs = kSource + "/configs";
    const auto dir = std::filesystem::temp_directory_path() / "sb-card-test";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir / "run1");
    const HardwareProfile a100 = profile("a100-sxm4-40gb");
    // No records: projected only. The fp16 8192^3 GEMM is a listed shape: its rate is the listed
    // rates' (197.51 and 215.33 TFLOP/s), and ms and TFLOP/s are one figure (2 n^3 FLOPs).
    std::vector<CardFigure> c = card_tests(a100, Calibration{}, configs, dir.string());
    ASSERT_EQ(c.size(), 6u);
    EXPECT_EQ(c[0].test, "GEMM fp16 8192^3");
    EXPECT_NEAR(c[1].projected, (197.51 + 215.33) / 2, 0.5);
    EXPECT_NEAR(c[0].projected * c[1].projected, 2.0 * 8192.0 * 8192.0 * 8192.0 / 1e9, 1e-6 * c[0].projected * c[1].projected);
    EXPECT_EQ(c[4].test, "ResNet-50 batch 256");
    const TrainConfig rn50 = load_config_file(configs + "/resnet50.yaml");
    EXPECT_DOUBLE_EQ(c[4].projected, project_workload(rn50, CostModel(a100, Calibration{}), {1}, {1}).front().samples_per_s);
    for (const CardFigure& f : c) EXPECT_LT(f.measured, 0) << f.test;
    // A gemm record of this GPU (and one of another GPU, and a projected one, both ignored).
    std::ofstream(dir / "run1" / "gemm.jsonl")
        << R"({"subcommand":"gemm","dtype":"fp16","m":8192,"n":8192,"k":8192,"tflops":201.0,"time_ms":{"median":5.47},)"
        << R"("gpu":{"name":"NVIDIA A100-SXM4-40GB"},"timestamp":"2026-01-01T00:00:00Z"})" << "\n"
        << R"({"subcommand":"gemm","dtype":"fp16","m":8192,"n":8192,"k":8192,"tflops":700.0,"time_ms":{"median":1.5},)"
        << R"("gpu":{"name":"NVIDIA H200"},"timestamp":"2026-01-02T00:00:00Z"})" << "\n"
        << R"({"projected":true,"subcommand":"gemm","dtype":"fp16","m":8192,"n":8192,"k":8192,"tflops":1.0,)"
        << R"("time_ms":{"median":1.0},"gpu":{"name":"NVIDIA A100-SXM4-40GB"},"timestamp":"2027-01-01T00:00:00Z"})" << "\n";
    c = card_tests(a100, Calibration{}, configs, dir.string());
    EXPECT_DOUBLE_EQ(c[0].measured, 5.47);
    EXPECT_DOUBLE_EQ(c[1].measured, 201.0);
    EXPECT_EQ(c[1].measured_from, (dir / "run1" / "gemm.jsonl").string());
    EXPECT_LT(c[2].measured, 0);  // no fp32 4096^3 record
}

TEST(CompareCards, TheSoakOfTheProfilesGpuIsSaidWithItsFile) {
    const auto dir = std::filesystem::temp_directory_path() / "sb-soak-test";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const HardwareProfile h200 = profile("h200-sxm");
    EXPECT_EQ(soak_summary(h200, dir.string()), "");
    std::ofstream(dir / "stress.jsonl")
        << R"({"subcommand":"stress","complete":false,"environment":{"gpu":{"name":"NVIDIA H200"}}})" << "\n"
        << R"({"subcommand":"stress","complete":true,"elapsed_s":150.0,"world_size":1,"sdc_checks":275,"checks_passed":true,)"
        << R"("workloads":[{"drift_pct":{"min":0.0,"max":0.47}},{"drift_pct":{"min":-0.6,"max":0.0}}],)"
        << R"("telemetry_by_rank":[{"ecc_corrected_delta":0,"ecc_uncorrected_delta":0,"temperature_c":{"max":56.0},)"
        << R"("power_w":{"max":696.6},"throttle_reasons_seen":["sw_power_cap"]}],)"
        << R"("environment":{"gpu":{"name":"NVIDIA H200"}},"timestamp":"2026-12-02T00:00:00Z"})" << "\n";
    EXPECT_EQ(soak_summary(h200, dir.string()),
              "soak 150 s on 1 GPU: 275 replica checks passed, throughput drift within 0.60%, ECC corrected/uncorrected "
              "0/0, up to 56 C and 697 W, throttling: sw_power_cap (" + (dir / "stress.jsonl").string() + ")");
    EXPECT_EQ(soak_summary(profile("a100-sxm4-40gb"), dir.string()), "");  // another GPU's soak is not its
}

}  // namespace
}  // namespace sb
