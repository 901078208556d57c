// Hardware profiles of the projection (DESIGN: Projection), configs/hardware/*.yaml: a GPU
// (its peaks from the one table in src/system/gpu_peaks.cpp, by device name), the node's intra-node
// fabric and the network between nodes. Every number of a profile carries its source;
// loading validates every key, type and range like a workload config (FILE:LINE:COL).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/system/gpu_peaks.h"

namespace sb {

// A number and the document it comes from.
struct Sourced {
    double value = 0;
    std::string source;
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
    Sourced gemm_efficiency;    // fraction of peak of a large GEMM, when no gemm record calibrates it
    Sourced memory_efficiency;  // fraction of mem_bw a streaming kernel reaches, likewise
    Sourced kernel_gap_us;      // device time between back-to-back kernels
    // ---- node
    Sourced gpus_per_node;
    LinkClass link = LinkClass::pcie_p2p;
    Sourced link_gbps;        // nvlink: per GPU per direction; unused for PCIe (from gen x lanes)
    Sourced pcie_gen;
    Sourced pcie_lanes;
    std::string pcie_topology;  // root_complex, switch
    Sourced host_mem_bw_gbps;   // what a host-staged all-reduce is bound by
    Sourced link_efficiency;    // ring busbw / link bandwidth reached by large all-reduces
    Sourced link_latency_us;    // per ring step
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

HardwareProfile parse_hardware_profile(const std::string& yaml_text, const std::string& source);
HardwareProfile load_hardware_profile(const std::string& path);
// A name ("a100-sxm4-40gb") is looked up as configs/hardware/NAME.yaml under `profile_dir`;
// anything with a '/' or ending in .yaml is a path.
std::string hardware_profile_path(const std::string& name_or_path, const std::string& profile_dir);

nlohmann::json to_json(const HardwareProfile& hw);

}  // namespace sb
