// The enum spelling tables of src/core/choices.h, the typo guess that every "unknown value"
// and "unknown key" message offers, and the repeated-entry check of lists of names.
#include "src/core/choices.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "base/errors.h"

namespace sb {
namespace {

// Optimal-string-alignment distance: edits plus adjacent swaps, case-insensitive.
size_t edit_distance(const std::string& a, const std::string& b) {
    auto lower = [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); };
    std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        for (size_t j = 1; j <= b.size(); ++j) {
            size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
            if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1]))
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
    }
    return d[a.size()][b.size()];
}

// The table's name of `value`; every value of the enum has a row.
template <class E>
const char* name_in(const std::vector<Choice<E>>& table, const E& value) {
    for (const auto& c : table)
        if (c.value == value) return c.name.c_str();
    return "unknown";
}

template <class E>
E parse_in(const std::vector<Choice<E>>& table, const char* key, const std::string& text) {
    std::optional<E> found = find_choice(text, table);
    if (!found) throw UserError(fmt::format("{}: {}", key, bad_choice_reason(text, table)));
    return *found;
}

}  // namespace

const std::vector<Choice<Precision>>& precision_choices() {
    static const std::vector<Choice<Precision>> table = [] {
        std::vector<Choice<Precision>> out;
        for (Precision p : {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16})
            out.push_back({precision_name(p), p});
        return out;
    }();
    return table;
}

const std::vector<Choice<DType>>& grad_dtype_choices() {
    static const std::vector<Choice<DType>> table = {{"fp32", DType::f32}, {"bf16", DType::bf16}, {"fp16", DType::f16}};
    return table;
}

const std::vector<Choice<ShardingMode>>& sharding_choices() {
    static const std::vector<Choice<ShardingMode>> table = [] {
        std::vector<Choice<ShardingMode>> out;
        for (ShardingMode m : {ShardingMode::none, ShardingMode::optimizer, ShardingMode::gradients,
                               ShardingMode::parameters})
            out.push_back({sharding_mode_name(m), m});
        return out;
    }();
    return table;
}

const std::vector<Choice<Activation>>& activation_choices() {
    static const std::vector<Choice<Activation>> table = [] {
        std::vector<Choice<Activation>> out;
        for (Activation a : {Activation::relu, Activation::gelu, Activation::tanh, Activation::none})
            out.push_back({activation_name(a), a});
        return out;
    }();
    return table;
}

const std::vector<Choice<OptimizerConfig::Kind>>& optimizer_choices() {
    static const std::vector<Choice<OptimizerConfig::Kind>> table = {{"sgd", OptimizerConfig::Kind::sgd},
                                                                     {"adamw", OptimizerConfig::Kind::adamw}};
    return table;
}

const std::vector<Choice<ScalingMode>>& scaling_mode_choices() {
    static const std::vector<Choice<ScalingMode>> table = {{"weak", ScalingMode::weak}, {"strong", ScalingMode::strong}};
    return table;
}

const std::vector<Choice<BackendChoice>>& backend_choices() {
    static const std::vector<Choice<BackendChoice>> table = {
        {"auto", BackendChoice::auto_select}, {"cpu", BackendChoice::cpu}, {"cuda", BackendChoice::cuda}};
    return table;
}

const std::vector<Choice<std::optional<ConvEngine>>>& conv_engine_choices() {
    static const std::vector<Choice<std::optional<ConvEngine>>> table = {
        {"auto", std::nullopt},
        {conv_engine_name(ConvEngine::im2col), ConvEngine::im2col},
        {conv_engine_name(ConvEngine::cudnn), ConvEngine::cudnn}};
    return table;
}

const std::vector<Choice<std::string>>& model_choices() {
    static const std::vector<Choice<std::string>> table = {
        {"mlp", "mlp"}, {"transformer", "transformer"}, {"resnet", "resnet"}};
    return table;
}

const std::vector<Choice<TransformerArch>>& arch_choices() {
    static const std::vector<Choice<TransformerArch>> table = {
        {transformer_arch_name(TransformerArch::bert), TransformerArch::bert},
        {transformer_arch_name(TransformerArch::gpt), TransformerArch::gpt}};
    return table;
}

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
    std::string best;
    size_t best_distance = std::numeric_limits<size_t>::max();
    for (const auto& c : candidates) {
        size_t dist = edit_distance(word, c);
        size_t allowed = std::max(word.size(), c.size()) >= 6 ? 2 : 1;
        if (dist <= allowed && dist < std::min(word.size(), c.size()) && dist < best_distance) {
            best = c;
            best_distance = dist;
        }
    }
    return best;
}

std::string join(const std::vector<std::string>& items) {
    std::string out;
    for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
    return out;
}

std::pair<size_t, size_t> first_repeat(const std::vector<std::string>& keys) {
    std::map<std::string, size_t> first;  // key -> its 1-based position
    for (size_t j = 0; j < keys.size(); ++j) {
        const auto [it, fresh] = first.emplace(keys[j], j + 1);
        if (!fresh) return {it->second, j + 1};
    }
    return {0, 0};
}

std::string repeated_entry(const std::vector<std::string>& entries) {
    const auto [first, again] = first_repeat(entries);
    if (again == 0) return "";
    return fmt::format("{} is given twice (entries {} and {})", entries[again - 1], first, again);
}

std::string repeated_entry(const std::vector<int>& entries) {
    std::vector<std::string> names;
    for (int e : entries) names.push_back(std::to_string(e));
    return repeated_entry(names);
}

std::string bad_choice_reason(const std::string& text, const std::vector<std::string>& names) {
    std::string reason = fmt::format("unknown value '{}'; valid values: {}", text, join(names));
    std::string guess = closest(text, names);
    if (!guess.empty()) reason += fmt::format("; did you mean '{}'?", guess);
    return reason;
}

const char* scaling_mode_name(ScalingMode mode) { return name_in(scaling_mode_choices(), mode); }
const char* backend_choice_name(BackendChoice backend) { return name_in(backend_choices(), backend); }
const char* optimizer_kind_name(OptimizerConfig::Kind kind) { return name_in(optimizer_choices(), kind); }
const char* conv_engine_choice_name(const std::optional<ConvEngine>& engine) {
    return name_in(conv_engine_choices(), engine);
}
const char* grad_dtype_name(DType dtype) { return name_in(grad_dtype_choices(), dtype); }

BackendChoice parse_backend_choice(const std::string& text) { return parse_in(backend_choices(), "backend", text); }
Precision parse_precision(const std::string& text) { return parse_in(precision_choices(), "precision", text); }
DType parse_grad_dtype(const std::string& text) { return parse_in(grad_dtype_choices(), "grad_dtype", text); }
ScalingMode parse_scaling_mode(const std::string& text) {
    return parse_in(scaling_mode_choices(), "scaling_mode", text);
}
ShardingMode parse_sharding_mode(const std::string& text) { return parse_in(sharding_choices(), "sharding", text); }

}  // namespace sb
