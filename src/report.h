// `scalebench report`: the efficiency table again, from JSONL files (Markdown or CSV).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sb {

struct ReportOptions {
    std::vector<std::string> files;
    bool csv = false;
};

// Writes the table of the `train` records to `out`, warnings (skipped lines) to `err`.
// Returns the number of records shown.
int write_report(const ReportOptions& options, std::ostream& out, std::ostream& err);

// The system a record ran on, as people name it: "2x NVIDIA H200 (host)" or "cpu (host)".
std::string system_label(const nlohmann::json& record);

}  // namespace sb
