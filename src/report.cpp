#include "src/report.h"

#include <cmath>
#include <ostream>

#include <fmt/format.h>

#include "src/errors.h"
#include "src/results.h"

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

}  // namespace

std::string system_label(const nlohmann::json& record) {
    std::string host = "?";
    if (record.contains("environment") && record["environment"].contains("hostnames") &&
        !record["environment"]["hostnames"].empty())
        host = record["environment"]["hostnames"][0].get<std::string>();
    std::string device = record.value("backend", std::string("?"));
    if (record.contains("environment") && record["environment"].contains("gpu") &&
        record["environment"]["gpu"].contains("name"))
        device = record["environment"]["gpu"]["name"].get<std::string>();
    return fmt::format("{} ({})", device, host);
}

int write_report(const ReportOptions& options, std::ostream& out, std::ostream& err) {
    const std::vector<std::string> header = {"system", "backend", "model", "precision", "mode", "ranks",
                                             "global batch", "samples/s", "per rank", "step ms", "compute ms",
                                             "exposed comm ms", "optimizer ms", "busbw GB/s", "efficiency"};
    std::vector<std::vector<std::string>> rows;
    for (const std::string& file : options.files) {
        ReadResult read = read_records(file);
        for (const auto& w : read.warnings) err << w << "\n";
        for (const auto& r : read.records) {
            if (r.value("subcommand", std::string()) != "train") continue;
            const double eff = number(r, "scaling_efficiency");
            rows.push_back({system_label(r), r.value("backend", "?"), r.value("model", "?"),
                            r.value("precision", "?"), r.value("scaling_mode", "?"),
                            std::to_string(r.value("world_size", 0)), std::to_string(r.value("global_batch", 0)),
                            fixed(number(r, "samples_per_s"), 1), fixed(number(r, "samples_per_s_per_rank"), 1),
                            fixed(median_of(r, "step_ms"), 3), fixed(median_of(r, "compute_ms"), 3),
                            fixed(median_of(r, "exposed_comm_ms"), 3), fixed(median_of(r, "optimizer_ms"), 3),
                            fixed(number(r, "allreduce_busbw_gbps"), 2),
                            std::isnan(eff) ? "-" : fmt::format("{:.1f}%", 100 * eff)});
        }
    }
    if (options.csv) {
        auto csv_field = [](const std::string& s) {
            if (s.find_first_of(",\"\n") == std::string::npos) return s;
            std::string quoted = "\"";
            for (char c : s) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
            return quoted + "\"";
        };
        auto line = [&](const std::vector<std::string>& cells) {
            for (size_t i = 0; i < cells.size(); ++i) out << (i ? "," : "") << csv_field(cells[i]);
            out << "\n";
        };
        line(header);
        for (const auto& r : rows) line(r);
    } else {
        auto line = [&](const std::vector<std::string>& cells) {
            out << "|";
            for (const auto& c : cells) out << " " << c << " |";
            out << "\n";
        };
        line(header);
        out << "|";
        for (size_t i = 0; i < header.size(); ++i) out << (i < 5 ? " --- |" : " ---: |");
        out << "\n";
        for (const auto& r : rows) line(r);
    }
    return static_cast<int>(rows.size());
}

}  // namespace sb
