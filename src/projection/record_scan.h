// Records found in a results folder, as the buyer's guide reads them for its card tests and
// soaks. The scan never blocks and never reads without bound: only regular *.jsonl files are
// read (a FIFO or a device under that name is skipped), each through the checked reader
// (src/core/files.h), so a file over kMaxRecordFileBytes is refused naming it.
#pragma once

#include <functional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace sb {

// Calls `visit` with every measured record (a JSON object line, not marked "projected") of the
// regular *.jsonl files under `dir` (recursively, files in sorted order) and its file. Lines that
// are not JSON objects are passed over; a missing or empty `dir` has none.
void for_each_measured_record(const std::string& dir,
                              const std::function<void(const nlohmann::json& record, const std::string& file)>& visit);
// The latest (by timestamp) measured record under `dir` that `matches`, with its file; a null
// record when there is none.
std::pair<nlohmann::json, std::string> latest_record(const std::string& dir,
                                                     const std::function<bool(const nlohmann::json&)>& matches);
// The text at `key` of a record ("" when it is missing or not a string).
std::string text_of(const nlohmann::json& r, const char* key);
// The number at `key` of a record (0 when it is missing or not a number).
double number_of(const nlohmann::json& r, const char* key);
// The count at `key` of a record: number_of as a whole number.
long count_of(const nlohmann::json& r, const char* key);
// The GPU's device name a record gives ("" when none).
std::string gpu_name_of(const nlohmann::json& r);

}  // namespace sb
