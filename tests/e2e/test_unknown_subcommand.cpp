// A first word that names no subcommand is refused as bad input (exit 2, one line, printed
// once), with the subcommand it is most likely a typo of; never read as train's argument, and
// never answered with train's help. Flags alone still mean `train`.
#include <gtest/gtest.h>

#include <string>

#include "tests/e2e/e2e_util.h"

namespace {

using sb::e2e::mpirun;
using sb::e2e::Result;

Result run(const std::string& args, const std::string& launcher = "") {
    return sb::e2e::run_shell(launcher + " " + SCALEBENCH_BINARY + " " + args, sb::e2e::scratch("unknown-subcommand"));
}

size_t count(const std::string& haystack, const std::string& needle) {
    size_t n = 0;
    for (size_t pos = haystack.find(needle); pos != std::string::npos; pos = haystack.find(needle, pos + 1)) ++n;
    return n;
}

TEST(UnknownSubcommand, ATypoIsRefusedWithExit2AndTheNearestSubcommand) {
    const Result r = run("reprot x.jsonl");
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_EQ(r.err, "scalebench: error: unknown subcommand 'reprot'; did you mean 'report'?\n");
    EXPECT_EQ(r.out, "");
    const Result comm = run("comn -b 8");
    EXPECT_EQ(comm.code, 2) << comm.err;
    EXPECT_NE(comm.err.find("unknown subcommand 'comn'; did you mean 'comm'?"), std::string::npos) << comm.err;
}

TEST(UnknownSubcommand, HelpAfterAnUnknownNameIsNotTrainsHelp) {
    const Result r = run("frobnicate --help");
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    // Nothing near it: every subcommand is listed instead.
    EXPECT_NE(r.err.find("unknown subcommand 'frobnicate'; subcommands: train, report, "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(", project, compare"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("Usage"), std::string::npos) << r.out;
}

TEST(UnknownSubcommand, UnderMpirunEveryRankRefusesAndTheLineIsPrintedOnce) {
    const Result r = run("stres --duration 1s", mpirun(2));
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_EQ(count(r.err, "scalebench: error: unknown subcommand 'stres'; did you mean 'stress'?"), 1u) << r.err;
}

TEST(UnknownSubcommand, FlagsAloneStillMeanTrain) {
    const Result help = run("--steps 3 --help");
    EXPECT_EQ(help.code, 0) << help.err;
    EXPECT_NE(help.out.find("scalebench train"), std::string::npos) << help.out;
}

}  // namespace
