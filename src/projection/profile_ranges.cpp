// The table of src/projection/profile_ranges.h.
#include "src/projection/profile_ranges.h"

#include <vector>

#include "base/errors.h"

namespace sb {
namespace {

const std::vector<ProfileNumber>& profile_numbers() {
    static const std::vector<ProfileNumber> table = {
        // gpu
        {"memory_gb", {1, false, 4096, false, "a GPU holds 1 GB to 4 TB"}},
        {"sm_count", {1, false, 1024, false, "streaming multiprocessors of one GPU"}},
        {"tdp_w", {10, false, 5000, false, "a GPU board draws 10 W to 5 kW"}},
        {"price_usd", {50, false, 1e6, false, "a GPU costs $50 to $1M"}},
        {"copy_gbps", {10, false, 1e5, false, "device-memory copies run at 10 GB/s to 100 TB/s"}},
        {"l2_mb", {0.25, false, 4096, false, "an L2 cache of 256 KB to 4 GB"}},
        {"l2_copy_gbps", {10, false, 1e6, false, "L2-resident copies run at 10 GB/s to 1 PB/s"}},
        {"kernel_gap_us", {0, false, 1000, false, "the gap between two kernels is microseconds; 1 ms is a stalled host"}},
        {"clock_factor", {0, true, 1.5, false, "a sustained clock from a stop to 1.5x the rated boost"}},
        {"compute_error_pct", {-100, true, 1000, false, "the compute model's error: above -100% (no step takes no time), at most 10x slow"}},
        {"tflops", {1e-3, false, 1e5, false, "a published GEMM rate of 1 GFLOPS to 100 PFLOPS"}},
        // node and host
        {"gpus_per_node", {1, false, 64, false, "GPUs in one server"}},
        {"link_gbps", {0.1, false, 1e5, false, "a GPU link of 100 MB/s to 100 TB/s"}},
        {"pcie_gen", {3, false, 5, false, "the PCIe generations the link model knows"}},
        {"pcie_lanes", {1, false, 16, false, "a PCIe slot has 1 to 16 lanes"}},
        {"host_mem_bw_gbps", {1, false, 1e4, false, "host memory bandwidth of 1 GB/s to 10 TB/s"}},
        {"link_efficiency", {0, true, 1, false, "a share of the link's rate"}},
        {"link_latency_us", {0, false, 1000, false, "a link's latency is microseconds; 1 ms is a network, not a link"}},
        {"nvls_busbw_gbps", {0.1, false, 1e5, false, "NVLS bus bandwidth of 100 MB/s to 100 TB/s, as a link's"}},
        {"comm_sms", {0, false, 1024, false, "SMs NCCL takes, at most the GPU's"}},
        {"staged_overlap", {0, false, 1, false, "a share of the staged copy hidden behind the next"}},
        {"staged_host_gbps", {1, false, 1e4, false, "host memory serving staged copies at 1 GB/s to 10 TB/s, as its bandwidth"}},
        {"sockets", {1, false, 8, false, "CPU sockets of one server"}},
        {"inter_socket_gbps", {0.1, false, 1e4, false, "a socket link of 100 MB/s to 10 TB/s"}},
        {"gpus_per_switch", {1, false, 64, false, "GPUs behind one PCIe switch"}},
        {"step_jitter_pct", {0, false, 100, false, "a percentage of the step time"}},
        {"bucket_launch_us", {0, false, 1000, false, "launching one bucket's all-reduce takes microseconds"}},
        {"framework_step_ms", {0, false, 1000, false, "a framework's cost per step is milliseconds; a second is a stalled host"}},
        {"input_images_per_s", {1, false, 1e7, false, "one host's input pipeline delivers 1 to 10M images a second"}},
        {"server_usd", {0, false, 1e7, false, "a server without its GPUs costs at most $10M"}},
        {"host_power_w", {0, false, 1e5, false, "a server's host draws at most 100 kW"}},
        // network
        {"nic_gbps", {0.1, false, 1e4, false, "a NIC of 100 MB/s to 10 TB/s"}},
        {"nics_per_node", {1, false, 64, false, "NICs in one server"}},
        {"efficiency", {0, true, 1, false, "a share of the NICs' rate"}},
        {"latency_us", {0, false, 1e4, false, "a network hop is microseconds; 10 ms is a failing fabric"}},
    };
    return table;
}

}  // namespace

const RealRange& profile_range(const std::string& key) {
    const std::string leaf = key.substr(key.rfind('.') == std::string::npos ? 0 : key.rfind('.') + 1);
    for (const ProfileNumber& n : profile_numbers())
        if (leaf == n.key) return n.range;
    SB_REQUIRE(false, "profile number '" + key + "' has no range in profile_ranges.cpp");
    throw std::logic_error("unreachable");
}

}  // namespace sb
