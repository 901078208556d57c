// The shipped configs/ folder (src/projection/shipped_configs.h).
#include "src/projection/shipped_configs.h"

#include <algorithm>
#include <filesystem>

#include "src/core/data_dir.h"

namespace sb {

std::string shipped_config_dir(const std::string& sub) {
    const std::string dir = shipped_path(sub.empty() ? "configs" : "configs/" + sub);
    return !dir.empty() && std::filesystem::is_directory(dir) ? dir : "";
}

std::vector<std::string> yaml_names_in(const std::string& dir) {
    std::vector<std::string> names;
    if (dir.empty()) return names;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

std::vector<std::string> shipped_profile_names() { return yaml_names_in(shipped_config_dir("hardware")); }

std::vector<std::string> shipped_scenario_names() { return yaml_names_in(shipped_config_dir("scenarios")); }

}  // namespace sb
