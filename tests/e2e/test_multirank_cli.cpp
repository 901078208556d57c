// End to end on CPU ranks, the multi-rank figures by their definitions: a communication delay
// injected with SCALEBENCH_TEST_COMM_DELAY comes back as added comm cost (step -
// no-communication step) within the spread; a rank slowed with SCALEBENCH_TEST_DELAY_RANK is
// named by train, report and stress with its host, by arrival and by compute, with its whole
// lag behind the other rank; and without a delay nobody is named in 20 short trials.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "src/core/results.h"
#include "tests/e2e/e2e_util.h"

namespace {

using sb::e2e::kSmall;
using sb::e2e::mpirun;
using sb::e2e::Result;
using sb::e2e::records_of;

std::filesystem::path dir() { return sb::e2e::scratch("multirank-e2e"); }

std::string fresh(const std::string& name) { return sb::e2e::fresh_file(dir(), name); }

Result run(const std::string& command, const std::string& name) { return sb::e2e::run_shell(command, dir() / name); }

// The record's communication figures follow from its own step times, as the docs define them.
void expect_definitions_hold(const nlohmann::json& r) {
    const double step = r["step_ms"]["median"], no_comm = r["no_comm_step_ms"]["median"];
    const double cost = r["comm_cost_ms"], alone = r["allreduce_ms"];
    EXPECT_DOUBLE_EQ(cost, step - no_comm) << r.dump();
    EXPECT_DOUBLE_EQ(r["hidden_fraction"].get<double>(), 1.0 - cost / alone) << r.dump();
    EXPECT_DOUBLE_EQ(r["compute_slowdown_ms"].get<double>(),
                     r["compute_ms"]["median"].get<double>() - r["no_comm_compute_ms"]["median"].get<double>());
    const double spread = r["comm_cost_spread_ms"];
    EXPECT_GE(spread, 0.0);
    EXPECT_NEAR(r["samples_per_s_spread"].get<double>() / r["samples_per_s"].get<double>(),
                r["step_spread_ms"].get<double>() / step, 1e-9);
}

// 40 ms added to one rank's gradient collective in every communicating step (and in the
// all-reduce timed alone): the comm cost holds it, it adds no more than itself against a launch
// without the delay (within the spreads), and it lies in the exposed tail. On CPU ranks MPI
// progresses only inside MPI calls, and the undelayed comm cost is itself up to tens of ms on a
// loaded machine, waiting the delay partly absorbs.
TEST(MultiRankCli, AnInjectedCommunicationDelayIsTheCommCost) {
    constexpr double kDelayMs = 40;
    auto two_ranks = [](const std::string& env, const std::string& name) {
        const std::string out = fresh(name + ".jsonl");
        const Result r = run(env + mpirun(2) + SCALEBENCH_BINARY + kSmall + " --scaling 1,2 --steps 10 --out " + out,
                             name);
        EXPECT_EQ(r.code, 0) << r.err;
        EXPECT_NE(r.out.find("comm cost"), std::string::npos) << r.out;
        const auto train = records_of(out, "train");
        EXPECT_EQ(train.size(), 2u);
        if (train.size() != 2) return nlohmann::json();
        EXPECT_TRUE(train[0]["comm_cost_ms"].is_null()) << "nothing to charge at 1 rank";
        EXPECT_TRUE(train[0]["no_comm_step_ms"].is_null());
        EXPECT_EQ(train[0]["scaling_efficiency_spread"], 0.0);
        expect_definitions_hold(train[1]);
        return train[1];
    };
    const nlohmann::json delayed = two_ranks("SCALEBENCH_TEST_COMM_DELAY=1:40 ", "commdelay");
    const nlohmann::json plain = two_ranks("", "nocommdelay");
    ASSERT_FALSE(delayed.is_null() || plain.is_null());
    const double added = delayed["comm_cost_ms"].get<double>() - plain["comm_cost_ms"].get<double>();
    const double spread = std::hypot(delayed["comm_cost_spread_ms"].get<double>(),
                                     plain["comm_cost_spread_ms"].get<double>());
    // The delay can hide only behind the step's own work: the comm cost holds all of it but the
    // no-communication step.
    EXPECT_GE(delayed["comm_cost_ms"].get<double>(),
              kDelayMs - delayed["no_comm_step_ms"]["median"].get<double>() - 2 * spread)
        << delayed.dump();
    // Against the launch without it, the delay absorbs the waiting that launch already had (the
    // other rank's lateness, MPI progress), so it adds between the delay less that comm cost and
    // the delay itself. sleep_for wakes late, never early: on a quiet machine the spread is near
    // zero while the wake-up adds a fraction of a millisecond, so the upper bound allows 1 ms.
    constexpr double kWakeUpMs = 1.0;
    EXPECT_GE(added, kDelayMs - plain["comm_cost_ms"].get<double>() - 2 * spread)
        << delayed.dump() << "\n" << plain.dump();
    EXPECT_LE(added, kDelayMs + 2 * spread + kWakeUpMs) << delayed.dump() << "\n" << plain.dump();
    EXPECT_GE(delayed["exposed_comm_ms"]["median"].get<double>(), kDelayMs - 2 * spread) << "the delay lies in the tail";
}

TEST(MultiRankCli, WithoutADelayTheDefinitionsHoldAndNobodyIsNamed) {
    const std::string out = fresh("plain.jsonl");
    const Result r = run(mpirun(2) + SCALEBENCH_BINARY + kSmall + " --scaling 2 --steps 10 --out " + out, "plain");
    ASSERT_EQ(r.code, 0) << r.err;
    const auto train = records_of(out, "train");
    ASSERT_EQ(train.size(), 1u);
    expect_definitions_hold(train[0]);
    EXPECT_EQ(train[0]["straggler_check"]["stragglers"].size(), 0u) << train[0]["straggler_check"].dump();
    EXPECT_EQ(train[0]["straggler_check"]["per_rank"].size(), 2u);
    EXPECT_EQ(train[0]["straggler_check"]["buckets"].size(), train[0]["buckets"].get<size_t>());
}

TEST(MultiRankCli, ADelayedRankIsNamedByTrainAndReportWithItsHost) {
    const std::string out = fresh("delay.jsonl");
    const Result r = run("SCALEBENCH_TEST_DELAY_RANK=1:20 " + mpirun(2) + SCALEBENCH_BINARY + kSmall +
                             " --scaling 2 --steps 12 --out " + out,
                         "delay");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("straggler at 2 ranks: rank 1 on "), std::string::npos) << r.out;
    const auto train = records_of(out, "train");
    ASSERT_EQ(train.size(), 1u);
    const nlohmann::json& check = train[0]["straggler_check"];
    ASSERT_EQ(check["stragglers"].size(), 1u) << check.dump();
    const nlohmann::json& s = check["stragglers"][0];
    EXPECT_EQ(s["rank"], 1);
    EXPECT_EQ(s["host"], train[0]["environment"]["hostnames"][1]);
    // Against the other rank, not a midpoint: the whole 20 ms (a sleep overshoots on a loaded
    // machine, never undershoots), by arrival and by compute.
    EXPECT_EQ(s["named_by"], nlohmann::json({"compute", "arrival"})) << s.dump();
    EXPECT_GT(s["lag_ms"].get<double>(), 18.0) << s.dump();
    EXPECT_LT(s["lag_ms"].get<double>(), s["step_ms"].get<double>()) << s.dump();
    EXPECT_GT(s["behind_ms"].get<double>(), 18.0) << s.dump();
    EXPECT_GE(s["last_share"].get<double>(), 0.75) << s.dump();
    for (const auto& b : check["buckets"]) {
        EXPECT_EQ(b["last_rank"], 1) << b.dump();
        EXPECT_GT(b["lag_ms"].get<double>(), 15.0) << b.dump();
    }

    const Result report = run(std::string(SCALEBENCH_BINARY) + " report " + out, "delay-report");
    ASSERT_EQ(report.code, 0) << report.err;
    EXPECT_NE(report.out.find("straggler in " + out), std::string::npos) << report.out;
    EXPECT_NE(report.out.find("rank 1 on " + train[0]["environment"]["hostnames"][1].get<std::string>() +
                              " is behind: arrives last at"),
              std::string::npos) << report.out;
}

// 20 trials, cheaply: one stress launch of 20 short intervals, each judged on its own steps.
TEST(MultiRankCli, WithoutADelayNobodyIsNamedIn20Trials) {
    const std::string out = fresh("nodelay-stress.jsonl");
    const Result r = run(mpirun(2) + SCALEBENCH_BINARY + " stress" + kSmall +
                             " --duration 7s --interval 0.25s --out " + out,
                         "nodelay");
    ASSERT_EQ(r.code, 0) << r.err;
    int intervals = 0;
    for (const auto& rec : records_of(out, "stress")) {
        if (rec.value("complete", true)) continue;
        ++intervals;
        EXPECT_TRUE(rec["straggler_check"]["stragglers"].empty())
            << "interval " << rec["interval"] << ": " << rec["straggler_check"].dump();
    }
    EXPECT_GE(intervals, 20);
}

TEST(MultiRankCli, StressNamesADelayedRank) {
    const std::string out = fresh("stress.jsonl");
    const Result r = run("SCALEBENCH_TEST_DELAY_RANK=0:20 " + mpirun(2) + SCALEBENCH_BINARY + " stress" + kSmall +
                             " --duration 3s --interval 1s --out " + out,
                         "stress");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find(": rank 0 on "), std::string::npos) << r.out;
    int named = 0, intervals = 0;
    for (const auto& rec : records_of(out, "stress")) {
        if (rec.value("complete", true)) continue;
        ++intervals;
        for (const auto& s : rec["straggler_check"]["stragglers"]) named += s["rank"] == 0;
    }
    EXPECT_GE(intervals, 2);
    EXPECT_EQ(named, intervals) << "every interval names rank 0";
}

}  // namespace
