// `scalebench project` and `scalebench compare` (DESIGN: Projection): the projection model
// (src/projection/projection.h) over the world sizes of one hardware profile, printed as `train`'s
// table and appended as records marked "projected"; and the buyer's table over several
// profiles with a verdict per scenario.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/core/config.h"
#include "src/projection/hardware.h"
#include "src/projection/projection.h"

namespace CLI {
class App;
}

namespace sb {

struct ProjectOptions {
    std::string hardware;  // profile name (configs/hardware/NAME.yaml) or path; compare: comma list
    std::string config;    // workload YAML; empty = the built-in default
    std::vector<int> gpus;   // per node; default 1, 2, 4, 8 up to the node's GPUs
    std::vector<int> nodes;  // default 1
    std::vector<std::string> calibrate;
    std::string batch;       // --batch N (per GPU) or "max" (the largest that fits); empty = the config's
    std::string precision;   // --precision: what-if, replacing the config's
    std::string grad_dtype;  // --grad-dtype: likewise
    std::string out = "results/projected.jsonl";  // compare: empty unless --out (then every projected record)
    bool json = false;  // compare --json: the table, bands and verdicts as one JSON object on stdout
    std::vector<std::string> scenarios;  // compare without --config: scenario names in configs/scenarios (empty: all)
    std::string report;         // compare --report FILE.md: the whole answer as Markdown with plots
    double years = 3;           // compare: the period the node's power is paid for
    double usd_per_kwh = 0.15;  // compare: the price of that power
    std::string host;  // --host: a host section (configs/hosts/NAME.yaml or a path) replacing the profiles'
    std::string profile_dir;  // empty: configs/hardware found from the working directory or the binary's
};

// Where the shipped `configs/<sub>` folder is: under the working directory, else under the
// binary's folder or one of its parents (a build tree inside the source tree, an install).
// Empty when neither has it.
std::string shipped_config_dir(const std::string& sub);
// The names of the shipped hardware profiles (sorted), for --help, errors and --hardware all.
std::vector<std::string> shipped_profile_names();

void add_project_options(CLI::App& sub, ProjectOptions& opts);
void add_compare_options(CLI::App& sub, ProjectOptions& opts);

// One projected world size of a profile, as a `train`-shaped record.
struct Projection {
    ProjectedStep step;
    double samples_per_s = 0, efficiency = 0, busbw = 0;
    int global_batch = 0;
    nlohmann::json record;
};

// Projects cfg on hw at gpus x nodes for each entry (weak or strong scaling as cfg says).
std::vector<Projection> project_workload(const TrainConfig& cfg, const CostModel& model, const std::vector<int>& gpus,
                                         const std::vector<int>& nodes);

// Every projected figure's band: its lowest and highest over the corners of the profile's ranges
// (sources that disagree), one entry per world size of `project_workload`.
struct Band {
    double lo = 0, hi = 0;
};
std::vector<Band> samples_per_s_bands(const TrainConfig& cfg, const HardwareProfile& hw, const Calibration& cal,
                                      const std::vector<int>& gpus, const std::vector<int>& nodes);

// --batch: N sets the per-GPU batch; "max" the largest the profile's GPU holds (weak scaling only).
// A batch that is not a positive number or "max" is a UserError naming the flag.
void apply_batch_option(const std::string& batch, TrainConfig& cfg, const HardwareProfile& hw);

// compare's rows: each profile projected at 1, 2, 4, 8 GPUs up to its node.
struct CompareRow {
    HardwareProfile hw;
    std::vector<Projection> by_gpus;  // 1, 2, 4, 8 up to the node's GPUs
    std::vector<Band> bands;          // samples/s over the profile's ranges, per entry of by_gpus (empty: none computed)
    const Projection& at_max() const { return by_gpus.back(); }
    const Projection* at(int g) const {
        for (const auto& p : by_gpus)
            if (p.step.world_size == g) return &p;
        return nullptr;
    }
    int max_gpus() const { return by_gpus.back().step.world_size; }
    double per_10k(const Projection& p) const {
        return p.samples_per_s / (p.step.world_size * hw.price_usd.value / 1e4);
    }
    double per_kw(const Projection& p) const { return p.samples_per_s / (p.step.world_size * hw.tdp_w.value / 1e3); }
    bool fits() const { return by_gpus.front().record["fits_memory"].get<bool>(); }
};

// What a scenario judges of each row: the configuration (this many GPUs, or the node's largest
// below), the score, and the requirements a profile must record to qualify (production).
enum class Score {
    samples_per_s,      // the ample budget: the best result per node
    per_10k_gpus,       // samples/s per $10k of the GPUs
    per_10k_whole_cost  // the limited budget: samples/s per $10k of GPUs, server share and power over the period
};
struct ScenarioRule {
    std::string scenario;
    int gpus = 1;
    Score score = Score::samples_per_s;
    std::vector<std::string> needs;  // ecc, datacenter_use, vendor_driver
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
// Why a profile does not meet a rule's requirements ("" when it does).
std::string unmet_requirements(const HardwareProfile& hw, const std::vector<std::string>& needs);

// One scenario's verdict over a set of rows: the winner (nullptr: none qualifies) and why.
struct Verdict {
    std::string scenario;
    const CompareRow* winner = nullptr;
    std::string reason;
};
// The scenario rules: small experiments (samples/s per $10k on one GPU), NLP fine-tuning (per
// $10k at up to 4 GPUs), large CV training (per $10k at the full node), multi-GPU training
// (throughput of one node). A profile the workload does not fit never wins; a multi-GPU
// configuration slower than one GPU of a compared profile does not qualify (the scaling floor:
// that one GPU is the answer). A candidate ties with the best one when each central score lies
// inside the other's band (or within 1% of it); a tie goes to the cheaper configuration (GPUs x
// price), then to the one needing no patched driver.
std::vector<Verdict> verdicts(const std::vector<CompareRow>& rows);
// The same rules for one scenario rule (and the cost terms of the whole-cost score).
Verdict decide(const std::vector<CompareRow>& rows, const ScenarioRule& rule, const CostTerms& terms = {});
// The rules `verdicts` applies to one workload (compare --config).
std::vector<ScenarioRule> single_workload_rules();
// The rows with each profile as given (key empty; with their bands), or with ranged number `key`
// at one end in every profile that has it; at `gpus` per node (empty: 1, 2, 4, 8 up to each node).
std::vector<CompareRow> compare_rows(const TrainConfig& cfg, const std::vector<HardwareProfile>& profiles,
                                     const std::vector<Calibration>& calibrations, const std::string& key, bool high,
                                     const std::vector<int>& gpus = {});
// Per scenario of `central`, every (ranged number, end) that gives another winner, said as
// "WINNER with KEY at its high end (VALUE)".
std::vector<std::vector<std::string>> verdict_flips(const TrainConfig& cfg, const std::vector<HardwareProfile>& profiles,
                                                    const std::vector<Calibration>& calibrations,
                                                    const std::vector<Verdict>& central,
                                                    const std::vector<ScenarioRule>& rules = single_workload_rules(),
                                                    const CostTerms& terms = {}, const std::vector<int>& gpus = {});

// A scenario preset (configs/scenarios/NAME.yaml): the rule and its workloads (paths).
struct Scenario {
    std::string name, source;
    ScenarioRule rule;
    std::vector<std::string> workloads;
};
// Loads a preset; a bad key, a workload that is not there or an unknown requirement is a UserError at FILE:LINE:COL.
Scenario load_scenario(const std::string& path, const std::string& configs_dir);
std::vector<std::string> shipped_scenario_names();

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

// The latest completed `stress` (soak) summary of the profile's GPU under `results_dir`, said in
// one line (duration, replica checks, throughput drift, ECC, temperature, power, throttling) with
// its file; empty when there is none.
std::string soak_summary(const HardwareProfile& hw, const std::string& results_dir);

int run_project(const ProjectOptions& opts);
int run_compare(const ProjectOptions& opts);

}  // namespace sb
