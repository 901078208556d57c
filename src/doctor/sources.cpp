// Loading the doctor's band sources: hardware profiles and published all-reduce figures.
#include "src/doctor/sources.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "base/errors.h"
#include "src/core/files.h"
#include "src/core/yaml_fields.h"

namespace sb::doctor {

std::vector<HardwareProfile> load_profiles(const std::string& dir) {
    std::vector<std::string> paths;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
        if (e.path().extension() == ".yaml") paths.push_back(e.path().string());
    std::sort(paths.begin(), paths.end());
    std::vector<HardwareProfile> out;
    for (const std::string& p : paths) out.push_back(load_hardware_profile(p));
    return out;
}

std::vector<PublishedBusbw> load_published_busbw(const std::string& path) {
    std::vector<PublishedBusbw> out;
    // Read as every YAML input is: a regular file under its bound, one document.
    const YAML::Node root = load_yaml_document(read_text_file(path, "published figures"), path, "published figures");
    try {
        for (const YAML::Node& e : root["entries"]) {
            PublishedBusbw p;
            p.profile = e["profile"].as<std::string>();
            p.source = e["source"].as<std::string>();
            p.gpus = e["gpus_per_node"].as<int>() * e["nodes"].as<int>();
            p.bytes = e["bytes"].as<double>();
            p.busbw_gbps = e["busbw_gbps"].as<double>();
            if (e["nodes"].as<int>() == 1) out.push_back(p);  // the doctor measures one node
        }
    } catch (const YAML::Exception& e) {
        throw UserError(fmt::format("{}: {}", path, e.what()));
    }
    return out;
}

}  // namespace sb::doctor
