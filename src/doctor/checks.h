// The doctor's verdicts (DESIGN: The doctor): pure functions of a SystemSnapshot and the
// expected bands of the detected hardware, tier by tier (topology, configuration, transfer,
// collective, training). Each check ends in pass, warn, fail or skipped; a skip carries its
// reason and every warn or fail its likely cause and its fix. docs/doctor.md lists them.
#pragma once

#include <string>
#include <vector>

#include "src/doctor/snapshot.h"
#include "src/projection/hardware.h"

namespace sb::doctor {

enum class Verdict { pass, warn, fail, skipped };
const char* verdict_name(Verdict v);

enum class Tier { topology, configuration, transfer, collective, training };
constexpr Tier kTiers[] = {Tier::topology, Tier::configuration, Tier::transfer, Tier::collective, Tier::training};
const char* tier_name(Tier t);

struct Check {
    Tier tier = Tier::topology;
    std::string name;
    Verdict verdict = Verdict::pass;
    std::string figures;  // what was read or measured
    std::string band;     // the expected band and its source, where the figure has one
    std::string cause;    // warn/fail: the likely cause; skipped: the reason
    std::string fix;      // warn/fail
};

// A measured rate against what the hardware should give: below `lo` is low, above
// `ceiling` is more than the link can carry (a unit or measurement error).
struct Band {
    double lo = 0, ceiling = 0;  // GB/s; ceiling 0: no band
    std::string source;
    bool known() const { return ceiling > 0; }
};

// One published all-reduce figure (results/published/nccl_allreduce.yaml).
struct PublishedBusbw {
    std::string profile, source;
    int gpus = 0;
    double bytes = 0, busbw_gbps = 0;
};

struct ExpectedBands {
    std::string profile;   // the hardware profile the bands come from; "" none
    std::string why_none;  // when there is no profile: why
    Band busbw;            // all-reduce at 1 GiB across the detected link
    Band peer_copy;        // cudaMemcpyPeer between two GPUs
    std::vector<PublishedBusbw> published;  // on a profile with the same link, shown beside the measurement
};

// The fraction of a link's line rate below which a copy reads low (an assumption stated
// in docs/doctor.md), and the floor of a host-staged copy: the lowest published one,
// 5.9 of 31.5 GB/s (NVIDIA/nccl-tests#117, the rtx4090-24gb-pcie4 profile's low end).
constexpr double kCopyLowFraction = 0.6;
constexpr double kStagedLowFraction = 0.187;
// A 2-rank ring at 1 GiB reaches this much of the profile's large-message efficiency
// before it reads low (assumption: nccl-tests rows at 1 GiB sit within 25% of the peak).
constexpr double kBusbwAllowance = 0.75;
// Power limit against the default: warn below, fail below.
constexpr double kPowerWarnFraction = 0.95, kPowerFailFraction = 0.8;
// Scaling efficiency of the training tier below which it reads low (assumption).
constexpr double kTrainingLowEfficiency = 0.7;

// The link class the snapshot shows: NVLink when any GPU has active links, PCIe P2P when
// every pair is granted peer access, host-staged otherwise.
LinkClass detected_link(const SystemSnapshot& s);

// The profile whose GPU is the snapshot's (by device name; the closest memory size) and whose
// link class is the detected one, and the bands it implies; `profiles` are the shipped ones.
ExpectedBands expected_bands(const SystemSnapshot& s, const std::vector<HardwareProfile>& profiles,
                             const std::vector<PublishedBusbw>& published);

// The host-side copy band of one GPU: its PCIe line rate (max generation and width).
Band host_copy_band(const GpuReading& g);

// Every check of every tier, in ladder order.
std::vector<Check> run_checks(const SystemSnapshot& s, const ExpectedBands& bands);

// The worst verdict of a tier (fail > warn > pass); skipped only when every check skipped.
Verdict tier_verdict(const std::vector<Check>& checks, Tier t);

// 0 when no tier fails (a warn does not fail); otherwise 32 + the failing tiers' bits:
// topology 1, configuration 2, transfer 4, collective 8, training 16.
int exit_code(const std::vector<Check>& checks);

// NCCL's transports per channel connection from its INFO log ("Channel 00/0 : 0[0] -> 1[0]
// via P2P/IPC", "... [send] via NET/Socket/0"): "P2P/IPC", "P2P/CUMEM", "SHM", "NET/Socket",
// "NET/IB", ... one entry per line that names one.
std::vector<std::string> parse_nccl_transports(const std::string& log);

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; empty for text that is not a CPU list.
std::vector<int> parse_cpu_list(const std::string& text);

// ACS control of a PCIe function from its config space (as sysfs `config` gives it, 4096
// bytes read as root): 1 when P2P request or completion redirect is on, 0 when off or the
// function has no ACS capability, -1 when the extended space is not there to read.
int acs_redirect(const std::vector<unsigned char>& config);

}  // namespace sb::doctor
