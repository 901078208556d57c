// End-to-end tests of `scalebench stress` through the real binary: durations parsed or
// refused (exit 2), a 3-second run under mpirun -np 2 writing interval records and a
// complete final summary, a run killed mid-way (SIGKILL alone, SIGTERM to mpirun)
// leaving a file whose every line parses, a planted bit flip exiting 3 with the rank
// and host named, and train's --recheck-allreduce recorded.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/errors.h"
#include "src/core/results.h"
#include "tests/e2e/e2e_util.h"
#include "src/commands/stress.h"

namespace {

using sb::e2e::kSmall;
using sb::e2e::mpirun;
using sb::e2e::Result;
using sb::e2e::slurp;

std::filesystem::path scratch() { return sb::e2e::scratch("stress-e2e"); }

std::string command(const std::string& args, const std::string& launcher) {
    const auto dir = scratch();
    return launcher + " " + SCALEBENCH_BINARY + " " + args + " >" + (dir / "out").string() + " 2>" +
           (dir / "err").string() + " </dev/null";
}

Result run(const std::string& args, const std::string& launcher = "") {
    Result r;
    int status = std::system(command(args, launcher).c_str());
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(scratch() / "out");
    r.err = slurp(scratch() / "err");
    return r;
}

std::string fresh(const std::string& name) { return sb::e2e::fresh_file(scratch(), name); }

TEST(Duration, ParsesEverySpelling) {
    EXPECT_DOUBLE_EQ(sb::parse_duration("90s", "--duration"), 90);
    EXPECT_DOUBLE_EQ(sb::parse_duration("15m", "--duration"), 900);
    EXPECT_DOUBLE_EQ(sb::parse_duration("2h", "--duration"), 7200);
    EXPECT_DOUBLE_EQ(sb::parse_duration("72h", "--duration"), 259200);
    EXPECT_DOUBLE_EQ(sb::parse_duration("1h30m", "--duration"), 5400);
    EXPECT_DOUBLE_EQ(sb::parse_duration("1d2h3m4s", "--duration"), 93784);
    EXPECT_DOUBLE_EQ(sb::parse_duration("1.5h", "--duration"), 5400);
    EXPECT_DOUBLE_EQ(sb::parse_duration("3", "--duration"), 3);
    EXPECT_DOUBLE_EQ(sb::parse_duration("0.5", "--interval"), 0.5);
    EXPECT_EQ(sb::format_duration(259200), "72h00m00s");
    EXPECT_EQ(sb::format_duration(75), "1m15s");
}

TEST(Duration, RefusesWhatIsNotADurationNamingTheFlag) {
    for (const char* bad : {"", "5x", "0s", "0", "h", "1m1h", "1h1h", "1h-2m", "-3s", "1.2.3s", "1h30", "abc", "2 h"}) {
        try {
            sb::parse_duration(bad, "--interval");
            ADD_FAILURE() << "accepted '" << bad << "'";
        } catch (const sb::UserError& e) {
            EXPECT_NE(std::string(e.what()).find("--interval '" + std::string(bad) + "'"), std::string::npos)
                << e.what();
        }
    }
}

TEST(StressCli, BadDurationOrIntervalExits2WithOneLineAndWritesNothing) {
    const std::string out = fresh("never.jsonl");
    Result r = run("stress" + kSmall + " --duration 3x --out " + out, mpirun(2));
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("--duration '3x': unknown unit 'x'"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("--duration '3x'"), r.err.rfind("--duration '3x'")) << "printed once:\n" << r.err;
    Result i = run("stress" + kSmall + " --duration 3s --interval 0m --out " + out);
    EXPECT_EQ(i.code, 2) << i.err;
    EXPECT_NE(i.err.find("--interval '0m'"), std::string::npos) << i.err;
    Result missing = run("stress" + kSmall + " --out " + out);
    EXPECT_EQ(missing.code, 2) << "--duration is required: " << missing.err;
    Result flip = run("stress" + kSmall + " --duration 3s --plant-bit-flip 5@10 --out " + out, mpirun(2));
    EXPECT_EQ(flip.code, 2) << flip.err;
    // A step no soak of that duration reaches: refused up front, one line, nothing written.
    Result far = run("stress" + kSmall + " --duration 3s --plant-bit-flip 0@999999999999 --out " + out);
    EXPECT_EQ(far.code, 2) << far.err;
    EXPECT_EQ(far.err, "scalebench: error: --plant-bit-flip '0@999999999999': step 999999999999 lies past the 3000000 steps a "
                       "--duration of 3.0s can run (at most 1000000 steps a second), so the flip would never be "
                       "planted\n");
    EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(PlantedFlip, AFlipThatCannotFireIsRefusedNamingTheFlag) {
    auto refusal = [](const std::string& text, int world, double duration_s) -> std::string {
        try {
            sb::check_planted_flip(sb::parse_planted_flip(text), text, world, duration_s);
            return "";
        } catch (const sb::UserError& e) {
            return e.what();
        }
    };
    EXPECT_EQ(refusal("1@250", 2, 3), "");
    EXPECT_EQ(refusal("1@3000000", 2, 3), "");  // the last step 3 s can hold
    EXPECT_NE(refusal("1@3000001", 2, 3).find("--plant-bit-flip '1@3000001': step 3000001 lies past the 3000000 steps"),
              std::string::npos);
    EXPECT_NE(refusal("1@999999999999", 2, 90).find("step 999999999999 lies past"), std::string::npos);
    EXPECT_EQ(refusal("2@10", 2, 3), "--plant-bit-flip '2@10': rank 2 but 2 ranks launched");
    EXPECT_EQ(refusal("0@0", 1, 3).rfind("--plant-bit-flip '0@0': STEP: must be >= 1, got 0 (a global step: steps "
                                         "count from 1",
                                         0),
              0u);
}

TEST(StressCli, ThreeSecondRunWritesIntervalRecordsAndACompleteSummary) {
    const std::string out = fresh("soak.jsonl");
    Result r = run("stress" + kSmall + " --duration 3s --interval 1s --sdc-check-every 20 --out " + out, mpirun(2));
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("elapsed"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("remaining"), std::string::npos) << r.out;
    const sb::ReadResult read = sb::read_records(out);
    EXPECT_TRUE(read.warnings.empty());
    const auto& records = read.records;
    ASSERT_GE(records.size(), 3u) << ">= 2 intervals and the summary";
    for (size_t i = 0; i + 1 < records.size(); ++i) {
        const auto& rec = records[i];
        EXPECT_EQ(rec["subcommand"], "stress");
        EXPECT_FALSE(rec["complete"].get<bool>());
        EXPECT_EQ(rec["interval"], static_cast<int>(i));
        EXPECT_EQ(rec["world_size"], 2);
        EXPECT_GT(rec["samples_per_s"].get<double>(), 0);
        EXPECT_GT(rec["steps"].get<int>(), 0);
        EXPECT_EQ(rec["step_ms"]["count"], rec["steps"]);
        EXPECT_TRUE(rec["drift_pct"].is_number());
        // The steps fill most of an interval; they cannot take more than all of it.
        EXPECT_GT(rec["busy_pct"].get<double>(), 10.0);
        EXPECT_LE(rec["busy_pct"].get<double>(), 100.5);
        EXPECT_GE(rec["sdc_check_ms"].get<double>(), 0.0);
        EXPECT_GT(rec["sdc_checks"].get<int>(), 0);
        EXPECT_TRUE(rec["sdc_events"].empty());
        EXPECT_EQ(rec["telemetry_by_rank"].size(), 2u);
        EXPECT_NEAR(rec["interval_s"].get<double>(), 1.0, 0.5);
    }
    EXPECT_DOUBLE_EQ(records[0]["drift_pct"].get<double>(), 0.0) << "the first interval is the reference";
    const double expected_drift =
        100.0 * (records[1]["samples_per_s"].get<double>() / records[0]["samples_per_s"].get<double>() - 1.0);
    EXPECT_NEAR(records[1]["drift_pct"].get<double>(), expected_drift, 1e-9);
    const auto& last = records.back();
    EXPECT_TRUE(last["complete"].get<bool>());
    EXPECT_TRUE(last["checks_passed"].get<bool>());
    EXPECT_EQ(last["intervals"].get<size_t>(), records.size() - 1);
    EXPECT_GE(last["elapsed_s"].get<double>(), 3.0);
    ASSERT_EQ(last["workloads"].size(), 1u);
    EXPECT_GT(last["workloads"][0]["samples_per_s"]["median"].get<double>(), 0);
    EXPECT_TRUE(last["workloads"][0]["drift_pct"]["last"].is_number());
}

// Starts the binary in the background; returns the pid of the process itself.
pid_t spawn(const std::string& args, const std::string& launcher) {
    const std::string cmd = "exec " + command(args, launcher);
    pid_t pid = ::fork();
    if (pid == 0) {
        ::setpgid(0, 0);
        ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    return pid;
}

bool wait_for_lines(const std::string& path, size_t lines, double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < until) {
        const std::string text = slurp(path);
        if (static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) >= lines) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
}

void expect_intact_and_incomplete(const std::string& path) {
    // A rank 0 killed outright has its record guard write the incomplete record a moment later.
    for (int i = 0; i < 200; ++i) {
        const sb::ReadResult read = sb::read_records(path);
        if (!read.runs.empty() && read.runs.back().end_line > 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const sb::ReadResult read = sb::read_records(path);
    ASSERT_EQ(read.runs.size(), 1u);
    EXPECT_TRUE(read.runs[0].incomplete) << "the run is closed by its incomplete record";
    for (const auto& w : read.warnings) EXPECT_NE(w.find("torn last"), std::string::npos) << w;
    EXPECT_LE(read.warnings.size(), 1u);
    ASSERT_GE(read.records.size(), 1u);
    for (size_t i = 0; i < read.records.size(); ++i) {
        const auto& rec = read.records[i];
        EXPECT_FALSE(rec["complete"].get<bool>()) << "killed before the end: no complete record";
        // A run that is told to stop (SIGTERM) says so in a last "incomplete" record.
        if (rec["subcommand"] == "incomplete") {
            EXPECT_EQ(i + 1, read.records.size()) << "the incomplete marker comes last";
            EXPECT_EQ(rec["run_subcommand"], "stress");
        } else {
            EXPECT_EQ(rec["subcommand"], "stress");
        }
    }
}

TEST(StressCli, SigkillMidRunLeavesEveryIntervalRecordIntact) {
    const std::string out = fresh("killed.jsonl");
    const pid_t pid = spawn("stress" + kSmall + " --duration 60s --interval 0.3 --out " + out, "");
    ASSERT_GT(pid, 0);
    const bool appeared = wait_for_lines(out, 3, 30);  // the start record and two intervals
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(appeared) << slurp(scratch() / "err");
    EXPECT_TRUE(WIFSIGNALED(status));
    expect_intact_and_incomplete(out);
}

TEST(StressCli, SigtermToMpirunMidRunLeavesEveryIntervalRecordIntact) {
    const std::string out = fresh("terminated.jsonl");
    const pid_t pid = spawn("stress" + kSmall + " --duration 60s --interval 0.3 --out " + out, mpirun(2));
    ASSERT_GT(pid, 0);
    const bool appeared = wait_for_lines(out, 2, 60);  // the start record and an interval
    ::kill(pid, SIGTERM);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(appeared) << slurp(scratch() / "err");
    EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "mpirun reports the interruption";
    expect_intact_and_incomplete(out);
}

TEST(StressCli, PlantedBitFlipExits3NamingRankAndHost) {
    const std::string out = fresh("flip.jsonl");
    Result r = run("stress" + kSmall + " --duration 2s --interval 1s --sdc-check-every 10 --plant-bit-flip 1@25 --out " +
                       out,
                   mpirun(2));
    EXPECT_EQ(r.code, 3) << r.out << r.err;
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    EXPECT_NE(r.err.find("SILENT DATA CORRUPTION: after step 30 (workload 0) rank 1 on host " + std::string(host)),
              std::string::npos)
        << r.err;
    const auto records = sb::read_records(out).records;
    ASSERT_GE(records.size(), 2u);
    EXPECT_EQ(records[0]["sdc_events"].size(), 1u) << records[0].dump();
    EXPECT_EQ(records[0]["sdc_events"][0]["rank"], 1);
    EXPECT_EQ(records[0]["sdc_events"][0]["step"], 30);
    EXPECT_FALSE(records[0]["checks_passed"].get<bool>());
    EXPECT_TRUE(records.back()["complete"].get<bool>());
    EXPECT_FALSE(records.back()["checks_passed"].get<bool>());
}

// The period comes from the workload's sdc_check_every when --sdc-check-every is not given.
TEST(StressCli, SdcCheckPeriodFromTheConfigFile) {
    const std::string out = fresh("flip-yaml.jsonl");
    const auto config = scratch() / "sdc-every-4.yaml";
    std::ofstream(config) << slurp(std::filesystem::path(SCALEBENCH_SOURCE_DIR) / "configs/ci-small.yaml")
                          << "sdc_check_every: 4\n";
    Result r = run("stress --config " + config.string() +
                       " --backend cpu --duration 2s --interval 1s --plant-bit-flip 1@25 --out " + out,
                   mpirun(2));
    EXPECT_EQ(r.code, 3) << r.out << r.err;
    const auto records = sb::read_records(out).records;
    ASSERT_GE(records.size(), 2u);
    ASSERT_EQ(records[0]["sdc_events"].size(), 1u) << records[0].dump();
    EXPECT_EQ(records[0]["sdc_events"][0]["step"], 28) << "the first multiple of 4 after the flip at 25";
    EXPECT_EQ(records.back()["sdc_check_every"], 4);
}

TEST(StressCli, TrainRecheckAllreduceIsRecordedOnlyWhenAsked) {
    const std::string out = fresh("recheck.jsonl");
    Result r = run("train" + kSmall + " --steps 3 --scaling 2 --recheck-allreduce --out " + out, mpirun(2));
    ASSERT_EQ(r.code, 0) << r.err;
    Result plain = run("train" + kSmall + " --steps 3 --scaling 2 --out " + out, mpirun(2));
    ASSERT_EQ(plain.code, 0) << plain.err;
    const auto records = sb::read_records(out).records;
    ASSERT_EQ(records.size(), 2u);
    EXPECT_TRUE(records[0]["allreduce_recheck"]["passed"].get<bool>());
    EXPECT_EQ(records[0]["allreduce_recheck"]["mismatched_elements"], 0);
    EXPECT_FALSE(records[1].contains("allreduce_recheck")) << "the train record is unchanged without the flag";
    // Where the gradients land in reused slots no buffer stands to reduce twice: refused up front.
    for (const char* mode : {"gradients", "parameters"}) {
        Result landing = run("train" + kSmall + " --steps 3 --scaling 2 --recheck-allreduce --sharding " + mode +
                                 " --out " + out,
                             mpirun(2));
        EXPECT_EQ(landing.code, 2) << landing.err;
        EXPECT_NE(landing.err.find(std::string("--recheck-allreduce: --sharding is ") + mode), std::string::npos)
            << landing.err;
    }
    EXPECT_EQ(sb::read_records(out).records.size(), 2u) << "nothing written";
}

// With its parameters sharded no rank holds a replica to check: stress refuses the mode, naming
// the key, before any work.
TEST(StressCli, ShardedParametersAreRefusedNamingTheKey) {
    const std::string config = fresh("parameters.yaml"), out = fresh("parameters.jsonl");
    std::ofstream(config) << slurp(std::string(SCALEBENCH_SOURCE_DIR) + "/configs/ci-small.yaml")
                          << "\nsharding: parameters\n";
    Result r = run("stress --config " + config + " --backend cpu --duration 3s --out " + out, mpirun(2));
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(config + ":"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("key 'sharding'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("sharding parameters: stress checks that every rank holds the same replica"),
              std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
