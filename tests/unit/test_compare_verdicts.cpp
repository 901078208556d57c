// compare's verdict logic on hand-made profiles: a workload that does not fit never wins; a
// verdict that changes when a ranged number moves to an end of its range is reported as a flip
// naming the number, its end and the other winner; none is reported where no range decides.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "src/commands/project_command.h"
#include "src/projection/buyers_guide.h"
#include "src/core/config.h"
#include "base/errors.h"
#include "src/core/workload.h"
#include "src/projection/hardware.h"
#include "src/projection/projection.h"

namespace sb {
namespace {

const std::string kSource = SCALEBENCH_SOURCE_DIR;

HardwareProfile profile(const std::string& name) {
    return load_hardware_profile(kSource + "/configs/hardware/" + name + ".yaml");
}

// The profile with every range collapsed to its central value (a point): what a test about
// something else needs when one profile's range would flip its verdict.
HardwareProfile without_ranges(HardwareProfile hw) {
    for (auto& [key, number] : sourced_numbers(hw)) number->lo_source = number->hi_source = "";
    return hw;
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
    ASSERT_FALSE(rows[0].by_gpus.front().fits_memory());
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
    // Without the host's staged rate, which binds the ring at 4 GPUs (below the copy rate at every
    // end of its range), so that the copy rate's range decides the flip.
    staged.staged_host_gbps = {};
    const HardwareProfile p2p = without_ranges(profile("rtx4090-24gb-pcie4-p2p"));
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
    EXPECT_NE(std::find(flips[at].begin(), flips[at].end(), "staged with staged's node.link_efficiency at its high end (0.7)"),
              flips[at].end())
        << (flips[at].empty() ? "no flip" : flips[at].front());
    // One GPU needs no all-reduce: no range changes "small experiments".
    const size_t small = static_cast<size_t>(&scenario(central_verdicts, "small experiments") - central_verdicts.data());
    EXPECT_TRUE(flips[small].empty());
}

TEST(CompareVerdicts, OneCardsGpuNumbersMoveTogetherInEveryProfileOfIt) {
    // Two profiles of one physical card (the 48 GB 4090, its clock a range [0.9, 1]) and an A100 priced
    // between the card's score at each end of that range: at the central clock the card wins; with
    // the clock at its low end in both profiles the A100 does. Moved in one profile alone, the other
    // would still win and no flip would show.
    const TrainConfig cfg = bert_base();
    HardwareProfile a = profile("rtx4090-48gb-pcie4"), b = a;
    ASSERT_TRUE(a.clock_factor.is_range());
    a.name = "card-a";
    b.name = "card-b";
    HardwareProfile a100 = without_ranges(profile("a100-sxm4-40gb"));
    auto per_10k_at1 = [&](const HardwareProfile& hw) {
        const CompareRow row = compare_rows(cfg, {hw}, {Calibration{}}, "", false).front();
        return row.per_10k(row.by_gpus.front());
    };
    const double central = per_10k_at1(a), low = per_10k_at1(at_range_end(a, "gpu.clock_factor", false));
    ASSERT_LT(low, central * 0.97) << "the clock must matter on one GPU";
    a100.price_usd.value *= per_10k_at1(a100) / std::sqrt(central * low);
    const std::vector<HardwareProfile> profiles = {a, b, a100};
    const std::vector<Calibration> none(3);
    const std::vector<CompareRow> rows = compare_rows(cfg, profiles, none, "", false);
    const std::vector<Verdict> central_verdicts = verdicts(rows);
    const Verdict& small = scenario(central_verdicts, "small experiments");
    ASSERT_NE(small.winner, nullptr);
    EXPECT_EQ(small.winner->hw.name, "card-a") << small.reason;
    const std::vector<std::vector<std::string>> flips = verdict_flips(cfg, profiles, none, central_verdicts);
    const std::vector<std::string>& f = flips[static_cast<size_t>(&small - central_verdicts.data())];
    EXPECT_NE(std::find(f.begin(), f.end(), "a100-sxm4-40gb with card-a and card-b's gpu.clock_factor at its low end (0.9)"),
              f.end())
        << (f.empty() ? "no flip" : f.front());
    for (const std::string& flip : f) EXPECT_EQ(flip.find("with card-b's gpu.clock_factor"), std::string::npos) << flip;
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
        p.bands.samples_per_s = {s * (1 - band), s * (1 + band)};
        p.bands.samples_per_s_without_compute_error = p.bands.samples_per_s;  // what the tie rule reads
        r.by_gpus.push_back(p);
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

TEST(CompareVerdicts, ABandWiderThanTheLeadWithTheComputeErrorIsSaid) {
    // B leads A by 5% (per $10k: 1050 against 1000); with the compute model's error B's band spans +-20%: the
    // verdict says so.
    std::vector<CompareRow> rows = {made_row("a", 1000, false, {100.0}), made_row("b", 1000, false, {105.0})};
    rows[1].by_gpus.front().bands.samples_per_s = {84.0, 126.0};
    const Verdict v = scenario(verdicts(rows), "small experiments");
    ASSERT_EQ(v.winner->hw.name, "b");
    EXPECT_NE(v.reason.find("the band with the compute model's error (840.0-1260.0) is wider than the lead over a (+50.0)"),
              std::string::npos) << v.reason;
    // A band narrower than the lead says nothing.
    rows[1].by_gpus.front().bands.samples_per_s = {104.0, 106.0};
    EXPECT_EQ(scenario(verdicts(rows), "small experiments").reason.find("wider than the lead"), std::string::npos);
}

TEST(CompareVerdicts, AProfilesCaveatsAreSaidBesideEveryVerdictItWins) {
    // The P2P module's preconditions: whatever the profile wins says them, with their sources.
    CompareRow p2p = made_row("p2p", 1000, true, {200});
    p2p.hw.caveats = profile("rtx4090-24gb-pcie4-p2p").caveats;
    ASSERT_EQ(p2p.hw.caveats.size(), 1u);
    ASSERT_FALSE(p2p.hw.reported_failing());
    const std::vector<CompareRow> rows = {p2p, made_row("stock", 1000, false, {100})};  // the verdict points into them
    const Verdict v = scenario(verdicts(rows), "small experiments");
    ASSERT_EQ(v.winner->hw.name, "p2p");
    EXPECT_NE(v.reason.find("caveat: needs the unofficial P2P kernel module"), std::string::npos) << v.reason;
    EXPECT_NE(v.reason.find("IOMMU off or passthrough"), std::string::npos) << v.reason;
    // A verdict it does not win says none of them.
    const std::vector<CompareRow> others = {made_row("p2p", 1000, true, {50}), made_row("stock", 1000, false, {100})};
    EXPECT_EQ(scenario(verdicts(others), "small experiments").reason.find("caveat"), std::string::npos);
}

TEST(CompareVerdicts, AProfileReportedNotToWorkIsShownBesideTheVerdictNeverCrowned) {
    // The 48 GB P2P profile's second caveat reports the module failing on 48 GB cards: twice the
    // stock card's score, it is shown beside the verdict, which names the stock card.
    CompareRow failing = made_row("p2p-48", 1000, true, {200});
    failing.hw.caveats = profile("rtx4090-48gb-pcie4-p2p").caveats;
    ASSERT_EQ(failing.hw.caveats.size(), 2u);
    ASSERT_TRUE(failing.hw.reported_failing());
    const std::vector<CompareRow> rows = {failing, made_row("stock", 1000, false, {100})};  // the verdict points into them
    const Verdict v = scenario(verdicts(rows), "small experiments");
    ASSERT_NE(v.winner, nullptr);
    EXPECT_EQ(v.winner->hw.name, "stock") << v.reason;
    EXPECT_NE(v.reason.find("beside it, not crowned: p2p-48 at 1 GPU (20"), std::string::npos) << v.reason;
    EXPECT_NE(v.reason.find("reported failing on 48 GB cards"), std::string::npos) << v.reason;
    EXPECT_NE(v.reason.find("aikitoria/open-gpu-kernel-modules#14"), std::string::npos) << v.reason;
    // Below the stock card it is not mentioned at all.
    CompareRow slower = failing;
    slower.by_gpus.front().samples_per_s = 50;
    slower.by_gpus.front().bands.samples_per_s = slower.by_gpus.front().bands.samples_per_s_without_compute_error = {50, 50};
    const std::vector<CompareRow> slower_rows = {slower, made_row("stock", 1000, false, {100})};
    const Verdict w = scenario(verdicts(slower_rows), "small experiments");
    EXPECT_EQ(w.winner->hw.name, "stock");
    EXPECT_EQ(w.reason.find("p2p-48"), std::string::npos) << w.reason;
    // Where every candidate is reported failing the verdict says it is no recommendation.
    const std::vector<CompareRow> only_rows = {failing};
    const Verdict only = scenario(verdicts(only_rows), "small experiments");
    ASSERT_NE(only.winner, nullptr);
    EXPECT_NE(only.reason.find("this is no recommendation"), std::string::npos) << only.reason;
    // The shipped 48 GB P2P profile is the one marked so; the 24 GB one is not.
    EXPECT_TRUE(profile("rtx4090-48gb-pcie4-p2p").reported_failing());
    EXPECT_FALSE(profile("rtx4090-24gb-pcie4-p2p").reported_failing());
}

TEST(CompareVerdicts, PerKwCountsTheNodesPowerNotTheGpusAlone) {
    const CompareRow row = made_row("h200", 30000, false, {100, 190, 370, 720});
    const HardwareProfile& hw = row.hw;
    ASSERT_GT(hw.host_power_w.value, 0) << "the H200 profile gives the host's power";
    for (const Projection& p : row.by_gpus) {
        const int g = p.step.world_size;
        const double watts = g * hw.tdp_w.value + g / hw.gpus_per_node.value * hw.host_power_w.value;
        EXPECT_NEAR(row.per_kw(p), p.samples_per_s / (watts / 1e3), 1e-9 * p.samples_per_s) << g;
        EXPECT_LT(row.per_kw(p), p.samples_per_s / (g * hw.tdp_w.value / 1e3)) << g;
    }
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

// compare --gpus 8 (no 1 among the counts): one GPU of each card is still projected, the figure
// asked for with 1 among the counts, and it is the scaling floor's baseline, so the 8-GPU nodes
// qualify; a rule of one GPU judges it, and the verdicts say it was not asked. Where the workload
// fits one GPU of no card, no floor applies and the verdict says so.
TEST(CompareVerdicts, TheScalingFloorIsOneGpuOfEachCardWhateverGpuCountsAreAsked) {
    const TrainConfig cfg = bert_base();
    const std::vector<HardwareProfile> profiles = {without_ranges(profile("a100-sxm4-80gb")),
                                                   without_ranges(profile("h100-sxm"))};
    const std::vector<Calibration> none(2);
    CompareSetup eight;
    eight.gpus = {8};
    const std::vector<CompareRow> rows = compare_rows(cfg, profiles, none, "", false, eight);
    const std::vector<CompareRow> every = compare_rows(cfg, profiles, none, "", false);
    double fastest = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
        ASSERT_EQ(rows[i].by_gpus.size(), 1u);
        ASSERT_EQ(rows[i].by_gpus.front().step.world_size, 8);
        ASSERT_NE(every[i].at(1), nullptr);
        EXPECT_EQ(rows[i].one_gpu().step.world_size, 1);
        EXPECT_DOUBLE_EQ(rows[i].one_gpu().samples_per_s, every[i].at(1)->samples_per_s);
        EXPECT_DOUBLE_EQ(rows[i].by_gpus.front().samples_per_s, every[i].at(8)->samples_per_s);
        fastest = std::max(fastest, rows[i].one_gpu().samples_per_s);
    }
    const std::vector<Verdict> v = verdicts(rows);
    const Verdict& multi = scenario(v, "multi-GPU training");
    ASSERT_NE(multi.winner, nullptr) << multi.reason;
    EXPECT_EQ(multi.winner->hw.name, scenario(verdicts(every), "multi-GPU training").winner->hw.name);
    EXPECT_NE(multi.reason.find("at 8 GPUs"), std::string::npos) << multi.reason;
    EXPECT_NE(multi.reason.find(fmt::format("faster than the fastest single GPU compared ({:.1f} samples/s, projected "
                                            "though not among the GPU counts asked)", fastest)),
              std::string::npos) << multi.reason;
    const Verdict& small = scenario(v, "small experiments");
    ASSERT_NE(small.winner, nullptr) << small.reason;
    EXPECT_NE(small.reason.find("at 1 GPU ("), std::string::npos) << small.reason;
    EXPECT_NE(small.reason.find("; 1 GPU, projected though not among the GPU counts asked"), std::string::npos)
        << small.reason;

    std::vector<CompareRow> unfit = {made_row("big-model", 1000, false, {100, 190, 370, 720})};
    unfit[0].by_gpus.front().record["fits_memory"] = false;  // one GPU holds no replica; two and more do
    const std::vector<Verdict> unfit_verdicts = verdicts(unfit);  // the verdict points into it
    const Verdict& floorless = scenario(unfit_verdicts, "multi-GPU training");
    ASSERT_NE(floorless.winner, nullptr) << floorless.reason;
    EXPECT_NE(floorless.reason.find("the workload fits one GPU of no compared profile, so no scaling floor applies"),
              std::string::npos) << floorless.reason;
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

// The row's configurations on `nodes` nodes: the same GPU counts per node as by_gpus, their
// samples/s given (fitting, the band half-width a fraction).
void on_nodes(CompareRow& r, int nodes, std::vector<double> samples, double band = 0) {
    ASSERT_EQ(samples.size(), r.by_gpus.size());
    for (size_t i = 0; i < samples.size(); ++i) {
        Projection p;
        p.step.world_size = r.by_gpus[i].step.world_size * nodes;
        p.step.nodes = nodes;
        p.samples_per_s = samples[i];
        p.efficiency = samples[i] / (p.step.world_size * r.by_gpus.front().samples_per_s);
        p.record = {{"fits_memory", true}, {"memory_per_gpu_gb", 1.0}};
        p.bands.samples_per_s = {samples[i] * (1 - band), samples[i] * (1 + band)};
        p.bands.samples_per_s_without_compute_error = p.bands.samples_per_s;
        r.on_nodes.push_back(p);
    }
}

TEST(CompareNodes, EveryMultiGpuScenarioJudgesTheNodesGiven) {
    // "in-node" scales well inside its node and badly across nodes (a slow network); "across"
    // the other way round. One node: in-node wins the throughput of the node; two nodes: across.
    std::vector<CompareRow> rows = {made_row("in-node", 1000, false, {100, 200, 400, 800}),
                                    made_row("across", 1000, false, {100, 190, 380, 760})};
    EXPECT_EQ(scenario(verdicts(rows), "multi-GPU training").winner->hw.name, "in-node");
    on_nodes(rows[0], 2, {150, 300, 600, 1000});
    on_nodes(rows[1], 2, {190, 380, 760, 1520});
    const std::vector<Verdict> v = verdicts(rows);
    const Verdict& multi = scenario(v, "multi-GPU training");
    EXPECT_EQ(multi.winner->hw.name, "across");
    EXPECT_NE(multi.reason.find("samples/s highest at 16 GPUs on 2 nodes x 8 (1520.0"), std::string::npos) << multi.reason;
    // NLP fine-tuning's 4 GPUs: 4 per node on the 2 nodes.
    const Verdict& nlp = scenario(v, "NLP fine-tuning");
    EXPECT_NE(nlp.reason.find("at 8 GPUs on 2 nodes x 4"), std::string::npos) << nlp.reason;
    // One GPU needs no network: small experiments judges one GPU of one node.
    EXPECT_NE(scenario(v, "small experiments").reason.find("at 1 GPU ("), std::string::npos);
    // The scaling floor holds across nodes: two nodes slower than one GPU of another profile do not qualify.
    const ScenarioRule throughput{"multi-GPU training", 8, Score::samples_per_s, {}};
    std::vector<CompareRow> slow = {rows[1], made_row("one-fast-gpu", 100000, false, {1600})};
    const Verdict floor = decide(slow, throughput);
    EXPECT_EQ(floor.winner->hw.name, "one-fast-gpu") << floor.reason;
}

TEST(CompareNodes, RowsOnNodesAreProjectsConfigurations) {
    const TrainConfig cfg = bert_base();
    const HardwareProfile a100 = profile("a100-sxm4-40gb");
    const std::vector<CompareRow> rows = compare_rows(cfg, {a100}, {Calibration{}}, "", false, CompareSetup{{}, 2, {}});
    const CompareRow& r = rows.front();
    ASSERT_EQ(r.by_gpus.size(), 4u);
    ASSERT_EQ(r.on_nodes.size(), 4u);
    EXPECT_EQ(r.nodes(), 2);
    // project --nodes 2 --gpus 1,2,4,8 gives the same figures: one code path.
    const std::vector<Projection> project = project_workload(cfg, CostModel(a100, Calibration{}), {1, 2, 4, 8}, {2});
    for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(r.on_nodes[i].step.world_size, 2 * r.by_gpus[i].step.world_size);
        EXPECT_EQ(r.on_nodes[i].record["nodes"], 2);
        EXPECT_DOUBLE_EQ(r.on_nodes[i].samples_per_s, project[i].samples_per_s);
    }
    EXPECT_EQ(&r.top(), &r.on_nodes.back());
    // One node (the default): no configurations across nodes.
    EXPECT_TRUE(compare_rows(cfg, {a100}, {Calibration{}}, "", false).front().on_nodes.empty());
    // A profile without a network between nodes cannot be projected on two: the flag is named.
    HardwareProfile alone = a100;
    alone.nic_gbps.value = 0;
    try {
        compare_rows(cfg, {alone}, {Calibration{}}, "", false, CompareSetup{{}, 2, {}});
        ADD_FAILURE() << "accepted";
    } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find("--nodes 2: "), std::string::npos) << e.what();
    }
}

TEST(CompareNodes, NodeCountsAreReadAsProjectReadsThem) {
    ProjectOptions o;
    EXPECT_EQ(node_counts(o), std::vector<int>{1});
    EXPECT_EQ(compare_node_count(o), 1);
    o.nodes = {1, 2, 4};
    EXPECT_EQ(node_counts(o), (std::vector<int>{1, 2, 4}));
    auto refused = [&](std::vector<int> nodes, bool compare) {
        o.nodes = std::move(nodes);
        try {
            compare ? compare_node_count(o) : static_cast<int>(node_counts(o).size());
        } catch (const UserError& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_EQ(refused({0}, false), "--nodes 0: must be >= 1 and <= 1048576");
    EXPECT_EQ(refused({-2}, true), "--nodes -2: must be >= 1 and <= 1048576");
    EXPECT_EQ(refused({1, 2}, true), "--nodes 1,2: compare judges one node count (project takes a list)");
    EXPECT_EQ(refused({2}, true), "accepted");
}

TEST(CompareVerdicts, ShippedScenariosLoadAndBadOnesAreRefusedAtTheirLine) {
    const std::string configs = kSource + "/configs";
    for (const char* name : {"large-cv", "nlp-fine-tuning", "small-experiments", "multi-gpu", "production"}) {
        const Scenario sc = load_scenario(configs + "/scenarios/" + name + ".yaml", configs);
        EXPECT_EQ(sc.workloads.size(), std::string(name) == "nlp-fine-tuning" ? 3u : 2u) << name;
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
    // input: synthetic (the default) or real; anything else refused at its line.
    EXPECT_EQ(refused("scenario: x\ngpus: 1\nworkloads: [ci-small.yaml]\ninput: real\n"), "accepted");
    EXPECT_NE(refused("scenario: x\ngpus: 1\nworkloads: [ci-small.yaml]\ninput: imagenet\n").find("bad.yaml:4:"),
              std::string::npos);
    {
        const std::string path = (dir / "real.yaml").string();
        std::ofstream(path) << "scenario: x\ngpus: 1\nworkloads: [ci-small.yaml]\ninput: real\n";
        EXPECT_TRUE(load_scenario(path, configs).real_input);
        EXPECT_FALSE(load_scenario(configs + "/scenarios/large-cv.yaml", configs).real_input);
    }
}

// A stress summary record (complete) of one run: GPU, memory (MiB; 0: not given), drift range,
// replica checks and mismatches.
std::string soak_summary_record(const std::string& run_id, const std::string& gpu, double memory_mib, double drift_max,
                                int checks, int mismatches, const std::string& timestamp) {
    nlohmann::json events = nlohmann::json::array();
    for (int i = 0; i < mismatches; ++i) events.push_back({{"step", 100 * (i + 1)}, {"rank", 1}});
    nlohmann::json gpu_json = {{"name", gpu}};
    if (memory_mib > 0) gpu_json["memory_total_mib"] = memory_mib;
    const nlohmann::json r = {
        {"subcommand", "stress"}, {"run_id", run_id}, {"complete", true}, {"elapsed_s", 3600.0}, {"world_size", 2},
        {"sdc_checks", checks}, {"sdc_events", events}, {"checks_passed", mismatches == 0},
        {"workloads", {{{"drift_pct", {{"min", -0.1}, {"max", drift_max}, {"last", drift_max}}}}}},
        {"telemetry_by_rank", nullptr}, {"environment", {{"gpu", gpu_json}}}, {"timestamp", timestamp}};
    return r.dump() + "\n";
}

// An interval record (complete: false) of a run.
std::string soak_interval_record(const std::string& run_id, const std::string& gpu, double drift, const std::string& timestamp) {
    const nlohmann::json r = {{"subcommand", "stress"}, {"run_id", run_id}, {"complete", false}, {"interval", 0},
                              {"elapsed_s", 600.0}, {"world_size", 2}, {"sdc_checks", 7}, {"sdc_events", nlohmann::json::array()},
                              {"drift_pct", drift}, {"environment", {{"gpu", {{"name", gpu}}}}}, {"timestamp", timestamp}};
    return r.dump() + "\n";
}

std::string incomplete_record(const std::string& run_id, const std::string& error) {
    return nlohmann::json({{"subcommand", "incomplete"}, {"run_subcommand", "stress"}, {"run_id", run_id},
                           {"complete", false}, {"error", error}})
               .dump() +
           "\n";
}

TEST(CompareSoaks, EachSoakOfTheProfilesGpuIsScoredWithItsFile) {
    const auto dir = std::filesystem::temp_directory_path() / "sb-soak-runs";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir / "a");
    const std::string h200 = "NVIDIA H200", rtx = "NVIDIA GeForce RTX 4090";
    auto write = [&](const std::string& name, const std::string& text) {
        std::ofstream(dir / name) << text;
        return (dir / name).string();
    };
    const std::string clean = write("a/clean.jsonl", soak_summary_record("r1", h200, 143155.9, 0.5, 100, 0, "2026-01-01T00:00:00Z"));
    const std::string sdc = write("sdc.jsonl", soak_interval_record("r2", h200, 0.1, "2026-01-02T00:00:00Z") +
                                                   soak_summary_record("r2", h200, 0, 0.1, 50, 1, "2026-01-02T01:00:00Z"));
    const std::string hang =
        write("hang.jsonl", soak_interval_record("r3", h200, 0.2, "2026-01-03T00:00:00Z") +
                                incomplete_record("r3", "rank 0 (n1): collective all_reduce did not complete within 600 s; a rank "
                                                        "stopped answering"));
    const std::string stop =
        write("stop.jsonl", soak_interval_record("r4", h200, 0.3, "2026-01-04T00:00:00Z") +
                                incomplete_record("r4", "rank 0 (n1) received SIGTERM: the launcher stopped the job (a rank "
                                                        "failed, a time limit, or the launcher was stopped)"));
    // A 24 GB RTX 4090's soak: the 24 GB profile's, not the 48 GB board's.
    write("rtx.jsonl", soak_summary_record("r5", rtx, 24564.0, 0.2, 80, 2, "2026-01-05T00:00:00Z"));

    const std::vector<SoakRun> runs = soak_runs(profile("h200-sxm"), dir.string());
    ASSERT_EQ(runs.size(), 4u);  // latest first
    EXPECT_EQ(runs[0].file, stop);
    EXPECT_TRUE(runs[0].interrupted());
    EXPECT_FALSE(runs[0].faulted());
    EXPECT_EQ(runs[1].file, hang);
    EXPECT_TRUE(runs[1].faulted());
    EXPECT_EQ(runs[2].file, sdc);
    EXPECT_EQ(runs[2].mismatches, 1);
    EXPECT_EQ(runs[2].replica_checks, 50);
    EXPECT_TRUE(runs[2].complete);
    EXPECT_EQ(runs[3].file, clean);
    EXPECT_DOUBLE_EQ(runs[3].drift_pct, 0.5);

    // A mismatch and a hang count against the GPU, each said with its file.
    SoakVerdict v = soak_verdict(runs);
    EXPECT_EQ(v.status, SoakVerdict::Status::counts_against);
    EXPECT_NE(v.said.find("1 replica mismatch in 50 checks (" + sdc + ")"), std::string::npos) << v.said;
    EXPECT_NE(v.said.find("ended by a hang or fault: rank 0 (n1): collective all_reduce did not complete within 600 s"),
              std::string::npos) << v.said;
    EXPECT_EQ(v.said.find("SIGTERM"), std::string::npos) << v.said;  // a stop is not a fault
    // A clean soak passes; the stopped one is said and not scored.
    v = soak_verdict({runs[0], runs[3]});
    EXPECT_EQ(v.status, SoakVerdict::Status::passed);
    EXPECT_NE(v.said.find("passed: 1 run (" + clean + ")"), std::string::npos) << v.said;
    EXPECT_NE(v.said.find("1 run cut short, not scored"), std::string::npos) << v.said;
    EXPECT_NE(v.brief.find("passed (1 run, throughput drift within 0.50%, bound 5% [2-10%])"), std::string::npos) << v.brief;
    // No completed soak is "not measured", never a pass.
    v = soak_verdict({runs[0]});
    EXPECT_EQ(v.status, SoakVerdict::Status::not_measured);
    EXPECT_EQ(v.said.rfind("not measured; 1 run cut short, not scored", 0), 0u) << v.said;
    EXPECT_EQ(soak_verdict({}).said, "not measured");
    EXPECT_EQ(std::string(soak_status_name(soak_verdict({}).status)), "not measured");

    EXPECT_TRUE(soak_runs(profile("rtx4090-48gb-pcie4"), dir.string()).empty());
    const std::vector<SoakRun> rtx24 = soak_runs(profile("rtx4090-24gb-pcie4"), dir.string());
    ASSERT_EQ(rtx24.size(), 1u);
    EXPECT_EQ(soak_verdict(rtx24).status, SoakVerdict::Status::counts_against);
    // The one-line summary matches the board the same way.
    EXPECT_EQ(soak_summary(profile("rtx4090-48gb-pcie4"), dir.string()), "");
}

TEST(CompareSoaks, ProductionExcludesAGpuWhoseSoakCountsAgainstIt) {
    std::vector<CompareRow> rows = {made_row("fast", 1000, false, {300}), made_row("slow", 1000, false, {100})};
    SoakRun bad;
    bad.file = "f.jsonl";
    bad.complete = true;
    bad.replica_checks = 10;
    bad.mismatches = 1;
    rows[0].soaks = {bad};
    const ScenarioRule production{"production", 1, Score::samples_per_s, {"ecc", "datacenter_use", "vendor_driver", "soak"}};
    const Verdict v = decide(rows, production);
    ASSERT_NE(v.winner, nullptr);
    EXPECT_EQ(v.winner->hw.name, "slow");
    EXPECT_NE(v.reason.find("excluded: fast: counts against: 1 replica mismatch in 10 checks (f.jsonl)"), std::string::npos)
        << v.reason;
    EXPECT_NE(v.reason.find("; soak not measured"), std::string::npos) << v.reason;  // said, not taken as a pass
    // A rule that does not require soak does not judge them.
    const ScenarioRule facts_only{"production", 1, Score::samples_per_s, {"ecc", "datacenter_use", "vendor_driver"}};
    EXPECT_EQ(decide(rows, facts_only).winner->hw.name, "fast");
}

TEST(CompareSoaks, DriftIsJudgedAgainstARangedBoundAndItsEndsAreFlips) {
    SoakRun drifting;
    drifting.file = "d.jsonl";
    drifting.complete = true;
    drifting.replica_checks = 10;
    drifting.drift_pct = 3.0;
    EXPECT_EQ(soak_verdict({drifting}).status, SoakVerdict::Status::passed);  // the central bound, 5%
    SoakVerdict v = soak_verdict({drifting}, kSoakDriftBound.lo);
    EXPECT_EQ(v.status, SoakVerdict::Status::counts_against);
    EXPECT_NE(v.said.find("throughput drift 3.00% beyond the bound 2% [2-10%] (d.jsonl)"), std::string::npos) << v.said;
    drifting.drift_pct = 12.0;
    EXPECT_EQ(soak_verdict({drifting}, kSoakDriftBound.hi).status, SoakVerdict::Status::counts_against);
    drifting.drift_pct = 3.0;

    // Two equal nodes, x the cheaper: x wins the tie at the central bound; at the bound's low end
    // its 3% drift counts against it and y wins, a flip said with the bound's end.
    const TrainConfig cfg = load_config_file(kSource + "/configs/ci-small.yaml");
    HardwareProfile x = without_ranges(profile("h200-sxm"));
    // ci-small's sub-millisecond step: the framework's per-step cost at 2 GPUs would make one GPU
    // faster than two, which no verdict answers (StepTerms.*); the soak is what this test judges.
    x.framework_step_ms.value = 0;
    HardwareProfile y = x;
    x.name = "x";
    x.price_usd.value = 30000;
    y.name = "y";
    const CompareSetup setup{{1, 2}, 1, {{drifting}, {}}};
    const std::vector<Calibration> none(2);
    const std::vector<CompareRow> rows = compare_rows(cfg, {x, y}, none, "", false, setup);
    const ScenarioRule rule{"production", 2, Score::samples_per_s, {"soak"}};
    const Verdict central = decide(rows, rule);
    ASSERT_NE(central.winner, nullptr);
    EXPECT_EQ(central.winner->hw.name, "x") << central.reason;
    EXPECT_NE(central.reason.find("soak passed (1 run, throughput drift within 3.00%, bound 5% [2-10%])"), std::string::npos)
        << central.reason;
    const std::vector<std::vector<std::string>> flips = verdict_flips(cfg, {x, y}, none, {central}, {rule}, {}, setup);
    ASSERT_EQ(flips.size(), 1u);
    EXPECT_EQ(flips[0], std::vector<std::string>{"y with soak.drift_bound_pct at its low end (2)"});
    // A drift below the band's low end changes no verdict: nothing to flip.
    drifting.drift_pct = 1.0;
    const CompareSetup steady{{1, 2}, 1, {{drifting}, {}}};
    const std::vector<CompareRow> steady_rows = compare_rows(cfg, {x, y}, none, "", false, steady);
    EXPECT_TRUE(verdict_flips(cfg, {x, y}, none, {decide(steady_rows, rule)}, {rule}, {}, steady)[0].empty());
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

    // ResNet-50 train records: the latest that ran the engine the projection traced counts
    // (configs/resnet50.yaml's auto: cuDNN, in every build since the trace models it); a record
    // without the key predates the cuDNN engine and ran im2col.
    const bool cudnn = resolve_conv_engine(rn50, TraceOps(rn50.precision)) == ConvEngine::cudnn;
    auto resnet_run = [&](const char* engine, double samples, const char* when) {
        nlohmann::json r = {{"subcommand", "train"}, {"world_size", 1}, {"gpu", {{"name", "NVIDIA A100-SXM4-40GB"}}},
                            {"local_batch", rn50.batch_size}, {"precision", precision_name(rn50.precision)},
                            {"config", to_json(rn50)}, {"samples_per_s", samples}, {"timestamp", when}};
        if (engine) r["conv_engine"] = engine;
        std::ofstream(dir / "run1" / "train.jsonl", std::ios::app) << r.dump() << "\n";
        return card_tests(a100, Calibration{}, configs, dir.string())[4].measured;
    };
    EXPECT_LT(c[4].measured, 0);
    resnet_run("cudnn", 2000.0, "2026-01-01T00:00:00Z");
    EXPECT_DOUBLE_EQ(resnet_run("im2col", 1500.0, "2026-01-02T00:00:00Z"), cudnn ? 2000.0 : 1500.0);
    EXPECT_DOUBLE_EQ(resnet_run("cudnn", 2100.0, "2026-01-03T00:00:00Z"), cudnn ? 2100.0 : 1500.0);
    EXPECT_DOUBLE_EQ(resnet_run(nullptr, 1400.0, "2026-01-04T00:00:00Z"), cudnn ? 2100.0 : 1400.0);
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
