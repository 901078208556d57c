// What every tier's checks share (checks_*.cpp only): making a check, raising its verdict with
// a cause and a fix, the GPU labels and lookups, sizes in the unit that shows them.
#pragma once

#include <string>
#include <vector>

#include "src/doctor/checks.h"
#include "src/doctor/expectations.h"

namespace sb::doctor::detail {

Check check(Tier t, std::string name);
// The check does not apply here (one GPU, left out by a flag): never a failure.
Check skipped(Tier t, std::string name, std::string reason);
// The check applies but what it judges could not be read: never a pass; its tier is unjudged.
Check unjudged(Tier t, std::string name, std::string reason);
// Raises c to `v` (fail > warn > pass), adding the cause and the fix.
void raise(Check& c, Verdict v, const std::string& cause, const std::string& fix);

std::string join(const std::vector<std::string>& parts, const char* sep = "; ");
std::string gpu_label(const SystemSnapshot& s, const GpuReading& g);
const GpuReading* find_gpu(const SystemSnapshot& s, const std::string& host, int index);
// Peer access granted on a pair whose traffic crosses PCIe (not NVLink): what ACS, the IOMMU
// and BAR1 act on.
bool pcie_p2p_pair(const PairReading& p);
bool any_pcie_p2p(const SystemSnapshot& s);
bool any_p2p(const SystemSnapshot& s);
// "256 MiB", "32 GiB".
std::string mib_text(double mib);
// Why GPU readings are missing, for an unjudged reason: the snapshot's gpu_unavailable or NVML's error.
std::string blind_reason(const SystemSnapshot& s, const std::string& what);
// The largest row of one collective, or nullptr.
const AllReduceRow* largest_row(const CollectiveRun& r, const std::string& op);

std::vector<Check> topology_checks(const SystemSnapshot& s, const ExpectedBands& bands);
std::vector<Check> configuration_checks(const SystemSnapshot& s, const ExpectedBands& bands);
std::vector<Check> settings_checks(const SystemSnapshot& s);
std::vector<Check> transfer_checks(const SystemSnapshot& s, const ExpectedBands& bands);
std::vector<Check> collective_checks(const SystemSnapshot& s, const ExpectedBands& bands);
Check training_check(const SystemSnapshot& s, const ExpectedBands& bands);

}  // namespace sb::doctor::detail
