// The straggler check on synthetic per-rank timings (a rank made slower is named, with its
// host and GPU; noise alone names nobody), the shared-GPU mode's host identities and device
// placement, and the test-only delay's parsing.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "src/commands/runner.h"
#include "src/commands/stragglers.h"
#include "base/errors.h"
#include "src/system/backend.h"

namespace sb {
namespace {

// compute[rank][step]: `base` ms with +-`noise` uniform jitter, `extra` ms more on `slow`.
std::vector<std::vector<double>> timings(int ranks, int steps, double base, double noise, int slow, double extra,
                                         uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> jitter(-noise, noise);
    std::vector<std::vector<double>> c(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r)
        for (int s = 0; s < steps; ++s) c[r].push_back(base + jitter(rng) + (r == slow ? extra : 0.0));
    return c;
}

// Arrivals of `buckets` buckets, evenly spread over each rank's compute time.
std::vector<std::vector<std::vector<double>>> arrivals_of(const std::vector<std::vector<double>>& compute, int buckets) {
    std::vector<std::vector<std::vector<double>>> a;
    for (const auto& rank : compute) {
        std::vector<std::vector<double>> steps;
        for (double c : rank) {
            std::vector<double> step;
            for (int b = 0; b < buckets; ++b) step.push_back(c * (b + 1) / buckets);
            steps.push_back(step);
        }
        a.push_back(steps);
    }
    return a;
}

// The steps of ranks with these compute times and arrivals; each step lasts the slowest rank's
// compute plus 1 ms (the step waits for the last rank).
RankSteps steps_of(const std::vector<std::vector<double>>& compute,
                   const std::vector<std::vector<std::vector<double>>>& arrivals) {
    RankSteps in{{}, compute, arrivals};
    for (const auto& rank : compute) {
        std::vector<double> steps;
        for (size_t s = 0; s < rank.size(); ++s) {
            double slowest = 0;
            for (const auto& other : compute) slowest = std::max(slowest, s < other.size() ? other[s] : 0.0);
            steps.push_back(slowest + 1.0);
        }
        in.step_ms.push_back(steps);
    }
    return in;
}

std::vector<RankLocation> places(int ranks) {
    std::vector<RankLocation> who;
    for (int r = 0; r < ranks; ++r) who.push_back({"host" + std::to_string(r / 2), "0000:0" + std::to_string(r) + ":00.0"});
    return who;
}

TEST(Stragglers, ASlowerRankIsNamedWithHostAndGpu) {
    for (int ranks : {2, 4, 8}) {
        const auto compute = timings(ranks, 30, 10.0, 0.3, ranks - 1, 3.0, 7);
        const nlohmann::json check = straggler_check(steps_of(compute, arrivals_of(compute, 3)), places(ranks));
        ASSERT_EQ(check["stragglers"].size(), 1u) << ranks << " ranks: " << check.dump();
        const nlohmann::json& s = check["stragglers"][0];
        EXPECT_EQ(s["rank"], ranks - 1);
        EXPECT_EQ(s["host"], "host" + std::to_string((ranks - 1) / 2));
        EXPECT_EQ(s["gpu_bus_id"], "0000:0" + std::to_string(ranks - 1) + ":00.0");
        // Behind the other ranks by the whole 3 ms, with 2 ranks too (never a midpoint); named by
        // both tests, as arrivals spread over compute carry the lead into the last bucket.
        EXPECT_NEAR(s["behind_ms"].get<double>(), 3.0, 0.3) << ranks << " ranks";
        // Its arrival lag grows over the backward (1, 2, 3 ms at the 3 buckets): the median is 2.
        EXPECT_NEAR(s["lag_ms"].get<double>(), 2.0, 0.5) << ranks << " ranks";
        EXPECT_EQ(s["named_by"], nlohmann::json({"compute", "arrival"})) << s.dump();
        ASSERT_EQ(check["per_rank"].size(), static_cast<size_t>(ranks));
        ASSERT_EQ(check["buckets"].size(), 3u);
        for (const nlohmann::json& b : check["buckets"]) {
            EXPECT_EQ(b["last_rank"], ranks - 1);
            EXPECT_DOUBLE_EQ(b["last_share"].get<double>(), 1.0);
            EXPECT_GT(b["lag_ms"].get<double>(), 0.0);
        }
        // The last bucket arrives when compute ends: its lag is the compute lag.
        EXPECT_NEAR(check["buckets"][2]["lag_ms"].get<double>(), 3.0, 0.5);
        const std::string line = straggler_line(s);
        EXPECT_NE(line.find("rank " + std::to_string(ranks - 1) + " on host"), std::string::npos) << line;
        EXPECT_NE(line.find("(GPU 0000:0"), std::string::npos) << line;
    }
}

// On GPUs the wait for a slow rank lands in every rank's compute time: compute names nobody,
// who arrives last at the buckets does, with the whole lag behind the other rank.
TEST(Stragglers, ARankArrivingLastIsNamedWhenComputeTimesAreEqual) {
    for (int ranks : {2, 4}) {
        const auto compute = timings(ranks, 20, 30.7, 0.2, -1, 0.0, 11);
        auto arrivals = arrivals_of(timings(ranks, 20, 0.7, 0.05, -1, 0.0, 12), 4);
        for (auto& step : arrivals[1])
            for (double& a : step) a += 30.0;
        RankSteps in = steps_of(compute, arrivals);
        for (auto& rank : in.step_ms)
            for (double& t : rank) t = 170.0;
        const nlohmann::json check = straggler_check(in, places(ranks));
        ASSERT_EQ(check["stragglers"].size(), 1u) << check.dump();
        const nlohmann::json& s = check["stragglers"][0];
        EXPECT_EQ(s["rank"], 1);
        EXPECT_EQ(s["named_by"], nlohmann::json({"arrival"}));
        EXPECT_DOUBLE_EQ(s["last_share"].get<double>(), 1.0);
        EXPECT_NEAR(s["lag_ms"].get<double>(), 30.0, 0.3);
        EXPECT_NEAR(s["lag_fraction"].get<double>(), 30.0 / 170.0, 0.01);
        const std::string line = straggler_line(s);
        EXPECT_NE(line.find("rank 1 on host0 (GPU 0000:01:00.0) is behind: arrives last at 100% of buckets, "),
                  std::string::npos) << line;
        EXPECT_NE(line.find(" ms after the other ranks (18% of the 170.000 ms step"), std::string::npos) << line;
    }
}

// Arriving last at most buckets by a lag the step does not feel (under 10% of it), or by a
// large lag at only some of them, names nobody.
TEST(Stragglers, ASmallOrOccasionalArrivalLagIsNotAStraggler) {
    const auto compute = timings(2, 20, 10.0, 0.2, -1, 0.0, 13);
    auto small = arrivals_of(timings(2, 20, 1.0, 0.01, -1, 0.0, 14), 3);
    for (auto& step : small[1])
        for (double& a : step) a += 0.8;  // 8% of the ~11 ms step
    EXPECT_TRUE(straggler_check(steps_of(compute, small), places(2))["stragglers"].empty());
    auto occasional = arrivals_of(timings(2, 21, 1.0, 0.01, -1, 0.0, 15), 3);
    for (auto& step : occasional[0])
        for (double& a : step) a += 0.1;  // rank 0 last, but for
    for (size_t s = 0; s < occasional[1].size(); s += 3)
        for (double& a : occasional[1][s]) a += 5.0;  // a third of the steps
    const auto compute21 = timings(2, 21, 10.0, 0.2, -1, 0.0, 13);
    EXPECT_TRUE(straggler_check(steps_of(compute21, occasional), places(2))["stragglers"].empty());
}

TEST(Stragglers, NoiseAloneNamesNobody) {
    for (uint64_t seed = 1; seed <= 20; ++seed) {
        const auto compute = timings(4, 30, 10.0, 2.0, -1, 0.0, seed);
        const nlohmann::json check = straggler_check(steps_of(compute, arrivals_of(compute, 2)), places(4));
        EXPECT_TRUE(check["stragglers"].empty()) << "seed " << seed << ": " << check.dump();
    }
}

TEST(Stragglers, ASmallOrInconsistentLeadIsNotAStraggler) {
    // 5% behind, steadily: below the 10% bar.
    auto compute = timings(4, 30, 10.0, 0.05, 2, 0.5, 3);
    EXPECT_TRUE(straggler_check(steps_of(compute, {}), places(4))["stragglers"].empty());
    // 20% behind on average, but only in a few steps (a spread larger than half the lead).
    compute = timings(4, 30, 10.0, 0.05, -1, 0.0, 3);
    for (int s = 0; s < 30; s += 4) compute[1][s] += 15.0;
    EXPECT_TRUE(straggler_check(steps_of(compute, {}), places(4))["stragglers"].empty());
}

TEST(Stragglers, AFewHeldUpStepsDoNotHideAStraggler) {
    // Rank 3 is 3 ms behind in every step; in two of 12 steps the scheduler held rank 0 up by
    // 60 ms (a plain standard deviation of the excess would be ~25 ms and hide it).
    auto compute = timings(4, 12, 10.0, 0.2, 3, 3.0, 9);
    compute[0][4] += 60.0;
    compute[3][8] += 60.0;
    const nlohmann::json check = straggler_check(steps_of(compute, {}), places(4));
    ASSERT_EQ(check["stragglers"].size(), 1u) << check.dump();
    EXPECT_EQ(check["stragglers"][0]["rank"], 3);
}

TEST(Stragglers, ALeadUnderAQuarterMillisecondIsNoise) {
    // 50% behind on 0.3 ms steps, steadily: 0.15 ms, the scheduler's noise on CPU ranks.
    const auto compute = timings(4, 30, 0.3, 0.001, 1, 0.15, 5);
    EXPECT_TRUE(straggler_check(steps_of(compute, {}), places(4))["stragglers"].empty());
    const auto slower = timings(4, 30, 0.3, 0.001, 1, 0.3, 5);
    EXPECT_EQ(straggler_check(steps_of(slower, {}), places(4))["stragglers"].size(), 1u);
}

TEST(Stragglers, OneRankOrNoStepsNamesNobody) {
    const auto one = timings(1, 10, 10.0, 0.1, 0, 5.0, 1);
    const nlohmann::json check = straggler_check(steps_of(one, arrivals_of(one, 2)), places(1));
    EXPECT_TRUE(check["stragglers"].empty());
    EXPECT_TRUE(check["buckets"].empty());
    EXPECT_EQ(check["per_rank"].size(), 1u);
    EXPECT_TRUE(straggler_check(steps_of({{}, {}}, {}), places(2))["stragglers"].empty());
}

TEST(Stragglers, MissingArrivalsLeaveTheBucketsOut) {
    const auto compute = timings(2, 10, 10.0, 0.1, 1, 5.0, 1);
    auto arrivals = arrivals_of(compute, 2);
    for (auto& step : arrivals[0]) step[1] = NAN;
    const nlohmann::json check = straggler_check(steps_of(compute, arrivals), places(2));
    ASSERT_EQ(check["buckets"].size(), 1u);
    EXPECT_EQ(check["buckets"][0]["bucket"], 0);
    EXPECT_EQ(check["stragglers"].size(), 1u);
}

TEST(Stragglers, LocationsComeFromTheEnvironmentRecord) {
    const nlohmann::json env = {{"hostnames", {"a", "b"}}, {"gpus_by_rank", {{{"pci_bus_id", "0000:1b:00.0"}}, {}}}};
    const std::vector<RankLocation> who = rank_locations(env, 3);
    ASSERT_EQ(who.size(), 3u);
    EXPECT_EQ(who[0].host, "a");
    EXPECT_EQ(who[0].gpu_bus_id, "0000:1b:00.0");
    EXPECT_EQ(who[1].host, "b");
    EXPECT_EQ(who[1].gpu_bus_id, "-");
    EXPECT_EQ(who[2].host, "?");
}

TEST(TestHooks, ParseRankAndNumberAndRefuseTheRest) {
    const std::string v = "SCALEBENCH_TEST_DELAY_RANK";
    EXPECT_EQ(parse_test_hook(v, "MS", nullptr).rank, -1);
    EXPECT_EQ(parse_test_hook(v, "MS", "").rank, -1);
    const TestHook d = parse_test_hook(v, "MS", "1:20.5");
    EXPECT_EQ(d.rank, 1);
    EXPECT_DOUBLE_EQ(d.value, 20.5);
    EXPECT_DOUBLE_EQ(parse_test_hook("SCALEBENCH_TEST_CUDA_FAULT", "STEP", "01:007").value, 7);
    for (const char* bad : {"1", ":20", "1:", "x:20", "-1:20", "1:-5", "1:20ms", "1:60001"}) {
        try {
            parse_test_hook(v, "MS", bad);
            ADD_FAILURE() << bad << " was accepted";
        } catch (const UserError& e) {
            EXPECT_EQ(std::string(e.what()).rfind(v + "='" + bad + "': ", 0), 0u) << e.what();
            EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
        }
    }
}

TEST(SharedGpu, EachRankGetsItsOwnNcclHostIdentity) {
    SharedGpuEnv a = shared_gpu_env("node1", 0, true, nullptr, nullptr);
    SharedGpuEnv b = shared_gpu_env("node1", 1, true, nullptr, nullptr);
    EXPECT_EQ(a.host_id, "node1-rank0");
    EXPECT_EQ(b.host_id, "node1-rank1");
    EXPECT_EQ(a.socket_ifname, "lo");  // one host: loopback
    // A host identity already set (containers that share a host name) is kept, made per rank.
    EXPECT_EQ(shared_gpu_env("node1", 3, true, "box7", nullptr).host_id, "box7-rank3");
    // The user's interface stays; on several hosts loopback would not reach the others.
    EXPECT_EQ(shared_gpu_env("node1", 0, true, nullptr, "ib0").socket_ifname, "");
    EXPECT_EQ(shared_gpu_env("node1", 0, false, nullptr, nullptr).socket_ifname, "");
    EXPECT_EQ(shared_gpu_env("node1", 0, true, "", "").socket_ifname, "lo");
    EXPECT_EQ(shared_gpu_env("node1", 0, true, "", "").host_id, "node1-rank0");
}

TEST(SharedGpu, RanksGoRoundRobinOverTheVisibleGpus) {
    EXPECT_EQ(shared_gpu_device(0, 1), 0);
    EXPECT_EQ(shared_gpu_device(3, 1), 0);
    EXPECT_EQ(shared_gpu_device(0, 2), 0);
    EXPECT_EQ(shared_gpu_device(1, 2), 1);
    EXPECT_EQ(shared_gpu_device(2, 2), 0);
    EXPECT_EQ(shared_gpu_device(5, 4), 1);
}

TEST(SharedGpu, TheOneRankPerGpuErrorNamesTheFlag) {
    const std::string error = one_rank_per_gpu_problem({"0000:1b:00.0", "0000:1b:00.0"}, {4, 5}, "node1");
    EXPECT_NE(error.find("ranks 4 and 5 on host node1 both drive GPU 0000:1b:00.0"), std::string::npos) << error;
    EXPECT_NE(error.find("--share-gpu"), std::string::npos) << error;
    EXPECT_EQ(one_rank_per_gpu_problem({"0000:1b:00.0", "0000:1c:00.0"}, {0, 1}, "node1"), "");
}

}  // namespace
}  // namespace sb
