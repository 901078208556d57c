// The doctor's CUDA readings: GPUs and pairs (gpu_environment's NVML and CUDA facts plus
// sysfs), verified copies, the clocks under a GEMM load, and the NCCL collective probe, whose
// sizes grow by the rule of sweep_sizes.h.
#include "src/doctor/live_cuda.h"
#include "src/core/results.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <thread>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include "models/cuda/cuda_check.h"
#include "base/errors.h"
#include "src/doctor/checks.h"
#include "src/doctor/live_reader.h"
#include "src/doctor/sweep_sizes.h"
#include "src/system/environment.h"
#include "src/system/gpu_info.h"

extern char** environ;

namespace sb::doctor {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kCopyBytes = size_t{256} << 20;  // beyond every L2, short enough for 56 pairs
constexpr int kCopyReps = 5;
constexpr int kLatencyReps = 20;

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

// Byte i of device d's pattern: differs between devices, so a stale or misrouted copy shows.
void fill_pattern(unsigned char* p, size_t n, int d) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>((i * 131 + static_cast<size_t>(d) * 7 + 1) >> 2);
}

// {gen, width} from gpu_environment's "pcie" object; 0 where NVML has none.
PcieLink nvml_link(const nlohmann::json& env, const char* gen, const char* width) {
    PcieLink l;
    if (!env.contains("pcie") || !env["pcie"].is_object()) return l;
    const nlohmann::json& p = env["pcie"];
    if (p.contains(gen) && p[gen].is_number()) l.gen = p[gen].get<int>();
    if (p.contains(width) && p[width].is_number()) l.width = p[width].get<int>();
    return l;
}

// The link as it is now: NVML's reading where it has one, else sysfs's.
PcieLink current_link(int device, const GpuReading& g) {
    const PcieLink l = nvml_link(gpu_environment(device), "current_gen", "current_width");
    return l.gen > 0 ? l : read_current_link(g.pci_bus_id);
}

// Per GPU: a device buffer holding its pattern, a target buffer for copies into it,
// pinned host buffers (the pattern and a read-back), and a stream.
struct GpuBuffers {
    int device = 0;
    void* src = nullptr;
    void* dst = nullptr;
    unsigned char* host_src = nullptr;
    unsigned char* host_dst = nullptr;
    cudaStream_t stream = nullptr;
};

// Milliseconds of `issue` on `stream` of the current device, timed with events.
template <class F>
double time_on(cudaStream_t stream, F&& issue) {
    cudaEvent_t a, b;
    SB_CHECK_CUDA(cudaEventCreate(&a));
    SB_CHECK_CUDA(cudaEventCreate(&b));
    SB_CHECK_CUDA(cudaEventRecord(a, stream));
    issue();
    SB_CHECK_CUDA(cudaEventRecord(b, stream));
    SB_CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    SB_CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    SB_CHECK_CUDA(cudaEventDestroy(a));
    SB_CHECK_CUDA(cudaEventDestroy(b));
    return ms;
}

// Device memory `dev` of g against the source GPU's pattern (its host_src), read back
// through g's pinned memory.
bool holds_pattern(GpuBuffers& g, const void* dev, const GpuBuffers& source) {
    SB_CHECK_CUDA(cudaSetDevice(g.device));
    SB_CHECK_CUDA(cudaMemcpy(g.host_dst, dev, kCopyBytes, cudaMemcpyDeviceToHost));
    return std::memcmp(source.host_src, g.host_dst, kCopyBytes) == 0;
}

void clear(GpuBuffers& g, void* dev) {
    SB_CHECK_CUDA(cudaSetDevice(g.device));
    SB_CHECK_CUDA(cudaMemset(dev, 0, kCopyBytes));
    SB_CHECK_CUDA(cudaDeviceSynchronize());
}

CopyReading copy_reading(const std::string& kind, const std::string& host, int src, int dst, double ms, double lat_ms,
                         bool concurrent, bool correct) {
    CopyReading c;
    c.kind = kind;
    c.host = host;
    c.src = src;
    c.dst = dst;
    c.concurrent = concurrent;
    c.bytes = static_cast<double>(kCopyBytes);
    c.gbps = ms > 0 ? kCopyBytes / (ms * 1e6) : 0;
    c.latency_us = lat_ms * 1000;
    c.correct = correct;
    return c;
}

void host_copies(std::vector<GpuBuffers>& bufs, SystemSnapshot& s, const std::string& host) {
    // One GPU at a time: h2d then d2h, each timed, the round trip verified.
    for (GpuBuffers& g : bufs) {
        SB_CHECK_CUDA(cudaSetDevice(g.device));
        std::vector<double> h2d, d2h, h2d_lat, d2h_lat;
        for (int r = 0; r < kCopyReps; ++r) {
            h2d.push_back(time_on(g.stream, [&] {
                SB_CHECK_CUDA(cudaMemcpyAsync(g.src, g.host_src, kCopyBytes, cudaMemcpyHostToDevice, g.stream));
            }));
            d2h.push_back(time_on(g.stream, [&] {
                SB_CHECK_CUDA(cudaMemcpyAsync(g.host_dst, g.src, kCopyBytes, cudaMemcpyDeviceToHost, g.stream));
            }));
        }
        const bool correct = std::memcmp(g.host_src, g.host_dst, kCopyBytes) == 0;
        for (int r = 0; r < kLatencyReps; ++r) {
            h2d_lat.push_back(time_on(g.stream, [&] {
                SB_CHECK_CUDA(cudaMemcpyAsync(g.dst, g.host_src, 4, cudaMemcpyHostToDevice, g.stream));
            }));
            d2h_lat.push_back(time_on(g.stream, [&] {
                SB_CHECK_CUDA(cudaMemcpyAsync(g.host_dst, g.src, 4, cudaMemcpyDeviceToHost, g.stream));
            }));
        }
        s.copies.push_back(copy_reading("h2d", host, -1, g.device, median(h2d), median(h2d_lat), false, correct));
        s.copies.push_back(copy_reading("d2h", host, g.device, -1, median(d2h), median(d2h_lat), false, correct));
    }
    // Every GPU at once: each timed on its own stream while the others copy too; the PCIe
    // link is read while the copies run.
    for (const char* kind : {"h2d", "d2h"}) {
        const bool up = std::strcmp(kind, "h2d") == 0;
        std::vector<cudaEvent_t> start(bufs.size()), end(bufs.size());
        for (size_t i = 0; i < bufs.size(); ++i) {
            GpuBuffers& g = bufs[i];
            SB_CHECK_CUDA(cudaSetDevice(g.device));
            SB_CHECK_CUDA(cudaEventCreate(&start[i]));
            SB_CHECK_CUDA(cudaEventCreate(&end[i]));
            SB_CHECK_CUDA(cudaEventRecord(start[i], g.stream));
            for (int r = 0; r < kCopyReps; ++r)
                SB_CHECK_CUDA(up ? cudaMemcpyAsync(g.src, g.host_src, kCopyBytes, cudaMemcpyHostToDevice, g.stream)
                                 : cudaMemcpyAsync(g.host_dst, g.src, kCopyBytes, cudaMemcpyDeviceToHost, g.stream));
            SB_CHECK_CUDA(cudaEventRecord(end[i], g.stream));
        }
        if (up)
            for (size_t i = 0; i < bufs.size(); ++i) s.gpus[i].pcie_load = current_link(bufs[i].device, s.gpus[i]);
        for (size_t i = 0; i < bufs.size(); ++i) {
            SB_CHECK_CUDA(cudaSetDevice(bufs[i].device));
            SB_CHECK_CUDA(cudaEventSynchronize(end[i]));
            float ms = 0;
            SB_CHECK_CUDA(cudaEventElapsedTime(&ms, start[i], end[i]));
            const bool correct = up || std::memcmp(bufs[i].host_src, bufs[i].host_dst, kCopyBytes) == 0;
            s.copies.push_back(copy_reading(kind, host, up ? -1 : bufs[i].device, up ? bufs[i].device : -1,
                                            ms / kCopyReps, 0, true, correct));
            SB_CHECK_CUDA(cudaEventDestroy(start[i]));
            SB_CHECK_CUDA(cudaEventDestroy(end[i]));
        }
    }
}

// A device-to-device copy within one GPU, bytes read plus written per second (GB/s), the median
// of five: the card's memory bandwidth as the profiles' copy_gbps counts it.
double device_copy_gbps(GpuBuffers& g) {
    SB_CHECK_CUDA(cudaSetDevice(g.device));
    std::vector<double> ms;
    for (int r = 0; r < kCopyReps; ++r)
        ms.push_back(time_on(g.stream, [&] {
            SB_CHECK_CUDA(cudaMemcpyAsync(g.dst, g.src, kCopyBytes, cudaMemcpyDeviceToDevice, g.stream));
        }));
    const double t = median(ms);
    return t > 0 ? 2.0 * kCopyBytes / (t * 1e6) : 0;
}

// Device a's buffer into b's through pinned host memory in 8 MiB chunks, the device-to-host
// copy of one chunk overlapping the host-to-device copy of the one before (as NCCL's SHM
// transport pipelines). Host wall time: events of two devices cannot be compared.
double staged_ms(GpuBuffers& a, GpuBuffers& b, unsigned char* bounce) {
    constexpr size_t kChunk = size_t{8} << 20;
    const size_t chunks = kCopyBytes / kChunk;
    std::vector<cudaEvent_t> ready(chunks);
    SB_CHECK_CUDA(cudaSetDevice(a.device));
    for (cudaEvent_t& e : ready) SB_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    SB_CHECK_CUDA(cudaDeviceSynchronize());
    const auto t0 = Clock::now();
    for (size_t c = 0; c < chunks; ++c) {
        const size_t off = c * kChunk;
        SB_CHECK_CUDA(cudaSetDevice(a.device));
        SB_CHECK_CUDA(cudaMemcpyAsync(bounce + off, static_cast<char*>(a.src) + off, kChunk, cudaMemcpyDeviceToHost,
                                      a.stream));
        SB_CHECK_CUDA(cudaEventRecord(ready[c], a.stream));
        SB_CHECK_CUDA(cudaSetDevice(b.device));
        SB_CHECK_CUDA(cudaStreamWaitEvent(b.stream, ready[c], 0));
        SB_CHECK_CUDA(cudaMemcpyAsync(static_cast<char*>(b.dst) + off, bounce + off, kChunk, cudaMemcpyHostToDevice,
                                      b.stream));
    }
    SB_CHECK_CUDA(cudaStreamSynchronize(b.stream));
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    SB_CHECK_CUDA(cudaSetDevice(a.device));
    for (cudaEvent_t& e : ready) SB_CHECK_CUDA(cudaEventDestroy(e));
    return ms;
}

void pair_copies(std::vector<GpuBuffers>& bufs, SystemSnapshot& s, const std::string& host) {
    const int n = static_cast<int>(bufs.size());
    auto granted = [&](int a, int b) {
        for (const PairReading& p : s.pairs)
            if ((p.a == a && p.b == b) || (p.a == b && p.b == a)) return p.cuda_p2p == 1;
        return false;
    };
    unsigned char* bounce = nullptr;
    SB_CHECK_CUDA(cudaMallocHost(&bounce, kCopyBytes));
    for (int a = 0; a < n; ++a) {
        for (int b = 0; b < n; ++b) {
            if (a == b) continue;
            GpuBuffers &ga = bufs[a], &gb = bufs[b];
            if (granted(a, b)) try {
                SB_CHECK_CUDA(cudaSetDevice(a));
                cudaError_t rc = cudaDeviceEnablePeerAccess(b, 0);
                if (rc != cudaSuccess && rc != cudaErrorPeerAccessAlreadyEnabled) SB_CHECK_CUDA(rc);
                cudaGetLastError();
                clear(gb, gb.dst);
                std::vector<double> ms, lat;
                SB_CHECK_CUDA(cudaSetDevice(a));
                for (int r = 0; r < kCopyReps; ++r)
                    ms.push_back(time_on(ga.stream, [&] {
                        SB_CHECK_CUDA(cudaMemcpyPeerAsync(gb.dst, b, ga.src, a, kCopyBytes, ga.stream));
                    }));
                for (int r = 0; r < kLatencyReps; ++r)
                    lat.push_back(time_on(ga.stream, [&] {
                        SB_CHECK_CUDA(cudaMemcpyPeerAsync(gb.dst, b, ga.src, a, 4, ga.stream));
                    }));
                const bool correct = holds_pattern(gb, gb.dst, ga);
                s.copies.push_back(copy_reading("peer", host, a, b, median(ms), median(lat), false, correct));
            } catch (const std::exception& e) {
                // The doctor's own peer copy failing is the finding: a transfer fail, not the end of the run.
                CopyReading failed = copy_reading("peer", host, a, b, 0, 0, false, false);
                failed.error = e.what();
                s.copies.push_back(failed);
                cudaGetLastError();
                for (int d : {a, b}) {
                    cudaSetDevice(d);
                    if (cudaDeviceSynchronize() != cudaSuccess)
                        throw std::runtime_error(fmt::format("GPU{} is unusable after a failed peer copy: {}", d, e.what()));
                }
            }
            clear(gb, gb.dst);
            const double ms = staged_ms(ga, gb, bounce);
            s.copies.push_back(copy_reading("staged", host, a, b, ms, 0, false, holds_pattern(gb, gb.dst, ga)));
        }
    }
    SB_CHECK_CUDA(cudaFreeHost(bounce));
    // Every GPU sends to the next at once (a ring), where each such pair is granted.
    bool ring = n > 1;
    for (int a = 0; a < n; ++a) ring = ring && granted(a, (a + 1) % n);
    for (const CopyReading& c : s.copies) ring = ring && c.error.empty();
    if (!ring) return;
    for (int a = 0; a < n; ++a) clear(bufs[(a + 1) % n], bufs[(a + 1) % n].dst);
    std::vector<cudaEvent_t> start(n), end(n);
    for (int a = 0; a < n; ++a) {
        const int b = (a + 1) % n;
        SB_CHECK_CUDA(cudaSetDevice(a));
        SB_CHECK_CUDA(cudaEventCreate(&start[a]));
        SB_CHECK_CUDA(cudaEventCreate(&end[a]));
        SB_CHECK_CUDA(cudaEventRecord(start[a], bufs[a].stream));
        SB_CHECK_CUDA(cudaMemcpyPeerAsync(bufs[b].dst, b, bufs[a].src, a, kCopyBytes, bufs[a].stream));
        SB_CHECK_CUDA(cudaEventRecord(end[a], bufs[a].stream));
    }
    for (int a = 0; a < n; ++a) {
        SB_CHECK_CUDA(cudaSetDevice(a));
        SB_CHECK_CUDA(cudaEventSynchronize(end[a]));
        float ms = 0;
        SB_CHECK_CUDA(cudaEventElapsedTime(&ms, start[a], end[a]));
        const int b = (a + 1) % n;
        s.copies.push_back(copy_reading("peer", host, a, b, ms, 0, true, holds_pattern(bufs[b], bufs[b].dst, bufs[a])));
        SB_CHECK_CUDA(cudaSetDevice(a));
        SB_CHECK_CUDA(cudaEventDestroy(start[a]));
        SB_CHECK_CUDA(cudaEventDestroy(end[a]));
    }
}

// TF32 GEMMs on every GPU at once for `seconds`, NVML sampled meanwhile: clocks, power and
// the clock-event reasons under a full load.
void clocks_under_load(SystemSnapshot& s, double seconds) {
    const int n = static_cast<int>(s.gpus.size());
    constexpr int kDim = 8192;
    const size_t bytes = size_t{kDim} * kDim * sizeof(float);
    std::vector<cublasHandle_t> handles(n);
    std::vector<float*> mats(n);
    std::vector<std::unique_ptr<TelemetrySampler>> samplers;
    for (int d = 0; d < n; ++d) {
        SB_CHECK_CUDA(cudaSetDevice(d));
        SB_CHECK_CUBLAS(cublasCreate(&handles[d]));
        SB_CHECK_CUBLAS(cublasSetMathMode(handles[d], CUBLAS_TF32_TENSOR_OP_MATH));
        SB_CHECK_CUDA(cudaMalloc(&mats[d], 3 * bytes));
        SB_CHECK_CUDA(cudaMemset(mats[d], 0, 3 * bytes));
        samplers.push_back(std::make_unique<TelemetrySampler>(d, 50));
    }
    for (auto& t : samplers) t->start();
    const float one = 1, zero = 0;
    std::vector<cudaEvent_t> begin(n), finish(n);
    for (int d = 0; d < n; ++d) {
        SB_CHECK_CUDA(cudaSetDevice(d));
        SB_CHECK_CUDA(cudaEventCreate(&begin[d]));
        SB_CHECK_CUDA(cudaEventCreate(&finish[d]));
        SB_CHECK_CUDA(cudaEventRecord(begin[d], nullptr));
    }
    int64_t gemms = 0;
    const auto t0 = Clock::now();
    while (std::chrono::duration<double>(Clock::now() - t0).count() < seconds) {
        gemms += 4;
        for (int d = 0; d < n; ++d) {
            SB_CHECK_CUDA(cudaSetDevice(d));
            for (int k = 0; k < 4; ++k)
                SB_CHECK_CUBLAS(cublasSgemm(handles[d], CUBLAS_OP_N, CUBLAS_OP_N, kDim, kDim, kDim, &one, mats[d], kDim,
                                            mats[d] + size_t{kDim} * kDim, kDim, &zero,
                                            mats[d] + 2 * size_t{kDim} * kDim, kDim));
        }
        for (int d = 0; d < n; ++d) {
            SB_CHECK_CUDA(cudaSetDevice(d));
            SB_CHECK_CUDA(cudaDeviceSynchronize());
        }
    }
    for (int d = 0; d < n; ++d) {
        // The card's TF32 GEMM rate over the whole load: 2 m n k flops per product.
        SB_CHECK_CUDA(cudaSetDevice(d));
        SB_CHECK_CUDA(cudaEventRecord(finish[d], nullptr));
        SB_CHECK_CUDA(cudaEventSynchronize(finish[d]));
        float ms = 0;
        SB_CHECK_CUDA(cudaEventElapsedTime(&ms, begin[d], finish[d]));
        if (ms > 0) s.gpus[d].gemm_tflops = gemms * 2.0 * kDim * kDim * kDim / (ms * 1e9);
        SB_CHECK_CUDA(cudaEventDestroy(begin[d]));
        SB_CHECK_CUDA(cudaEventDestroy(finish[d]));
    }
    for (int d = 0; d < n; ++d) {
        const nlohmann::json t = samplers[d]->stop();
        GpuReading& g = s.gpus[d];
        if (t.contains("sm_clock_mhz") && t["sm_clock_mhz"].is_object()) g.sm_clock_load_mhz = t["sm_clock_mhz"]["avg"];
        if (t.contains("power_w") && t["power_w"].is_object()) g.power_load_w = t["power_w"]["avg"];
        if (t.contains("throttle_reasons_seen"))
            for (const auto& name : t["throttle_reasons_seen"])
                if (name != "gpu_idle") g.clock_events_load.push_back(name.get<std::string>());
        SB_CHECK_CUDA(cudaSetDevice(d));
        SB_CHECK_CUDA(cudaFree(mats[d]));
        SB_CHECK_CUBLAS(cublasDestroy(handles[d]));
    }
}

template <class T>
T value_or(const nlohmann::json& j, const char* key, T otherwise) {
    return j.contains(key) && !j[key].is_null() ? j[key].get<T>() : otherwise;
}

// gpu_environment's "settings" into the reading; unreported values stay unknown.
void read_settings(const nlohmann::json& e, GpuReading& g) {
    if (!e.contains("settings") || !e["settings"].is_object()) return;
    const nlohmann::json& x = e["settings"];
    auto flag = [&](const char* key) { return x.contains(key) && x[key].is_boolean() ? (x[key].get<bool>() ? 1 : 0) : -1; };
    g.persistence = flag("persistence_mode");
    g.mig = flag("mig_mode");
    g.clocks_locked = flag("clocks_locked");
    g.compute_mode = x.contains("compute_mode") && x["compute_mode"].is_string() ? x["compute_mode"].get<std::string>() : "";
    if (x.contains("remapped_rows") && x["remapped_rows"].is_object()) {
        const nlohmann::json& r = x["remapped_rows"];
        g.remapped_rows_uncorrectable = r["uncorrectable"].get<int64_t>();
        g.row_remap_pending = r["pending"].get<bool>() ? 1 : 0;
        g.row_remap_failure = r["failure"].get<bool>() ? 1 : 0;
    }
    if (x.contains("pcie_replay_count") && x["pcie_replay_count"].is_number())
        g.pcie_replays = x["pcie_replay_count"].get<int64_t>();
    if (x.contains("nvlink_error_count") && x["nvlink_error_count"].is_number())
        g.nvlink_errors = x["nvlink_error_count"].get<int64_t>();
}

}  // namespace

int visible_gpu_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

std::string cuda_unavailable_reason() {
    int n = 0;
    const cudaError_t rc = cudaGetDeviceCount(&n);
    cudaGetLastError();
    if (rc != cudaSuccess) return fmt::format("cudaGetDeviceCount: {} ({})", cudaGetErrorString(rc), static_cast<int>(rc));
    return n == 0 ? "no device (CUDA_VISIBLE_DEVICES, the driver)" : "";
}

namespace {

// One GPU's reading: gpu_environment's NVML and CUDA facts, sysfs, the kernel log's XIDs.
GpuReading gpu_reading(int d, const std::string& host, const nlohmann::json& e) {
    GpuReading g;
    g.index = d;
    g.host = host;
    g.name = value_or<std::string>(e, "name", "");
    g.pci_bus_id = value_or<std::string>(e, "pci_bus_id", "");
    g.memory_mib = value_or<double>(e, "memory_total_mib", 0);
    g.sm_clock_max_mhz = value_or<double>(e, "sm_clock_max_mhz", 0);
    g.power_limit_w = value_or<double>(e, "power_limit_w", 0);
    g.power_default_w = value_or<double>(e, "power_default_limit_w", 0);
    g.ecc_enabled = e.contains("ecc_enabled") && !e["ecc_enabled"].is_null() ? (e["ecc_enabled"].get<bool>() ? 1 : 0) : -1;
    g.ecc_uncorrected = value_or<int64_t>(e, "ecc_uncorrected_volatile", -1);
    if (e.contains("nvlink_links_active") && e["nvlink_links_active"].size() > static_cast<size_t>(d) &&
        !e["nvlink_links_active"][d].is_null())
        g.nvlink_active = e["nvlink_links_active"][d].get<int>();
    g.nvml_error = value_or<std::string>(e, "nvml_error", "");
    read_settings(e, g);
    read_sysfs_gpu(g);
    if (e.contains("settings") && e["settings"]["pcie_gpu_max_gen"].is_number())
        g.pcie_card_max.gen = e["settings"]["pcie_gpu_max_gen"].get<int>();  // the card's own, not the slot's
    g.xid_count = read_xids(g.pci_bus_id, &g.xids);
    // NVML's view of the link where it has one: the GPU's own, where a virtual machine's
    // sysfs shows its emulated root port.
    const PcieLink nvml_max = nvml_link(e, "max_gen", "max_width");
    if (nvml_max.gen > 0) {
        g.pcie_max = nvml_max;
        g.pcie_idle = nvml_link(e, "current_gen", "current_width");
    }
    return g;
}

// Every pair of this host's GPUs: peer access both ways, NVLink, the sysfs path and ACS.
void read_pairs(SystemSnapshot& s, const std::string& host) {
    const int n = static_cast<int>(s.gpus.size());
    for (int a = 0; a < n; ++a)
        for (int b = a + 1; b < n; ++b) {
            PairReading p;
            p.host = host;
            p.a = a;
            p.b = b;
            int ab = 0, ba = 0;
            SB_CHECK_CUDA(cudaDeviceCanAccessPeer(&ab, a, b));
            SB_CHECK_CUDA(cudaDeviceCanAccessPeer(&ba, b, a));
            p.cuda_p2p = ab && ba ? 1 : 0;
            if (s.gpus[a].nvlink_active > 0 && s.gpus[b].nvlink_active > 0 && p.cuda_p2p == 1) p.path = "nvlink";
            read_sysfs_pair(p, s.gpus[a], s.gpus[b]);
            s.pairs.push_back(p);
        }
}

}  // namespace

SystemSnapshot read_host(const std::string& host, double load_s) {
    SystemSnapshot s;
    const int n = visible_gpu_count();
    nlohmann::json first;
    for (int d = 0; d < n; ++d) {
        const nlohmann::json e = gpu_environment(d);
        if (d == 0) first = e;
        s.gpus.push_back(gpu_reading(d, host, e));
    }
    s.versions.driver = value_or<std::string>(first, "driver_version", "");
    s.versions.cuda_runtime = value_or<std::string>(first, "cuda_runtime_version", "");
    s.versions.nccl = value_or<std::string>(first, "nccl_version", "");
    s.hosts.push_back({host, s.versions.driver, s.versions.cuda_runtime, s.versions.nccl});
    read_pairs(s, host);

    std::vector<GpuBuffers> bufs(n);
    for (int d = 0; d < n; ++d) {
        GpuBuffers& g = bufs[d];
        g.device = d;
        SB_CHECK_CUDA(cudaSetDevice(d));
        SB_CHECK_CUDA(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
        SB_CHECK_CUDA(cudaMalloc(&g.src, kCopyBytes));
        SB_CHECK_CUDA(cudaMalloc(&g.dst, kCopyBytes));
        on_cpus(s.gpus[d].local_cpus, [&] {  // the GPU's own NUMA node: far memory would read as a slow link
            SB_CHECK_CUDA(cudaMallocHost(&g.host_src, kCopyBytes));
            SB_CHECK_CUDA(cudaMallocHost(&g.host_dst, kCopyBytes));
            fill_pattern(g.host_src, kCopyBytes, d);
            std::memset(g.host_dst, 0, kCopyBytes);
        });
    }
    host_copies(bufs, s, host);  // leaves each GPU's pattern in its src
    for (GpuBuffers& g : bufs) s.gpus[g.device].memory_copy_gbps = device_copy_gbps(g);
    pair_copies(bufs, s, host);
    for (GpuBuffers& g : bufs) {
        SB_CHECK_CUDA(cudaSetDevice(g.device));
        SB_CHECK_CUDA(cudaFree(g.src));
        SB_CHECK_CUDA(cudaFree(g.dst));
        SB_CHECK_CUDA(cudaFreeHost(g.host_src));
        SB_CHECK_CUDA(cudaFreeHost(g.host_dst));
        SB_CHECK_CUDA(cudaStreamDestroy(g.stream));
    }
    if (load_s > 0) clocks_under_load(s, load_s);
    return s;
}

// ---------------------------------------------------------------- the all-reduce probe

namespace {

std::string to_hex(const void* data, size_t n) {
    std::string out;
    for (size_t i = 0; i < n; ++i) out += fmt::format("{:02x}", static_cast<const unsigned char*>(data)[i]);
    return out;
}

bool from_hex(const std::string& hex, void* data, size_t n) {
    if (hex.size() != 2 * n) return false;
    for (size_t i = 0; i < n; ++i)
        static_cast<unsigned char*>(data)[i] = static_cast<unsigned char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
    return true;
}

// Input element i of rank r: a small integer, so every sum over ranks is exact in fp32.
float probe_input(int r, size_t i) { return static_cast<float>(1 + ((i * 2654435761u + r * 40503u) >> 7 & 15)); }

// Every rank's `value` reduced by `op` (ncclMax, ncclMin) through NCCL, so every rank takes
// the same decision: `scratch` holds one double on the device.
double agree(double value, ncclRedOp_t op, double* scratch, ncclComm_t comm, cudaStream_t stream) {
    SB_CHECK_CUDA(cudaMemcpyAsync(scratch, &value, sizeof(double), cudaMemcpyHostToDevice, stream));
    SB_CHECK_NCCL(ncclAllReduce(scratch, scratch, 1, ncclDouble, op, comm, stream));
    SB_CHECK_CUDA(cudaMemcpyAsync(&value, scratch, sizeof(double), cudaMemcpyDeviceToHost, stream));
    SB_CHECK_CUDA(cudaStreamSynchronize(stream));
    return value;
}

// One collective at `bytes` (nccl-tests' size: the all-reduce's buffer, the all-gather's output,
// the reduce-scatter's input), timed after a warm-up at the slowest rank (agreed through NCCL, so
// every rank computes the same busbw) and every element of the result checked.
AllReduceRow probe_row(const std::string& op, size_t bytes, float* send, float* recv, std::vector<float>& host,
                       double* scratch, int rank, int nranks, ncclComm_t comm, cudaStream_t stream) {
    const size_t count = bytes / sizeof(float), chunk = count / nranks;
    const int iters = bytes <= (size_t{16} << 20) ? 20 : 5;
    auto issue = [&] {
        if (op == "all_reduce") SB_CHECK_NCCL(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, stream));
        else if (op == "all_gather") SB_CHECK_NCCL(ncclAllGather(send, recv, chunk, ncclFloat, comm, stream));
        else SB_CHECK_NCCL(ncclReduceScatter(send, recv, chunk, ncclFloat, ncclSum, comm, stream));
    };
    issue();  // warm-up
    SB_CHECK_CUDA(cudaMemsetAsync(recv, 0xff, bytes, stream));
    const double ms = time_on(stream, [&] {
        for (int it = 0; it < iters; ++it) issue();
    });
    const size_t out = op == "reduce_scatter" ? chunk : op == "all_gather" ? chunk * nranks : count;
    SB_CHECK_CUDA(cudaMemcpy(host.data(), recv, out * sizeof(float), cudaMemcpyDeviceToHost));
    int64_t wrong = 0;
    for (size_t i = 0; i < out; ++i) {
        float want = 0;
        if (op == "all_gather") want = probe_input(static_cast<int>(i / chunk), i % chunk);  // each rank's first chunk
        else
            for (int r = 0; r < nranks; ++r) want += probe_input(r, op == "reduce_scatter" ? rank * chunk + i : i);
        wrong += host[i] != want;
    }
    AllReduceRow row;
    row.op = op;
    row.bytes = static_cast<double>(bytes);
    row.time_us = agree(ms * 1000 / iters, ncclMax, scratch, comm, stream);
    const double factor = op == "all_reduce" ? 2.0 * (nranks - 1) / nranks : double(nranks - 1) / nranks;
    row.busbw_gbps = bytes / (row.time_us * 1e3) * factor;
    row.wrong = wrong;
    return row;
}

// The probe's arguments after the hidden one: unique id, rank, ranks, device, max bytes, the
// busbw the sizes grow towards (0: none), the ranks sharing this GPU, the result file.
constexpr int kProbeArgc = 10;

}  // namespace

int run_allreduce_probe(int argc, char** argv) {
    nlohmann::json result;
    const std::string out = argc == kProbeArgc ? argv[kProbeArgc - 1] : "";
    try {
        if (argc != kProbeArgc)
            throw std::runtime_error("usage: unique-id rank nranks device max-bytes target-gbps device-ranks result-file");
        ncclUniqueId id;
        if (!from_hex(argv[2], &id, sizeof(id))) throw std::runtime_error("bad unique id");
        const int rank = std::atoi(argv[3]), nranks = std::atoi(argv[4]), device = std::atoi(argv[5]);
        SweepLimits limits;
        limits.max_bytes = std::stoull(argv[6]);
        limits.target_gbps = std::stod(argv[7]);
        const int device_ranks = std::max(1, std::atoi(argv[8]));
        limits.align = sizeof(float) * static_cast<size_t>(nranks);
        SB_CHECK_CUDA(cudaSetDevice(device));
        ncclComm_t comm;
        SB_CHECK_NCCL(ncclCommInitRank(&comm, nranks, id, rank));
        cudaStream_t stream;
        SB_CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        double* scratch = nullptr;
        SB_CHECK_CUDA(cudaMalloc(&scratch, sizeof(double)));
        // Send and receive buffers of every rank on this GPU in 80% of its free memory, read by
        // every rank before any allocates (the agreement waits for all), the smallest share agreed.
        size_t free_bytes = 0, total_bytes = 0;
        SB_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
        limits.memory_bytes = static_cast<size_t>(
            agree(0.8 * static_cast<double>(free_bytes) / (2.0 * device_ranks), ncclMin, scratch, comm, stream));
        const size_t largest = std::max(sweep_first_bytes(limits), std::min(limits.max_bytes, limits.memory_bytes));
        float *send = nullptr, *recv = nullptr;
        SB_CHECK_CUDA(cudaMalloc(&send, largest));
        SB_CHECK_CUDA(cudaMalloc(&recv, largest));
        std::vector<float> host(largest / sizeof(float));
        for (size_t i = 0; i < host.size(); ++i) host[i] = probe_input(rank, i);
        SB_CHECK_CUDA(cudaMemcpy(send, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
        std::vector<AllReduceRow> rows;
        std::vector<SweepStop> stops;
        for (const char* op : {"all_reduce", "all_gather", "reduce_scatter"}) {
            const SweepResult r = run_sweep(
                [&](size_t bytes) {
                    rows.push_back(probe_row(op, bytes, send, recv, host, scratch, rank, nranks, comm, stream));
                    return rows.back().busbw_gbps;
                },
                limits);
            stops.push_back({op, r.sizes.empty() ? 0.0 : static_cast<double>(r.sizes.back()), r.stop});
        }
        result["rows"] = rows;
        result["stops"] = stops;
        result["target_gbps"] = limits.target_gbps;
        result["max_bytes"] = limits.max_bytes;
        result["memory_bytes"] = limits.memory_bytes;
        SB_CHECK_CUDA(cudaFree(send));
        SB_CHECK_CUDA(cudaFree(recv));
        SB_CHECK_CUDA(cudaFree(scratch));
        SB_CHECK_NCCL(ncclCommDestroy(comm));
    } catch (const std::exception& e) {
        result["error"] = e.what();
    }
    std::ofstream(out) << json_text(result) << "\n";
    return result.contains("error") ? 1 : 0;
}

namespace {

// The probe's environment: this process's, with NCCL's INFO log into `log` (and
// NCCL_P2P_DISABLE=1 for the control) in place of any such setting of the caller's.
std::vector<std::string> probe_environment(const std::string& log, bool p2p_disabled) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
        const std::string kv = *e;
        const bool ours = kv.rfind("NCCL_DEBUG=", 0) == 0 || kv.rfind("NCCL_DEBUG_FILE=", 0) == 0 ||
                          kv.rfind("NCCL_DEBUG_SUBSYS=", 0) == 0 || (p2p_disabled && kv.rfind("NCCL_P2P_DISABLE=", 0) == 0);
        if (!ours) env.push_back(kv);
    }
    env.push_back("NCCL_DEBUG=INFO");
    env.push_back("NCCL_DEBUG_SUBSYS=INIT,P2P,SHM,NET");
    env.push_back("NCCL_DEBUG_FILE=" + log);
    if (p2p_disabled) env.push_back("NCCL_P2P_DISABLE=1");
    return env;
}

// Every rank's run as one: the slowest rank's time per row, the wrong elements summed, every
// rank's transports, the first error.
CollectiveRun merge_ranks(const std::vector<nlohmann::json>& all) {
    CollectiveRun merged = all[0].get<CollectiveRun>();
    for (size_t r = 1; r < all.size(); ++r) {
        const CollectiveRun other = all[r].get<CollectiveRun>();
        merged.timed_out = merged.timed_out || other.timed_out;
        if (merged.error.empty()) merged.error = other.error;
        for (const std::string& t : other.transports) merged.transports.push_back(t);
        for (size_t i = 0; i < merged.rows.size() && i < other.rows.size(); ++i) {
            AllReduceRow& row = merged.rows[i];
            if (other.rows[i].time_us > row.time_us) {
                row.time_us = other.rows[i].time_us;
                row.busbw_gbps = other.rows[i].busbw_gbps;
            }
            row.wrong += other.rows[i].wrong;
        }
        if (other.rows.size() < merged.rows.size()) merged.rows.resize(other.rows.size());
    }
    return merged;
}

}  // namespace

CollectiveRun run_allreduce_sweep(const std::string& label, bool p2p_disabled, int device, int device_ranks,
                                  size_t max_bytes, double target_gbps, double deadline_s,
                                  const std::string& scratch_dir, MPI_Comm world) {
    int rank = 0, size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(world, &rank));
    SB_CHECK_MPI(MPI_Comm_size(world, &size));
    ncclUniqueId id;
    if (rank == 0) SB_CHECK_NCCL(ncclGetUniqueId(&id));
    SB_CHECK_MPI(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, world));

    const std::string base = fmt::format("{}/{}-rank{}", scratch_dir, label, rank);
    const std::string log = base + ".nccl.log", result_file = base + ".json", output = base + ".out";
    std::vector<std::string> env = probe_environment(log, p2p_disabled);
    std::vector<char*> envp;
    for (std::string& kv : env) envp.push_back(kv.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = {"/proc/self/exe", kAllReduceProbeArgument, to_hex(&id, sizeof(id)),
                                     std::to_string(rank), std::to_string(size), std::to_string(device),
                                     std::to_string(max_bytes), fmt::format("{}", target_gbps),
                                     std::to_string(device_ranks), result_file};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    pid_t pid = 0;
    CollectiveRun run;
    run.label = label;
    run.nranks = size;
    run.deadline_s = deadline_s;
    const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
        run.error = fmt::format("rank {}: posix_spawn: {}", rank, std::strerror(rc));
    } else {
        const auto t0 = Clock::now();
        int status = 0;
        while (waitpid(pid, &status, WNOHANG) == 0) {
            if (std::chrono::duration<double>(Clock::now() - t0).count() > deadline_s) {
                kill(pid, SIGKILL);
                waitpid(pid, &status, 0);
                run.timed_out = true;
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        std::ifstream in(result_file);
        const nlohmann::json r = parse_json_or_discarded(std::string(std::istreambuf_iterator<char>(in), {}));
        if (!run.timed_out && r.is_object() && r.contains("error"))
            run.error = fmt::format("rank {}: {}", rank, r["error"].get<std::string>());
        else if (!run.timed_out && r.is_object() && r.contains("rows")) {
            const CollectiveRun measured = r.get<CollectiveRun>();  // rows, stops and the sweep's limits
            run.rows = measured.rows;
            run.stops = measured.stops;
            run.target_gbps = measured.target_gbps;
            run.max_bytes = measured.max_bytes;
            run.memory_bytes = measured.memory_bytes;
        }
        else if (!run.timed_out)
            run.error = fmt::format("rank {}: the probe ended ({}) without a result; its output: {}", rank,
                                    WIFSIGNALED(status) ? fmt::format("signal {}", WTERMSIG(status))
                                                        : fmt::format("exit {}", WEXITSTATUS(status)),
                                    output);
    }
    std::stringstream text;
    text << std::ifstream(log).rdbuf();
    run.transports = parse_nccl_transports(text.str());

    // Rank 0: the slowest rank's times, every rank's wrong elements and transports.
    const std::vector<nlohmann::json> all = gather_json(nlohmann::json(run), world);
    return rank == 0 ? merge_ranks(all) : run;
}

}  // namespace sb::doctor
