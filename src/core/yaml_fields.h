// The YAML reading rules of the config (src/core/yaml_reader.h) for other YAML inputs (hardware profiles):
// the file read with read_text_file (src/core/files.h: type and size first), one document
// loaded with the same checks (UTF-8, a single document, syntax errors at FILE:LINE:COL) and typed fields that fail as "FILE:LINE:COL: key 'a.b': reason",
// unknown and repeated keys included. Implemented in yaml_reader.cpp, over the reader the
// config uses.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "src/core/files.h"  // read_text_file
#include "src/core/plausible.h"

namespace sb {

constexpr Plausible kProfileMagnitude{1e-6, false, 1e9};

// One YAML document of `text`; `source` names it in errors, `what` says what it is ("config").
YAML::Node load_yaml_document(const std::string& text, const std::string& source, const std::string& what);

class YamlFields {
public:
    explicit YamlFields(const std::string& source);
    ~YamlFields();
    using KeyHandler = std::function<void(const std::string& key, const YAML::Node& key_node, const YAML::Node& value)>;
    // Calls `handle` for each key of `map` in document order; unknown or repeated keys fail.
    void for_each_key(const YAML::Node& map, const std::string& prefix, const std::vector<std::string>& known,
                      const KeyHandler& handle);
    void expect_map(const YAML::Node& value, const YAML::Node& key_node, const std::string& key) const;
    int64_t integer(const YAML::Node& value, const YAML::Node& key_node, const std::string& key, int64_t lo,
                    int64_t hi) const;
    // A number in (lo, hi] (lo_open) or [lo, hi]; hi <= lo means unbounded above. Either way
    // a non-zero value has a magnitude in kProfileMagnitude.
    double real(const YAML::Node& value, const YAML::Node& key_node, const std::string& key, double lo, bool lo_open,
                double hi = 0.0) const;
    std::string non_empty_text(const YAML::Node& value, const YAML::Node& key_node, const std::string& key) const;
    bool boolean(const YAML::Node& value, const YAML::Node& key_node, const std::string& key) const;
    std::string choice(const YAML::Node& value, const YAML::Node& key_node, const std::string& key,
                       const std::vector<std::string>& names) const;
    [[noreturn]] void fail(const YAML::Node& value, const YAML::Node& key_node, const std::string& key,
                           const std::string& reason) const;
    [[noreturn]] void fail_at(const YAML::Mark& mark, const std::string& reason) const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace sb
