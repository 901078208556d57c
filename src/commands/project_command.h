// `scalebench project` and `scalebench compare` (DESIGN: Projection): the projection model
// (src/projection/projection.h) over the world sizes of one hardware profile, printed as `train`'s
// table and appended as records marked "projected"; and the buyer's table over several
// profiles with a verdict per scenario.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/core/config.h"
#include "src/core/results.h"
#include "src/projection/hardware.h"
#include "src/projection/projection.h"

namespace CLI {
class App;
}

namespace sb {

struct ProjectOptions {
    std::string hardware;  // profile name (configs/hardware/NAME.yaml) or path; compare: comma list
    std::string config;    // workload YAML; empty = the built-in default
    std::vector<int> gpus;   // --scaling (alias --gpus): GPUs per node; default 1, 2, 4, 8 up to the node's GPUs
    std::vector<int> nodes;  // project: node counts (default 1); compare: one count, the multi-GPU configurations'
    std::vector<std::string> calibrate;
    std::string batch;       // --batch-size N (per GPU) or, project only, "max" (the largest that fits); empty = the config's
    int seq_len = 0;         // --seq-len: what-if for a transformer workload; 0 = the config's
    std::string conv_engine; // --conv-engine: what-if for a ResNet workload (auto, im2col, cudnn); empty = the config's
    std::string precision;   // --precision: what-if, replacing the config's
    std::string grad_dtype;  // --grad-dtype: likewise
    std::string out = default_output("projected.jsonl");  // compare: empty unless --out (then every projected record)
    bool json = false;  // compare --json: the table, bands and verdicts as one JSON object on stdout
    std::vector<std::string> scenarios;  // compare without --config: scenario names in configs/scenarios (empty: all)
    std::string report;         // compare --report FILE.md: the whole answer as Markdown with plots
    double years = 3;           // compare: the period the node's power is paid for
    double usd_per_kwh = 0.15;  // compare: the price of that power
    bool comm = false;  // project --comm: the projected all-reduce busbw by message size, in nccl-tests' table
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

// --nodes, as project and compare read it: the node counts given (default {1}); a count below 1
// is a UserError naming the flag. (Whether a profile has a network between its nodes is
// project_workload's check, for both.)
std::vector<int> node_counts(const ProjectOptions& opts);
// compare --nodes: one node count (default 1); a list is a UserError naming the flag.
int compare_node_count(const ProjectOptions& opts);

// A projected figure's band: its lowest and highest over the corners of the profile's ranges
// (sources that disagree); a point where the profile has none.
struct Band {
    double lo = 0, hi = 0;
};
// Every figure of a projected configuration carries its band, each corner projected whole (its
// speed-up and efficiency against its own one GPU, not the central one).
struct FigureBands {
    Band samples_per_s, efficiency, speedup, busbw, exposed_comm_ms;
};
nlohmann::json to_json(const FigureBands& b);

// project --comm: one row of the projected all-reduce table, nccl-tests' all_reduce_perf columns
// (float sum, out of place) with the busbw band over the profile's ranges.
struct CommRow {
    int gpus_per_node = 0, nodes = 1;
    double bytes = 0, time_us = 0, algbw = 0, busbw = 0;
    Band busbw_band;
};
// The rows for every GPU count x node count, sizes 8 B to 4 GiB by factors of 2 (nccl-tests -b 8 -e 4G -f 2).
std::vector<CommRow> comm_table(const CostModel& model, const std::vector<int>& gpus, const std::vector<int>& nodes);

// One projected world size of a profile, as a `train`-shaped record.
struct Projection {
    ProjectedStep step;
    double samples_per_s = 0, efficiency = 0, speedup = 0, busbw = 0;
    int64_t global_batch = 0;
    FigureBands bands;  // points at the central values until widen_to_ranges
    nlohmann::json record;
};

// Projects cfg on hw at gpus x nodes for each entry (weak or strong scaling as cfg says).
std::vector<Projection> project_workload(const TrainConfig& cfg, const CostModel& model, const std::vector<int>& gpus,
                                         const std::vector<int>& nodes);
// Widens the bands of `rows` (project_workload of the same arguments) to every corner of the
// profile's ranges, and writes them into their records ("bands", "samples_per_s_band", "ranges").
void widen_to_ranges(std::vector<Projection>& rows, const TrainConfig& cfg, const HardwareProfile& hw,
                     const Calibration& cal, const std::vector<int>& gpus, const std::vector<int>& nodes);

// --batch: N sets the per-GPU batch; "max" the largest the profile's GPU holds (weak scaling only).
// A batch that is not a positive number or "max" is a UserError naming the flag.
void apply_batch_option(const std::string& batch, TrainConfig& cfg, const HardwareProfile& hw);

// One `stress` run (a soak) of a GPU, from its records: the interval records, the summary
// (complete) and, for a run cut short, its `incomplete` record (matched by run_id).
struct SoakRun {
    std::string file, timestamp;
    bool complete = false;     // its summary record was written
    double elapsed_s = 0;
    int world_size = 0;
    long replica_checks = 0;
    long mismatches = 0;       // replica checks that found a rank's parameters differing (sdc_events)
    long ecc_uncorrected = 0;  // uncorrected ECC errors over the run, every rank
    double drift_pct = 0;      // the largest |throughput drift| of any workload against its first interval
    std::string ended;         // a run cut short: its incomplete record's error
    // Cut short by a signal or its launcher: the record cannot tell a fault from a stop, so not scored.
    bool interrupted() const;
    bool faulted() const { return !complete && !ended.empty() && !interrupted(); }  // a hang or an error of its own
};
// Every soak of a profile's GPU under `results_dir` (recursively, *.jsonl), latest first: a record
// is of the profile's GPU when the device name matches and, where the record gives the GPU's
// memory, it is within 15% of the profile's (the 24 GB card's soak does not vouch for the 48 GB board).
std::vector<SoakRun> soak_runs(const HardwareProfile& hw, const std::string& results_dir);

// The bound on a soak's throughput drift, % either way: an assumption, so a range. A verdict is
// decided at the central value and decided again at each end; a winner that changes is a flip.
struct SoakDriftBound {
    double value = 5, lo = 2, hi = 10;
};
inline constexpr SoakDriftBound kSoakDriftBound{};
// What a profile's soaks say under a drift bound: what counts against it (a replica mismatch, an
// uncorrected ECC error, a run ended by a hang or fault, drift beyond the bound; each with its
// file), or that they passed, or that none was measured (never a pass).
struct SoakVerdict {
    enum class Status { not_measured, passed, counts_against } status = Status::not_measured;
    std::string said;   // one line: the status, the figures and the files
    std::string brief;  // the status and the figures, as a verdict's reason ends with it
};
SoakVerdict soak_verdict(const std::vector<SoakRun>& runs, double drift_bound_pct = kSoakDriftBound.value);
const char* soak_status_name(SoakVerdict::Status s);  // "not measured", "passed", "counts against"

// compare's rows: each profile projected at 1, 2, 4, 8 GPUs up to its node, and with --nodes N
// the same GPU counts per node on N nodes.
struct CompareRow {
    HardwareProfile hw;
    std::vector<Projection> by_gpus;  // one node: 1, 2, 4, 8 up to the node's GPUs, each with its bands
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
    int max_gpus() const { return by_gpus.back().step.world_size; }
    double per_10k(const Projection& p) const {
        return p.samples_per_s / (p.step.world_size * hw.price_usd.value / 1e4);
    }
    double per_kw(const Projection& p) const { return p.samples_per_s / (p.step.world_size * hw.tdp_w.value / 1e3); }
    bool fits() const { return by_gpus.front().record["fits_memory"].get<bool>(); }
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
// the rows were projected on N nodes (compare --nodes N). A profile the workload does not fit
// never wins; a multi-GPU configuration slower than one GPU of a compared profile does not
// qualify (the scaling floor: that one GPU is the answer). A candidate ties with the best one
// when each central score lies inside the other's band (or within 1% of it); a tie goes to the
// cheaper configuration (GPUs x price), then to the one needing no patched driver.
std::vector<Verdict> verdicts(const std::vector<CompareRow>& rows);
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

// The latest completed `stress` (soak) summary of the profile's GPU (matched as soak_runs does)
// under `results_dir`, said in one line (duration, replica checks, throughput drift, ECC,
// temperature, power, throttling) with its file; empty when there is none.
std::string soak_summary(const HardwareProfile& hw, const std::string& results_dir);

int run_project(const ProjectOptions& opts);
int run_compare(const ProjectOptions& opts);

}  // namespace sb
