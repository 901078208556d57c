// `scalebench project` and `scalebench compare` (DESIGN: Projection): their options and entry
// points. `project` prints a workload projected on one hardware profile
// (src/projection/workload_projection.h) as `train`'s table and appends its records; `compare`
// prints the buyer's guide over several profiles (src/projection/buyers_guide.h).
#pragma once

#include <string>
#include <vector>

#include "src/core/results.h"
#include "src/projection/shipped_configs.h"

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
    std::string sharding;    // --sharding: the mode (none, optimizer, gradients) instead of the config's; compare:
                             // every workload's, in place of a scenario's choice among modes
    std::string input = "synthetic";  // --input: synthetic (data on the device) or real (the host's loader ceiling)
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

void add_project_options(CLI::App& sub, ProjectOptions& opts);
void add_compare_options(CLI::App& sub, ProjectOptions& opts);

// --nodes, as project and compare read it: the node counts given (default {1}); a count below 1
// is a UserError naming the flag. (Whether a profile has a network between its nodes is
// project_workload's check, for both.)
std::vector<int> node_counts(const ProjectOptions& opts);
// compare --nodes: one node count (default 1); a list is a UserError naming the flag.
int compare_node_count(const ProjectOptions& opts);

int run_project(const ProjectOptions& opts);
int run_compare(const ProjectOptions& opts);

}  // namespace sb
