// How flags are read (src/core/flag_reading.h): one transform on every option whose type is
// a number, the table of flags that take a config key's range, and the repeated-entry check
// of every list.
#include "src/core/flag_reading.h"

#include <climits>
#include <map>

#include "src/core/choices.h"
#include "src/core/config_keys.h"

namespace sb {
namespace {

// Flags that set a config key, or a count of the same kind, take that key's range.
const std::map<std::string, IntRange>& integer_flag_ranges() {
    static const std::map<std::string, IntRange> table = {
        {"--steps", kStepsRange},
        {"--warmup", kWarmupRange},
        {"--batch-size", kBatchRange},
        {"--scaling", kWorldRange},
        {"--nodes", kWorldRange},
        {"--seq-len", IntRange{0, kSeqRange.hi, "0 keeps the config's; else the seq_len range"}},
        {"--sdc-check-every", kSdcCheckEveryRange},
        {"--train-steps", kStepsRange},
    };
    return table;
}

const std::map<std::string, RealRange>& real_flag_ranges() {
    static const std::map<std::string, RealRange> table = {
        {"--bucket-mb", kBucketMbRange},
    };
    return table;
}

constexpr IntRange kInt32{INT_MIN, INT_MAX, "the flag is read into a 32-bit int"};
constexpr RealRange kAnyFinite{-kNoUpperBound, false, kNoUpperBound, false, ""};

std::string long_name(const CLI::Option& opt) {
    const auto& names = opt.get_lnames();
    return names.empty() ? opt.get_name() : "--" + names.front();
}

void add_number_reader(CLI::App& app) {
    for (CLI::Option* opt : app.get_options()) {
        const std::string type = opt->get_type_name();
        const std::string flag = long_name(*opt);
        if (type == "INT" || type == "UINT") {
            const IntRange range = integer_flag_range(flag);
            opt->transform(CLI::Validator(
                [range](std::string& text) {
                    int64_t v = 0;
                    std::string problem = parse_integer(text, range, v);
                    if (problem.empty()) text = std::to_string(v);  // plain decimal: CLI11 reads "064" as octal
                    return problem;
                },
                "", "one number parser"));
        } else if (type == "FLOAT") {
            const RealRange range = real_flag_range(flag);
            opt->transform(CLI::Validator(
                [range](std::string& text) {
                    double v = 0;
                    return parse_real(text, range, v);
                },
                "", "one number parser"));
        }
    }
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) add_number_reader(*sub);
}

}  // namespace

IntRange integer_flag_range(const std::string& flag) {
    const auto& table = integer_flag_ranges();
    const auto it = table.find(flag);
    return it == table.end() ? kInt32 : it->second;
}

RealRange real_flag_range(const std::string& flag) {
    const auto& table = real_flag_ranges();
    const auto it = table.find(flag);
    return it == table.end() ? kAnyFinite : it->second;
}

void read_numeric_flags_with_one_parser(CLI::App& app) { add_number_reader(app); }

void refuse_repeated_list_entries(const CLI::App& app) {
    for (const CLI::Option* opt : app.get_options()) {
        if (opt->get_items_expected_max() <= 1 || opt->count() == 0) continue;
        if (const std::string problem = repeated_entry(opt->reduced_results()); !problem.empty())
            throw CLI::ValidationError(long_name(*opt), problem);
    }
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
        if (sub->parsed()) refuse_repeated_list_entries(*sub);
}

}  // namespace sb
