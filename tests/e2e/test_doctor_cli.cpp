// End-to-end tests of `scalebench doctor` through the real binary under mpirun: a recorded
// snapshot judged into the table, JSON and the Markdown report with the documented exit code;
// a live run on 2 ranks (no GPU here: every GPU check skipped with its reason, the training
// tier at 1 and 2 ranks); bad flags exit 2 with one line.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "tests/e2e/e2e_util.h"

namespace {

using sb::e2e::mpirun;
using sb::e2e::Result;

std::filesystem::path scratch() { return sb::e2e::scratch("doctor-e2e"); }

Result doctor(const std::string& args, int np, const std::string& case_name) {
    return sb::e2e::run_shell(mpirun(np) + SCALEBENCH_BINARY + " doctor " + args, scratch() / case_name);
}

const std::string kFixtures = std::string(SCALEBENCH_SOURCE_DIR) + "/tests/fixtures/doctor/";

TEST(DoctorCli, RecordedSnapshotGivesTheTierExitCodeTableJsonAndReport) {
    const std::string report = (scratch() / "slot-x8.md").string();
    const Result table = doctor("--from-snapshot " + kFixtures + "slot-x8.json --report " + report, 1, "table");
    EXPECT_EQ(table.code, 34) << table.err;  // 32 + configuration (2)
    EXPECT_NE(table.out.find("configuration  fail     PCIe generation and width: slot and under load"),
              std::string::npos)
        << table.out;
    EXPECT_NE(table.out.find("exit code 34"), std::string::npos);
    const std::string md = sb::e2e::slurp(report);
    EXPECT_NE(md.find("| configuration | fail | PCIe generation and width: slot and under load |"), std::string::npos)
        << md;

    const Result json = doctor("--from-snapshot " + kFixtures + "slot-x8.json --json", 1, "json");
    EXPECT_EQ(json.code, 34) << json.err;
    const nlohmann::json j = nlohmann::json::parse(json.out);
    EXPECT_EQ(j["tiers"]["configuration"], "fail");
    EXPECT_EQ(j["tiers"]["transfer"], "warn");
    EXPECT_EQ(j["bands"]["profile"], "a100-sxm4-80gb");
    EXPECT_EQ(j["snapshot"]["gpus"][1]["pcie_max"]["width"], 8);

    const Result pass = doctor("--from-snapshot " + kFixtures + "corpus/hgx-a100.json", 1, "pass");
    EXPECT_EQ(pass.code, 0) << pass.out;
}

TEST(DoctorCli, LiveRunOnTwoRanksSkipsWhatItCannotReadAndSaysWhy) {
    const std::string report = (scratch() / "live.md").string();
    const std::string snapshot = (scratch() / "live.json").string();
    const Result r = doctor("--report " + report + " --snapshot-out " + snapshot + " --train-steps 3", 2, "live");
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    // Every skipped row carries its reason; the training tier ran at 1 and 2 ranks.
    size_t skipped = 0, reasons = 0;
    for (size_t at = r.out.find(" skipped "); at != std::string::npos; at = r.out.find(" skipped ", at + 1)) ++skipped;
    for (size_t at = r.out.find("reason:  "); at != std::string::npos; at = r.out.find("reason:  ", at + 1)) ++reasons;
    EXPECT_GT(skipped, 0u);
    EXPECT_EQ(skipped, reasons) << r.out;
    EXPECT_NE(r.out.find("training       pass     short training run at 1 and N ranks"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("at 2 ranks"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("2 ranks; bands from"), std::string::npos) << r.out;
    EXPECT_TRUE(std::filesystem::exists(report));
    // The snapshot it wrote judges the same way again.
    const Result again = doctor("--from-snapshot " + snapshot, 1, "again");
    EXPECT_EQ(again.code, 0) << again.err;
    EXPECT_NE(again.out.find("at 2 ranks"), std::string::npos);
}

TEST(DoctorCli, BadFlagsExit2WithOneLine) {
    const Result size = doctor("--max-bytes 1X", 2, "bad-size");
    EXPECT_EQ(size.code, 2);
    EXPECT_NE(size.err.find("--max-bytes"), std::string::npos) << size.err;
    const Result missing = doctor("--from-snapshot /nonexistent/snap.json", 1, "bad-snapshot");
    EXPECT_EQ(missing.code, 2);
    EXPECT_NE(missing.err.find("--from-snapshot /nonexistent/snap.json: cannot read snapshot: No such file or directory"),
              std::string::npos)
        << missing.err;
    // The shared input reader's checks and message: a device or a FIFO is named for what it is,
    // never opened for a blocking read.
    const Result device = doctor("--from-snapshot /dev/zero", 1, "device-snapshot");
    EXPECT_EQ(device.code, 2);
    EXPECT_NE(device.err.find("--from-snapshot /dev/zero: cannot read snapshot: it is a character device, not a "
                              "regular file"),
              std::string::npos)
        << device.err;
    const std::filesystem::path fifo = std::filesystem::temp_directory_path() / "scalebench-doctor-fifo";
    std::filesystem::remove(fifo);
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    const Result pipe = doctor("--from-snapshot " + fifo.string(), 1, "fifo-snapshot");
    std::filesystem::remove(fifo);
    EXPECT_EQ(pipe.code, 2);
    EXPECT_NE(pipe.err.find("cannot read snapshot: it is a FIFO, not a regular file"), std::string::npos) << pipe.err;
    const Result skip = doctor("--skip topology", 1, "bad-skip");
    EXPECT_EQ(skip.code, 2);
    EXPECT_NE(skip.err.find("--skip"), std::string::npos) << skip.err;
}

}  // namespace
