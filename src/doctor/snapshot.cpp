// SystemSnapshot to and from JSON: every field under its own name; a key a snapshot leaves
// out keeps its "unknown" default, so a recorded snapshot states only what was read.
#include "src/doctor/snapshot.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "base/errors.h"

namespace sb::doctor {

namespace {
void snapshot_to_json(nlohmann::json& j, const SystemSnapshot& s) {
    j = nlohmann::json{{"taken", s.taken},
                       {"world_size", s.world_size},
                       {"shared_gpu", s.shared_gpu},
                       {"gpu_unavailable", s.gpu_unavailable},
                       {"versions", s.versions},
                       {"hosts", s.hosts},
                       {"load_skipped", s.load_skipped},
                       {"ranks", s.ranks},
                       {"gpus", s.gpus},
                       {"pairs", s.pairs},
                       {"copies", s.copies},
                       {"transfer_skipped", s.transfer_skipped},
                       {"collectives", s.collectives},
                       {"collective_skipped", s.collective_skipped},
                       {"training", s.training},
                       {"training_skipped", s.training_skipped}};
}

template <class T>
void read_key(const nlohmann::json& j, const char* key, T& out) {
    if (!j.contains(key)) return;
    try {
        out = j.at(key).get<T>();
    } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error(fmt::format("key '{}': {}", key, e.what()));
    }
}

// Every key of `given` is one `canonical` (the same reading written back) has, at every depth:
// a misspelt nested key ("pcie_mx") would otherwise leave its reading at "unknown" unnoticed.
void check_keys(const nlohmann::json& given, const nlohmann::json& canonical, const std::string& path) {
    if (given.is_object() && canonical.is_object()) {
        for (const auto& [key, value] : given.items()) {
            const std::string at = path.empty() ? key : path + "/" + key;
            if (!canonical.contains(key)) throw std::runtime_error(fmt::format("unknown key '{}'", at));
            check_keys(value, canonical.at(key), at);
        }
    } else if (given.is_array() && canonical.is_array()) {
        for (size_t i = 0; i < given.size() && i < canonical.size(); ++i)
            check_keys(given[i], canonical[i], fmt::format("{}/{}", path, i));
    }
}
}  // namespace

void to_json(nlohmann::json& j, const SystemSnapshot& s) { snapshot_to_json(j, s); }

void from_json(const nlohmann::json& j, SystemSnapshot& s) {
    if (!j.is_object()) throw std::runtime_error("a snapshot is a JSON object");
    static const char* const known[] = {"taken",  "world_size", "shared_gpu",       "gpu_unavailable",
                                        "versions", "hosts", "load_skipped", "ranks",    "gpus",             "pairs",
                                        "copies", "transfer_skipped", "collectives", "collective_skipped",
                                        "training", "training_skipped", "note"};
    for (const auto& [key, value] : j.items()) {
        bool ok = false;
        for (const char* k : known) ok = ok || key == k;
        if (!ok) throw std::runtime_error(fmt::format("unknown key '{}'", key));
    }
    read_key(j, "taken", s.taken);
    read_key(j, "world_size", s.world_size);
    read_key(j, "shared_gpu", s.shared_gpu);
    read_key(j, "gpu_unavailable", s.gpu_unavailable);
    read_key(j, "versions", s.versions);
    read_key(j, "hosts", s.hosts);
    read_key(j, "load_skipped", s.load_skipped);
    read_key(j, "ranks", s.ranks);
    read_key(j, "gpus", s.gpus);
    read_key(j, "pairs", s.pairs);
    read_key(j, "copies", s.copies);
    read_key(j, "transfer_skipped", s.transfer_skipped);
    read_key(j, "collectives", s.collectives);
    read_key(j, "collective_skipped", s.collective_skipped);
    read_key(j, "training", s.training);
    read_key(j, "training_skipped", s.training_skipped);
    nlohmann::json canonical;
    snapshot_to_json(canonical, s);
    for (const auto& [key, value] : j.items())
        if (key != "note") check_keys(value, canonical.at(key), key);
}

SystemSnapshot load_snapshot(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw UserError(fmt::format("{}: cannot open the snapshot", path));
    std::stringstream text;
    text << in.rdbuf();
    try {
        return nlohmann::json::parse(text.str()).get<SystemSnapshot>();
    } catch (const std::exception& e) {
        throw UserError(fmt::format("{}: not a doctor snapshot: {}", path, e.what()));
    }
}

}  // namespace sb::doctor
