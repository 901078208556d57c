// Records found in a results folder (src/projection/record_scan.h).
#include "src/projection/record_scan.h"

#include <filesystem>
#include <fstream>

namespace sb {

std::pair<nlohmann::json, std::string> latest_record(const std::string& dir,
                                                      const std::function<bool(const nlohmann::json&)>& matches) {
    std::pair<nlohmann::json, std::string> found;
    std::error_code ec;
    if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return found;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
        if (e.path().extension() != ".jsonl") continue;
        std::ifstream in(e.path());
        for (std::string line; std::getline(in, line);) {
            const nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
            if (r.is_discarded() || !r.is_object() || (r.contains("projected") && r["projected"] == true) || !matches(r))
                continue;
            if (found.first.is_null() || r.value("timestamp", "") > found.first.value("timestamp", ""))
                found = {r, e.path().string()};
        }
    }
    return found;
}

std::string gpu_name_of(const nlohmann::json& r) {
    if (r.contains("gpu") && r["gpu"].is_object()) return r["gpu"].value("name", "");
    if (r.contains("environment") && r["environment"].contains("gpu")) return r["environment"]["gpu"].value("name", "");
    return "";
}


}  // namespace sb
