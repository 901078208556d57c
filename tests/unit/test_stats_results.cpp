// Statistics (numpy-style percentiles) and JSONL results: whole-line appends, a reader
// that skips and reports a torn last line, and the report table.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "src/core/errors.h"
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
                {"scaling_efficiency", 0.9}});
    append_record(path, one);
    append_record(path, two);
    append_record(path, {{"subcommand", "gemm"}});
    std::ostringstream out, err;
    EXPECT_EQ(write_report({{path}, false}, out, err), 2);
    const std::string md = out.str();
    EXPECT_NE(md.find("| cpu (nodeA) | cpu | mlp | fp32 | weak | 2 | 128 | 11520.0 | 5760.0 | 10.000 | 8.000 | 1.500 | 0.500 | 3.25 | 90.0% |"),
              std::string::npos) << md;
    std::ostringstream csv;
    write_report({{path}, true}, csv, err);
    EXPECT_NE(csv.str().find("cpu (nodeA),cpu,mlp,fp32,weak,1,64,6400.0,6400.0,10.000,8.000,1.500,0.500,3.25,100.0%"),
              std::string::npos) << csv.str();
}

}  // namespace
}  // namespace sb
