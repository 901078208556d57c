// The doctor's three sinks for one set of checks: the terminal table, JSON (--json) and a
// Markdown report (--report FILE.md). The same rows in each.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/doctor/checks.h"

namespace sb::doctor {

std::string format_table(const std::vector<Check>& checks, const ExpectedBands& bands, const SystemSnapshot& s);
std::string format_markdown(const std::vector<Check>& checks, const ExpectedBands& bands, const SystemSnapshot& s);
// {tiers: {name: verdict}, checks: [...], bands: {...}, exit_code, snapshot}
nlohmann::json checks_json(const std::vector<Check>& checks, const ExpectedBands& bands, const SystemSnapshot& s);

}  // namespace sb::doctor
