// Result records (DESIGN: Results): one JSON object per line, appended whole, so a
// reader never sees half a record; readers skip and report a torn last line.
// The schema is documented in results/SCHEMA.md.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sb {

constexpr int kSchemaVersion = 1;

// Checked before any work is done: the folder of `path` can be made and the file (or,
// when it does not exist yet, its folder) is writable. Empty when fine, else the reason.
std::string results_file_problem(const std::string& path);

// Appends one line (creating folders as needed), flushed and fsynced.
void append_record(const std::string& path, const nlohmann::json& record);

struct ReadResult {
    std::vector<nlohmann::json> records;
    std::vector<std::string> warnings;  // "FILE:LINE: skipped ..." for unparseable lines
};
ReadResult read_records(const std::string& path);

}  // namespace sb
