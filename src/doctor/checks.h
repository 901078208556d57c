// The doctor's verdicts (DESIGN: The doctor): pure functions of a SystemSnapshot and the
// expected bands of the detected hardware, tier by tier (topology, configuration, transfer,
// collective, training). Each check ends in pass, warn, fail, skipped (it does not apply, or was
// left out) or unjudged (it applies but what it judges could not be read: never a pass); a
// skip or unjudged carries its reason and every warn or fail its likely cause and its fix.
// docs/doctor.md lists them. The checks live one tier per file (checks_*.cpp), the bands in
// bands.cpp, the per-model expectations in expectations.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/doctor/snapshot.h"
#include "src/projection/hardware.h"

namespace sb::doctor {

enum class Verdict { pass, warn, fail, skipped, unjudged };
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
    std::string cause;    // warn/fail: the likely cause; skipped/unjudged: the reason
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
    std::string link;      // the link class as detected and how ("nvlink: 12 links up on every GPU"), or why unknown
    Band busbw;            // the collectives' busbw at the largest size across the detected link
    Band peer_copy;        // cudaMemcpyPeer between two GPUs
    Band gemm;             // the card's TF32 GEMM of 8192^3, TFLOP/s: 80% of the profile's lowest published, to the datasheet peak
    Band memory_copy;      // a device-to-device copy, GB/s read + written: 80% of the profile's copy, to the datasheet bandwidth
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
// A card's GEMM and copy rates read low below this fraction of the profile's published (or
// measured) rate (assumption: a short run under a power cap reaches 80% of a published run).
constexpr double kCardLowFraction = 0.8;
// A clock under load below this fraction of the maximum with no clock-event reason is unexplained.
constexpr double kClockLowFraction = 0.75;

// The link class between the GPUs of a host, and how it was told: NVLink when NVML shows
// links up; PCIe P2P when every pair is granted and NVML shows no link (or the model has none);
// host-staged when no pair is granted. Unknown (nullopt, `how` says why) where the readings
// cannot tell, and for one GPU per host (`single_gpu`): nothing is guessed.
struct LinkDetection {
    std::optional<LinkClass> link;
    bool single_gpu = false;
    std::string how;
};
LinkDetection detect_link(const SystemSnapshot& s);

// The profile whose GPU is the snapshot's (by device name; the closest memory size) and whose
// link class is the detected one, and the bands it implies; `profiles` are the shipped ones.
ExpectedBands expected_bands(const SystemSnapshot& s, const std::vector<HardwareProfile>& profiles,
                             const std::vector<PublishedBusbw>& published);

// The host-side copy band of one GPU: its PCIe line rate (max generation and width).
Band host_copy_band(const GpuReading& g);

// How many GPUs of `g`'s host share its PCIe switch (itself included): the pairs whose PCIe
// path is same_switch. Host copies of all GPUs at once share that uplink by design.
int gpus_sharing_switch(const SystemSnapshot& s, const GpuReading& g);

// Every check of every tier, in ladder order.
std::vector<Check> run_checks(const SystemSnapshot& s, const ExpectedBands& bands);

// The worst verdict of a tier (fail > unjudged > warn > pass); skipped only when every check skipped.
Verdict tier_verdict(const std::vector<Check>& checks, Tier t);

// 0 when no tier fails and none is unjudged (a warn does not fail); otherwise 32 + the failing
// tiers' bits (topology 1, configuration 2, transfer 4, collective 8, training 16) + 64 when a
// tier could not be judged.
constexpr int kCannotJudgeBit = 64;
int exit_code(const std::vector<Check>& checks);

// NCCL's transports per channel connection from its INFO log ("Channel 00/0 : 0[0] -> 1[0]
// via P2P/IPC", "... [send] via NET/Socket/0"): "P2P/IPC", "P2P/CUMEM", "SHM", "NET/Socket",
// "NET/IB", ... one entry per line that names one; "NVLS" once when NCCL set up NVLink SHARP
// ("NVLS comm" / "NVLS multicast support is available" and a channel through it).
std::vector<std::string> parse_nccl_transports(const std::string& log);

// The kernel log's "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., ..." lines naming the GPU at
// `bus_id` ("0000:3b:00.0"): their count, and the XID codes seen in *codes ("79, 48").
int64_t parse_xids(const std::string& log, const std::string& bus_id, std::string* codes);

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; empty for text that is not a CPU list.
std::vector<int> parse_cpu_list(const std::string& text);

// ACS control of a PCIe function from its config space (as sysfs `config` gives it, 4096
// bytes read as root): 1 when P2P request or completion redirect is on, 0 when off or the
// function has no ACS capability, -1 when the extended space is not there to read.
int acs_redirect(const std::vector<unsigned char>& config);

}  // namespace sb::doctor
