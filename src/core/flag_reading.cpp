// How flags are read (src/core/flag_reading.h): one transform on every option whose type is
// a number, the table of flags that take a config key's range or a bound of their own (and
// of each part of a value written in parts), and the repeated-entry check of every list.
#include "src/core/flag_reading.h"

#include <climits>
#include <map>
#include <regex>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "base/errors.h"
#include "collectives/deadline.h"
#include "src/core/choices.h"
#include "src/core/config_keys.h"

namespace sb {
namespace {

// Flags that set a config key, or a count of the same kind, take that key's range; a flag of
// one subcommand with a bound of its own is named with the subcommand.
constexpr IntRange kInt32{INT_MIN, INT_MAX, "the flag is read into a 32-bit int"};
constexpr RealRange kAnyFinite{-kNoUpperBound, false, kNoUpperBound, false, ""};

// The parts of stress's values and of the test hooks (each hook's RANK:NUMBER: trainer.h).
constexpr IntRange kWorldRank{0, kMaxWorld - 1, "a world rank: a world holds at most 2^20 ranks (the scaling bound)"};
constexpr double kLongestSoakS = 366.0 * 86400;
constexpr RealRange kSoakSeconds{0, true, kLongestSoakS, false,
                                 "seconds: a year (366d) holds any soak, and no clock overflows"};
constexpr IntRange kFlipStep{1, static_cast<int64_t>(kLongestSoakS * kMostStepsPerSecond),
                             "a global step: steps count from 1 (step 0 never ends), and a year of soak at "
                             "10^6 steps a second runs no more"};
constexpr RealRange kHookDelayMs{0, false, 60000, false,
                                 "ms a test hook sleeps per step: a minute is past any delay a test needs"};
constexpr IntRange kHookFaultStep{0, INT_MAX, "a step of the run, counted from 0: steps plus warmup fit a 32-bit int"};

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
        // Flags of one subcommand, named with it. A launch count past a million runs for days
        // (each launch costs microseconds at least).
        {"comm --iters", IntRange{1, 1000000, "timed launches per size: more would run for days"}},
        {"comm --warmup_iters", IntRange{0, 1000000, "warm-up launches per size: more would run for days"}},
        {"comm --check", IntRange{0, 1000000, "checked runs per measurement: more would run for days"}},
        {"gemm --iters", IntRange{1, 1000000, "timed products per case: more would run for days"}},
        {"gemm --warmup", IntRange{0, 1000000, "untimed products per case: more would run for days"}},
        // Values written in parts, an entry per part (flag_reading.h).
        {"stress --plant-bit-flip RANK", kWorldRank},
        {"stress --plant-bit-flip STEP", kFlipStep},
        {"SCALEBENCH_TEST_DELAY_RANK RANK", kWorldRank},
        {"SCALEBENCH_TEST_COMM_DELAY RANK", kWorldRank},
        {"SCALEBENCH_TEST_CUDA_FAULT RANK", kWorldRank},
        {"SCALEBENCH_TEST_CUDA_FAULT STEP", kHookFaultStep},
    };
    return table;
}

const std::map<std::string, RealRange>& real_flag_ranges() {
    static const std::map<std::string, RealRange> table = {
        {"--bucket-mb", kBucketMbRange},
        {"doctor --deadline", kDeadlineSecondsRange},
        {"doctor --load-seconds",
         RealRange{0, false, 86400.0, false, "seconds of GEMMs under load: past a day the doctor is a soak (stress)"}},
        {"compare --years", RealRange{0, true, 100, false, "years the node's power is paid for: no node runs a century"}},
        {"compare --usd-per-kwh", RealRange{0, false, 100, false, "dollars per kWh: past 100 is no grid's price"}},
        // Values written in parts, an entry per part (flag_reading.h).
        {"stress --duration", kSoakSeconds},
        {"stress --interval", kSoakSeconds},
        {"SCALEBENCH_TEST_DELAY_RANK MS", kHookDelayMs},
        {"SCALEBENCH_TEST_COMM_DELAY MS", kHookDelayMs},
        {"SIZE bytes", RealRange{0, false, 1125899906842624.0, false,
                                 "bytes: past 2^50 (a pebibyte) is more than any machine holds"}},
    };
    return table;
}

// The subcommand's own entry ("comm --iters"), else the flag's ("--steps"), else `fallback`.
template <typename Range>
Range range_of(const std::map<std::string, Range>& table, const std::string& subcommand, const std::string& flag,
               Range fallback) {
    if (const auto it = table.find(subcommand + " " + flag); it != table.end()) return it->second;
    if (const auto it = table.find(flag); it != table.end()) return it->second;
    return fallback;
}

// "STEP: REASON" for the entry "stress --plant-bit-flip STEP"; "" stays "".
std::string named_by_part(const std::string& entry, const std::string& problem) {
    return problem.empty() ? "" : entry.substr(entry.rfind(' ') + 1) + ": " + problem;
}

std::string long_name(const CLI::Option& opt) {
    const auto& names = opt.get_lnames();
    return names.empty() ? opt.get_name() : "--" + names.front();
}

void add_number_reader(CLI::App& app) {
    for (CLI::Option* opt : app.get_options()) {
        const std::string type = opt->get_type_name();
        const std::string flag = long_name(*opt);
        if (type == "INT" || type == "UINT") {
            const IntRange range = integer_flag_range(app.get_name(), flag);
            opt->transform(CLI::Validator(
                [range](std::string& text) {
                    int64_t v = 0;
                    std::string problem = parse_integer(text, range, v);
                    if (problem.empty()) text = std::to_string(v);  // plain decimal: CLI11 reads "064" as octal
                    return problem;
                },
                "", "one number parser"));
        } else if (type == "FLOAT") {
            const RealRange range = real_flag_range(app.get_name(), flag);
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

IntRange integer_flag_range(const std::string& subcommand, const std::string& flag) {
    return range_of(integer_flag_ranges(), subcommand, flag, kInt32);
}

RealRange real_flag_range(const std::string& subcommand, const std::string& flag) {
    return range_of(real_flag_ranges(), subcommand, flag, kAnyFinite);
}

void read_numeric_flags_with_one_parser(CLI::App& app) { add_number_reader(app); }

IntRange integer_entry(const std::string& name) {
    const auto it = integer_flag_ranges().find(name);
    SB_REQUIRE(it != integer_flag_ranges().end(), "the flag table has no integer entry '" + name + "'");
    return it->second;
}

RealRange real_entry(const std::string& name) {
    const auto it = real_flag_ranges().find(name);
    SB_REQUIRE(it != real_flag_ranges().end(), "the flag table has no real entry '" + name + "'");
    return it->second;
}

std::string parse_part(const std::string& entry, const std::string& text, int64_t& out) {
    return named_by_part(entry, parse_integer(text, integer_entry(entry), out));
}

std::string parse_part(const std::string& entry, const std::string& text, double& out) {
    if (!integer_flag_ranges().count(entry)) return named_by_part(entry, parse_real(text, real_entry(entry), out));
    int64_t whole = 0;
    const std::string problem = parse_part(entry, text, whole);
    if (problem.empty()) out = static_cast<double>(whole);
    return problem;
}

void refuse_repeated_list_entries(const CLI::App& app) {
    for (const CLI::Option* opt : app.get_options()) {
        if (opt->get_items_expected_max() <= 1 || opt->count() == 0) continue;
        if (const std::string problem = repeated_entry(opt->reduced_results()); !problem.empty())
            throw CLI::ValidationError(long_name(*opt), problem);
    }
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
        if (sub->parsed()) refuse_repeated_list_entries(*sub);
}

size_t parse_size(const std::string& text, const std::string& flag) {
    static const std::regex pattern(R"(^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([kKmMgG]?)\s*$)");
    std::smatch match;
    if (!std::regex_match(text, match, pattern))
        throw UserError(fmt::format("{} '{}': not a size in bytes (a number with an optional K, M or G suffix, "
                                    "powers of 1024: 8, 128K, 32M, 1G)",
                                    flag, text));
    double units = 1;
    switch (match[2].matched && match[2].length() ? match[2].str()[0] : ' ') {
        case 'k': case 'K': units = 1024.0; break;
        case 'm': case 'M': units = 1024.0 * 1024.0; break;
        case 'g': case 'G': units = 1024.0 * 1024.0 * 1024.0; break;
        default: break;
    }
    double number = 0;
    std::string problem = parse_real(match[1].str(), kAnyFinite, number);  // the pattern holds no sign
    const double bytes = number * units;
    if (problem.empty()) problem = real_range_problem(bytes, number_text(bytes), real_entry("SIZE bytes"));
    if (!problem.empty()) throw UserError(fmt::format("{} '{}': {}", flag, text, problem));
    return static_cast<size_t>(bytes);  // whole bytes, rounded down as nccl-tests
}

}  // namespace sb
