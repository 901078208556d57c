// Loading the doctor's band sources: hardware profiles and published all-reduce figures.
#include "src/doctor/sources.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "base/errors.h"
#include "src/core/config.h"
#include "src/core/files.h"
#include "src/core/flag_reading.h"
#include "src/core/yaml_fields.h"
#include "src/projection/profile_ranges.h"

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

namespace {

// The ranges of the published figures' numbers, each with its reason: the machine's as a
// hardware profile holds them (src/projection/profile_ranges.cpp), the size as the doctor's
// and comm's sizes (the flag table's "SIZE bytes").
RealRange published_busbw_range() {
    return RealRange{0.1, false, 1e5, false, "a published bus bandwidth of 100 MB/s to 100 TB/s, as a link's"};
}

}  // namespace

std::vector<PublishedBusbw> load_published_busbw(const std::string& path) {
    std::vector<PublishedBusbw> out;
    // Read as every YAML input is: a regular file under its bound, one document, each number by
    // the one number parser in its range, an error at FILE:LINE:COL naming the key.
    const YAML::Node root = load_yaml_document(read_text_file(path, "published figures"), path, "published figures");
    YamlFields f(path);
    if (!root.IsMap()) f.fail_at(root.Mark(), "the published figures must be a map with the key 'entries'");
    auto whole = [&](const YAML::Node& v, const YAML::Node& k, const std::string& key, const RealRange& r) {
        return f.integer(v, k, key, static_cast<int64_t>(r.lo), static_cast<int64_t>(r.hi));
    };
    bool any = false;
    f.for_each_key(root, "", {"entries"}, [&](const std::string&, const YAML::Node& k, const YAML::Node& list) {
        any = true;
        if (!list.IsSequence()) f.fail(list, k, "entries", "a list of published figures");
        for (const YAML::Node& e : list) {
            if (!e.IsMap()) f.fail_at(e.Mark(), "key 'entries': each entry is a map of keys");
            PublishedBusbw p;
            int64_t gpus_per_node = 0, nodes = 0;
            std::set<std::string> seen;
            f.for_each_key(e, "entries",
                           {"id", "use", "profile", "algorithm", "gpus_per_node", "nodes", "nics_per_node", "host",
                            "bytes", "busbw_gbps", "source", "configuration"},
                           [&](const std::string& name, const YAML::Node& key_node, const YAML::Node& v) {
                               const std::string key = "entries." + name;
                               seen.insert(name);
                               if (name == "use") f.choice(v, key_node, key, {"validation", "calibration"});
                               else if (name == "profile") p.profile = f.non_empty_text(v, key_node, key);
                               else if (name == "source") p.source = f.non_empty_text(v, key_node, key);
                               else if (name == "gpus_per_node")
                                   gpus_per_node = whole(v, key_node, key, profile_range("gpus_per_node"));
                               else if (name == "nodes") nodes = f.integer(v, key_node, key, 1, kMaxWorldSize);
                               else if (name == "nics_per_node") whole(v, key_node, key, profile_range("nics_per_node"));
                               else if (name == "bytes") p.bytes = f.real(v, key_node, key, real_entry("SIZE bytes"));
                               else if (name == "busbw_gbps")
                                   p.busbw_gbps = f.real(v, key_node, key, published_busbw_range());
                               else f.non_empty_text(v, key_node, key);  // id, algorithm, host, configuration
                           });
            for (const char* key : {"profile", "source", "gpus_per_node", "nodes", "bytes", "busbw_gbps"})
                if (!seen.count(key)) f.fail_at(e.Mark(), fmt::format("key 'entries.{}': missing", key));
            p.gpus = static_cast<int>(gpus_per_node * nodes);
            if (nodes == 1) out.push_back(p);  // the doctor measures one node
        }
    });
    if (!any) f.fail_at(root.Mark(), "key 'entries': missing");
    return out;
}

}  // namespace sb::doctor
