// Duplicates refused wherever a list names things (src/core/choices.h repeated_entry,
// src/core/files.h repeated_file, src/core/flag_reading.h refuse_repeated_list_entries): every
// list flag and positional list of a command, the config's scaling, files under two spellings.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

#include "base/errors.h"
#include "src/core/choices.h"
#include "src/core/config.h"
#include "src/core/files.h"
#include "src/core/flag_reading.h"
#include "tests/cli_parse.h"

namespace sb {
namespace {

TEST(Duplicates, RepeatedEntriesAreNamedWithTheirPositions) {
    EXPECT_EQ(repeated_entry(std::vector<int>{2, 2, 1}), "2 is given twice (entries 1 and 2)");
    EXPECT_EQ(repeated_entry(std::vector<std::string>{"a", "b", "a"}), "a is given twice (entries 1 and 3)");
    EXPECT_EQ(repeated_entry(std::vector<int>{1, 2, 4}), "");
    const auto dir = std::filesystem::temp_directory_path() / ("sb-dups-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "a.jsonl") << "";
    const std::string a = (dir / "a.jsonl").string(), other = (dir / "." / "a.jsonl").string();
    EXPECT_EQ(repeated_file({a, other}), other + " is given twice (entries 1 and 2, as " + a + ")");
    std::filesystem::remove_all(dir);
}

std::string parse_error(std::vector<std::string> args) {
    CLI::App app{"t"};
    std::vector<int> scaling, gpus;
    std::vector<std::string> hardware, files;
    CLI::App* comm = app.add_subcommand("comm");
    comm->add_option("--scaling", scaling)->delimiter(',');
    CLI::App* compare = app.add_subcommand("compare");
    compare->add_option("--hardware", hardware)->delimiter(',');
    compare->add_option("--scaling,--gpus", gpus)->delimiter(',');
    CLI::App* report = app.add_subcommand("report");
    report->add_option("files", files);
    return test::parse_error(app, args);
}

TEST(Duplicates, EveryListFlagOfEveryCommandRefusesARepeat) {
    EXPECT_EQ(parse_error({"comm", "--scaling", "2,2,1"}), "--scaling: 2 is given twice (entries 1 and 2)");
    EXPECT_EQ(parse_error({"comm", "--scaling", "2,02"}), "--scaling: 2 is given twice (entries 1 and 2)");
    EXPECT_EQ(parse_error({"compare", "--gpus", "4,4,1"}), "--scaling: 4 is given twice (entries 1 and 2)");
    EXPECT_EQ(parse_error({"compare", "--hardware", "a,a"}), "--hardware: a is given twice (entries 1 and 2)");
    EXPECT_EQ(parse_error({"report", "x.jsonl", "x.jsonl"}), "files: x.jsonl is given twice (entries 1 and 2)");
    EXPECT_EQ(parse_error({"comm", "--scaling", "1,2,4"}), "");
}

TEST(Duplicates, TheConfigsScalingListRefusesARepeat) {
    try {
        parse_config("scaling: [1, 2, 2]\n", "t.yaml");
        ADD_FAILURE() << "accepted";
    } catch (const UserError& e) {
        EXPECT_STREQ(e.what(), "t.yaml:1:10: key 'scaling': 2 is given twice (entries 2 and 3)");
    }
}

}  // namespace
}  // namespace sb
