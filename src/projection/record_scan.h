// Records found in a results folder: the latest measured record that matches, and the GPU a
// record names. The buyer's guide reads them for its card tests and soaks.
#pragma once

#include <functional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace sb {

// The latest record under `dir` (recursively, *.jsonl, measured only) that `matches`, with its
// file; a null record when there is none.
std::pair<nlohmann::json, std::string> latest_record(const std::string& dir,
                                                     const std::function<bool(const nlohmann::json&)>& matches);
// The GPU's device name a record gives ("" when none).
std::string gpu_name_of(const nlohmann::json& r);

}  // namespace sb
