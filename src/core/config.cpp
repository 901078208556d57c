// Config loading and validation (src/core/config.h): reads YAML with yaml-cpp, checks every key,
// type and range itself (yaml-cpp's as<int>() is too lenient), and reports the first problem
// as one UserError line "FILE:LINE:COL: key 'mlp.hidden[2]': reason". The range rules live
// here once and serve both the YAML reader (with line:column) and validate_config (after
// command-line flags, without a line).
#include "src/core/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <regex>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "base/errors.h"
#include "src/core/files.h"
#include "src/core/plausible.h"
#include "src/core/yaml_fields.h"

namespace sb {
namespace {

// ---- limits that keep a typo from asking for an absurd allocation or run
constexpr int64_t kMaxWidth = int64_t{1} << 20;       // input_dim, hidden widths, classes
constexpr int64_t kMaxBatch = kMaxBatchSize;
constexpr int64_t kMaxSteps = 1000000000;             // steps and warmup: their sum fits an int
constexpr int64_t kMaxDatasetBatches = int64_t{1} << 20;
constexpr int64_t kMaxHiddenLayers = 1024;
constexpr int64_t kMaxWorld = kMaxWorldSize;           // a scaling entry
constexpr double kMaxBucketMb = 4096.0;

struct IntRange {
    int64_t lo;
    int64_t hi;
};
constexpr IntRange kWidthRange{1, kMaxWidth};
constexpr IntRange kClassesRange{2, kMaxWidth};
constexpr IntRange kBatchRange{1, kMaxBatch};
constexpr IntRange kStepsRange{1, kMaxSteps};
constexpr IntRange kWarmupRange{0, kMaxSteps};
constexpr IntRange kDatasetBatchesRange{1, kMaxDatasetBatches};
constexpr IntRange kWorldRange{1, kMaxWorld};
constexpr IntRange kSdcCheckEveryRange{0, kMaxSteps};
constexpr IntRange kLayersRange{1, 1024};
constexpr IntRange kHeadsRange{1, 1024};
constexpr IntRange kVocabRange{3, int64_t{1} << 22};  // bert reserves one id for [MASK]
constexpr IntRange kSeqRange{2, int64_t{1} << 16};
constexpr IntRange kTypeVocabRange{1, 1024};
constexpr IntRange kStageBlocksRange{1, 256};  // resnet.blocks entries
constexpr int64_t kMaxStages = 8;
constexpr IntRange kChannelsRange{1, kMaxResNetChannels};  // resnet.width
constexpr IntRange kImageRange{8, 4096};

// A real interval; open ends exclude the bound, has_hi = false means unbounded above.
struct RealRange {
    double lo;
    bool lo_open;
    bool has_hi;
    double hi;
    bool hi_open;
};
constexpr RealRange kPositive{0.0, true, false, 0.0, false};
constexpr RealRange kNonNegative{0.0, false, false, 0.0, false};
constexpr RealRange kUnitHalfOpen{0.0, false, true, 1.0, true};  // [0, 1)
constexpr RealRange kBucketMbRange{0.0, true, true, kMaxBucketMb, false};
constexpr RealRange kUnitOpen{0.0, true, true, 1.0, true};  // (0, 1)

// Shortest text that reads back to the same value (0.001, not 0.0010000000474974513).
std::string number_text(double v) { return fmt::format("{}", v); }
std::string number_text(float v) { return fmt::format("{}", v); }

// "" when v is in range, else the reason.
std::string int_range_problem(int64_t v, IntRange r) {
    if (v < r.lo) return fmt::format("must be >= {}, got {}", r.lo, v);
    if (v > r.hi) return fmt::format("must be <= {}, got {}", r.hi, v);
    return "";
}

std::string real_range_problem(double v, const std::string& shown, RealRange r) {
    bool low_ok = r.lo_open ? v > r.lo : v >= r.lo;
    bool high_ok = !r.has_hi || (r.hi_open ? v < r.hi : v <= r.hi);
    if (low_ok && high_ok) return "";
    if (!r.has_hi) return fmt::format("must be {} {}, got {}", r.lo_open ? ">" : ">=", number_text(r.lo), shown);
    return fmt::format("must be in {}{}, {}{}, got {}", r.lo_open ? "(" : "[", number_text(r.lo),
                       number_text(r.hi), r.hi_open ? ")" : "]", shown);
}

// ---- enum spellings. Names come from the *_name functions so configs, flags and result
// records spell them the same way.
template <class E>
struct Choice {
    std::string name;
    E value;
};

std::vector<Choice<Precision>> precision_choices() {
    std::vector<Choice<Precision>> out;
    for (Precision p : {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16})
        out.push_back({precision_name(p), p});
    return out;
}

std::vector<Choice<DType>> grad_dtype_choices() {
    return {{"fp32", DType::f32}, {"bf16", DType::bf16}, {"fp16", DType::f16}};
}

std::vector<Choice<ShardingMode>> sharding_choices() {
    std::vector<Choice<ShardingMode>> out;
    for (ShardingMode m : {ShardingMode::none, ShardingMode::optimizer, ShardingMode::gradients,
                           ShardingMode::parameters})
        out.push_back({sharding_mode_name(m), m});
    return out;
}

std::vector<Choice<Activation>> activation_choices() {
    std::vector<Choice<Activation>> out;
    for (Activation a : {Activation::relu, Activation::gelu, Activation::tanh, Activation::none})
        out.push_back({activation_name(a), a});
    return out;
}

const char* optimizer_kind_name(OptimizerConfig::Kind kind) {
    return kind == OptimizerConfig::Kind::sgd ? "sgd" : "adamw";
}

std::vector<Choice<OptimizerConfig::Kind>> optimizer_choices() {
    return {{"sgd", OptimizerConfig::Kind::sgd}, {"adamw", OptimizerConfig::Kind::adamw}};
}

std::vector<Choice<ScalingMode>> scaling_mode_choices() {
    return {{"weak", ScalingMode::weak}, {"strong", ScalingMode::strong}};
}

std::vector<Choice<BackendChoice>> backend_choices() {
    return {{"auto", BackendChoice::auto_select}, {"cpu", BackendChoice::cpu}, {"cuda", BackendChoice::cuda}};
}

std::vector<Choice<std::optional<ConvEngine>>> conv_engine_choices() {
    return {{"auto", std::nullopt}, {"im2col", ConvEngine::im2col}, {"cudnn", ConvEngine::cudnn}};
}

std::vector<Choice<std::string>> model_choices() {
    return {{"mlp", "mlp"}, {"transformer", "transformer"}, {"resnet", "resnet"}};
}

std::vector<Choice<TransformerArch>> arch_choices() {
    return {{transformer_arch_name(TransformerArch::bert), TransformerArch::bert},
            {transformer_arch_name(TransformerArch::gpt), TransformerArch::gpt}};
}

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

}  // namespace

// The closest candidate when it is plausibly a typo of `word`, else "".
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

namespace {

std::string join(const std::vector<std::string>& items) {
    std::string out;
    for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
    return out;
}

template <class E>
std::vector<std::string> names_of(const std::vector<Choice<E>>& choices) {
    std::vector<std::string> names;
    for (const auto& c : choices) names.push_back(c.name);
    return names;
}

// The reason a spelling is not a valid choice, with the valid ones and a likely fix.
template <class E>
std::string bad_choice_reason(const std::string& text, const std::vector<Choice<E>>& choices) {
    std::vector<std::string> names = names_of(choices);
    std::string reason = fmt::format("unknown value '{}'; valid values: {}", text, join(names));
    std::string guess = closest(text, names);
    if (!guess.empty()) reason += fmt::format("; did you mean '{}'?", guess);
    return reason;
}

template <class E>
std::optional<E> find_choice(const std::string& text, const std::vector<Choice<E>>& choices) {
    for (const auto& c : choices)
        if (c.name == text) return c.value;
    return std::nullopt;
}

// ---- the keys of each section, in the order default.yaml lists them
const std::vector<std::string> kTopKeys = {"model", "mlp", "transformer", "resnet", "batch_size", "scaling_mode", "scaling", "steps",
                                           "warmup", "dataset_batches", "precision", "optimizer", "bucket_mb",
                                           "grad_dtype", "sharding", "seed", "backend", "share_gpu", "out", "cuda_graphs",
                                           "conv_engine", "sdc_check_every"};
const std::vector<std::string> kMlpKeys = {"input_dim", "hidden", "num_classes", "activation", "teacher_hidden"};
const std::vector<std::string> kTransformerKeys = {"arch", "layers", "hidden", "heads", "ffn", "vocab", "seq_len",
                                                  "max_positions", "type_vocab", "dropout", "attention_dropout",
                                                  "layernorm_eps", "mask_prob"};
const std::vector<std::string> kResNetKeys = {"blocks", "width", "image_size", "num_classes", "bn_eps"};
const std::vector<std::string> kOptimizerKeys = {"kind", "lr", "momentum", "weight_decay", "beta1", "beta2", "eps"};

// Every known key as a full path, to catch a key put in the wrong section.
std::vector<std::string> all_key_paths() {
    std::vector<std::string> out;
    for (const auto& k : kTopKeys) out.push_back(k);
    for (const auto& k : kMlpKeys) out.push_back("mlp." + k);
    for (const auto& k : kTransformerKeys) out.push_back("transformer." + k);
    for (const auto& k : kResNetKeys) out.push_back("resnet." + k);
    for (const auto& k : kOptimizerKeys) out.push_back("optimizer." + k);
    return out;
}

const char* node_kind(const YAML::Node& node) {
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

    std::vector<int> scaling_list(const YAML::Node& value, const YAML::Node& key_node, const std::string& key) const {
        std::vector<int> out = int_list(value, key_node, key, kWorldRange, kMaxWorld);
        for (size_t i = 1; i < out.size(); ++i) {
            if (out[i] == out[i - 1])
                fail(value[i].Mark(), fmt::format("{}[{}]", key, i), fmt::format("duplicate world size {}", out[i]));
            if (out[i] < out[i - 1])
                fail(value[i].Mark(), fmt::format("{}[{}]", key, i),
                     fmt::format("world sizes must be strictly increasing, got {} after {}", out[i], out[i - 1]));
        }
        return out;
    }

    void expect_map(const YAML::Node& value, const YAML::Node& key_node, const std::string& key) const {
        if (!value.IsMap()) fail(where(value, key_node), key, fmt::format("expected a map, got {}", node_kind(value)));
    }

protected:
    std::string source_;
};

// Reads one YAML document into a TrainConfig: the top-level keys, then one section each for
// mlp, transformer, resnet and optimizer.
class ConfigReader : public YamlReader {
public:
    using YamlReader::YamlReader;

    void read_document(const YAML::Node& root, TrainConfig& cfg) {
        if (root.IsNull())
            fail_at(YAML::Mark(),
                    "the config holds no keys: a config is a YAML map of keys (no --config runs the built-in default)");
        if (!root.IsMap())
            fail_at(root.Mark(), fmt::format("the config must be a map of keys, got {}", node_kind(root)));
        for_each_key(root, "", kTopKeys, [&](const std::string& key, const YAML::Node& key_node,
                                             const YAML::Node& value) {
            const YAML::Mark mark = where(value, key_node);
            cfg.key_marks[key] = fmt::format("{}:{}:{}", source_, mark.line + 1, mark.column + 1);
            if (key == "model") cfg.model = choice(value, key_node, key, model_choices());
            else if (key == "mlp") read_mlp(value, key_node, cfg.mlp);
            else if (key == "transformer") read_transformer(value, key_node, cfg.transformer);
            else if (key == "resnet") read_resnet(value, key_node, cfg.resnet);
            else if (key == "batch_size") cfg.batch_size = static_cast<int>(integer(value, key_node, key, kBatchRange));
            else if (key == "scaling_mode") cfg.scaling_mode = choice(value, key_node, key, scaling_mode_choices());
            else if (key == "scaling") cfg.scaling = scaling_list(value, key_node, key);
            else if (key == "steps") cfg.steps = static_cast<int>(integer(value, key_node, key, kStepsRange));
            else if (key == "warmup") cfg.warmup = static_cast<int>(integer(value, key_node, key, kWarmupRange));
            else if (key == "dataset_batches")
                cfg.dataset_batches = static_cast<int>(integer(value, key_node, key, kDatasetBatchesRange));
            else if (key == "precision") cfg.precision = choice(value, key_node, key, precision_choices());
            else if (key == "optimizer") read_optimizer(value, key_node, cfg.optimizer);
            else if (key == "bucket_mb") cfg.bucket_mb = real(value, key_node, key, kBucketMbRange);
            else if (key == "grad_dtype") cfg.grad_dtype = choice(value, key_node, key, grad_dtype_choices());
            else if (key == "sharding") cfg.sharding = choice(value, key_node, key, sharding_choices());
            else if (key == "seed") cfg.seed = unsigned_integer(value, key_node, key);
            else if (key == "backend") cfg.backend = choice(value, key_node, key, backend_choices());
            else if (key == "share_gpu") cfg.share_gpu = boolean(value, key_node, key);
            else if (key == "out") cfg.out = non_empty_text(value, key_node, key);
            else if (key == "cuda_graphs") cfg.cuda_graphs = boolean(value, key_node, key);
            else if (key == "conv_engine") cfg.conv_engine = choice(value, key_node, key, conv_engine_choices());
            else if (key == "sdc_check_every")
                cfg.sdc_check_every = static_cast<int>(integer(value, key_node, key, kSdcCheckEveryRange));
        });
    }

private:
    void read_mlp(const YAML::Node& value, const YAML::Node& key_node, MlpConfig& mlp) {
        expect_map(value, key_node, "mlp");
        for_each_key(value, "mlp", kMlpKeys, [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
            std::string path = "mlp." + key;
            if (key == "input_dim") mlp.input_dim = static_cast<int>(integer(v, k, path, kWidthRange));
            else if (key == "hidden") mlp.hidden = int_list(v, k, path, kWidthRange, kMaxHiddenLayers);
            else if (key == "num_classes") mlp.num_classes = static_cast<int>(integer(v, k, path, kClassesRange));
            else if (key == "activation") mlp.activation = choice(v, k, path, activation_choices());
            else if (key == "teacher_hidden") mlp.teacher_hidden = static_cast<int>(integer(v, k, path, kWidthRange));
        });
    }

    void read_transformer(const YAML::Node& value, const YAML::Node& key_node, TransformerConfig& tc) {
        expect_map(value, key_node, "transformer");
        TransformerShape& s = tc.shape;
        std::map<std::string, YAML::Mark> given;
        for_each_key(value, "transformer", kTransformerKeys,
                     [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                         std::string path = "transformer." + key;
                         given[key] = where(v, k);
                         if (key == "arch") s.arch = choice(v, k, path, arch_choices());
                         else if (key == "layers") s.layers = static_cast<int>(integer(v, k, path, kLayersRange));
                         else if (key == "hidden") s.hidden = static_cast<int>(integer(v, k, path, kWidthRange));
                         else if (key == "heads") s.heads = static_cast<int>(integer(v, k, path, kHeadsRange));
                         else if (key == "ffn") s.ffn = static_cast<int>(integer(v, k, path, kWidthRange));
                         else if (key == "vocab") s.vocab = static_cast<int>(integer(v, k, path, kVocabRange));
                         else if (key == "seq_len") s.seq_len = static_cast<int>(integer(v, k, path, kSeqRange));
                         else if (key == "max_positions")
                             s.max_positions = static_cast<int>(integer(v, k, path, kSeqRange));
                         else if (key == "type_vocab")
                             s.type_vocab = static_cast<int>(integer(v, k, path, kTypeVocabRange));
                         else if (key == "dropout") s.dropout = real32(v, k, path, kUnitHalfOpen);
                         else if (key == "attention_dropout") s.attention_dropout = real32(v, k, path, kUnitHalfOpen);
                         else if (key == "layernorm_eps") s.layernorm_eps = real32(v, k, path, kPositive);
                         else if (key == "mask_prob") tc.mask_prob = real32(v, k, path, kUnitOpen);
                     });
        // GPT-2's own values where the file leaves them to the arch.
        if (s.arch == TransformerArch::gpt) {
            if (!given.count("max_positions")) s.max_positions = 1024;
            if (!given.count("layernorm_eps")) s.layernorm_eps = 1e-5f;
        }
        const YAML::Mark section = key_node.Mark();
        const auto mark_of = [&](const char* key) { return given.count(key) ? given.at(key) : section; };
        if (s.hidden % s.heads != 0)
            fail(mark_of("heads"), "transformer.heads",
                 fmt::format("hidden {} is not divisible by heads {}", s.hidden, s.heads));
        if (s.seq_len > s.max_positions)
            fail(mark_of("seq_len"), "transformer.seq_len",
                 fmt::format("seq_len {} exceeds max_positions {}", s.seq_len, s.max_positions));
    }

    void read_resnet(const YAML::Node& value, const YAML::Node& key_node, ResNetShape& s) {
        expect_map(value, key_node, "resnet");
        std::map<std::string, YAML::Mark> given;
        for_each_key(value, "resnet", kResNetKeys, [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
            std::string path = "resnet." + key;
            given[key] = where(v, k);
            if (key == "blocks") s.blocks = int_list(v, k, path, kStageBlocksRange, kMaxStages);
            else if (key == "width") s.width = static_cast<int>(integer(v, k, path, kChannelsRange));
            else if (key == "image_size") s.image_size = static_cast<int>(integer(v, k, path, kImageRange));
            else if (key == "num_classes") s.num_classes = static_cast<int>(integer(v, k, path, kClassesRange));
            else if (key == "bn_eps") s.bn_eps = real32(v, k, path, kPositive);
        });
        const ResNetShapeProblem problem = resnet_shape_problem(s);
        if (!problem.reason.empty())
            fail(given.count(problem.key) ? given.at(problem.key) : key_node.Mark(), "resnet." + problem.key,
                 problem.reason);
    }

    void read_optimizer(const YAML::Node& value, const YAML::Node& key_node, OptimizerConfig& opt) {
        expect_map(value, key_node, "optimizer");
        for_each_key(value, "optimizer", kOptimizerKeys,
                     [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                         std::string path = "optimizer." + key;
                         if (key == "kind") opt.kind = choice(v, k, path, optimizer_choices());
                         else if (key == "lr") opt.lr = real32(v, k, path, kPositive);
                         else if (key == "momentum") opt.momentum = real32(v, k, path, kUnitHalfOpen);
                         else if (key == "weight_decay") opt.weight_decay = real32(v, k, path, kNonNegative);
                         else if (key == "beta1") opt.beta1 = real32(v, k, path, kUnitHalfOpen);
                         else if (key == "beta2") opt.beta2 = real32(v, k, path, kUnitHalfOpen);
                         else if (key == "eps") opt.eps = real32(v, k, path, kPositive);
                     });
    }
};

// ---- validate_config: the same rules on the resolved values, reported without a line.
class Checker {
public:
    Checker(const TrainConfig& cfg, const FlagKeys& flags) : cfg_(cfg), flags_(flags) {}

    void integer(const std::string& key, int64_t v, IntRange range) const { report(key, int_range_problem(v, range)); }
    void real(const std::string& key, double v, const std::string& shown, RealRange range) const {
        if (!std::isfinite(v)) report(key, fmt::format("must be a finite number, got {}", shown));
        report(key, real_range_problem(v, shown, range));
    }
    void real(const std::string& key, float v, RealRange range) const { real(key, v, number_text(v), range); }

    void report(const std::string& key, const std::string& problem) const {
        if (!problem.empty()) throw UserError(fmt::format("{}: {}", key_origin(cfg_, flags_, key), problem));
    }

private:
    const TrainConfig& cfg_;
    const FlagKeys& flags_;
};

}  // namespace

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

// Why `sharding` cannot run with the rest of the config, or "".
std::string sharding_problem(const TrainConfig& cfg) {
    if (cfg.sharding == ShardingMode::none) return "";
    if (cfg.sharding == ShardingMode::parameters)
        return "parameters (ZeRO-3) is not supported yet: the models compute from one flat weight buffer, so "
               "weights cannot be gathered unit by unit; optimizer or gradients shard the optimizer state";
    if (cfg.grad_dtype != DType::f32)
        return fmt::format("{} reduce-scatters fp32 gradients; grad_dtype {} applies to the all-reduce (sharding: "
                           "none) only", sharding_mode_name(cfg.sharding), grad_dtype_name(cfg.grad_dtype));
    if (cfg.precision == Precision::fp16)
        return fmt::format("{} with precision fp16: loss scaling decides on every gradient, which a rank holding a "
                           "shard does not see; use bf16", sharding_mode_name(cfg.sharding));
    return "";
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

TrainConfig parse_config(const std::string& yaml_text, const std::string& source) {
    TrainConfig cfg;
    cfg.source = source;
    ConfigReader reader(source);
    reader.read_document(load_yaml_document(yaml_text, source, "config"), cfg);
    return cfg;
}

TrainConfig load_config_file(const std::string& path) { return parse_config(read_text_file(path, "config file"), path); }

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

std::string key_origin(const TrainConfig& cfg, const FlagKeys& flags, const std::string& key) {
    const std::string top = key.substr(0, key.find_first_of(".["));
    if (auto flag = flags.find(key); flag != flags.end()) return flag->second;
    if (auto flag = flags.find(top); flag != flags.end()) return flag->second;  // scaling[1] of --scaling
    if (auto mark = cfg.key_marks.find(top); mark != cfg.key_marks.end())
        return fmt::format("{}: key '{}'", mark->second, key);
    return fmt::format("{}: key '{}'", cfg.source, key);
}

void validate_config(const TrainConfig& cfg, const FlagKeys& flags) {
    Checker check(cfg, flags);
    if (!find_choice(cfg.model, model_choices())) check.report("model", bad_choice_reason(cfg.model, model_choices()));
    check.integer("mlp.input_dim", cfg.mlp.input_dim, kWidthRange);
    if (cfg.mlp.hidden.empty()) check.report("mlp.hidden", "must be a non-empty list");
    if (static_cast<int64_t>(cfg.mlp.hidden.size()) > kMaxHiddenLayers)
        check.report("mlp.hidden", fmt::format("must have at most {} entries, got {}", kMaxHiddenLayers,
                                               cfg.mlp.hidden.size()));
    for (size_t i = 0; i < cfg.mlp.hidden.size(); ++i)
        check.integer(fmt::format("mlp.hidden[{}]", i), cfg.mlp.hidden[i], kWidthRange);
    check.integer("mlp.num_classes", cfg.mlp.num_classes, kClassesRange);
    check.integer("mlp.teacher_hidden", cfg.mlp.teacher_hidden, kWidthRange);
    const TransformerShape& ts = cfg.transformer.shape;
    check.integer("transformer.layers", ts.layers, kLayersRange);
    check.integer("transformer.hidden", ts.hidden, kWidthRange);
    check.integer("transformer.heads", ts.heads, kHeadsRange);
    check.integer("transformer.ffn", ts.ffn, kWidthRange);
    check.integer("transformer.vocab", ts.vocab, kVocabRange);
    check.integer("transformer.seq_len", ts.seq_len, kSeqRange);
    check.integer("transformer.max_positions", ts.max_positions, kSeqRange);
    check.integer("transformer.type_vocab", ts.type_vocab, kTypeVocabRange);
    check.real("transformer.dropout", ts.dropout, kUnitHalfOpen);
    check.real("transformer.attention_dropout", ts.attention_dropout, kUnitHalfOpen);
    check.real("transformer.layernorm_eps", ts.layernorm_eps, kPositive);
    check.real("transformer.mask_prob", cfg.transformer.mask_prob, kUnitOpen);
    if (ts.hidden % ts.heads != 0)
        check.report("transformer.heads", fmt::format("hidden {} is not divisible by heads {}", ts.hidden, ts.heads));
    if (ts.seq_len > ts.max_positions)
        check.report("transformer.seq_len",
                     fmt::format("seq_len {} exceeds max_positions {}", ts.seq_len, ts.max_positions));
    const ResNetShape& rs = cfg.resnet;
    if (rs.blocks.empty() || static_cast<int64_t>(rs.blocks.size()) > kMaxStages)
        check.report("resnet.blocks", fmt::format("must have 1 to {} entries, got {}", kMaxStages, rs.blocks.size()));
    for (size_t i = 0; i < rs.blocks.size(); ++i)
        check.integer(fmt::format("resnet.blocks[{}]", i), rs.blocks[i], kStageBlocksRange);
    check.integer("resnet.width", rs.width, kChannelsRange);
    check.integer("resnet.image_size", rs.image_size, kImageRange);
    check.integer("resnet.num_classes", rs.num_classes, kClassesRange);
    check.real("resnet.bn_eps", rs.bn_eps, kPositive);
    const ResNetShapeProblem shape_problem = resnet_shape_problem(rs);
    check.report("resnet." + shape_problem.key, shape_problem.reason);
    check.integer("batch_size", cfg.batch_size, kBatchRange);
    // An empty list means "the launched world size" and is valid.
    for (size_t i = 0; i < cfg.scaling.size(); ++i) {
        std::string key = fmt::format("scaling[{}]", i);
        check.integer(key, cfg.scaling[i], kWorldRange);
        if (i > 0 && cfg.scaling[i] == cfg.scaling[i - 1])
            check.report(key, fmt::format("duplicate world size {}", cfg.scaling[i]));
        if (i > 0 && cfg.scaling[i] < cfg.scaling[i - 1])
            check.report(key, fmt::format("world sizes must be strictly increasing, got {} after {}", cfg.scaling[i],
                                          cfg.scaling[i - 1]));
    }
    check.integer("steps", cfg.steps, kStepsRange);
    check.integer("warmup", cfg.warmup, kWarmupRange);  // with steps' limit, warmup + steps fits an int
    check.integer("dataset_batches", cfg.dataset_batches, kDatasetBatchesRange);
    const OptimizerConfig& opt = cfg.optimizer;
    check.real("optimizer.lr", opt.lr, kPositive);
    check.real("optimizer.momentum", opt.momentum, kUnitHalfOpen);
    check.real("optimizer.weight_decay", opt.weight_decay, kNonNegative);
    check.real("optimizer.beta1", opt.beta1, kUnitHalfOpen);
    check.real("optimizer.beta2", opt.beta2, kUnitHalfOpen);
    check.real("optimizer.eps", opt.eps, kPositive);
    check.real("bucket_mb", cfg.bucket_mb, number_text(cfg.bucket_mb), kBucketMbRange);
    check.report("sharding", sharding_problem(cfg));
    if (cfg.out.empty()) check.report("out", "must be a non-empty string");
    if (const size_t at = invalid_utf8_at(cfg.out); at != std::string::npos)
        check.report("out", fmt::format("is not UTF-8 text (byte {} of the path), which records, being JSON, cannot hold",
                                        at + 1));
}

std::vector<int> world_sizes(const TrainConfig& cfg, int launched) {
    if (!cfg.scaling.empty()) return cfg.scaling;
    std::vector<int> sizes;
    for (int n = 1; n < launched; n *= 2) sizes.push_back(n);
    sizes.push_back(launched);
    return sizes;
}

void validate_for_world(const TrainConfig& cfg, int world_size, const FlagKeys& flags) {
    SB_REQUIRE(world_size >= 1, "world size must be positive");
    for (int n : cfg.scaling) {
        if (n > world_size)
            throw UserError(fmt::format("{}: scaling entry {} exceeds the launched world size {} (mpirun -np {})",
                                        key_origin(cfg, flags, "scaling"), n, world_size, world_size));
    }
    // Weak scaling multiplies the batch by the ranks of the largest world measured; the
    // datasets index a global batch's rows with int, so the product is bounded here, in 64
    // bits, before any work.
    const std::vector<int> measured = world_sizes(cfg, world_size);
    const int largest = *std::max_element(measured.begin(), measured.end());
    const int64_t global = cfg.scaling_mode == ScalingMode::weak ? int64_t{cfg.batch_size} * largest : cfg.batch_size;
    if (global > kMaxGlobalBatch)
        throw UserError(fmt::format("{}: batch_size {} on {} ranks is a global batch of {}; at most {} (scaling_mode: weak "
                                    "multiplies the batch by the ranks)",
                                    key_origin(cfg, flags, "batch_size"), cfg.batch_size, largest, global,
                                    kMaxGlobalBatch));
    if (cfg.scaling_mode == ScalingMode::strong) {
        for (int n : world_sizes(cfg, world_size)) {
            if (cfg.batch_size % n != 0)
                throw UserError(fmt::format("{}: batch_size {} is not divisible by world size {} (scaling_mode: strong)",
                                            key_origin(cfg, flags, "batch_size"), cfg.batch_size, n));
        }
    }
}

int per_rank_batch(const TrainConfig& cfg, int world_size) {
    SB_REQUIRE(world_size >= 1, "world size must be positive");
    return cfg.scaling_mode == ScalingMode::weak ? cfg.batch_size : cfg.batch_size / world_size;
}

nlohmann::json to_json(const TrainConfig& cfg) {
    // fp32 fields go out as the double with the same shortest text, so 1e-3f reads 0.001.
    auto real = [](float v) { return std::strtod(number_text(v).c_str(), nullptr); };
    const OptimizerConfig& opt = cfg.optimizer;
    return nlohmann::json{
        {"source", cfg.source},
        {"model", cfg.model},
        {"mlp",
         {{"input_dim", cfg.mlp.input_dim},
          {"hidden", cfg.mlp.hidden},
          {"num_classes", cfg.mlp.num_classes},
          {"activation", activation_name(cfg.mlp.activation)},
          {"teacher_hidden", cfg.mlp.teacher_hidden}}},
        {"transformer",
         {{"arch", transformer_arch_name(cfg.transformer.shape.arch)},
          {"layers", cfg.transformer.shape.layers},
          {"hidden", cfg.transformer.shape.hidden},
          {"heads", cfg.transformer.shape.heads},
          {"ffn", cfg.transformer.shape.ffn},
          {"vocab", cfg.transformer.shape.vocab},
          {"seq_len", cfg.transformer.shape.seq_len},
          {"max_positions", cfg.transformer.shape.max_positions},
          {"type_vocab", cfg.transformer.shape.type_vocab},
          {"dropout", real(cfg.transformer.shape.dropout)},
          {"attention_dropout", real(cfg.transformer.shape.attention_dropout)},
          {"layernorm_eps", real(cfg.transformer.shape.layernorm_eps)},
          {"mask_prob", real(cfg.transformer.mask_prob)}}},
        {"resnet",
         {{"blocks", cfg.resnet.blocks},
          {"width", cfg.resnet.width},
          {"image_size", cfg.resnet.image_size},
          {"num_classes", cfg.resnet.num_classes},
          {"bn_eps", real(cfg.resnet.bn_eps)}}},
        {"batch_size", cfg.batch_size},
        {"scaling_mode", scaling_mode_name(cfg.scaling_mode)},
        {"scaling", cfg.scaling},
        {"steps", cfg.steps},
        {"warmup", cfg.warmup},
        {"dataset_batches", cfg.dataset_batches},
        {"precision", precision_name(cfg.precision)},
        {"optimizer",
         {{"kind", optimizer_kind_name(opt.kind)},
          {"lr", real(opt.lr)},
          {"momentum", real(opt.momentum)},
          {"weight_decay", real(opt.weight_decay)},
          {"beta1", real(opt.beta1)},
          {"beta2", real(opt.beta2)},
          {"eps", real(opt.eps)}}},
        {"bucket_mb", cfg.bucket_mb},
        {"grad_dtype", grad_dtype_name(cfg.grad_dtype)},
        {"sharding", sharding_mode_name(cfg.sharding)},
        {"seed", cfg.seed},
        {"backend", backend_choice_name(cfg.backend)},
        {"share_gpu", cfg.share_gpu},
        {"out", cfg.out},
        {"cuda_graphs", cfg.cuda_graphs},
        {"conv_engine", conv_engine_choice_name(cfg.conv_engine)},
        {"sdc_check_every", cfg.sdc_check_every},
    };
}

const char* scaling_mode_name(ScalingMode mode) { return mode == ScalingMode::weak ? "weak" : "strong"; }

const char* conv_engine_choice_name(const std::optional<ConvEngine>& engine) {
    return engine ? conv_engine_name(*engine) : "auto";
}

const char* backend_choice_name(BackendChoice backend) {
    switch (backend) {
        case BackendChoice::cpu: return "cpu";
        case BackendChoice::cuda: return "cuda";
        default: return "auto";
    }
}

BackendChoice parse_backend_choice(const std::string& text) {
    std::optional<BackendChoice> found = find_choice(text, backend_choices());
    if (!found) throw UserError(fmt::format("backend: {}", bad_choice_reason(text, backend_choices())));
    return *found;
}

Precision parse_precision(const std::string& text) {
    std::optional<Precision> found = find_choice(text, precision_choices());
    if (!found) throw UserError(fmt::format("precision: {}", bad_choice_reason(text, precision_choices())));
    return *found;
}

DType parse_grad_dtype(const std::string& text) {
    std::optional<DType> found = find_choice(text, grad_dtype_choices());
    if (!found) throw UserError(fmt::format("grad_dtype: {}", bad_choice_reason(text, grad_dtype_choices())));
    return *found;
}

const char* grad_dtype_name(DType dtype) {
    switch (dtype) {
        case DType::bf16: return "bf16";
        case DType::f16: return "fp16";
        default: return "fp32";
    }
}

ShardingMode parse_sharding_mode(const std::string& text) {
    std::optional<ShardingMode> found = find_choice(text, sharding_choices());
    if (!found) throw UserError(fmt::format("sharding: {}", bad_choice_reason(text, sharding_choices())));
    return *found;
}

}  // namespace sb
