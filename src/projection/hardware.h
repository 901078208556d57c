// Hardware profiles of the projection (DESIGN: Projection), configs/hardware/*.yaml: a GPU
// (its peaks from the one table in src/system/gpu_peaks.cpp, by device name), the node's intra-node
// fabric and the network between nodes. Every number of a profile carries its source;
// loading validates every key, type and range like a workload config (FILE:LINE:COL).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/core/config.h"
#include "src/system/gpu_peaks.h"

namespace sb {

// A number and the document it comes from. Where sources disagree it is a range: [lo, hi]
// around the central value, each end with its own source (is_range()).
struct Sourced {
    double value = 0;
    std::string source;
    double lo = 0, hi = 0;
    std::string lo_source, hi_source;
    bool is_range() const { return !lo_source.empty(); }
};

// A recorded fact that is not a number (ECC, support, cooling) and where it comes from.
struct SourcedText {
    std::string value;
    std::string source;
};

// One published (or measured) GEMM rate of the GPU: the achieved TFLOP/s of an m x n x k
// product in a precision, with its source.
struct PublishedGemm {
    Precision precision = Precision::fp32;
    int64_t m = 0, n = 0, k = 0;
    double tflops = 0;
    std::string source;
};

// A condition a profile's figures rest on that a buyer must know (an unofficial driver module and
// its preconditions, a reported failure), with its source: printed beside every verdict it wins.
struct Caveat {
    std::string text;
    std::string source;
    // The source reports the profile's setup failing (not a precondition): compare never crowns it.
    bool reported_failing = false;
};

// How GPUs of one node exchange all-reduce data.
enum class LinkClass {
    nvlink,       // NVLink / NVSwitch: link_gbps per GPU per direction
    pcie_p2p,     // PCIe peer-to-peer through the root complex or a switch
    host_staged,  // no P2P: every hop is GPU -> host memory -> GPU (NCCL's SHM transport)
};
const char* link_class_name(LinkClass link);

struct HardwareProfile {
    std::string source;  // the file
    std::string name;
    std::string description;
    // ---- gpu
    std::string device_name;  // cudaDeviceProp::name: the gpu_peaks entry
    GpuPeak peak;             // from gpu_peaks (memory_gb may be overridden below)
    Sourced memory_gb;        // the table's, or the profile's override (a memory mod)
    Sourced sm_count;
    Sourced tdp_w;
    Sourced price_usd;
    // What this GPU achieves, from its own published microbenchmarks (or ours, on the H200):
    std::vector<PublishedGemm> gemm;  // GEMM TFLOP/s by shape and precision; every precision has one
    Sourced copy_gbps;                // a device-to-device copy larger than L2: bytes read + written per second
    Sourced l2_mb;                    // L2 cache size
    Sourced l2_copy_gbps;             // a copy whose operands fit in L2, likewise
    Sourced kernel_gap_us;      // device time between back-to-back kernels
    // The sustained SM clock against the one the gemm rates were measured at (1 unless a
    // power or cooling limit lowers it: a modded card); it scales the tensor and FP32 rates.
    Sourced clock_factor{1.0, "the GPU as benchmarked", 0, 0, "", ""};
    // The compute model's own error on this GPU: how much longer (%) a published or measured one-GPU
    // step is than the projected one. Every op's time is scaled by 1 + it/100; the central value 0 is
    // the model's own figure, the range the error measured against one-GPU runs (the profile's own,
    // else the spread over every GPU with published one-GPU runs, below), so a band holds them.
    Sourced compute_error_pct{0, "the model's own figure", -34, 138,
                              "the lowest one-GPU error over the profiled GPUs: A100 SXM4 80GB, NVIDIA's "
                              "DeepLearningExamples rows (results/projection-validation/validation.jsonl, "
                              "published_throughput)",
                              "the highest one-GPU error over the profiled GPUs: H200 SXM, PyTorch rows "
                              "(results/projection-validation/validation.jsonl, published_throughput)"};
    // ---- node
    Sourced gpus_per_node;
    LinkClass link = LinkClass::pcie_p2p;
    Sourced link_gbps;        // nvlink: per GPU per direction; unused for PCIe (from gen x lanes)
    Sourced pcie_gen;
    Sourced pcie_lanes;
    std::string pcie_topology;  // root_complex, switch
    std::string host;           // the host section's name: the profile's own, or --host
    bool patched_driver = false;  // needs a driver the vendor does not ship (GeForce P2P): the less simple system
    Sourced host_mem_bw_gbps;   // what a host-staged all-reduce is bound by
    Sourced link_efficiency;    // ring busbw / link bandwidth reached by large all-reduces
    Sourced link_latency_us;    // per ring step
    // NCCL's NVLS all-reduce (NVLink SHARP on an NVSwitch 3 node, H100/H200): its large-message busbw
    // at 8 GPUs (nccl-tests' busbw, above the ring's); the ring's up to 4 GPUs, rising linearly to it
    // at 8 (NVIDIA/nccl#1455). Value 0 (no source): no NVLS, the ring's at every count.
    Sourced nvls_busbw_gbps;
    // The cost of overlapping an all-reduce with the backward (DESIGN: Projection):
    // The host: its sockets and the link between them (a ring that spans both crosses it), and how
    // many GPUs share one PCIe switch uplink (pcie_topology switch).
    Sourced sockets{1, "assumption: one socket (the profile names no host with more)", 0, 0, "", ""};
    Sourced inter_socket_gbps;  // per direction; required when sockets > 1
    Sourced gpus_per_switch{1, "assumption: every GPU on its own root port or switch uplink", 0, 0, "", ""};
    // The step of N ranks (DESIGN: Projection): a rank's step-time spread (the standard deviation as
    // % of its median) makes the step of N the slowest of N draws; each bucket's all-reduce call costs
    // its launch besides the ring's per-step latency.
    Sourced step_jitter_pct{0.40,
                            "H200 one-rank train records under results/h200-*: median over 102 records of "
                            "(p90 - p10) / 2.563 of step_ms over its median (the normal's sigma from its 10-90% spread)",
                            0.17, 0.81, "the records' lower quartile", "the records' upper quartile"};
    Sourced bucket_launch_us{4.4,
                             "H200 comm records (results/h200-one-gpu/gemm/comm.jsonl): median fit alpha of a one-rank "
                             "all-reduce call, launch and smallest kernel",
                             3.9, 8.8, "the lowest fit alpha of those records", "the highest fit alpha of those records"};
    // The training framework's own cost per step at N > 1 ranks (PyTorch DDP's gradient hooks, bucket
    // copies and launches), charged once per step beside the schedule's.
    Sourced framework_step_ms{3.25,
                              "Lambda's P2P-on H100 SXM ResNet-50 logs (lambdal/deeplearning-benchmark, 2023-02-14): the "
                              "median iteration of the 2, 4 and 8-GPU runs beyond the one-GPU run's (2.3-3.6 ms)",
                              0.6, 3.9, "the least those six rows take beyond the model without it",
                              "the most those six rows take beyond the model without it"};
    // The host's real-data input ceiling for an image workload (ResNet at 224x224): the images/s its
    // CPUs decode and augment through the published data loader. value 0 (no source): none published,
    // and a real-data projection is the synthetic one, said so.
    Sourced input_images_per_s;
    Sourced comm_sms;           // SMs NCCL's kernel holds while it runs (one per channel)
    Sourced staged_overlap;     // host_staged: the fraction of the all-reduce's time compute can run beside it
    // host_staged: the rate host memory serves the staged copies of all the node's GPUs together (a GPU
    // at ring busbw B costs it 2B: a write and a read); value 0 (no source): no such bound.
    Sourced staged_host_gbps;
    // The node's cost beside its GPUs' (optional; compare's limited budget counts them when given):
    Sourced server_usd;         // server without GPUs: chassis, CPUs, memory, NICs, power supplies
    Sourced host_power_w;       // the node's power besides its GPUs' TDP at full load
    // ---- production (optional): what decides whether the system can run a service
    SourcedText ecc;             // yes, optional (off by default, costs capacity) or no
    SourcedText datacenter_use;  // yes: the vendor supports and licenses it in a datacenter; no
    SourcedText cooling;         // passive (server airflow), blower, open-air
    bool has_production() const { return !ecc.value.empty(); }
    std::vector<Caveat> caveats;  // node.caveats
    bool reported_failing() const;  // a caveat reports the setup failing
    // ---- network (multi-node); nic_gbps.value == 0 when the profile has none
    std::string network_kind;
    Sourced nic_gbps;  // per NIC per direction, GB/s
    Sourced nics_per_node;
    Sourced network_efficiency;
    Sourced network_latency_us;
    bool has_network() const { return nic_gbps.value > 0; }
};

// PCIe bandwidth per direction after line coding, GB/s: gen 3/4/5 x lanes.
double pcie_gbps(int gen, int lanes);

// Every sourced number of a profile by its key ("node.link_efficiency").
std::vector<std::pair<std::string, Sourced*>> sourced_numbers(HardwareProfile& hw);
// The keys of the numbers that are ranges (sources disagree).
std::vector<std::string> ranged_keys(const HardwareProfile& hw);
// The profile with the ranged number `key` at its low or high end.
HardwareProfile at_range_end(const HardwareProfile& hw, const std::string& key, bool high);
// The most ranged numbers a profile may have: a band projects the workload at every corner of
// them (2^k profiles for k ranged numbers), so each one more doubles the work. The shipped
// profiles have at most 8 (the stock 48 GB 4090: 256 corners).
inline constexpr size_t kMaxRangedNumbers = 8;
// Refuses (UserError naming the profile and its ranged numbers) a profile with more than
// kMaxRangedNumbers: `project` and `compare` call it before any projection.
void check_ranged_count(const HardwareProfile& hw);
// The profile at every corner of its ranges (2^k profiles, k ranged numbers; {hw} when none;
// check_ranged_count first): a projected figure's band is its lowest and highest over them.
std::vector<HardwareProfile> range_corners(const HardwareProfile& hw);

// The node run with NCCL_P2P_DISABLE=1: no peer path, so every hop stages through host memory
// (NCCL's SHM transport). The GPU, the PCIe link and the host stay `hw`'s; the staged transport's
// numbers (link_efficiency, link_latency_us, comm_sms, staged_overlap) are those of `staged`, a
// host_staged profile (UserError otherwise) whose GPUs share `hw`'s PCIe generation and width.
HardwareProfile with_p2p_disabled(const HardwareProfile& hw, const HardwareProfile& staged);

// --host: a host section (configs/hosts/NAME.yaml or a path: sockets and the link between them,
// PCIe topology, GPUs per switch, host memory bandwidth) replaces the profile's; a bad file is a
// UserError at FILE:LINE:COL.
void apply_host_section(HardwareProfile& hw, const std::string& yaml_text, const std::string& source);

HardwareProfile parse_hardware_profile(const std::string& yaml_text, const std::string& source);
HardwareProfile load_hardware_profile(const std::string& path);
// A name ("a100-sxm4-40gb") is looked up as configs/hardware/NAME.yaml under `profile_dir`;
// anything with a '/' or ending in .yaml is a path.
std::string hardware_profile_path(const std::string& name_or_path, const std::string& profile_dir);

nlohmann::json to_json(const HardwareProfile& hw);

// What the profile's projected all-reduce busbw rests on where that is not a published all_reduce_perf
// run (`project --comm` prints it): on a host_staged node a fitted figure, not validated; "" elsewhere.
std::string busbw_provenance(const HardwareProfile& hw);

}  // namespace sb
