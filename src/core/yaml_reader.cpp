// One YAML document loaded with the checks every YAML input shares (UTF-8, a single
// document, syntax errors at FILE:LINE:COL), and YamlFields, the typed reader's face for
// hardware profiles and scenarios (src/core/yaml_fields.h).
#include "src/core/yaml_reader.h"

#include <fmt/format.h>

#include "src/core/files.h"
#include "src/core/plausible.h"
#include "src/core/yaml_fields.h"

namespace sb {
namespace {

// The position of the first byte that is not valid UTF-8 (JSON records need UTF-8), as
// 1-based line and column (in characters); {0, 0} when the text is valid.
std::pair<int, int> first_invalid_utf8(const std::string& text) {
    const size_t at = invalid_utf8_at(text);
    if (at == std::string::npos) return {0, 0};
    const size_t line_start = text.rfind('\n', at) == std::string::npos ? 0 : text.rfind('\n', at) + 1;
    const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
    const auto column = 1 + std::count_if(text.begin() + static_cast<std::ptrdiff_t>(line_start),
                                          text.begin() + static_cast<std::ptrdiff_t>(at),
                                          [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
    return {static_cast<int>(line), static_cast<int>(column)};
}

// The line of a document marker ("---" or "...") that starts a second document, or 0.
// (YAML::LoadAll would find it too, but loops forever on some inputs, e.g. ",".)
int second_document_line(const std::string& text) {
    bool content = false;
    int line = 0;
    size_t start = 0;
    while (start <= text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        const std::string row = text.substr(start, end - start);
        ++line;
        const bool marker = (row.rfind("---", 0) == 0 || row.rfind("...", 0) == 0) &&
                            (row.size() == 3 || row[3] == ' ' || row[3] == '\t' || row[3] == '\r');
        const size_t first = row.find_first_not_of(" \t\r");
        if (marker && content && row.rfind("---", 0) == 0) return line;
        if (!marker && first != std::string::npos && row[first] != '#') content = true;
        start = end + 1;
    }
    return 0;
}

}  // namespace

YAML::Node load_yaml_document(const std::string& yaml_text, const std::string& source, const std::string& what) {
    if (auto [line, column] = first_invalid_utf8(yaml_text); line != 0)
        throw UserError(fmt::format("{}:{}:{}: the {} is not valid UTF-8", source, line, column, what));
    if (int line = second_document_line(yaml_text); line != 0)
        throw UserError(fmt::format("{}:{}:1: the {} must be one YAML document; a second one starts here", source, line, what));
    try {
        return YAML::Load(yaml_text);
    } catch (const YAML::Exception& e) {  // ParserException and friends: all carry a mark
        throw UserError(fmt::format("{}:{}:{}: YAML syntax error: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg));
    }
}

struct YamlFields::Impl {
    explicit Impl(const std::string& source) : reader(source) {}
    YamlReader reader;
};

YamlFields::YamlFields(const std::string& source) : impl_(std::make_unique<Impl>(source)) {}
YamlFields::~YamlFields() = default;

void YamlFields::for_each_key(const YAML::Node& map, const std::string& prefix, const std::vector<std::string>& known,
                              const KeyHandler& handle) {
    impl_->reader.for_each_key(map, prefix, known, handle);
}

void YamlFields::expect_map(const YAML::Node& value, const YAML::Node& key_node, const std::string& key) const {
    impl_->reader.expect_map(value, key_node, key);
}

int64_t YamlFields::integer(const YAML::Node& value, const YAML::Node& key_node, const std::string& key, int64_t lo,
                            int64_t hi) const {
    return impl_->reader.integer(value, key_node, key, IntRange{lo, hi});
}

double YamlFields::real(const YAML::Node& value, const YAML::Node& key_node, const std::string& key, double lo,
                        bool lo_open, double hi) const {
    const double v = impl_->reader.real(value, key_node, key, RealRange{lo, lo_open, hi > lo, hi, false});
    // Profile numbers are rates, sizes, times, prices and fractions in units where a physical
    // value is neither below 1e-6 nor above 1e9 (1e-300 GB/s or a 1e300 us gap are typos).
    if (v != 0 && !implausible(std::fabs(v), kProfileMagnitude).empty())
        fail(value, key_node, key, fmt::format("{} is not a plausible value: a non-zero profile number has a magnitude "
                                               "from {:g} to {:g}", value.Scalar(), kProfileMagnitude.lo,
                                               kProfileMagnitude.hi));
    return v;
}

std::string YamlFields::non_empty_text(const YAML::Node& value, const YAML::Node& key_node,
                                       const std::string& key) const {
    return impl_->reader.non_empty_text(value, key_node, key);
}

bool YamlFields::boolean(const YAML::Node& value, const YAML::Node& key_node, const std::string& key) const {
    return impl_->reader.choice(value, key_node, key, std::vector<Choice<bool>>{{"true", true}, {"false", false}});
}

std::string YamlFields::choice(const YAML::Node& value, const YAML::Node& key_node, const std::string& key,
                               const std::vector<std::string>& names) const {
    std::vector<Choice<std::string>> choices;
    for (const auto& n : names) choices.push_back({n, n});
    return impl_->reader.choice(value, key_node, key, choices);
}

void YamlFields::fail(const YAML::Node& value, const YAML::Node& key_node, const std::string& key,
                      const std::string& reason) const {
    impl_->reader.fail_at(value.IsNull() || value.Mark().is_null() ? key_node.Mark() : value.Mark(),
                          fmt::format("key '{}': {}", key, reason));
}

void YamlFields::fail_at(const YAML::Mark& mark, const std::string& reason) const { impl_->reader.fail_at(mark, reason); }

}  // namespace sb
