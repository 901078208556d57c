// `scalebench report`: the efficiency table again, from JSONL files (Markdown or CSV), and
// with --compare a side-by-side table of systems (rows: world size; per system: throughput,
// efficiency, busbw).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sb {

struct ReportOptions {
    std::vector<std::string> files;
    bool csv = false;
    bool compare = false;  // side by side: one column group per system/config
};

// Writes the table of the `train` records to `out`, warnings to `err`: each line that is not
// a valid record is named by FILE:LINE and skipped, as is each run cut short (a start record
// without its end). Records of ranks sharing a GPU (shared_gpu) are shown with "shared GPU" in
// their system and, in Markdown, kSharedGpuReportNote above the table; a comparison leaves
// them out with a warning: they are no hardware figures. Returns the number of records shown (with `compare`: the number of records
// compared). A file without any valid record is a UserError.
int write_report(const ReportOptions& options, std::ostream& out, std::ostream& err);

// `scalebench report` on stdout and stderr: 0 when records were shown, else 2 with one line.
int run_report(const ReportOptions& options);

// The side-by-side table of `compare`. A column group is one system (system_label) running one
// workload (config_label); where two groups would read alike, the config, else the file name,
// else both are added. Repeated measurements of one world size are shown as their median; an
// efficiency missing from a record (a launch without n = 1) is taken against the group's n = 1.
int write_comparison(const ReportOptions& options, std::ostream& out, std::ostream& err);

// The workload of a record, as people name it: "ci-small, fp32, weak, batch 32/rank".
std::string config_label(const nlohmann::json& record);

// The system a record ran on, as people name it: the GPU name (else the backend) and the host of
// rank 0, or the Slurm partition for a Slurm job: "NVIDIA H200 (node17)", "cpu (Slurm partition gpu)";
// with " shared GPU" after it for a record of ranks sharing a GPU.
// results/plot_scaling.py names systems the same way.
std::string system_label(const nlohmann::json& record);
bool is_shared_gpu(const nlohmann::json& record);  // its `shared_gpu` is true
constexpr const char* kSharedGpuReportNote =
    "Rows marked \"shared GPU\" come from ranks sharing a GPU (--share-gpu): they rehearse a multi-rank run and are "
    "not hardware figures.";

}  // namespace sb
