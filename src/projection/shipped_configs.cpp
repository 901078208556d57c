// The shipped configs/ folder (src/projection/shipped_configs.h).
#include "src/projection/shipped_configs.h"

#include <algorithm>
#include <filesystem>

namespace sb {

std::string shipped_config_dir(const std::string& sub) {
    namespace fs = std::filesystem;
    const fs::path relative = fs::path("configs") / sub;
    if (fs::is_directory(relative)) return relative.string();
    std::error_code ec;
    fs::path dir = fs::canonical("/proc/self/exe", ec).parent_path();
    for (int up = 0; !ec && up < 4 && !dir.empty(); ++up, dir = dir.parent_path()) {
        if (fs::is_directory(dir / relative)) return (dir / relative).string();
        if (fs::is_directory(dir / "share" / "scalebench" / relative)) return (dir / "share" / "scalebench" / relative).string();
        if (dir == dir.parent_path()) break;
    }
    return "";
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
