// The GPU environment record has every field a result reader relies on (with NVML facts
// null, never invented, when NVML is absent), the P2P matrix covers all visible devices,
// and the telemetry sampler samples while running and is safe to create and drop.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include <cuda_runtime_api.h>

#include "src/system/gpu_info.h"

namespace sb {
namespace {

int visible_gpus() {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

#define SKIP_WITHOUT_GPU() \
    if (visible_gpus() == 0) GTEST_SKIP() << "no CUDA device visible"

bool matches(const nlohmann::json& v, const char* pattern) {
    return v.is_string() && std::regex_match(v.get<std::string>(), std::regex(pattern));
}

TEST(GpuEnvironment, HasTheDeviceAndLibraryFacts) {
    SKIP_WITHOUT_GPU();
    nlohmann::json g = gpu_environment(0);
    EXPECT_EQ(g["device"], 0);
    EXPECT_FALSE(g["name"].get<std::string>().empty());
    EXPECT_TRUE(matches(g["pci_bus_id"], R"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])"))
        << g["pci_bus_id"];
    EXPECT_GT(g["memory_total_mib"].get<double>(), 0);
    EXPECT_GT(g["sm_count"].get<int>(), 0);
    EXPECT_TRUE(matches(g["compute_capability"], R"(\d+\.\d+)")) << g["compute_capability"];
    EXPECT_GT(g["sm_clock_max_mhz"].get<double>(), 0);
    EXPECT_GT(g["memory_clock_max_mhz"].get<double>(), 0);
    EXPECT_GT(g["memory_bus_width_bits"].get<int>(), 0);
    EXPECT_GT(g["l2_bytes"].get<int64_t>(), 0);
    EXPECT_TRUE(matches(g["cuda_driver_version"], R"(\d+\.\d+)")) << g["cuda_driver_version"];
    EXPECT_TRUE(matches(g["cuda_runtime_version"], R"(\d+\.\d+)")) << g["cuda_runtime_version"];
    EXPECT_TRUE(matches(g["cublaslt_version"], R"(\d+\.\d+\.\d+)")) << g["cublaslt_version"];
    EXPECT_TRUE(matches(g["nccl_version"], R"(2\.\d+\.\d+)")) << g["nccl_version"];
}

TEST(GpuEnvironment, P2pMatrixIsSquareOverVisibleDevicesWithNullDiagonal) {
    SKIP_WITHOUT_GPU();
    const int n = visible_gpus();
    nlohmann::json g = gpu_environment(0);
    EXPECT_EQ(g["visible_devices"], n);
    const nlohmann::json& p2p = g["p2p"];
    ASSERT_TRUE(p2p.is_array());
    ASSERT_EQ(p2p.size(), static_cast<size_t>(n));
    for (int a = 0; a < n; ++a) {
        ASSERT_EQ(p2p[a].size(), static_cast<size_t>(n));
        for (int b = 0; b < n; ++b) {
            if (a == b) EXPECT_TRUE(p2p[a][b].is_null()) << a;
            else EXPECT_TRUE(p2p[a][b].is_boolean()) << a << "," << b;
        }
    }
}

TEST(GpuEnvironment, NvmlFactsArePresentOrNullWithAReason) {
    SKIP_WITHOUT_GPU();
    const int n = visible_gpus();
    nlohmann::json g = gpu_environment(0);
    ASSERT_TRUE(g["nvml"] == "ok" || g["nvml"] == "unavailable") << g["nvml"];
    ASSERT_TRUE(g["nvlink_links_active"].is_array());
    EXPECT_EQ(g["nvlink_links_active"].size(), static_cast<size_t>(n));
    for (const char* key : {"driver_version", "power_limit_w", "ecc_enabled", "pcie"}) EXPECT_TRUE(g.contains(key)) << key;
    for (const char* key : {"current_gen", "max_gen", "current_width", "max_width"})
        EXPECT_TRUE(g["pcie"].contains(key)) << key;
    if (g["nvml"] == "ok") {
        EXPECT_TRUE(matches(g["driver_version"], R"(\d+\.\d+(\.\d+)*)")) << g["driver_version"];
        for (const auto& links : g["nvlink_links_active"])
            if (!links.is_null()) {
                EXPECT_GE(links.get<int>(), 0);
                EXPECT_LE(links.get<int>(), 18);
            }
        if (!g["power_limit_w"].is_null()) EXPECT_GT(g["power_limit_w"].get<double>(), 0);
        if (!g["pcie"]["max_gen"].is_null()) EXPECT_GE(g["pcie"]["max_gen"].get<int>(), 1);
    } else {
        EXPECT_TRUE(g["nvml_error"].is_string());
        EXPECT_TRUE(g["driver_version"].is_null());
        EXPECT_TRUE(g["power_limit_w"].is_null());
        EXPECT_TRUE(g["pcie"]["current_gen"].is_null());
        for (const auto& links : g["nvlink_links_active"]) EXPECT_TRUE(links.is_null());
    }
}

TEST(GpuEnvironment, ABadDeviceIsAnError) {
    SKIP_WITHOUT_GPU();
    EXPECT_THROW(gpu_environment(visible_gpus()), std::exception);
    EXPECT_THROW(gpu_environment(-1), std::exception);
}

TEST(TelemetrySampler, SamplesWhileRunning) {
    SKIP_WITHOUT_GPU();
    const bool nvml_ok = gpu_environment(0)["nvml"] == "ok";
    TelemetrySampler sampler(0, 100);
    sampler.start();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    nlohmann::json t = sampler.stop();
    if (!nvml_ok) {
        EXPECT_EQ(t["nvml"], "unavailable");
        GTEST_SKIP() << "NVML unavailable on this GPU machine: " << t.dump();
    }
    EXPECT_EQ(t["nvml"], "ok");
    EXPECT_GE(t["samples"].get<int>(), 2);
    ASSERT_FALSE(t["temperature_c"].is_null());
    EXPECT_GT(t["temperature_c"]["avg"].get<double>(), 0);
    EXPECT_GE(t["temperature_c"]["max"].get<double>(), t["temperature_c"]["avg"].get<double>());
    ASSERT_FALSE(t["sm_clock_mhz"].is_null());
    EXPECT_LE(t["sm_clock_mhz"]["min"].get<double>(), t["sm_clock_mhz"]["avg"].get<double>());
    EXPECT_LE(t["sm_clock_mhz"]["avg"].get<double>(), t["sm_clock_mhz"]["max"].get<double>());
    ASSERT_FALSE(t["memory_used_mib"].is_null());
    EXPECT_GT(t["memory_used_mib"]["max"].get<double>(), 0);
    ASSERT_FALSE(t["memory_fluctuation_pct"].is_null());
    EXPECT_GE(t["memory_fluctuation_pct"].get<double>(), 0);
    if (!t["power_w"].is_null()) EXPECT_GT(t["power_w"]["avg"].get<double>(), 0);
    EXPECT_TRUE(t["throttle_reasons_seen"].is_array());
    for (const char* key : {"ecc_corrected_delta", "ecc_uncorrected_delta"}) {
        ASSERT_TRUE(t.contains(key)) << key;
        if (!t[key].is_null()) EXPECT_GE(t[key].get<int64_t>(), 0) << key;
    }

    sampler.start();  // reusable: a second interval starts from no samples
    nlohmann::json again = sampler.stop();
    EXPECT_GE(again["samples"].get<int>(), 1);
    EXPECT_LT(again["samples"].get<int>(), t["samples"].get<int>());
}

TEST(TelemetrySampler, IsSafeToDropWithoutStartOrStop) {
    SKIP_WITHOUT_GPU();
    { TelemetrySampler never_started(0); }
    {
        TelemetrySampler never_stopped(0, 10);
        never_stopped.start();
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }  // the destructor stops and joins the thread
    TelemetrySampler stopped_only(0);
    nlohmann::json t = stopped_only.stop();
    if (t["nvml"] == "ok") EXPECT_EQ(t["samples"], 0);
}

TEST(TelemetrySampler, ABadDeviceReportsUnavailableInsteadOfThrowing) {
    // No GPU needed: without one every device index is bad.
    TelemetrySampler sampler(visible_gpus() + 7);
    sampler.start();
    nlohmann::json t = sampler.stop();
    EXPECT_EQ(t["nvml"], "unavailable");
    EXPECT_TRUE(t["nvml_error"].is_string());
}

}  // namespace
}  // namespace sb
