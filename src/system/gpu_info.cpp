// The GPU environment record and the NVML telemetry sampler (see gpu_info.h). NVML is
// opened with dlopen at first use and never closed; the few entry points used are
// declared here (no nvml.h is needed), each optional except init and the handle lookup.
#include "src/system/gpu_info.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include "models/cuda/cuda_check.h"

namespace sb {
namespace {

// ---- the NVML ABI subset (C enums are passed as int, as NVML's ABI does)
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlInvalidArgument = 2;
constexpr nvmlReturn_t kNvmlNotSupported = 3;
constexpr int kNvmlFeatureEnabled = 1;
constexpr int kNvmlTemperatureGpu = 0;
constexpr int kNvmlClockSm = 1;
constexpr int kNvmlMemoryErrorCorrected = 0;
constexpr int kNvmlMemoryErrorUncorrected = 1;
constexpr int kNvmlVolatileEcc = 0;
constexpr unsigned kNvmlMaxNvLinks = 18;  // NVML_NVLINK_MAX_LINKS
struct nvmlMemory_t {
    unsigned long long total, free, used;
};

struct Nvml {
    bool ok = false;
    std::string error;  // why not ok
    const char* (*error_string)(nvmlReturn_t) = nullptr;
    nvmlReturn_t (*handle_by_pci_bus_id)(const char*, nvmlDevice_t*) = nullptr;
    nvmlReturn_t (*system_driver_version)(char*, unsigned) = nullptr;
    nvmlReturn_t (*nvlink_state)(nvmlDevice_t, unsigned, int*) = nullptr;
    nvmlReturn_t (*pcie_gen_current)(nvmlDevice_t, unsigned*) = nullptr;
    nvmlReturn_t (*pcie_gen_max)(nvmlDevice_t, unsigned*) = nullptr;
    nvmlReturn_t (*pcie_width_current)(nvmlDevice_t, unsigned*) = nullptr;
    nvmlReturn_t (*pcie_width_max)(nvmlDevice_t, unsigned*) = nullptr;
    nvmlReturn_t (*power_limit_mw)(nvmlDevice_t, unsigned*) = nullptr;
    nvmlReturn_t (*power_default_limit_mw)(nvmlDevice_t, unsigned*) = nullptr;
    nvmlReturn_t (*ecc_mode)(nvmlDevice_t, int*, int*) = nullptr;
    nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned*) = nullptr;
    nvmlReturn_t (*power_usage_mw)(nvmlDevice_t, unsigned*) = nullptr;
    nvmlReturn_t (*clock_mhz)(nvmlDevice_t, int, unsigned*) = nullptr;
    nvmlReturn_t (*memory_info)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
    nvmlReturn_t (*clock_event_reasons)(nvmlDevice_t, unsigned long long*) = nullptr;
    nvmlReturn_t (*total_ecc_errors)(nvmlDevice_t, int, int, unsigned long long*) = nullptr;
    nvmlReturn_t (*pcie_gen_gpu_max)(nvmlDevice_t, unsigned*) = nullptr;
    nvmlReturn_t (*persistence_mode)(nvmlDevice_t, int*) = nullptr;
    nvmlReturn_t (*mig_mode)(nvmlDevice_t, unsigned*, unsigned*) = nullptr;
    nvmlReturn_t (*compute_mode)(nvmlDevice_t, int*) = nullptr;
    nvmlReturn_t (*applications_clock)(nvmlDevice_t, int, unsigned*) = nullptr;
    nvmlReturn_t (*default_applications_clock)(nvmlDevice_t, int, unsigned*) = nullptr;
    nvmlReturn_t (*remapped_rows)(nvmlDevice_t, unsigned*, unsigned*, unsigned*, unsigned*) = nullptr;
    nvmlReturn_t (*pcie_replay_counter)(nvmlDevice_t, unsigned*) = nullptr;
    nvmlReturn_t (*nvlink_error_counter)(nvmlDevice_t, unsigned, int, unsigned long long*) = nullptr;

    std::string message(nvmlReturn_t rc) const {
        return error_string ? fmt::format("{} ({})", error_string(rc), rc) : fmt::format("NVML error {}", rc);
    }
};

template <class Fn>
void bind(void* lib, Fn& fn, std::initializer_list<const char*> names) {
    for (const char* name : names)
        if (void* sym = dlsym(lib, name)) {
            fn = reinterpret_cast<Fn>(sym);
            return;
        }
}

Nvml load_nvml() {
    Nvml n;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char* why = dlerror();
        n.error = fmt::format("dlopen libnvidia-ml.so.1: {}", why ? why : "not found");
        return n;
    }
    nvmlReturn_t (*init)() = nullptr;
    bind(lib, init, {"nvmlInit_v2", "nvmlInit"});
    bind(lib, n.error_string, {"nvmlErrorString"});
    bind(lib, n.handle_by_pci_bus_id, {"nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetHandleByPciBusId"});
    if (!init || !n.handle_by_pci_bus_id) {
        n.error = "libnvidia-ml.so.1 lacks nvmlInit_v2 or nvmlDeviceGetHandleByPciBusId_v2";
        return n;
    }
    bind(lib, n.system_driver_version, {"nvmlSystemGetDriverVersion"});
    bind(lib, n.nvlink_state, {"nvmlDeviceGetNvLinkState"});
    bind(lib, n.pcie_gen_current, {"nvmlDeviceGetCurrPcieLinkGeneration"});
    bind(lib, n.pcie_gen_max, {"nvmlDeviceGetMaxPcieLinkGeneration"});
    bind(lib, n.pcie_width_current, {"nvmlDeviceGetCurrPcieLinkWidth"});
    bind(lib, n.pcie_width_max, {"nvmlDeviceGetMaxPcieLinkWidth"});
    bind(lib, n.power_limit_mw, {"nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimit"});
    bind(lib, n.power_default_limit_mw, {"nvmlDeviceGetPowerManagementDefaultLimit"});
    bind(lib, n.ecc_mode, {"nvmlDeviceGetEccMode"});
    bind(lib, n.temperature, {"nvmlDeviceGetTemperature"});
    bind(lib, n.power_usage_mw, {"nvmlDeviceGetPowerUsage"});
    bind(lib, n.clock_mhz, {"nvmlDeviceGetClockInfo"});
    bind(lib, n.memory_info, {"nvmlDeviceGetMemoryInfo"});
    // Renamed in newer drivers; the bits are the same.
    bind(lib, n.clock_event_reasons,
         {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
    bind(lib, n.total_ecc_errors, {"nvmlDeviceGetTotalEccErrors"});
    bind(lib, n.pcie_gen_gpu_max, {"nvmlDeviceGetGpuMaxPcieLinkGeneration"});
    bind(lib, n.persistence_mode, {"nvmlDeviceGetPersistenceMode"});
    bind(lib, n.mig_mode, {"nvmlDeviceGetMigMode"});
    bind(lib, n.compute_mode, {"nvmlDeviceGetComputeMode"});
    bind(lib, n.applications_clock, {"nvmlDeviceGetApplicationsClock"});
    bind(lib, n.default_applications_clock, {"nvmlDeviceGetDefaultApplicationsClock"});
    bind(lib, n.remapped_rows, {"nvmlDeviceGetRemappedRows"});
    bind(lib, n.pcie_replay_counter, {"nvmlDeviceGetPcieReplayCounter"});
    bind(lib, n.nvlink_error_counter, {"nvmlDeviceGetNvLinkErrorCounter"});
    nvmlReturn_t rc = init();
    if (rc != kNvmlSuccess) {
        n.error = "nvmlInit_v2: " + n.message(rc);
        return n;
    }
    n.ok = true;
    return n;
}

// Loaded once per process; NVML itself is thread-safe.
const Nvml& nvml() {
    static const Nvml instance = load_nvml();
    return instance;
}

std::string pci_bus_id(int device) {
    char id[64] = {};
    SB_CHECK_CUDA(cudaDeviceGetPCIBusId(id, sizeof(id), device));
    return id;
}

// nullptr when NVML does not know the device (message in *why).
nvmlDevice_t nvml_device(const std::string& bus_id, std::string* why) {
    const Nvml& n = nvml();
    if (!n.ok) {
        *why = n.error;
        return nullptr;
    }
    nvmlDevice_t handle = nullptr;
    nvmlReturn_t rc = n.handle_by_pci_bus_id(bus_id.c_str(), &handle);
    if (rc != kNvmlSuccess) {
        *why = fmt::format("nvmlDeviceGetHandleByPciBusId_v2({}): {}", bus_id, n.message(rc));
        return nullptr;
    }
    return handle;
}

// One unsigned query as JSON: the value, or null when unsupported or failing.
nlohmann::json unsigned_query(nvmlReturn_t (*fn)(nvmlDevice_t, unsigned*), nvmlDevice_t dev) {
    unsigned value = 0;
    if (!fn || !dev || fn(dev, &value) != kNvmlSuccess) return nullptr;
    return value;
}

// Active NVLink links of one device; 0 for a GPU without NVLink, null when NVML fails.
nlohmann::json nvlink_links_active(nvmlDevice_t dev) {
    const Nvml& n = nvml();
    if (!dev || !n.nvlink_state) return nullptr;
    int active = 0;
    bool any_answer = false;
    for (unsigned link = 0; link < kNvmlMaxNvLinks; ++link) {
        int state = 0;
        nvmlReturn_t rc = n.nvlink_state(dev, link, &state);
        if (rc == kNvmlSuccess) {
            any_answer = true;
            if (state == kNvmlFeatureEnabled) ++active;
        } else if (rc == kNvmlNotSupported || rc == kNvmlInvalidArgument) {
            any_answer = true;  // no such link on this GPU
        }
    }
    if (!any_answer) return nullptr;
    return active;
}

std::string version_string(long code, long major_div, long minor_div, bool with_patch) {
    long major = code / major_div, minor = (code % major_div) / minor_div, patch = code % minor_div;
    return with_patch ? fmt::format("{}.{}.{}", major, minor, patch) : fmt::format("{}.{}", major, minor);
}

const char* throttle_reason_name(int bit) {
    switch (bit) {
        case 0: return "gpu_idle";
        case 1: return "applications_clocks_setting";
        case 2: return "sw_power_cap";
        case 3: return "hw_slowdown";
        case 4: return "sync_boost";
        case 5: return "sw_thermal_slowdown";
        case 6: return "hw_thermal_slowdown";
        case 7: return "hw_power_brake_slowdown";
        case 8: return "display_clock_setting";
        default: return nullptr;
    }
}

// The settings and error counters the doctor judges (gpu_info.h: gpu_settings).
nlohmann::json settings_of(nvmlDevice_t dev) {
    const Nvml& n = nvml();
    nlohmann::json j;
    j["pcie_gpu_max_gen"] = unsigned_query(n.pcie_gen_gpu_max, dev);
    int mode = 0;
    j["persistence_mode"] = nullptr;
    if (dev && n.persistence_mode && n.persistence_mode(dev, &mode) == kNvmlSuccess) j["persistence_mode"] = mode == 1;
    unsigned mig = 0, mig_pending = 0;
    j["mig_mode"] = nullptr;
    if (dev && n.mig_mode) {
        const nvmlReturn_t rc = n.mig_mode(dev, &mig, &mig_pending);
        if (rc == kNvmlSuccess) j["mig_mode"] = mig == 1;
        else if (rc == kNvmlNotSupported) j["mig_mode"] = false;  // a GPU without MIG runs whole
    }
    j["compute_mode"] = nullptr;
    if (dev && n.compute_mode && n.compute_mode(dev, &mode) == kNvmlSuccess)
        j["compute_mode"] = mode == 0 ? "default" : mode == 2 ? "prohibited" : mode == 3 ? "exclusive_process"
                                                                                      : "exclusive_thread";
    // Application clocks off their default, or the clock-event reason for them (also set by locked clocks).
    j["clocks_locked"] = nullptr;
    unsigned app = 0, app_default = 0;
    unsigned long long reasons = 0;
    const bool app_read = dev && n.applications_clock && n.default_applications_clock &&
                          n.applications_clock(dev, kNvmlClockSm, &app) == kNvmlSuccess &&
                          n.default_applications_clock(dev, kNvmlClockSm, &app_default) == kNvmlSuccess;
    const bool reasons_read = dev && n.clock_event_reasons && n.clock_event_reasons(dev, &reasons) == kNvmlSuccess;
    if (app_read || reasons_read) j["clocks_locked"] = (app_read && app != app_default) || (reasons & 0x2) != 0;
    unsigned corrected = 0, uncorrected = 0, pending = 0, failure = 0;
    j["remapped_rows"] = nullptr;
    if (dev && n.remapped_rows) {
        const nvmlReturn_t rc = n.remapped_rows(dev, &corrected, &uncorrected, &pending, &failure);
        if (rc == kNvmlSuccess)
            j["remapped_rows"] = {{"uncorrectable", uncorrected}, {"pending", pending != 0}, {"failure", failure != 0}};
    }
    j["pcie_replay_count"] = unsigned_query(n.pcie_replay_counter, dev);
    j["nvlink_error_count"] = nullptr;
    if (dev && n.nvlink_error_counter) {
        unsigned long long total = 0;
        bool any = false;
        for (unsigned link = 0; link < kNvmlMaxNvLinks; ++link)
            for (int counter = 0; counter < 4; ++counter) {  // DL replay, recovery, CRC flit, CRC data
                unsigned long long v = 0;
                if (n.nvlink_error_counter(dev, link, counter, &v) == kNvmlSuccess) {
                    total += v;
                    any = true;
                }
            }
        if (any) j["nvlink_error_count"] = total;
    }
    return j;
}

}  // namespace

nlohmann::json gpu_environment(int device) {
    int count = 0;
    SB_CHECK_CUDA(cudaGetDeviceCount(&count));
    if (device < 0 || device >= count)
        throw std::runtime_error(fmt::format("gpu_environment: device {} but {} visible", device, count));
    cudaDeviceProp prop{};
    SB_CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
    auto attribute = [device](cudaDeviceAttr attr) {
        int value = 0;
        SB_CHECK_CUDA(cudaDeviceGetAttribute(&value, attr, device));
        return value;
    };
    nlohmann::json j;
    j["device"] = device;
    j["name"] = std::string(prop.name);
    j["pci_bus_id"] = pci_bus_id(device);
    j["memory_total_mib"] = static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0);
    j["sm_count"] = prop.multiProcessorCount;
    j["compute_capability"] = fmt::format("{}.{}", prop.major, prop.minor);
    j["sm_clock_max_mhz"] = attribute(cudaDevAttrClockRate) / 1000.0;  // kHz
    j["memory_clock_max_mhz"] = attribute(cudaDevAttrMemoryClockRate) / 1000.0;
    j["memory_bus_width_bits"] = attribute(cudaDevAttrGlobalMemoryBusWidth);
    j["l2_bytes"] = prop.l2CacheSize;

    int driver = 0, runtime = 0, nccl = 0;
    SB_CHECK_CUDA(cudaDriverGetVersion(&driver));
    SB_CHECK_CUDA(cudaRuntimeGetVersion(&runtime));
    SB_CHECK_NCCL(ncclGetVersion(&nccl));
    j["cuda_driver_version"] = version_string(driver, 1000, 10, false);
    j["cuda_runtime_version"] = version_string(runtime, 1000, 10, false);
    j["cublaslt_version"] = version_string(static_cast<long>(cublasLtGetVersion()), 10000, 100, true);
    j["nccl_version"] = version_string(nccl, 10000, 100, true);

    j["visible_devices"] = count;
    nlohmann::json p2p = nlohmann::json::array();
    for (int a = 0; a < count; ++a) {
        nlohmann::json row = nlohmann::json::array();
        for (int b = 0; b < count; ++b) {
            if (a == b) {
                row.push_back(nullptr);
                continue;
            }
            int can = 0;
            SB_CHECK_CUDA(cudaDeviceCanAccessPeer(&can, a, b));
            row.push_back(can != 0);
        }
        p2p.push_back(row);
    }
    j["p2p"] = p2p;

    std::string why;
    nvmlDevice_t dev = nvml_device(j["pci_bus_id"].get<std::string>(), &why);
    const Nvml& n = nvml();
    j["nvml"] = dev ? "ok" : "unavailable";
    j["nvml_error"] = dev ? nlohmann::json(nullptr) : nlohmann::json(why);
    j["driver_version"] = nullptr;
    char driver_text[96] = {};
    if (dev && n.system_driver_version &&
        n.system_driver_version(driver_text, sizeof(driver_text)) == kNvmlSuccess)
        j["driver_version"] = std::string(driver_text);
    nlohmann::json links = nlohmann::json::array();
    for (int d = 0; d < count; ++d) {
        std::string ignored;
        links.push_back(dev ? nvlink_links_active(nvml_device(pci_bus_id(d), &ignored)) : nullptr);
    }
    j["nvlink_links_active"] = links;
    j["pcie"] = {{"current_gen", unsigned_query(n.pcie_gen_current, dev)},
                 {"max_gen", unsigned_query(n.pcie_gen_max, dev)},
                 {"current_width", unsigned_query(n.pcie_width_current, dev)},
                 {"max_width", unsigned_query(n.pcie_width_max, dev)}};
    nlohmann::json power_mw = unsigned_query(n.power_limit_mw, dev);
    j["power_limit_w"] = power_mw.is_null() ? nlohmann::json(nullptr)
                                            : nlohmann::json(power_mw.get<unsigned>() / 1000.0);
    nlohmann::json default_mw = unsigned_query(n.power_default_limit_mw, dev);
    j["power_default_limit_w"] = default_mw.is_null() ? nlohmann::json(nullptr)
                                                      : nlohmann::json(default_mw.get<unsigned>() / 1000.0);
    j["ecc_enabled"] = nullptr;
    int ecc_current = 0, ecc_pending = 0;
    if (dev && n.ecc_mode && n.ecc_mode(dev, &ecc_current, &ecc_pending) == kNvmlSuccess)
        j["ecc_enabled"] = ecc_current == kNvmlFeatureEnabled;
    j["ecc_uncorrected_volatile"] = nullptr;
    unsigned long long uncorrected = 0;
    if (dev && n.total_ecc_errors &&
        n.total_ecc_errors(dev, kNvmlMemoryErrorUncorrected, kNvmlVolatileEcc, &uncorrected) == kNvmlSuccess)
        j["ecc_uncorrected_volatile"] = uncorrected;
    j["settings"] = settings_of(dev);
    return j;
}

// ---------------------------------------------------------------- TelemetrySampler

namespace {

int64_t ecc_total(nvmlDevice_t dev, int error_type) {
    const Nvml& n = nvml();
    unsigned long long count = 0;
    if (!dev || !n.total_ecc_errors ||
        n.total_ecc_errors(dev, error_type, kNvmlVolatileEcc, &count) != kNvmlSuccess)
        return -1;
    return static_cast<int64_t>(count);
}

// {avg, min, max} over the reported (>= 0) values; null when none was reported.
nlohmann::json summarize(const std::vector<TelemetrySampler::Sample>& samples,
                         double TelemetrySampler::Sample::*field, bool with_min) {
    double sum = 0, lo = 0, hi = 0;
    size_t n = 0;
    for (const auto& s : samples) {
        double v = s.*field;
        if (v < 0) continue;
        lo = n ? std::min(lo, v) : v;
        hi = n ? std::max(hi, v) : v;
        sum += v;
        ++n;
    }
    if (n == 0) return nullptr;
    nlohmann::json j = {{"avg", sum / static_cast<double>(n)}, {"max", hi}};
    if (with_min) j["min"] = lo;
    return j;
}

}  // namespace

TelemetrySampler::TelemetrySampler(int device, double interval_ms)
    : device_(device), interval_ms_(interval_ms > 0 ? interval_ms : 100) {
    // Never throws: a sampler that cannot sample reports why from stop().
    char id[64] = {};
    cudaError_t rc = cudaDeviceGetPCIBusId(id, sizeof(id), device_);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();  // not left for a later launch check to report as its own
        unavailable_reason_ = fmt::format("cudaDeviceGetPCIBusId(device {}): {}", device_, cudaGetErrorString(rc));
        return;
    }
    nvml_device_ = nvml_device(id, &unavailable_reason_);
}

TelemetrySampler::~TelemetrySampler() {
    if (thread_.joinable()) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_requested_ = true;
        }
        wake_.notify_all();
        thread_.join();
    }
}

void TelemetrySampler::take_sample() {
    const Nvml& n = nvml();
    auto dev = static_cast<nvmlDevice_t>(nvml_device_);
    Sample s;
    unsigned value = 0;
    if (n.temperature && n.temperature(dev, kNvmlTemperatureGpu, &value) == kNvmlSuccess) s.temperature_c = value;
    if (n.power_usage_mw && n.power_usage_mw(dev, &value) == kNvmlSuccess) s.power_w = value / 1000.0;
    if (n.clock_mhz && n.clock_mhz(dev, kNvmlClockSm, &value) == kNvmlSuccess) s.sm_clock_mhz = value;
    nvmlMemory_t memory{};
    if (n.memory_info && n.memory_info(dev, &memory) == kNvmlSuccess)
        s.memory_used_mib = static_cast<double>(memory.used) / (1024.0 * 1024.0);
    unsigned long long reasons = 0;
    if (n.clock_event_reasons && n.clock_event_reasons(dev, &reasons) == kNvmlSuccess) s.throttle_reasons = reasons;
    std::lock_guard<std::mutex> lock(mutex_);
    samples_.push_back(s);
}

void TelemetrySampler::loop() {
    const auto interval = std::chrono::duration<double, std::milli>(interval_ms_);
    auto next = std::chrono::steady_clock::now();
    for (;;) {
        take_sample();
        next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval);
        std::unique_lock<std::mutex> lock(mutex_);
        if (wake_.wait_until(lock, next, [this] { return stop_requested_; })) return;
    }
}

void TelemetrySampler::start() {
    if (running_) throw std::logic_error("TelemetrySampler::start called twice without stop");
    running_ = true;
    samples_.clear();
    stop_requested_ = false;
    if (!nvml_device_) return;
    auto dev = static_cast<nvmlDevice_t>(nvml_device_);
    ecc_corrected_start_ = ecc_total(dev, kNvmlMemoryErrorCorrected);
    ecc_uncorrected_start_ = ecc_total(dev, kNvmlMemoryErrorUncorrected);
    thread_ = std::thread(&TelemetrySampler::loop, this);
}

nlohmann::json TelemetrySampler::stop() {
    if (!nvml_device_) {
        running_ = false;
        return {{"nvml", "unavailable"}, {"nvml_error", unavailable_reason_}};
    }
    if (thread_.joinable()) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_requested_ = true;
        }
        wake_.notify_all();
        thread_.join();
        take_sample();  // the state at the end of the measured interval
    }
    const bool was_running = running_;
    running_ = false;

    nlohmann::json j;
    j["nvml"] = "ok";
    j["interval_ms"] = interval_ms_;
    j["samples"] = samples_.size();
    j["temperature_c"] = summarize(samples_, &Sample::temperature_c, false);
    j["power_w"] = summarize(samples_, &Sample::power_w, false);
    j["sm_clock_mhz"] = summarize(samples_, &Sample::sm_clock_mhz, true);
    j["memory_used_mib"] = summarize(samples_, &Sample::memory_used_mib, true);
    const nlohmann::json& mem = j["memory_used_mib"];
    j["memory_fluctuation_pct"] =
        mem.is_null() || mem["avg"].get<double>() <= 0
            ? nlohmann::json(nullptr)
            : nlohmann::json(100.0 * (mem["max"].get<double>() - mem["min"].get<double>()) / mem["avg"].get<double>());
    uint64_t seen = 0;
    for (const auto& s : samples_) seen |= s.throttle_reasons;
    nlohmann::json names = nlohmann::json::array();
    for (int bit = 0; bit < 64; ++bit) {
        if (!(seen & (uint64_t{1} << bit))) continue;
        const char* name = throttle_reason_name(bit);
        names.push_back(name ? std::string(name) : fmt::format("bit_{}", bit));
    }
    j["throttle_reasons_seen"] = names;
    auto dev = static_cast<nvmlDevice_t>(nvml_device_);
    auto delta = [&](int64_t start, int type) -> nlohmann::json {
        if (!was_running || start < 0) return nullptr;
        int64_t now = ecc_total(dev, type);
        if (now < 0) return nullptr;
        return now - start;
    };
    j["ecc_corrected_delta"] = delta(ecc_corrected_start_, kNvmlMemoryErrorCorrected);
    j["ecc_uncorrected_delta"] = delta(ecc_uncorrected_start_, kNvmlMemoryErrorUncorrected);
    return j;
}

}  // namespace sb
