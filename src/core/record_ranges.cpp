// The table of src/core/record_ranges.h, parsed once from the text compiled in from
// results/record_ranges.json.
#include "src/core/record_ranges.h"

#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace sb {

extern const char kRecordRangesJson[];  // results/record_ranges.json, as built (CMakeLists.txt)

namespace {

struct Entry {
    double min, max;
    bool whole;
    std::string why;
};

const std::map<std::string, Entry>& table() {
    static const std::map<std::string, Entry> entries = [] {
        std::map<std::string, Entry> out;
        const nlohmann::json file = nlohmann::json::parse(kRecordRangesJson);
        for (const auto& [field, e] : file.at("ranges").items())
            out[field] = {e.at("min").get<double>(), e.at("max").get<double>(), e.value("whole", false),
                          e.at("why").get<std::string>()};
        return out;
    }();
    return entries;
}

}  // namespace

RecordRange record_range(const std::string& field) {
    const auto it = table().find(field);
    if (it == table().end()) throw std::logic_error("results/record_ranges.json has no range for '" + field + "'");
    const Entry& e = it->second;
    return {{e.min, false, e.max, false, e.why.c_str()}, e.whole};
}

}  // namespace sb
