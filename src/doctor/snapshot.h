// The doctor's one view of the system (DESIGN: The doctor): every reading its checks judge
// (NVML, sysfs PCIe/ACS/IOMMU/BAR, CUDA peer access, copy and all-reduce measurements, NCCL's
// transports, a short training run) lands in a SystemSnapshot. The live reader
// (live_reader.h) fills one on the machine; to_json/from_json write and read it, so every
// verdict (checks.h) is decided by pure functions tested from recorded snapshots without
// the hardware. A reading the reader could not take stays at its "unknown" value (-1, 0 or
// empty) and a tier it could not run carries the reason in its `skipped` field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sb::doctor {

// PCIe link generation and width; 0 where not read.
struct PcieLink {
    int gen = 0, width = 0;
};

struct GpuReading {
    int index = 0;  // CUDA device ordinal on its host
    std::string host, name, pci_bus_id;
    int numa_node = -1;
    std::string local_cpus;       // sysfs local_cpulist: "0-31,64-95"
    double memory_mib = 0;        // 0: not read
    double bar1_mib = 0;          // BAR1 aperture (sysfs resource, region 1)
    std::string iommu;            // the GPU's IOMMU group type: "off", "identity", "DMA", "DMA-FQ"; "" not read
    PcieLink pcie_card_max;       // the card's own maximum (NVML's GPU maximum generation, sysfs LnkCap width)
    PcieLink pcie_max, pcie_idle, pcie_load;  // pcie_max: the lower of the card's and its slot's; pcie_load: read while copies run
    int socket = -1;              // physical package of the GPU's NUMA node (sysfs cpu topology); -1 not read
    double power_limit_w = 0, power_default_w = 0;
    double sm_clock_max_mhz = 0, sm_clock_load_mhz = 0;  // load: mean under the short load
    double power_load_w = 0;                              // mean under the short load
    std::vector<std::string> clock_events_load;          // clock-event reasons seen under load
    int ecc_enabled = -1;                                 // -1 not read, 0 off, 1 on
    int64_t ecc_uncorrected = -1;                         // volatile count; -1 not read
    int nvlink_active = -1;                               // -1 not read
    std::string nvml_error;                               // why NVML could not be read; "" when it was
    // The settings that change every result (NVML); -1 or "" not read.
    int persistence = -1, mig = -1;                       // 0 off, 1 on
    std::string compute_mode;                             // "default", "exclusive_process", "prohibited"
    int clocks_locked = -1;                               // 1: application or locked clocks differ from the default
    // Error history: row remapping (A100 and later), PCIe replays, NVLink error counters, XIDs.
    int64_t remapped_rows_uncorrectable = -1;
    int row_remap_pending = -1, row_remap_failure = -1;
    int64_t pcie_replays = -1, nvlink_errors = -1;
    int64_t xid_count = -1;                               // kernel log "NVRM: Xid" lines naming this GPU; -1 not readable
    std::string xids;                                     // the XID codes seen, "79, 48"
    // The card's own rates, measured: a TF32 GEMM of 8192^3 under the load, a device-to-device copy.
    double gemm_tflops = 0, memory_copy_gbps = 0;
};

// Where a rank runs and the CPUs it may use.
struct RankReading {
    int rank = 0;
    std::string host;
    int device = -1;         // -1: no GPU
    std::string bound_cpus;  // sched_getaffinity: "0-15"
    std::vector<std::string> env;  // NCCL/CUDA variables set that force a transport or algorithm: "NCCL_P2P_DISABLE=1"
};

// One host's software versions.
struct HostReading {
    std::string host, driver, cuda_runtime, nccl;
};

// What lies between two GPUs of one host (a < b).
struct PairReading {
    std::string host;
    int a = 0, b = 1;
    int cuda_p2p = -1;  // cudaDeviceCanAccessPeer both ways: 1 yes, 0 no, -1 not read
    std::string path;   // how P2P travels: "nvlink", else the PCIe path; "" not read
    // The PCIe path: "same_switch" (below one bridge), "root_complex" (one root, one NUMA node),
    // "same_socket" (NUMA nodes of one socket), "socket_link" (two sockets); "" not read.
    std::string pcie_path;
    std::vector<std::string> acs_redirect_bridges;  // bridges on the path that redirect peer requests
    int acs_read = -1;                             // 1: every bridge's ACS control was read
};

struct Versions {
    std::string driver, cuda_runtime, nccl;
};

// One timed copy: h2d, d2h (pinned host memory), peer (cudaMemcpyPeer) or staged (through
// pinned host memory); concurrent: timed while every other copy of its kind runs.
struct CopyReading {
    std::string kind, host;
    int src = -1, dst = -1;  // device ordinals; -1 for the host side
    bool concurrent = false;
    double bytes = 0, gbps = 0, latency_us = 0;
    bool correct = true;  // the copied bytes were read back and compared
    std::string error;    // the CUDA error that stopped the copy; "" when it ran
};

// One size of one collective (nccl-tests' busbw: all_reduce 2(N-1)/N, all_gather and
// reduce_scatter (N-1)/N times algbw).
struct AllReduceRow {
    std::string op = "all_reduce";  // all_reduce, all_gather, reduce_scatter
    double bytes = 0, time_us = 0, busbw_gbps = 0;
    int64_t wrong = 0;
};

// Where one collective's sweep stopped growing (sweep_sizes.h): its largest size and why.
struct SweepStop {
    std::string op;
    double bytes = 0;
    std::string reason;  // band_reached, levelled_off, max_bytes, memory
};

// One NCCL sweep of the three collectives in a fresh process: "as_is" (the machine's own
// settings) or "p2p_disabled" (NCCL_P2P_DISABLE=1, the control). Each collective doubles from
// 1 MiB until busbw reaches target_gbps or levels off, within --max-bytes and free memory.
struct CollectiveRun {
    std::string label;
    int nranks = 0;
    bool timed_out = false;
    double deadline_s = 0;
    std::string error;  // why it did not finish, when it did not
    std::vector<std::string> transports;  // per channel connection, from NCCL's own log: "P2P/IPC", "SHM", "NET/Socket", "NVLS"
    double target_gbps = 0;       // the band's low end the sizes grew towards; 0: none (grown until level)
    double max_bytes = 0, memory_bytes = 0;  // the caps: --max-bytes, the share of free GPU memory
    std::vector<AllReduceRow> rows;
    std::vector<SweepStop> stops;  // one per collective; empty in a snapshot from before the rule
};

struct TrainingReading {
    std::string preset;
    int world_size = 0;
    double samples_per_s_1 = 0, samples_per_s_n = 0, efficiency = 0;
    double step_ms = 0, exposed_comm_ms = 0;  // at world_size, medians
    double step_ms_1 = 0;                     // the median step at 1 rank
    double gradient_bytes = 0;                // all-reduced per step
    bool checks_passed = true;
};

struct SystemSnapshot {
    std::string taken;  // UTC time, or what the fixture records
    int world_size = 1;
    bool shared_gpu = false;  // ranks share GPUs: collective and training figures are not hardware figures
    std::string gpu_unavailable;  // why no GPU reading exists (CPU build, no GPU visible); "" when read
    Versions versions;               // the first host's (every host's in `hosts`)
    std::vector<HostReading> hosts;  // each host's versions
    std::string load_skipped;        // why no GEMM load ran (--load-seconds 0); "" when it ran
    std::vector<RankReading> ranks;
    std::vector<GpuReading> gpus;
    std::vector<PairReading> pairs;
    std::vector<CopyReading> copies;
    std::string transfer_skipped;
    std::vector<CollectiveRun> collectives;
    std::string collective_skipped;
    TrainingReading training;
    std::string training_skipped;
};

// Each reading under its own field names; a key left out keeps the field's default.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(PcieLink, gen, width)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GpuReading, index, host, name, pci_bus_id, numa_node, local_cpus,
                                                memory_mib, bar1_mib, iommu, pcie_card_max, pcie_max, pcie_idle,
                                                pcie_load, socket, power_limit_w, power_default_w, sm_clock_max_mhz,
                                                sm_clock_load_mhz, power_load_w, clock_events_load, ecc_enabled,
                                                ecc_uncorrected, nvlink_active, nvml_error, persistence, mig,
                                                compute_mode, clocks_locked, remapped_rows_uncorrectable,
                                                row_remap_pending, row_remap_failure, pcie_replays, nvlink_errors,
                                                xid_count, xids, gemm_tflops, memory_copy_gbps)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RankReading, rank, host, device, bound_cpus, env)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(HostReading, host, driver, cuda_runtime, nccl)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(PairReading, host, a, b, cuda_p2p, path, pcie_path,
                                                acs_redirect_bridges, acs_read)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Versions, driver, cuda_runtime, nccl)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(CopyReading, kind, host, src, dst, concurrent, bytes, gbps,
                                                latency_us, correct, error)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AllReduceRow, op, bytes, time_us, busbw_gbps, wrong)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SweepStop, op, bytes, reason)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(CollectiveRun, label, nranks, timed_out, deadline_s, error,
                                                transports, target_gbps, max_bytes, memory_bytes, rows, stops)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TrainingReading, preset, world_size, samples_per_s_1,
                                                samples_per_s_n, efficiency, step_ms, exposed_comm_ms, step_ms_1,
                                                gradient_bytes, checks_passed)

void to_json(nlohmann::json& j, const SystemSnapshot& s);
// Throws std::runtime_error naming the key (its path, "gpus/3/pcie_mx") for a value of the
// wrong type or a key no reading has: a misspelt key is an error, not a default.
void from_json(const nlohmann::json& j, SystemSnapshot& s);

// The snapshot in `path` (JSON, read through the checked input reader: a regular file of at
// most kMaxSnapshotBytes, nested at most kMaxJsonDepth); UserError naming the file for one
// that does not read. parse_snapshot reads text already in memory, `source` naming it.
SystemSnapshot load_snapshot(const std::string& path);
SystemSnapshot parse_snapshot(const std::string& text, const std::string& source);

}  // namespace sb::doctor
