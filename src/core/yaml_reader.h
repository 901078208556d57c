// The typed YAML reader behind every YAML input (the config, and hardware profiles and
// scenarios through YamlFields, src/core/yaml_fields.h): maps with known keys, integers,
// reals, choices and lists in ranges, each failing at the first bad one as one UserError
// "FILE:LINE:COL: key 'a.b': reason".
#pragma once

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "base/errors.h"
#include "src/core/choices.h"
#include "src/core/config_keys.h"

namespace sb {

// "a map", "a list", "no value" or "a scalar": what a node holds, for messages.
inline const char* node_kind(const YAML::Node& node) {
    switch (node.Type()) {
        case YAML::NodeType::Map: return "a map";
        case YAML::NodeType::Sequence: return "a list";
        case YAML::NodeType::Null: return "no value";
        default: return "a scalar";
    }
}

// Typed reading of YAML nodes, failing at the first bad one with FILE:LINE:COL and the key:
// maps with known keys, integers, reals, choices and lists in ranges. The config below and
// YamlFields (hardware profiles) read through it.
class YamlReader {
public:
    explicit YamlReader(std::string source) : source_(std::move(source)) {}

    [[noreturn]] void fail_at(const YAML::Mark& mark, const std::string& reason) const {
        throw UserError(fmt::format("{}:{}:{}: {}", source_, mark.line + 1, mark.column + 1, reason));
    }

    // The typed helpers below also serve YamlFields (src/core/yaml_fields.h).
    using KeyHandler = std::function<void(const std::string&, const YAML::Node&, const YAML::Node&)>;

    [[noreturn]] void fail(const YAML::Mark& mark, const std::string& key, const std::string& reason) const {
        fail_at(mark, fmt::format("key '{}': {}", key, reason));
    }

    // A value's own mark, except that a missing value (`steps:`) is marked at the next
    // line by yaml-cpp, so it is reported at its key.
    static YAML::Mark where(const YAML::Node& value, const YAML::Node& key_node) {
        return value.IsNull() || value.Mark().is_null() ? key_node.Mark() : value.Mark();
    }

    // Calls `handle` for each key of `map` (document order), rejecting unknown and repeated keys.
    void for_each_key(const YAML::Node& map, const std::string& prefix, const std::vector<std::string>& known,
                      const KeyHandler& handle) {
        std::map<std::string, int> seen_at_line;
        for (auto it = map.begin(); it != map.end(); ++it) {
            // Copies (cheap handles): it-> yields a temporary pair, references would dangle.
            const YAML::Node key_node = it->first;
            const YAML::Node value = it->second;
            if (!key_node.IsScalar())
                fail_at(key_node.Mark(), fmt::format("{}keys must be names, got {}",
                                                     prefix.empty() ? "" : "in '" + prefix + "': ",
                                                     node_kind(key_node)));
            const std::string& key = key_node.Scalar();
            std::string path = prefix.empty() ? key : prefix + "." + key;
            if (std::find(known.begin(), known.end(), key) == known.end()) fail_unknown(key_node, prefix, key, known);
            auto [seen, fresh] = seen_at_line.emplace(key, key_node.Mark().line + 1);
            if (!fresh) fail(key_node.Mark(), path, fmt::format("given twice (first at line {})", seen->second));
            handle(key, key_node, value);
        }
    }

    [[noreturn]] void fail_unknown(const YAML::Node& key_node, const std::string& prefix, const std::string& key,
                                   const std::vector<std::string>& known) const {
        std::string path = prefix.empty() ? key : prefix + "." + key;
        std::string guess = closest(key, known);
        if (!guess.empty()) guess = prefix.empty() ? guess : prefix + "." + guess;
        if (guess.empty()) {
            // The right key in the wrong section, e.g. `lr:` at the top instead of under optimizer.
            for (const auto& p : all_key_paths()) {
                size_t dot = p.rfind('.');
                std::string leaf = dot == std::string::npos ? p : p.substr(dot + 1);
                if (leaf == key && p != path)
                    fail(key_node.Mark(), path,
                         fmt::format("unknown key here; did you mean {}'{}'?",
                                     dot == std::string::npos ? "the top-level key " : "", p));
            }
        }
        if (!guess.empty()) fail(key_node.Mark(), path, fmt::format("unknown key; did you mean '{}'?", guess));
        fail(key_node.Mark(), path,
             fmt::format("unknown key; valid keys{}: {}", prefix.empty() ? "" : " in '" + prefix + "'", join(known)));
    }

    // The text of a plain (unquoted) scalar that should hold a number; anything else fails
    // naming what was there, so `steps: "10"` and `steps: [10]` are type errors.
    std::string number_scalar(const YAML::Node& value, const YAML::Node& key_node, const std::string& key,
                              const char* wanted) const {
        if (!value.IsScalar()) fail(where(value, key_node), key, fmt::format("expected {}, got {}", wanted, node_kind(value)));
        if (value.Tag() == "!" || value.Tag() == "tag:yaml.org,2002:str")
            fail(where(value, key_node), key, fmt::format("expected {}, got the string \"{}\"", wanted, value.Scalar()));
        return value.Scalar();
    }

    int64_t integer(const YAML::Node& value, const YAML::Node& key_node, const std::string& key, IntRange range) const {
        std::string text = number_scalar(value, key_node, key, "an integer");
        static const std::regex kInteger("[-+]?[0-9]+");
        if (!std::regex_match(text, kInteger))
            fail(where(value, key_node), key, fmt::format("expected an integer, got '{}'", text));
        errno = 0;
        long long v = std::strtoll(text.c_str(), nullptr, 10);
        // Beyond int64 is beyond every limit; strtoll clamped v to the side it overflowed.
        if (errno == ERANGE) fail(where(value, key_node), key, fmt::format("must be {} {}, got {}",
                                                                           v < 0 ? ">=" : "<=", v < 0 ? range.lo : range.hi, text));
        std::string problem = int_range_problem(v, range);
        if (!problem.empty()) fail(where(value, key_node), key, problem);
        return v;
    }

    // YAML 1.2's core booleans only: `true`/`false` (yaml-cpp would also take yes/no/on/off).
    bool boolean(const YAML::Node& value, const YAML::Node& key_node, const std::string& key) const {
        if (!value.IsScalar()) fail(where(value, key_node), key, fmt::format("expected true or false, got {}", node_kind(value)));
        const std::string& text = value.Scalar();
        if (value.Tag() == "!" || (text != "true" && text != "false"))
            fail(where(value, key_node), key, fmt::format("expected true or false, got '{}'", text));
        return text == "true";
    }

    uint64_t unsigned_integer(const YAML::Node& value, const YAML::Node& key_node, const std::string& key) const {
        std::string text = number_scalar(value, key_node, key, "an integer");
        static const std::regex kInteger("[-+]?[0-9]+");
        if (!std::regex_match(text, kInteger))
            fail(where(value, key_node), key, fmt::format("expected an integer, got '{}'", text));
        if (text[0] == '-' && text.find_first_not_of("-0") != std::string::npos)
            fail(where(value, key_node), key, fmt::format("must be >= 0, got {}", text));
        errno = 0;
        unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
        if (errno == ERANGE)
            fail(where(value, key_node), key,
                 fmt::format("must be <= {}, got {}", std::numeric_limits<uint64_t>::max(), text));
        return v;
    }

    double real(const YAML::Node& value, const YAML::Node& key_node, const std::string& key, RealRange range) const {
        std::string text = number_scalar(value, key_node, key, "a number");
        static const std::regex kReal("[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
        if (!std::regex_match(text, kReal)) fail(where(value, key_node), key, fmt::format("expected a number, got '{}'", text));
        errno = 0;
        double v = std::strtod(text.c_str(), nullptr);
        if (errno == ERANGE && std::isinf(v))
            fail(where(value, key_node), key, fmt::format("{} is too large to be a number", text));
        std::string problem = real_range_problem(v, text, range);
        if (!problem.empty()) fail(where(value, key_node), key, problem);
        return v;
    }

    // A real stored as fp32 (the optimizer's fields): it must survive the narrowing.
    float real32(const YAML::Node& value, const YAML::Node& key_node, const std::string& key, RealRange range) const {
        double v = real(value, key_node, key, range);
        float f = static_cast<float>(v);
        if (std::isinf(f) || (v != 0.0 && f == 0.0f))
            fail(where(value, key_node), key, fmt::format("{} does not fit a 32-bit float", value.Scalar()));
        return f;
    }

    std::string text(const YAML::Node& value, const YAML::Node& key_node, const std::string& key) const {
        if (!value.IsScalar()) fail(where(value, key_node), key, fmt::format("expected a string, got {}", node_kind(value)));
        return value.Scalar();
    }

    std::string non_empty_text(const YAML::Node& value, const YAML::Node& key_node, const std::string& key) const {
        std::string s = text(value, key_node, key);
        if (s.empty()) fail(where(value, key_node), key, "must be a non-empty string");
        return s;
    }

    template <class E>
    E choice(const YAML::Node& value, const YAML::Node& key_node, const std::string& key,
             const std::vector<Choice<E>>& choices) const {
        if (!value.IsScalar())
            fail(where(value, key_node), key,
                 fmt::format("expected one of {}, got {}", join(names_of(choices)), node_kind(value)));
        std::optional<E> found = find_choice(value.Scalar(), choices);
        if (!found) fail(where(value, key_node), key, bad_choice_reason(value.Scalar(), choices));
        return *found;
    }

    // A non-empty list of at most max_entries integers in `range`; entries are named key[i].
    std::vector<int> int_list(const YAML::Node& value, const YAML::Node& key_node, const std::string& key,
                              IntRange range, int64_t max_entries) const {
        if (!value.IsSequence())
            fail(where(value, key_node), key, fmt::format("expected a list of integers, got {}", node_kind(value)));
        if (value.size() == 0) fail(where(value, key_node), key, "must be a non-empty list");
        if (static_cast<int64_t>(value.size()) > max_entries)
            fail(where(value, key_node), key,
                 fmt::format("must have at most {} entries, got {}", max_entries, value.size()));
        std::vector<int> out;
        for (size_t i = 0; i < value.size(); ++i)
            out.push_back(static_cast<int>(integer(value[i], value, fmt::format("{}[{}]", key, i), range)));
        return out;
    }

    void expect_map(const YAML::Node& value, const YAML::Node& key_node, const std::string& key) const {
        if (!value.IsMap()) fail(where(value, key_node), key, fmt::format("expected a map, got {}", node_kind(value)));
    }

protected:
    std::string source_;
};

}  // namespace sb
