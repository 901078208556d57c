// The buyer's guide (DESIGN: Projection): a workload projected on several profiles, the scenario
// rules and their verdicts (with the ties and flips the profiles' ranges allow), what a
// configuration costs, the card tests, and the scenario presets.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/core/config.h"
#include "src/projection/hardware.h"
#include "src/projection/projection.h"
#include "src/projection/soak_scoring.h"
#include "src/projection/workload_projection.h"

namespace sb {

// compare's rows: each profile projected at 1, 2, 4, 8 GPUs up to its node, and with --nodes N
// the same GPU counts per node on N nodes.
struct CompareRow {
    HardwareProfile hw;
    std::vector<Projection> by_gpus;  // one node: 1, 2, 4, 8 up to the node's GPUs (or --gpus), each with its bands
    // One GPU of the card, with its bands, where by_gpus holds no 1 (compare --gpus 8); else empty.
    std::optional<Projection> one_gpu_unlisted;
    // --nodes N > 1: each GPU count of by_gpus on N nodes (the network between them from the
    // profile), what the multi-GPU scenarios judge; empty on one node.
    std::vector<Projection> on_nodes;
    std::vector<SoakRun> soaks;        // the soaks of the profile's GPU (a rule requiring `soak` judges them)
    int nodes() const { return on_nodes.empty() ? 1 : on_nodes.front().step.nodes; }
    const Projection& at_max() const { return by_gpus.back(); }  // the full node
    // The largest configuration: the full node, on N nodes where projected.
    const Projection& top() const { return on_nodes.empty() ? by_gpus.back() : on_nodes.back(); }
    const Projection* at(int g) const {
        for (const auto& p : by_gpus)
            if (p.step.world_size == g) return &p;
        return nullptr;
    }
    // One GPU of the card, whatever GPU counts were asked: the scaling floor's baseline, and what a
    // rule of fewer GPUs than by_gpus's smallest judges.
    const Projection& one_gpu() const {
        const Projection* listed = at(1);
        return listed ? *listed : one_gpu_unlisted.value();
    }
    int max_gpus() const { return by_gpus.back().step.world_size; }
    double per_10k(const Projection& p) const {
        return p.samples_per_s / (p.step.world_size * hw.price_usd.value / 1e4);
    }
    // Per kW of the node's power at full load: the GPUs' TDP and their share of host_power_w (the
    // whole-cost score's watts), so a card's lead is not its host's omission.
    double per_kw(const Projection& p) const;
};

// What a scenario judges of each row: the configuration (this many GPUs, or the node's largest
// below), the score, and the requirements a profile must meet to qualify (production: recorded
// facts, and `soak`: no soak of its GPU that counts against it under the drift bound).
enum class Score {
    samples_per_s,      // the ample budget: the best result per node
    per_10k_gpus,       // samples/s per $10k of the GPUs
    per_10k_whole_cost  // the limited budget: samples/s per $10k of GPUs, server share and power over the period
};
struct ScenarioRule {
    std::string scenario;
    int gpus = 1;
    Score score = Score::samples_per_s;
    std::vector<std::string> needs;  // ecc, datacenter_use, vendor_driver, soak
    double soak_drift_bound_pct = kSoakDriftBound.value;
};
// The period and price of the power compare charges a configuration (assumptions of the user's).
struct CostTerms {
    double years = 3;
    double usd_per_kwh = 0.15;
};
// What `gpus` GPUs of the profile cost: their price, their share of the server (server_usd /
// gpus_per_node, when the profile gives it) and their power at full load (TDP plus their share of
// host_power_w) over the period.
struct ConfigurationCost {
    double gpus_usd = 0, server_usd = 0, power_usd = 0;
    double total() const { return gpus_usd + server_usd + power_usd; }
};
ConfigurationCost configuration_cost(const HardwareProfile& hw, int gpus, const CostTerms& terms);
// Why a profile does not meet a rule's recorded-fact requirements ("" when it does; `soak` is the
// rows' soaks, judged by decide).
std::string unmet_requirements(const HardwareProfile& hw, const std::vector<std::string>& needs);
// A configuration's footprint per GPU against the GPU's memory, each asked mode's where several were
// ("none 40.31, optimizer 30.02, gradients 30.02 GiB per GPU of 24"), else its own.
std::string footprints(const Projection& p, const HardwareProfile& hw);
// "1 GPU", "8 GPUs", "16 GPUs on 2 nodes x 8": a projected configuration as verdicts name it.
std::string configuration_name(const Projection& p);

// One scenario's verdict over a set of rows: the winner (nullptr: none qualifies) and why.
struct Verdict {
    std::string scenario;
    const CompareRow* winner = nullptr;
    std::string reason;
};
// The scenario rules: small experiments (samples/s per $10k on one GPU), NLP fine-tuning (per
// $10k at up to 4 GPUs), large CV training (per $10k at the full node), multi-GPU training
// (throughput of one node); a rule of more than one GPU judges N nodes of that many GPUs where
// the rows were projected on N nodes (compare --nodes N), and a rule of fewer GPUs than any
// projected count judges one GPU (CompareRow::one_gpu()). A configuration whose footprint does not
// fit its GPUs never wins (the verdict names it); a multi-GPU configuration slower than one GPU of a
// compared profile (each profile's one_gpu(), whatever GPU counts were asked) does not qualify (the
// scaling floor: that one GPU is the answer); where the workload fits one GPU of no compared
// profile, the verdict says that no floor applies. A profile with a caveat that reports it
// not working (Caveat::reported_failing) never wins outright: the verdict names the best profile
// without one and shows the caveated one beside it when it would have scored higher. The tie rule:
// a candidate ties with the best one when each central score lies inside the other's band (or
// within kTieWithin of it); a tie goes to the cheaper configuration (GPUs x price), then to the one needing
// no patched driver, then to the higher central score.
std::vector<Verdict> verdicts(const std::vector<CompareRow>& rows);
// Central scores this close (a fraction of the best) tie whatever their bands: a margin no
// projection resolves. compare's JSON carries it for the guide's text.
inline constexpr double kTieWithin = 0.01;
// The same rules for one scenario rule (and the cost terms of the whole-cost score).
Verdict decide(const std::vector<CompareRow>& rows, const ScenarioRule& rule, const CostTerms& terms = {});
// The rules `verdicts` applies to one workload (compare --config).
std::vector<ScenarioRule> single_workload_rules();
// What compare projects and judges besides the profiles: the GPUs per node (empty: 1, 2, 4, 8 up
// to each node), the node count of the multi-GPU configurations (compare --nodes) and each
// profile's soaks (empty: none looked up).
struct CompareSetup {
    std::vector<int> gpus;
    int nodes = 1;
    std::vector<std::vector<SoakRun>> soaks;  // per profile
    bool real_input = false;  // compare --input real: image workloads capped at each host's loader rate
    // The sharding modes each configuration may run in, the first that fits its GPUs taken (a
    // scenario's `sharding`); empty: the workload's own mode.
    std::vector<ShardingMode> sharding;
};
// The rows with each profile as given (key empty; with their bands), or with ranged number `key`
// at one end in profile `moved` (an index of `profiles`; the first unless given); projected as
// `setup` says.
std::vector<CompareRow> compare_rows(const TrainConfig& cfg, const std::vector<HardwareProfile>& profiles,
                                     const std::vector<Calibration>& calibrations, const std::string& key, bool high,
                                     const CompareSetup& setup = {}, size_t moved = 0);
// Per scenario of `central`, every (profile, ranged number, end) that gives another winner, said as
// "WINNER with PROFILE's KEY at its high end (VALUE)"; for a rule requiring `soak`, the drift
// bound's ends too (KEY soak.drift_bound_pct).
std::vector<std::vector<std::string>> verdict_flips(const TrainConfig& cfg, const std::vector<HardwareProfile>& profiles,
                                                    const std::vector<Calibration>& calibrations,
                                                    const std::vector<Verdict>& central,
                                                    const std::vector<ScenarioRule>& rules = single_workload_rules(),
                                                    const CostTerms& terms = {}, const CompareSetup& setup = {});

// A scenario preset (configs/scenarios/NAME.yaml): the rule and its workloads (paths).
struct Scenario {
    std::string name, source;
    ScenarioRule rule;
    std::vector<std::string> workloads;
    bool real_input = false;  // `input: real`: its image workloads capped at each host's loader rate
    // `sharding: [none, optimizer, gradients]`: each configuration of its workloads runs in the first of
    // these modes that fits its GPUs (compare --sharding fixes one mode instead); empty: the workload's own.
    std::vector<ShardingMode> sharding;
};
// Loads a preset; a bad key, a workload that is not there or an unknown requirement is a UserError at FILE:LINE:COL.
Scenario load_scenario(const std::string& path, const std::string& configs_dir);

// The card tests every buyer's guide prints, for one GPU of a profile: GEMM fp16 8192^3 and fp32
// 4096^3 (ms and TFLOP/s), ResNet-50 at batch 256 and BERT-base at batch 32 (samples/s), each
// projected and, where `results_dir` holds records of the profile's GPU (gemm, one-GPU train),
// measured beside it (the latest such record, its file named).
struct CardFigure {
    std::string test, unit;
    double projected = 0;
    double measured = -1;  // < 0: no record of this GPU
    std::string measured_from;
};
std::vector<CardFigure> card_tests(const HardwareProfile& hw, const Calibration& cal, const std::string& configs_dir,
                                   const std::string& results_dir);

// compare --config: one workload projected on every profile, judged under the single-workload
// rules, with the flips the profiles' ranges allow.
struct WorkloadComparison {
    TrainConfig cfg;
    int nodes = 1;
    std::vector<CompareRow> rows;
    std::vector<Verdict> verdicts;
    std::vector<std::vector<std::string>> flips;
};
WorkloadComparison compare_workload(const TrainConfig& cfg, const std::vector<HardwareProfile>& profiles,
                                    const std::vector<Calibration>& calibrations, const CostTerms& terms,
                                    const CompareSetup& setup);

// compare without --config: the scenario presets named (names in configs/scenarios or paths;
// empty: every shipped one); an unknown name is a UserError naming --scenario.
std::vector<Scenario> resolve_scenarios(const std::vector<std::string>& names, const std::string& configs_dir);

// One workload of the scenario presets: its rows, and its verdicts and flips under every rule
// (scenario x budget) that judges it, in the same order.
struct JudgedWorkload {
    std::string path, label;
    bool real_input = false;  // judged fed by the host's loader (a scenario's `input: real`, or compare --input real)
    std::vector<ShardingMode> sharding;  // the modes its configurations chose from (a scenario's `sharding`)
    TrainConfig cfg;
    std::vector<CompareRow> rows;
    std::vector<ScenarioRule> rules;
    std::vector<Verdict> verdicts;
    std::vector<std::vector<std::string>> flips;
};
// The two budgets every scenario is judged in: ample (the most samples/s per node) and limited
// (the most samples/s per $10k of the whole cost).
inline constexpr Score kBudgets[] = {Score::samples_per_s, Score::per_10k_whole_cost};
const char* budget_name(Score s);  // "ample", "limited"

// The buyer's guide over the scenario presets: every workload judged once, each profile's soaks
// and card tests.
struct ScenarioGuide {
    std::vector<HardwareProfile> profiles;
    std::vector<Scenario> scenarios;
    CostTerms terms;
    CompareSetup setup;
    std::string results_dir;  // where the soaks and card tests' measured records were looked up
    std::vector<JudgedWorkload> workloads;
    std::vector<std::vector<CardFigure>> cards;  // per profile
    // The workload `path` as `scenario` judges it (with its input and sharding modes: a real-input
    // scenario's is judged apart, and so is one choosing among sharding modes).
    const JudgedWorkload& workload(const Scenario& scenario, const std::string& path) const;
    // The verdict and flips of `scenario`'s rule for `workload` under the budget `score`.
    std::pair<const Verdict*, const std::vector<std::string>*> cell(const Scenario& scenario, const std::string& workload,
                                                                    Score score) const;
};
// Judges every workload of `scenarios` on the profiles (`load_workload` reads a workload path,
// with the user's what-ifs). `setup.soaks` is filled from `results_dir`.
ScenarioGuide judge_scenarios(const std::vector<HardwareProfile>& profiles, const std::vector<Calibration>& calibrations,
                              const std::vector<Scenario>& scenarios, const CostTerms& terms, CompareSetup setup,
                              const std::string& configs_dir, const std::string& results_dir,
                              const std::function<TrainConfig(const std::string&)>& load_workload);

}  // namespace sb
