// The shipped configs/ folder and what it holds: where it is (src/core/data_dir.h), the hardware
// profiles' and scenario presets' names.
#pragma once

#include <string>
#include <vector>

namespace sb {

// Where the shipped `configs/<sub>` folder is (src/core/data_dir.h: beside an installed binary, or
// the build tree's sources); empty when there is none.
std::string shipped_config_dir(const std::string& sub);
// The names of the shipped hardware profiles (sorted), for --help, errors and --hardware all.
std::vector<std::string> shipped_profile_names();
// The names of the shipped scenario presets (configs/scenarios, sorted).
std::vector<std::string> shipped_scenario_names();
// The stems of the *.yaml files in `dir` (sorted; empty when `dir` is empty).
std::vector<std::string> yaml_names_in(const std::string& dir);

}  // namespace sb
