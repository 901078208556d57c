// The doctor's live readings of the machine: sysfs (PCIe links, NUMA, BAR1, IOMMU, the PCIe
// path and ACS between two GPUs) and the rank's CPU binding here, built in every build; the
// CUDA, NVML and NCCL readings (live_cuda.h) only in a CUDA build. They fill the
// SystemSnapshot that the checks judge.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/doctor/snapshot.h"

namespace sb::doctor {

// "00000000:1B:00.0" (CUDA) -> "0000:1b:00.0" (sysfs).
std::string sysfs_bus_id(const std::string& cuda_bus_id);

// NUMA node, local CPUs, BAR1, IOMMU group type, the link's maximum (the lower of the
// GPU's and its upstream bridge's) and its current state, from /sys/bus/pci/devices/ID.
// Fields it cannot read stay unknown.
void read_sysfs_gpu(GpuReading& g);
// The link as it is now (read while copies run for the under-load reading).
PcieLink read_current_link(const std::string& bus_id);

// The PCIe path between two GPUs (same_switch, root_complex, socket_link) and the bridges on
// it that redirect peer requests (ACS), from the sysfs device tree and config space.
void read_sysfs_pair(PairReading& p, const GpuReading& a, const GpuReading& b);

// A build without CUDA: this host's NVIDIA display and 3D controllers (vendor 0x10de, class
// 0x03) and the pairs between them, as sysfs alone shows them (read_sysfs_gpu, read_sysfs_pair).
SystemSnapshot read_sysfs_host(const std::string& host);

// The CPUs this process may run on, as a CPU list ("0-15,32").
std::string bound_cpus();

// Runs `fn` with this thread on `cpus` (a CPU list; unchanged where empty or unreadable) and
// restores its CPUs after, so pinned host memory `fn` allocates and first touches lands on
// that NUMA node (a far-socket buffer would read as a slow link).
void on_cpus(const std::string& cpus, const std::function<void()>& fn);

// The NCCL and CUDA variables set in this process that force a transport, an algorithm or
// serialise launches ("NCCL_P2P_DISABLE=1"), in a fixed order.
std::vector<std::string> transport_env();

// XIDs in the kernel log naming `bus_id` (dmesg): the count (-1 when the log is not readable)
// and the codes seen ("79, 48").
int64_t read_xids(const std::string& bus_id, std::string* codes);

}  // namespace sb::doctor
