// End-to-end tests of `scalebench comm` through the real binary under mpirun: the
// nccl-tests table parses back (columns, sizes, #wrong, the closing lines), a record per
// sweep is written, --op all over a scaling list prints a block per (n, collective), and
// bad flags exit 2 with one line and no result file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "collectives/sweep.h"
#include "src/core/results.h"
#include "tests/e2e/e2e_util.h"

namespace {

// The sweep records of a file (each size's `comm_size` record precedes its sweep's `comm` record).
std::vector<nlohmann::json> sweep_records(const std::string& path) {
    std::vector<nlohmann::json> sweeps;
    for (const auto& r : sb::read_records(path).records)
        if (r["subcommand"] == "comm") sweeps.push_back(r);
    return sweeps;
}


using sb::e2e::mpirun;
using sb::e2e::Result;
using sb::e2e::slurp;


std::filesystem::path scratch() { return sb::e2e::scratch("comm-e2e"); }

Result run(const std::string& args, int np) {
    return sb::e2e::run_shell(mpirun(np) + SCALEBENCH_BINARY + " comm " + args, scratch());
}

size_t count(const std::string& haystack, const std::string& needle) {
    size_t n = 0;
    for (size_t pos = haystack.find(needle); pos != std::string::npos; pos = haystack.find(needle, pos + 1)) ++n;
    return n;
}

TEST(CommCli, MpiSweepPrintsAnNcclTestsTableThatParses) {
    const std::string out = (scratch() / "comm.jsonl").string();
    std::filesystem::remove(out);
    Result r = run("--backend mpi -b 8 -e 1M -f 4 --out " + out, 2);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("# Collective test starting: all_reduce_perf"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("#       size         count      type   redop    root     time   algbw   busbw  #wrong"),
              std::string::npos)
        << r.out;

    const sb::ParsedTable t = sb::parse_nccl_tests_output(r.out);
    ASSERT_EQ(t.rows.size(), 9u) << r.out;  // 8 B, 32 B, ..., 512 KiB
    double busbw_sum = 0;
    size_t bytes = 8;
    for (const sb::ParsedRow& row : t.rows) {
        EXPECT_EQ(row.bytes, bytes);
        EXPECT_EQ(row.count, bytes / 4);
        EXPECT_EQ(row.type, "float");
        EXPECT_EQ(row.redop, "sum");
        EXPECT_EQ(row.root, -1);
        EXPECT_EQ(row.out_of_place.wrong, 0);
        EXPECT_EQ(row.in_place.wrong, 0);
        EXPECT_GT(row.out_of_place.time_us, 0);
        EXPECT_NEAR(row.out_of_place.busbw_gbps, row.out_of_place.algbw_gbps, 0.011);  // 2(n-1)/n = 1 on 2 ranks
        busbw_sum += row.out_of_place.busbw_gbps + row.in_place.busbw_gbps;
        bytes *= 4;
    }
    ASSERT_TRUE(t.has_avg_busbw);
    EXPECT_NEAR(t.avg_busbw_gbps, busbw_sum / 18, 0.01 + 0.01 * t.avg_busbw_gbps);  // the table rounds to 0.01
    ASSERT_TRUE(t.has_out_of_bounds);
    EXPECT_EQ(t.out_of_bounds, 0);
    EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos);

    const auto records = sweep_records(out);
    ASSERT_EQ(records.size(), 1u);
    EXPECT_EQ(sb::read_records(out).records.size(), 9u + 1u);  // a comm_size record per size (8 B .. 512 KiB), then the sweep
    const auto& rec = records[0];
    EXPECT_EQ(rec["subcommand"], "comm");
    EXPECT_EQ(rec["op"], "all_reduce");
    EXPECT_EQ(rec["world_size"], 2);
    EXPECT_EQ(rec["rows"].size(), 9u);
    EXPECT_EQ(rec["rows"][8]["size_bytes"], 524288);
    EXPECT_NEAR(rec["avg_busbw_gbps"].get<double>(), t.avg_busbw_gbps, 1e-4 * t.avg_busbw_gbps + 1e-9);
    EXPECT_TRUE(rec["checks_passed"].get<bool>());
    ASSERT_TRUE(rec["fit"].is_object());
    EXPECT_GT(rec["fit"]["beta_gbps"].get<double>(), 0);
    EXPECT_EQ(rec["fit"]["points"], 9);
}

TEST(CommCli, AllCollectivesOverAScalingListPrintABlockEach) {
    const std::string out = (scratch() / "all.jsonl").string();
    std::filesystem::remove(out);
    Result r = run("--backend mpi --op all -b 64 -e 64K -f 32 -n 3 --scaling 1,2 --inplace out --out " + out, 2);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_EQ(count(r.out, "# Avg bus bandwidth"), 14u);
    EXPECT_EQ(count(r.out, "# Out of bounds values : 0 OK"), 14u);
    for (const char* name : {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "alltoall", "sendrecv"})
        EXPECT_EQ(count(r.out, std::string("# Collective test starting: ") + name + "_perf\n"), 2u) << name;
    const sb::ParsedTable t = sb::parse_nccl_tests_output(r.out);
    ASSERT_EQ(t.rows.size(), 14u * 3);  // 64 B, 2 KiB, 64 KiB
    for (const sb::ParsedRow& row : t.rows) {
        EXPECT_TRUE(row.out_of_place.ran);
        EXPECT_FALSE(row.in_place.ran);  // --inplace out: the in-place columns show "-"
    }
    EXPECT_EQ(sweep_records(out).size(), 14u);
    EXPECT_EQ(sb::read_records(out).records.size(), 14u * 4);  // 3 comm_size records and the comm record per sweep
}

TEST(CommCli, BadFlagsExitTwoWithOneLineAndNoResults) {
    const std::string out = (scratch() / "bad.jsonl").string();
    std::filesystem::remove(out);
    struct Case {
        std::string args, says;
    };
    for (const Case& c : {Case{"--bogus", "bogus"}, Case{"-b 2M -e 1M", "larger than -e"},
                          Case{"-b 8 -e 1M -f 4 -i 1K", "-i and -f"}, Case{"--op allreduce", "--op 'allreduce'"},
                          Case{"-b 8X", "-b '8X'"}, Case{"-d double", "-d 'double'"},
                          Case{"--scaling 3", "--scaling 3"}, Case{"--backend tcp", "--backend"}}) {
        Result r = run("--backend mpi -b 8 -e 64 " + c.args + " --out " + out, 2);
        EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out << r.err;
        EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << ": " << r.err;
        EXPECT_FALSE(std::filesystem::exists(out)) << c.args;
    }
}

}  // namespace
