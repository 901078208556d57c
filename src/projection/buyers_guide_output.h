// The buyer's guide as `compare` prints it: the tables and verdicts as text (100 columns), or as
// one JSON object (compare --json, and the data compare --report renders).
#pragma once

#include <nlohmann/json.hpp>

#include "src/projection/buyers_guide.h"

namespace sb {

// compare without --config: the scenario presets' guide.
nlohmann::json to_json(const ScenarioGuide& guide);
void print_scenario_guide(const ScenarioGuide& guide);

// compare --config: one workload on every profile.
nlohmann::json to_json(const WorkloadComparison& c);
void print_workload_comparison(const WorkloadComparison& c);

}  // namespace sb
