// The names of things: the spelling of every enum that configs, flags and records name: one table per enum,
// from which its *_name function, its parser and its flags' valid values all come, so a
// config, a flag and a record spell a value the same way. (The model enums' names,
// precision_name, activation_name, conv_engine_name, transformer_arch_name, live in models/,
// below this layer; their tables here are built from those functions.) Also the typo guess
// of every "unknown" message and the repeated-entry check of every list of names.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/sharding_mode.h"
#include "models/ops.h"
#include "models/transformer.h"

namespace sb {

enum class ScalingMode { weak, strong };
enum class BackendChoice { auto_select, cpu, cuda };

template <class E>
struct Choice {
    std::string name;
    E value;
};

const std::vector<Choice<Precision>>& precision_choices();
const std::vector<Choice<DType>>& grad_dtype_choices();  // fp32, bf16, fp16 (not dtype_name's f32)
const std::vector<Choice<ShardingMode>>& sharding_choices();
const std::vector<Choice<Activation>>& activation_choices();
const std::vector<Choice<OptimizerConfig::Kind>>& optimizer_choices();
const std::vector<Choice<ScalingMode>>& scaling_mode_choices();
const std::vector<Choice<BackendChoice>>& backend_choices();
const std::vector<Choice<std::optional<ConvEngine>>>& conv_engine_choices();  // auto is nullopt
const std::vector<Choice<std::string>>& model_choices();
const std::vector<Choice<TransformerArch>>& arch_choices();

// The one of `candidates` that `word` is plausibly a typo of (an edit or two, case aside), else "".
std::string closest(const std::string& word, const std::vector<std::string>& candidates);
std::string join(const std::vector<std::string>& items);  // "a, b, c"

template <class E>
std::vector<std::string> names_of(const std::vector<Choice<E>>& choices) {
    std::vector<std::string> names;
    for (const auto& c : choices) names.push_back(c.name);
    return names;
}

template <class E>
std::optional<E> find_choice(const std::string& text, const std::vector<Choice<E>>& choices) {
    for (const auto& c : choices)
        if (c.name == text) return c.value;
    return std::nullopt;
}

// "" when no entry of `entries` repeats an earlier one, else "ENTRY is given twice (entries
// I and J)": the one check of every list that names things (world sizes, GPU counts, node
// counts, profiles, files, workloads), so none is measured, projected or shown twice.
std::string repeated_entry(const std::vector<std::string>& entries);
std::string repeated_entry(const std::vector<int>& entries);
// The 1-based positions of the first entry that repeats an earlier one and of that earlier
// one; {0, 0} when none repeats (repeated_file in src/core/files.h compares files by identity).
std::pair<size_t, size_t> first_repeat(const std::vector<std::string>& keys);

// The reason a spelling is not a valid choice, with the valid ones and a likely fix.
std::string bad_choice_reason(const std::string& text, const std::vector<std::string>& names);
template <class E>
std::string bad_choice_reason(const std::string& text, const std::vector<Choice<E>>& choices) {
    return bad_choice_reason(text, names_of(choices));
}

const char* scaling_mode_name(ScalingMode mode);
const char* backend_choice_name(BackendChoice backend);
const char* optimizer_kind_name(OptimizerConfig::Kind kind);
// "auto", "im2col" or "cudnn": the config's spelling of conv_engine.
const char* conv_engine_choice_name(const std::optional<ConvEngine>& engine);
// "fp32", "bf16" or "fp16" (the names grad_dtype takes).
const char* grad_dtype_name(DType dtype);

// An unknown spelling is a UserError "KEY: unknown value ...; valid values: ...".
BackendChoice parse_backend_choice(const std::string& text);
Precision parse_precision(const std::string& text);
DType parse_grad_dtype(const std::string& text);
ScalingMode parse_scaling_mode(const std::string& text);
ShardingMode parse_sharding_mode(const std::string& text);

}  // namespace sb
