// src/core/plausible.h: the one range check of numbers from flags, profiles and records; and
// `report`, which shows a record's numbers only from their 64-bit or real values inside their
// range (src/core/record_ranges.h, one table with the plot tools), and strings only escaped so
// that its Markdown table stays a table.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "src/commands/report.h"
#include "base/errors.h"
#include "src/core/plausible.h"
#include "src/core/record_ranges.h"
#include "src/core/results.h"

namespace sb {
namespace {

TEST(RobustNumbers, NaNAndInfinityAreNeverPlausible) {
    const RealRange positive{0, true, 1e9, false, "a test's bound"};
    EXPECT_EQ(out_of_range(1.0, positive), "");
    EXPECT_EQ(out_of_range(1e9, positive), "");
    EXPECT_EQ(out_of_range(std::nan(""), positive), "must be a finite number, got nan");
    EXPECT_EQ(out_of_range(std::numeric_limits<double>::infinity(), positive), "must be a finite number, got inf");
    EXPECT_EQ(out_of_range(0.0, positive), "must be in (0, 1000000000], got 0 (a test's bound)");
    EXPECT_EQ(out_of_range(0.0, {0, false, 1, false}), "");
    EXPECT_EQ(out_of_range(-0.5, {0, false, 1, false}), "must be in [0, 1], got -0.5");
}

std::string fresh_records(const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() / ("scalebench-robust-numbers-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::filesystem::remove(dir / name);
    return (dir / name).string();
}

const nlohmann::json kTrainRecord = {{"subcommand", "train"}, {"backend", "cpu"},     {"model", "mlp"},
                                     {"precision", "fp32"},   {"scaling_mode", "strong"}, {"world_size", 2},
                                     {"local_batch", 16},     {"global_batch", 32},     {"samples_per_s", 100.0}};

TEST(RobustNumbers, ReportShowsNoNumberOutsideItsRangeAndNamesTheRecord) {
    const std::string path = fresh_records("report-numbers.jsonl");
    struct Case {
        std::string key;
        nlohmann::json value;
        std::string says;
    };
    // Every number the table prints is checked, each in its range from results/record_ranges.json
    // with the range's reason.
    const std::vector<Case> cases = {
        {"global_batch", 1e300, "field 'global_batch' must be in [1, 281474976710656], got 1e+300 (2^24 rows per rank on 2^24 ranks)"},
        {"global_batch", 3000000000LL * 100000LL, "field 'global_batch' must be in [1, 281474976710656], got 3e+14 (2^24 rows per rank on 2^24 ranks)"},
        {"global_batch", 2.5, "field 'global_batch' is not a whole number, got 2.5"},
        {"local_batch", -1, "field 'local_batch' must be in [1, 16777216], got -1 (rows per rank: the config's batch bound, 2^24)"},
        {"world_size", 1e300, "field 'world_size' must be in [1, 16777216], got 1e+300 (ranks of a run: 2^24 is past any cluster)"},
        {"samples_per_s", 1e300, "field 'samples_per_s' must be in [0, 1000000000000000], got 1e+300 (10^15 samples a second is past any machine)"},
        {"samples_per_s_spread", -1, "field 'samples_per_s_spread' must be in [0, 1000000000000000], got -1 (a spread of the throughput, in its bounds)"},
        {"scaling_efficiency", -0.5, "field 'scaling_efficiency' must be in [0, 100], got -0.5 (a ratio to the ideal: 100x is past any measurement error)"},
        {"scaling_efficiency_spread", 1e300, "field 'scaling_efficiency_spread' must be in [0, 100], got 1e+300 (a spread of the efficiency, in its bounds)"},
        {"step_ms", {{"median", 1e300}}, "field 'step_ms.median' must be in [0, 1000000000], got 1e+300 (a step of 10^9 ms, 11 days, is a hung run)"},
        {"comm_cost_ms", -1e300, "field 'comm_cost_ms' must be in [-1000000000, 1000000000], got -1e+300 (step minus the step without communication: either sign, in the step's bounds)"},
        {"comm_cost_spread_ms", 1e300, "field 'comm_cost_spread_ms' must be in [0, 1000000000], got 1e+300 (a spread of step times, in the step's bounds)"},
        {"hidden_fraction", 1e300, "field 'hidden_fraction' must be in [-1000000, 1000000], got 1e+300 (1 - cost / the collectives alone: past 0..1 when the cost is noise, never by a million)"},
        {"compute_slowdown_ms", 1e300, "field 'compute_slowdown_ms' must be in [-1000000000, 1000000000], got 1e+300 (compute minus compute without communication: either sign, in the step's bounds)"},
        {"allreduce_busbw_spread_gbps", 1e300, "field 'allreduce_busbw_spread_gbps' must be in [0, 1000000], got 1e+300 (a spread of the bus bandwidth, in its bounds)"},
        {"straggler_check", nlohmann::json::parse(R"({"stragglers": [{"rank": 1e300}]})"),
         "straggler_check: field 'rank' must be in [0, 16777216], got 1e+300 (a rank of a run of at most 2^24 ranks)"},
    };
    append_record(path, kTrainRecord);
    for (const Case& c : cases) {
        nlohmann::json r = kTrainRecord;
        r[c.key] = c.value;
        append_record(path, r);
    }
    std::ostringstream out, err;
    EXPECT_EQ(write_report({{path}, false}, out, err), 1);  // the one plausible record
    for (size_t i = 0; i < cases.size(); ++i)
        EXPECT_NE(err.str().find(fmt::format("report-numbers.jsonl:{}: skipped train record: {}\n", i + 2, cases[i].says)),
                  std::string::npos)
            << cases[i].key << "\n" << err.str();
    EXPECT_NE(out.str().find("| strong | 2 | 32 | 100.0 |"), std::string::npos) << out.str();
    EXPECT_EQ(out.str().find("-2147483648"), std::string::npos) << out.str();
    // The largest plausible global batch is printed from its 64-bit value.
    nlohmann::json big = kTrainRecord;
    big["global_batch"] = int64_t{1} << 44;
    const std::string big_path = fresh_records("report-big.jsonl");
    append_record(big_path, big);
    std::ostringstream big_out;
    EXPECT_EQ(write_report({{big_path}, false}, big_out, err), 1);
    EXPECT_NE(big_out.str().find("| 2 | 17592186044416 |"), std::string::npos) << big_out.str();
}

// report's ranges are compiled in from results/record_ranges.json, the file the plot tools read
// beside themselves: the binary holds each entry as the file says it.
TEST(RobustNumbers, ReportAndThePlotToolsReadOneRangeTable) {
    std::ifstream in(std::string(SCALEBENCH_SOURCE_DIR) + "/results/record_ranges.json");
    const nlohmann::json file = nlohmann::json::parse(in);
    ASSERT_GE(file.at("ranges").size(), 20u);
    for (const auto& [field, e] : file.at("ranges").items()) {
        const RecordRange r = record_range(field);
        EXPECT_EQ(r.range.lo, e.at("min").get<double>()) << field;
        EXPECT_EQ(r.range.hi, e.at("max").get<double>()) << field;
        EXPECT_FALSE(r.range.lo_open || r.range.hi_open) << field;
        EXPECT_EQ(r.whole, e.value("whole", false)) << field;
        EXPECT_EQ(std::string(r.range.why), e.at("why").get<std::string>()) << field;
    }
    EXPECT_THROW(record_range("no_such_field"), std::logic_error);
}

TEST(RobustNumbers, ReportEscapesStringsThatWouldBreakItsMarkdownTable) {
    const std::string path = fresh_records("report-strings.jsonl");
    nlohmann::json r = kTrainRecord;
    r["model"] = "m|l\np";
    r["environment"] = {{"hostnames", {"node|1\r"}}};
    append_record(path, r);
    std::ostringstream out, err;
    ASSERT_EQ(write_report({{path}, false}, out, err), 1) << err.str();
    const std::string table = out.str();
    EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 3) << "header, rule and one row:\n" << table;
    EXPECT_NE(table.find("| cpu (node\\|1\\x0d) | cpu | m\\|l\\x0ap |"), std::string::npos) << table;
    // Every line has as many unescaped column bars as the header.
    auto bars = [](const std::string& line) {
        size_t n = 0;
        for (size_t i = 0; i < line.size(); ++i) n += line[i] == '|' && (i == 0 || line[i - 1] != '\\');
        return n;
    };
    std::istringstream lines(table);
    std::string header, line;
    std::getline(lines, header);
    while (std::getline(lines, line)) EXPECT_EQ(bars(line), bars(header)) << line;
    // CSV keeps one row per line: control characters written \xNN (src/core/table_text.h).
    std::ostringstream csv;
    write_report({{path}, true}, csv, err);
    EXPECT_NE(csv.str().find(",m|l\\x0ap,"), std::string::npos) << csv.str();
    EXPECT_NE(csv.str().find("cpu (node|1\\x0d)"), std::string::npos) << csv.str();
}

}  // namespace
}  // namespace sb
