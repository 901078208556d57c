// src/core/plausible.h: the one range check of numbers from flags, profiles and records; and
// `report`, which shows a record's numbers only from their 64-bit or real values inside their
// range, and strings only escaped so that its Markdown table stays a table.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "src/commands/report.h"
#include "base/errors.h"
#include "src/core/plausible.h"
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

TEST(RobustNumbers, ARecordFieldIsNamedWithItsFileAndRecord) {
    const nlohmann::json record = {{"time_us", -5.0}, {"name", "x"}};
    auto error = [&](const std::string& key) {
        try {
            plausible_field(record, key, {0, true, 1e12, false}, "r.jsonl: record 3");
        } catch (const UserError& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_EQ(error("time_us"), "r.jsonl: record 3: key 'time_us': must be in (0, 1000000000000], got -5");
    EXPECT_EQ(error("name"), "r.jsonl: record 3: key 'name': not a number");
    EXPECT_EQ(error("gone"), "r.jsonl: record 3: key 'gone': missing");
    EXPECT_EQ(plausible_field({{"time_us", 2.5}}, "time_us", {0, true, 1e12, false}, "r"), 2.5);
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
    const std::vector<Case> cases = {
        {"global_batch", 1e300, "field 'global_batch' must be in [1, 281474976710656], got 1e+300"},
        {"global_batch", 3000000000LL * 100000LL, "field 'global_batch' must be in [1, 281474976710656], got 3e+14"},
        {"global_batch", 2.5, "field 'global_batch' is not a whole number, got 2.5"},
        {"local_batch", -1, "field 'local_batch' must be in [1, 16777216], got -1"},
        {"world_size", 1e300, "field 'world_size' must be in [1, 16777216], got 1e+300"},
        {"samples_per_s", 1e300, "field 'samples_per_s' must be in [0, 1000000000000000], got 1e+300"},
        {"scaling_efficiency", -0.5, "field 'scaling_efficiency' must be in [0, 100], got -0.5"},
        {"step_ms", {{"median", 1e300}}, "field 'step_ms.median' must be in [0, 1000000000], got 1e+300"},
        {"straggler_check", nlohmann::json::parse(R"({"stragglers": [{"rank": 1e300}]})"),
         "straggler_check: field 'rank' must be in [0, 16777216], got 1e+300"},
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
