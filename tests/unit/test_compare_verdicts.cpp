// compare's verdict logic on hand-made profiles: a workload that does not fit never wins; a
// verdict that changes when a ranged number moves to an end of its range is reported as a flip
// naming the number, its end and the other winner; none is reported where no range decides.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/commands/project_command.h"
#include "src/core/config.h"
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
    const TrainConfig cfg = bert_base();
    HardwareProfile staged = profile("rtx4090-24gb-pcie4");  // link_efficiency and staged_overlap are ranges
    staged.name = "staged";
    HardwareProfile a100 = profile("a100-sxm4-40gb");  // no ranges
    const std::vector<Calibration> none(2);
    // Price the staged node so that, per dollar at 4 GPUs, it loses at the central values and wins
    // with its staged copy at the high end of its range.
    auto per_10k_at4 = [&](const HardwareProfile& hw) {
        const CompareRow row = compare_rows(cfg, {hw}, {Calibration{}}, "", false).front();
        return row.per_10k(*row.at(4));
    };
    const double a100_score = per_10k_at4(a100);
    const double central = per_10k_at4(staged);
    const double high = per_10k_at4(at_range_end(staged, "node.link_efficiency", true));
    ASSERT_GT(high, central * 1.2) << "the range must matter at 4 GPUs";
    // The price at which the staged node scores halfway (geometrically) between the two.
    staged.price_usd.value *= std::sqrt(central * high) / a100_score;
    const std::vector<HardwareProfile> profiles = {staged, a100};
    const std::vector<CompareRow> rows = compare_rows(cfg, profiles, none, "", false);  // the verdicts point into them
    const std::vector<Verdict> central_verdicts = verdicts(rows);
    const Verdict& nlp = scenario(central_verdicts, "NLP fine-tuning");
    ASSERT_NE(nlp.winner, nullptr);
    EXPECT_EQ(nlp.winner->hw.name, "a100-sxm4-40gb");
    const std::vector<std::vector<std::string>> flips = verdict_flips(cfg, profiles, none, central_verdicts);
    const size_t at = static_cast<size_t>(&nlp - central_verdicts.data());
    ASSERT_FALSE(flips[at].empty());
    EXPECT_NE(std::find(flips[at].begin(), flips[at].end(), "staged with node.link_efficiency at its high end (0.7)"),
              flips[at].end());
    // Throughput of one node (multi-GPU training) is the A100's at every end: no flip reported.
    const size_t multi = static_cast<size_t>(&scenario(central_verdicts, "multi-GPU training") - central_verdicts.data());
    EXPECT_TRUE(flips[multi].empty());
}

}  // namespace
}  // namespace sb
