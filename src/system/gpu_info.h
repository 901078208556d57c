// The GPU part of the environment record and GPU telemetry (DESIGN: Environment).
// gpu_environment: what the device is and how it is linked (CUDA runtime, cuBLAS, NCCL,
// P2P matrix, and NVML facts: NVLink, PCIe, power limit, ECC). TelemetrySampler: a thread
// that samples NVML while a benchmark runs. NVML is loaded at run time
// (dlopen "libnvidia-ml.so.1"), so the binary starts where it is absent; its fields are
// then null and "nvml" says "unavailable". CUDA builds only.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace sb {

// Keys: device, name, pci_bus_id, memory_total_mib, sm_count, compute_capability ("9.0"),
// sm_clock_max_mhz, memory_clock_max_mhz, memory_bus_width_bits, l2_bytes,
// cuda_driver_version, cuda_runtime_version, cublaslt_version, nccl_version,
// visible_devices, p2p (n x n of bool, null on the diagonal: a device is not its own peer),
// nvml ("ok" | "unavailable"), nvml_error (why, when unavailable), driver_version,
// nvlink_links_active (per visible device), pcie {current_gen, max_gen, current_width,
// max_width}, power_limit_w, power_default_limit_w, ecc_enabled, ecc_uncorrected_volatile (count since
// the driver loaded), settings {pcie_gpu_max_gen (the card's own, not the slot's),
// persistence_mode, mig_mode, compute_mode, clocks_locked, remapped_rows {uncorrectable,
// pending, failure}, pcie_replay_count, nvlink_error_count (summed over links and counters)}.
// NVML facts a GPU does not support are null.
nlohmann::json gpu_environment(int device);

// Samples NVML every interval_ms from start() until stop(). stop() returns
// {samples, interval_ms, temperature_c{avg,max}, power_w{avg,max}, sm_clock_mhz{avg,min,max},
// memory_used_mib{avg,min,max}, memory_fluctuation_pct, throttle_reasons_seen [names],
// ecc_corrected_delta, ecc_uncorrected_delta} (a metric the GPU does not report is null),
// or {"nvml": "unavailable", ...} without NVML. Safe to destroy without start/stop.
class TelemetrySampler {
public:
    explicit TelemetrySampler(int device, double interval_ms = 100);
    ~TelemetrySampler();
    TelemetrySampler(const TelemetrySampler&) = delete;
    TelemetrySampler& operator=(const TelemetrySampler&) = delete;

    void start();
    nlohmann::json stop();

    struct Sample {
        double temperature_c = -1;  // < 0: not reported
        double power_w = -1;
        double sm_clock_mhz = -1;
        double memory_used_mib = -1;
        uint64_t throttle_reasons = 0;
    };

private:
    void take_sample();
    void loop();

    int device_;
    double interval_ms_;
    void* nvml_device_ = nullptr;  // nvmlDevice_t, null when NVML is unavailable
    std::string unavailable_reason_;
    std::thread thread_;
    std::mutex mutex_;
    std::condition_variable wake_;
    bool stop_requested_ = false;
    bool running_ = false;
    std::vector<Sample> samples_;
    int64_t ecc_corrected_start_ = -1, ecc_uncorrected_start_ = -1;  // -1: not reported
};

}  // namespace sb
