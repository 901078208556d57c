// `scalebench report`: reads train records (src/core/results.h) and prints the scaling table, or
// with --compare the systems side by side; Markdown or CSV.
#include "src/commands/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <iostream>
#include <ostream>
#include <set>

#include <fmt/format.h>

#include "src/commands/stragglers.h"
#include "base/errors.h"
#include "src/core/files.h"
#include "src/core/plausible.h"
#include "src/core/record_ranges.h"
#include "src/core/results.h"
#include "src/core/table_text.h"

namespace sb {

namespace {

double number(const nlohmann::json& j, const char* key) {
    if (!j.contains(key) || !j[key].is_number()) return NAN;
    return j[key].get<double>();
}

double median_of(const nlohmann::json& j, const char* key) {
    if (!j.contains(key) || !j[key].is_object()) return NAN;
    return number(j[key], "median");
}

std::string fixed(double v, int digits) { return std::isnan(v) ? "-" : fmt::format("{:.{}f}", v, digits); }

std::string percent(double v) { return std::isnan(v) ? "-" : fmt::format("{:.1f}%", 100 * v); }

double median(std::vector<double> v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
    if (v.empty()) return NAN;
    std::sort(v.begin(), v.end());
    const size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Each number a table shows, and whether a record must have it: a record holding one outside
// its range (src/core/record_ranges.h, one table with the plot tools) is not shown, so nothing
// prints as a wrapped integer or a 300-digit figure. Whole numbers are read as 64-bit integers
// or reals, never as int.
struct ShownNumber {
    const char* key;
    const char* part;  // the statistic of an object field ("median"), or nullptr
    bool required;
};
const ShownNumber kShownNumbers[] = {
    {"world_size", nullptr, true},
    {"local_batch", nullptr, false},
    {"global_batch", nullptr, false},
    {"samples_per_s", nullptr, true},
    {"samples_per_s_spread", nullptr, false},
    {"samples_per_s_per_rank", nullptr, false},
    {"step_ms", "median", false},
    {"compute_ms", "median", false},
    {"exposed_comm_ms", "median", false},
    {"optimizer_ms", "median", false},
    {"comm_cost_ms", nullptr, false},
    {"comm_cost_spread_ms", nullptr, false},
    {"hidden_fraction", nullptr, false},
    {"compute_slowdown_ms", nullptr, false},
    {"allreduce_busbw_gbps", nullptr, false},
    {"allreduce_busbw_spread_gbps", nullptr, false},
    {"scaling_efficiency", nullptr, false},
    {"scaling_efficiency_spread", nullptr, false},
};

// Why a shown number of record `r` cannot be shown, or "" (a missing optional one shows "-").
std::string shown_number_problem(const nlohmann::json& r, const ShownNumber& n) {
    const std::string name = n.part ? fmt::format("{}.{}", n.key, n.part) : n.key;
    const auto it = r.find(n.key);
    const nlohmann::json* v = it == r.end() ? nullptr : &*it;
    if (v && n.part) v = v->is_object() && v->contains(n.part) ? &(*v)[n.part] : nullptr;
    if (!v || v->is_null()) return n.required ? fmt::format("field '{}' is missing", name) : "";
    if (!v->is_number()) return fmt::format("field '{}' is not a number", name);
    const double x = v->get<double>();
    const RecordRange range = record_range(n.key);
    if (range.whole && std::floor(x) != x) return fmt::format("field '{}' is not a whole number, got {:g}", name, x);
    if (const std::string problem = out_of_range(x, range.range); !problem.empty())
        return fmt::format("field '{}' {}", name, problem);
    return "";
}

// A whole-number field (checked by shown_number_problem) as printed; "-" when missing.
std::string whole(const nlohmann::json& r, const char* key) {
    const auto it = r.find(key);
    if (it == r.end() || !it->is_number()) return "-";
    return it->is_number_integer() ? it->dump() : fmt::format("{:.0f}", it->get<double>());
}

// Markdown (first `left` columns left-aligned, the rest right-aligned) or CSV.
void write_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                 size_t left, bool csv, std::ostream& out) {
    if (csv) {
        auto line = [&](const std::vector<std::string>& cells) {
            for (size_t i = 0; i < cells.size(); ++i) out << (i ? "," : "") << csv_field(cells[i]);
            out << "\n";
        };
        line(header);
        for (const auto& r : rows) line(r);
        return;
    }
    auto line = [&](const std::vector<std::string>& cells) {
        out << "|";
        for (const auto& c : cells) out << " " << markdown_cell(c) << " |";
        out << "\n";
    };
    line(header);
    out << "|";
    for (size_t i = 0; i < header.size(); ++i) out << (i < left ? " --- |" : " ---: |");
    out << "\n";
    for (const auto& r : rows) line(r);
}

}  // namespace

std::string config_label(const nlohmann::json& record) {
    std::string workload = record.value("model", std::string("?"));
    if (record.contains("config") && record["config"].is_object() && record["config"].contains("source") &&
        record["config"]["source"].is_string()) {
        const std::string source = record["config"]["source"].get<std::string>();
        if (!source.empty() && source[0] != '<') workload = std::filesystem::path(source).stem().string();
    }
    const std::string mode = record.value("scaling_mode", std::string("?"));
    const std::string batch = mode == "weak" ? fmt::format("batch {}/rank", whole(record, "local_batch"))
                                             : fmt::format("global batch {}", whole(record, "global_batch"));
    return fmt::format("{}, {}, {}, {}", workload, record.value("precision", std::string("?")), mode, batch);
}

// `train` records and `project` ones (the same fields, computed instead of measured).
static bool is_scaling_record(const nlohmann::json& record) {
    const auto sub = record.find("subcommand");
    return sub != record.end() && (*sub == "train" || *sub == "project");
}

bool is_shared_gpu(const nlohmann::json& record) {
    const auto shared = record.find("shared_gpu");
    return shared != record.end() && shared->is_boolean() && shared->get<bool>();
}

std::string system_label(const nlohmann::json& record) {
    if (is_shared_gpu(record)) {
        nlohmann::json own_gpu = record;
        own_gpu.erase("shared_gpu");
        return system_label(own_gpu) + " shared GPU";
    }
    if (record.value("projected", false)) {
        nlohmann::json measured_like = record;
        measured_like.erase("projected");
        return system_label(measured_like) + " projected";
    }
    const nlohmann::json env = record.contains("environment") && record["environment"].is_object()
                                   ? record["environment"] : nlohmann::json::object();
    std::string device = record.value("backend", std::string("?"));
    if (env.contains("gpu") && env["gpu"].is_object() && env["gpu"].contains("name") && env["gpu"]["name"].is_string())
        device = env["gpu"]["name"].get<std::string>();
    // A Slurm job's first host changes from job to job; its partition names the machine.
    if (env.contains("slurm") && env["slurm"].is_object() && env["slurm"].contains("SLURM_JOB_PARTITION") &&
        env["slurm"]["SLURM_JOB_PARTITION"].is_string())
        return fmt::format("{} (Slurm partition {})", device, env["slurm"]["SLURM_JOB_PARTITION"].get<std::string>());
    std::string host = "?";
    if (env.contains("hostnames") && env["hostnames"].is_array() && !env["hostnames"].empty() &&
        env["hostnames"][0].is_string())
        host = env["hostnames"][0].get<std::string>();
    return fmt::format("{} ({})", device, host);
}

namespace {

// The row of the scaling table for one record (throws nlohmann's type_error for a field of the
// wrong type, which read_scaling_records turns into a skipped line).
std::vector<std::string> table_row(const nlohmann::json& r) {
    return {system_label(r), r.value("backend", "?"), r.value("model", "?"), r.value("precision", "?"),
            r.value("scaling_mode", "?"), whole(r, "world_size"),
            whole(r, "global_batch"), fixed(number(r, "samples_per_s"), 1),
            fixed(number(r, "samples_per_s_spread"), 1), fixed(number(r, "samples_per_s_per_rank"), 1),
            fixed(median_of(r, "step_ms"), 3), fixed(median_of(r, "compute_ms"), 3),
            fixed(median_of(r, "exposed_comm_ms"), 3), fixed(median_of(r, "optimizer_ms"), 3),
            fixed(number(r, "comm_cost_ms"), 3), fixed(number(r, "comm_cost_spread_ms"), 3),
            percent(number(r, "hidden_fraction")), fixed(number(r, "compute_slowdown_ms"), 3),
            fixed(number(r, "allreduce_busbw_gbps"), 2), fixed(number(r, "allreduce_busbw_spread_gbps"), 2),
            percent(number(r, "scaling_efficiency")), percent(number(r, "scaling_efficiency_spread"))};
}

// The numbers of a straggler a train record names (stragglers.h), as kShownNumbers.
const ShownNumber kStragglerNumbers[] = {
    {"rank", nullptr, true},
    {"compute_ms", nullptr, false},
    {"behind_ms", nullptr, false},
    {"behind_fraction", nullptr, false},
    {"median_rank_compute_ms", nullptr, false},
    {"behind_sigma_ms", nullptr, false},
};

const nlohmann::json* stragglers_in(const nlohmann::json& r) {
    const auto check = r.find("straggler_check");
    if (check == r.end() || !check->is_object() || !check->contains("stragglers") || !(*check)["stragglers"].is_array())
        return nullptr;
    return &(*check)["stragglers"];
}

// The stragglers a train record names, one line each (checked by scaling_record_problem).
std::vector<std::string> stragglers_of(const nlohmann::json& r) {
    std::vector<std::string> lines;
    if (const nlohmann::json* stragglers = stragglers_in(r))
        for (const nlohmann::json& s : *stragglers) lines.push_back(printable(straggler_line(s)));
    return lines;
}

// Why a train or project record cannot be shown, or "" when it can.
std::string scaling_record_problem(const nlohmann::json& r) {
    for (const ShownNumber& n : kShownNumbers)
        if (const std::string problem = shown_number_problem(r, n); !problem.empty()) return problem;
    if (const nlohmann::json* stragglers = stragglers_in(r))
        for (const nlohmann::json& s : *stragglers) {
            if (!s.is_object()) return "a straggler of 'straggler_check' is not an object";
            for (const ShownNumber& n : kStragglerNumbers)
                if (const std::string problem = shown_number_problem(s, n); !problem.empty())
                    return "straggler_check: " + problem;
        }
    try {
        table_row(r);
        config_label(r);
        stragglers_of(r);
    } catch (const nlohmann::json::exception& e) {
        const std::string what = e.what();
        return "a field has the wrong type: " + what.substr(what.find("] ") == std::string::npos ? 0 : what.find("] ") + 2);
    }
    return "";
}

// The train and project records of `file` that can be shown; every line that is not a valid
// record is named in a warning on `err`. A file without any valid record is a UserError.
std::vector<nlohmann::json> read_scaling_records(const std::string& file, std::ostream& err) {
    ReadResult read = read_records(file);
    for (const auto& w : read.warnings) err << "scalebench report: warning: " << w << "\n";
    std::vector<nlohmann::json> shown;
    int diverged = 0;
    for (size_t i = 0; i < read.records.size(); ++i) {
        const nlohmann::json& r = read.records[i];
        if (!is_scaling_record(r)) continue;
        if (const std::string problem = scaling_record_problem(r); !problem.empty()) {
            err << fmt::format("scalebench report: warning: {}:{}: skipped {} record: {}\n", file, read.lines[i],
                               r["subcommand"].get<std::string>(), problem);
            continue;
        }
        // A run whose loss stopped being finite measured nothing worth a throughput (plot_scaling.py
        // leaves it out the same way).
        if (const auto check = r.find("loss_check"); check != r.end() && check->is_object() &&
                                                    check->contains("passed") && (*check)["passed"] == false) {
            ++diverged;
            continue;
        }
        shown.push_back(r);
    }
    if (diverged > 0)
        err << fmt::format("scalebench report: warning: {}: {} record(s) of runs that diverged (loss check failed: "
                           "the loss stopped being finite) left out: not throughput figures\n", file, diverged);
    if (read.records.empty() && read.runs.empty())
        throw UserError(fmt::format("{}: no valid record in the file ({} line(s) skipped)", file, read.warnings.size()));
    return shown;
}

}  // namespace

int write_report(const ReportOptions& options, std::ostream& out, std::ostream& err) {
    if (options.compare) return write_comparison(options, out, err);
    const std::vector<std::string> header = {"system", "backend", "model", "precision", "mode", "ranks",
                                             "global batch", "samples/s", "± samples/s", "per rank", "step ms",
                                             "compute ms", "tail ms", "optimizer ms", "comm cost ms", "± ms",
                                             "hidden", "bwd slow ms", "busbw GB/s", "± GB/s", "efficiency", "±"};
    std::vector<std::vector<std::string>> rows;
    std::vector<std::string> straggler_lines;
    bool shared = false;
    for (const std::string& file : options.files)
        for (const auto& r : read_scaling_records(file, err)) {
            rows.push_back(table_row(r));
            shared = shared || is_shared_gpu(r);
            for (const std::string& line : stragglers_of(r))
                straggler_lines.push_back(fmt::format("straggler in {} ({}, {} ranks): {}", file, system_label(r),
                                                      r["world_size"].get<int>(), line));
        }
    if (rows.empty()) return 0;
    // CSV stays a table: its system column says "shared GPU" on those rows, stragglers go to err.
    if (shared && !options.csv) out << kSharedGpuReportNote << "\n\n";
    write_table(header, rows, 5, options.csv, out);
    if (!straggler_lines.empty() && !options.csv) out << "\n";
    for (const std::string& line : straggler_lines) (options.csv ? err : out) << line << "\n";
    return static_cast<int>(rows.size());
}

int run_report(const ReportOptions& options) {
    try {
        // One file named twice would show every row twice.
        if (const std::string repeated = repeated_file(options.files); !repeated.empty()) throw UserError(repeated);
        const int shown = write_report(options, std::cout, std::cerr);
        if (shown > 0) return 0;
        std::cerr << "scalebench: error: no train records to show in the given files\n";
    } catch (const UserError& e) {
        std::cerr << "scalebench: error: " << e.what() << "\n";
    }
    return 2;
}

int write_comparison(const ReportOptions& options, std::ostream& out, std::ostream& err) {
    struct Point {
        std::vector<double> samples_per_s, efficiency, busbw;
    };
    struct Group {
        std::string file, system, config;
        std::map<int, Point> by_size;
    };
    std::vector<Group> groups;  // in the order first seen
    int compared = 0;
    for (const std::string& file : options.files) {
        int shared = 0;
        for (const auto& r : read_scaling_records(file, err)) {
            if (is_shared_gpu(r)) {  // a comparison of systems takes hardware figures only
                ++shared;
                continue;
            }
            const std::string system = system_label(r), config = config_label(r);
            auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) {
                return x.file == file && x.system == system && x.config == config;
            });
            if (g == groups.end()) g = groups.insert(groups.end(), Group{file, system, config, {}});
            Point& p = g->by_size[r["world_size"].get<int>()];
            p.samples_per_s.push_back(number(r, "samples_per_s"));
            p.efficiency.push_back(number(r, "scaling_efficiency"));
            p.busbw.push_back(number(r, "allreduce_busbw_gbps"));
            ++compared;
        }
        if (shared > 0)
            err << fmt::format("scalebench report: warning: {}: {} record(s) of ranks sharing a GPU (shared_gpu) left "
                               "out of the comparison: not hardware figures\n", file, shared);
    }
    // Name each group by its system; add the workload, then the file, only where names collide.
    auto names_with = [&](bool config, bool file) {
        std::vector<std::string> names;
        for (const Group& g : groups) {
            std::string name = g.system;
            if (config) name += ", " + g.config;
            if (file) name += " [" + std::filesystem::path(g.file).filename().string() + "]";
            names.push_back(name);
        }
        return names;
    };
    auto unique = [](std::vector<std::string> names) {
        std::sort(names.begin(), names.end());
        return std::adjacent_find(names.begin(), names.end()) == names.end();
    };
    std::vector<std::string> names = names_with(false, false);
    if (!unique(names)) names = names_with(true, false);
    if (!unique(names)) names = names_with(false, true);
    if (!unique(names)) names = names_with(true, true);

    std::set<int> sizes;
    for (const Group& g : groups)
        for (const auto& [n, p] : g.by_size) sizes.insert(n);
    std::vector<std::string> header = {"ranks"};
    for (const std::string& name : names)
        for (const char* what : {"samples/s", "efficiency", "busbw GB/s"}) header.push_back(name + " " + what);
    std::vector<std::vector<std::string>> rows;
    for (int n : sizes) {
        std::vector<std::string> row = {std::to_string(n)};
        for (const Group& g : groups) {
            auto it = g.by_size.find(n);
            if (it == g.by_size.end()) {
                row.insert(row.end(), {"-", "-", "-"});
                continue;
            }
            const double throughput = median(it->second.samples_per_s);
            double efficiency = median(it->second.efficiency);
            if (std::isnan(efficiency) && g.by_size.count(1))
                efficiency = throughput / (n * median(g.by_size.at(1).samples_per_s));
            row.insert(row.end(), {fixed(throughput, 1), percent(efficiency), fixed(median(it->second.busbw), 2)});
        }
        rows.push_back(row);
    }
    if (groups.empty()) return 0;
    write_table(header, rows, 1, options.csv, out);
    return compared;
}

}  // namespace sb
