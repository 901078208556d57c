// Statistics (numpy-style percentiles) and JSONL results: whole-line appends, a reader
// that skips and reports a torn last line, and the report table.
#include <gtest/gtest.h>

#include <algorithm>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/errors.h"
#include "src/commands/report.h"
#include "src/core/results.h"
#include "src/core/stats.h"

namespace sb {
namespace {

std::string temp_path(const std::string& name) {
    auto dir = std::filesystem::temp_directory_path() / ("scalebench-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return (dir / name).string();
}

TEST(Stats, PercentilesMatchNumpyLinearInterpolation) {
    // numpy.percentile([1,2,3,4,10], [10,50,90]) == [1.4, 3.0, 7.6]
    std::vector<double> v = {10, 3, 1, 4, 2};
    EXPECT_DOUBLE_EQ(percentile(v, 50), 3.0);
    EXPECT_NEAR(percentile(v, 10), 1.4, 1e-12);
    EXPECT_NEAR(percentile(v, 90), 7.6, 1e-12);
    Summary s = summarize(v);
    EXPECT_EQ(s.count, 5);
    EXPECT_DOUBLE_EQ(s.min, 1);
    EXPECT_DOUBLE_EQ(s.max, 10);
    EXPECT_DOUBLE_EQ(s.mean, 4);
    EXPECT_DOUBLE_EQ(summarize({2, 4}).median, 3);
    EXPECT_THROW(percentile({}, 50), std::invalid_argument);
}

TEST(Results, AppendsWholeLinesAndReadsThemBack) {
    const std::string path = temp_path("nested/dir/append.jsonl");
    std::filesystem::remove(path);
    append_record(path, {{"subcommand", "train"}, {"world_size", 1}});
    append_record(path, {{"subcommand", "train"}, {"world_size", 2}});
    ReadResult r = read_records(path);
    ASSERT_EQ(r.records.size(), 2u);
    EXPECT_TRUE(r.warnings.empty());
    EXPECT_EQ(r.records[1]["world_size"], 2);
}

TEST(Results, ReaderSkipsAndReportsATornLastLine) {
    const std::string path = temp_path("torn.jsonl");
    {
        std::ofstream out(path);
        out << R"({"subcommand":"train","world_size":1})" << "\n" << R"({"subcommand":"train","wor)";
    }
    ReadResult r = read_records(path);
    ASSERT_EQ(r.records.size(), 1u);
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_NE(r.warnings[0].find("torn.jsonl:2: skipped torn last line"), std::string::npos) << r.warnings[0];
}

// A torn last line: a record appended after a torn line starts on a line of its own, so the
// fragment is the only thing lost and the new record reads back whole.
TEST(Results, AnAppendAfterATornLineStartsOnAFreshLine) {
    const std::string path = temp_path("torn-then-append.jsonl");
    {
        std::ofstream out(path);
        out << R"({"subcommand":"train","world_size":1})" << "\n" << R"({"subcommand":"train","wor)";
    }
    append_record(path, {{"subcommand", "train"}, {"world_size", 2}});
    ReadResult r = read_records(path);
    ASSERT_EQ(r.records.size(), 2u);
    EXPECT_EQ(r.records[1]["world_size"], 2);
    EXPECT_EQ(r.lines[1], 3);
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_NE(r.warnings[0].find("torn-then-append.jsonl:2: skipped invalid line"), std::string::npos) << r.warnings[0];
}

// Only a last line without its newline is torn; a complete line that is not a record is invalid.
TEST(Results, ACompleteInvalidLastLineIsCalledInvalidNotTorn) {
    const std::string path = temp_path("invalid-last.jsonl");
    std::ofstream(path) << R"({"subcommand":"train","world_size":1})" << "\n" << "[1, 2]\n";
    ReadResult r = read_records(path);
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_NE(r.warnings[0].find("invalid-last.jsonl:2: skipped invalid line: not a JSON object"), std::string::npos)
        << r.warnings[0];
}

// A run is bracketed by start and end (or incomplete); a start without either is a run cut short.
TEST(Results, AStartWithoutAnEndIsReportedAsARunCutShort) {
    const std::string path = temp_path("brackets.jsonl");
    std::filesystem::remove(path);
    append_record(path, {{"subcommand", "start"}, {"run_subcommand", "train"}, {"run_id", "a"}});
    append_record(path, {{"subcommand", "train"}, {"run_id", "a"}, {"world_size", 1}});
    append_record(path, {{"subcommand", "end"}, {"run_subcommand", "train"}, {"run_id", "a"}});
    append_record(path, {{"subcommand", "start"}, {"run_subcommand", "stress"}, {"run_id", "b"}});
    append_record(path, {{"subcommand", "incomplete"}, {"run_subcommand", "stress"}, {"run_id", "b"}});
    append_record(path, {{"subcommand", "start"}, {"run_subcommand", "comm"}, {"run_id", "c"}});
    append_record(path, {{"subcommand", "comm_size"}, {"run_id", "c"}});
    ReadResult r = read_records(path);
    ASSERT_EQ(r.records.size(), 3u);  // the brackets are not measurements; incomplete is kept
    EXPECT_EQ(r.records[1]["subcommand"], "incomplete");
    ASSERT_EQ(r.runs.size(), 3u);
    EXPECT_EQ(r.runs[0].end_line, 3);
    EXPECT_FALSE(r.runs[0].incomplete);
    EXPECT_EQ(r.runs[1].end_line, 5);
    EXPECT_TRUE(r.runs[1].incomplete);
    EXPECT_EQ(r.runs[2].end_line, 0);
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_NE(r.warnings[0].find("brackets.jsonl:6: the comm run started here (run_id c) has no end record: it was "
                                 "cut short"),
              std::string::npos)
        << r.warnings[0];
}

// An unwritable output: an output path is opened up front; one that does not exist is created
// and removed again.
TEST(Results, OutputPathsAreOpenedUpFront) {
    const std::string fresh = temp_path("fresh/out.jsonl");
    std::filesystem::remove(fresh);
    EXPECT_EQ(results_file_problem(fresh), "");
    EXPECT_FALSE(std::filesystem::exists(fresh));
    const std::string folder = temp_path("a-folder");
    std::filesystem::create_directories(folder);
    EXPECT_EQ(results_file_problem(folder), folder + ": is a folder, not a results file");
    EXPECT_NE(results_file_problem("/proc/self/no-such-file").find("/proc/self/no-such-file: cannot"),
              std::string::npos);
    // A write that fails after the check is an internal failure (exit 1), not bad input.
    try {
        append_record("/dev/full", {{"subcommand", "train"}});
        FAIL() << "a record was written to /dev/full";
    } catch (const UserError& e) {
        FAIL() << "a failed write is not bad input: " << e.what();
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("/dev/full: cannot write a record (0 of 23 bytes written): No space left "
                                             "on device"), std::string::npos) << e.what();
    }
}

TEST(Results, MissingFileIsAUserError) {
    EXPECT_THROW(read_records(temp_path("does-not-exist.jsonl")), UserError);
}

TEST(Report, MarkdownAndCsvTablesOfTrainRecords) {
    const std::string path = temp_path("report.jsonl");
    std::filesystem::remove(path);
    nlohmann::json base = {{"subcommand", "train"}, {"backend", "cpu"}, {"model", "mlp"}, {"precision", "fp32"},
                           {"scaling_mode", "weak"}, {"environment", {{"hostnames", {"nodeA", "nodeA"}}}},
                           {"step_ms", {{"median", 10.0}}}, {"compute_ms", {{"median", 8.0}}},
                           {"exposed_comm_ms", {{"median", 1.5}}}, {"optimizer_ms", {{"median", 0.5}}},
                           {"allreduce_busbw_gbps", 3.25}};
    nlohmann::json one = base, two = base;
    one.update({{"world_size", 1}, {"global_batch", 64}, {"samples_per_s", 6400.0}, {"samples_per_s_per_rank", 6400.0},
                {"scaling_efficiency", 1.0}});
    two.update({{"world_size", 2}, {"global_batch", 128}, {"samples_per_s", 11520.0}, {"samples_per_s_per_rank", 5760.0},
                {"scaling_efficiency", 0.9}, {"samples_per_s_spread", 115.2}, {"comm_cost_ms", 1.2},
                {"comm_cost_spread_ms", 0.3}, {"hidden_fraction", 0.6}, {"compute_slowdown_ms", 0.4},
                {"allreduce_busbw_spread_gbps", 0.05}, {"scaling_efficiency_spread", 0.012}});
    append_record(path, one);
    append_record(path, two);
    append_record(path, {{"subcommand", "gemm"}});
    std::ostringstream out, err;
    EXPECT_EQ(write_report({{path}, false}, out, err), 2);
    const std::string md = out.str();
    // Each figure with its spread; comm cost, hidden share and the backward slowdown at n > 1
    // ("-" where a record has none: nothing to charge at 1 rank).
    EXPECT_NE(md.find("| cpu (nodeA) | cpu | mlp | fp32 | weak | 2 | 128 | 11520.0 | 115.2 | 5760.0 | 10.000 | 8.000 | "
                      "1.500 | 0.500 | 1.200 | 0.300 | 60.0% | 0.400 | 3.25 | 0.05 | 90.0% | 1.2% |"),
              std::string::npos) << md;
    std::ostringstream csv;
    write_report({{path}, true}, csv, err);
    EXPECT_NE(csv.str().find("cpu (nodeA),cpu,mlp,fp32,weak,1,64,6400.0,-,6400.0,10.000,8.000,1.500,0.500,-,-,-,-,3.25,-,"
                             "100.0%,-"),
              std::string::npos) << csv.str();
}

// Invalid lines: a record report cannot show is named by FILE:LINE and skipped, never an
// internal error or a row of '?'; a file without any valid record is refused.
TEST(Report, InvalidRecordsAreNamedByFileAndLineAndSkipped) {
    const std::string path = temp_path("report-invalid.jsonl");
    std::filesystem::remove(path);
    const nlohmann::json good = {{"subcommand", "train"}, {"world_size", 1}, {"samples_per_s", 100.0}};
    nlohmann::json wrong_type = good;
    wrong_type["backend"] = 7;
    append_record(path, good);
    append_record(path, wrong_type);
    append_record(path, {{"subcommand", "train"}});
    std::ostringstream out, err;
    EXPECT_EQ(write_report({{path}, false}, out, err), 1);
    EXPECT_NE(err.str().find("report-invalid.jsonl:2: skipped train record: a field has the wrong type"),
              std::string::npos)
        << err.str();
    EXPECT_NE(err.str().find("report-invalid.jsonl:3: skipped train record: field 'world_size' is missing"),
              std::string::npos)
        << err.str();
    const std::string table = out.str();
    EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 3) << "header, rule and the one valid record:\n" << table;
}

// A run whose loss stopped being finite is left out of every table (Markdown, CSV, --compare),
// with one warning for the file, not shown as throughput.
TEST(Report, ADivergedRunIsLeftOutWithOneWarning) {
    const std::string path = temp_path("report-diverged.jsonl");
    std::filesystem::remove(path);
    const nlohmann::json good = {{"subcommand", "train"}, {"world_size", 1}, {"samples_per_s", 100.0},
                                 {"loss_check", {{"passed", true}, {"first_nonfinite_step", nullptr}}}};
    nlohmann::json diverged = good;
    diverged["world_size"] = 2;
    diverged["samples_per_s"] = 102831.7;
    diverged["loss_check"] = {{"passed", false}, {"first_nonfinite_step", 3}};
    append_record(path, good);
    append_record(path, diverged);
    append_record(path, diverged);
    for (const bool csv : {false, true}) {
        std::ostringstream out, err;
        EXPECT_EQ(write_report({{path}, csv}, out, err), 1);
        EXPECT_EQ(out.str().find("102831.7"), std::string::npos) << out.str();
        EXPECT_NE(err.str().find("report-diverged.jsonl: 2 record(s) of runs that diverged (loss check failed"),
                  std::string::npos) << err.str();
    }
}

TEST(Report, AFileWithoutAValidRecordIsRefused) {
    const std::string empty = temp_path("report-empty.jsonl"), garbage = temp_path("report-garbage.jsonl");
    std::ofstream(empty) << "";
    std::ofstream(garbage) << "garbage\n{\"subcommand\"\n";
    for (const std::string& path : {empty, garbage}) {
        std::ostringstream out, err;
        try {
            write_report({{path}, false}, out, err);
            ADD_FAILURE() << path << " was accepted";
        } catch (const UserError& e) {
            EXPECT_NE(std::string(e.what()).find(path + ": no valid record in the file"), std::string::npos) << e.what();
        }
    }
}

}  // namespace
}  // namespace sb
