// Configuration checks: the PCIe link (slot and under load) against the card's own maximum,
// BAR1, ACS and the IOMMU where P2P crosses PCIe, power limit, clocks under load and their
// reasons, ECC, GPUs and hosts alike, and the card's own GEMM and memory-copy rates.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "src/doctor/check_util.h"

namespace sb::doctor::detail {

namespace {

// The card's own maximum: NVML's GPU maximum where read, else the model's datasheet.
PcieLink card_max(const GpuReading& g) {
    if (g.pcie_card_max.gen > 0) return g.pcie_card_max;
    if (const ModelExpectation* m = find_expectation(g.name)) return {m->pcie_gen, m->pcie_width};
    return {};
}

Check check_pcie(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "PCIe generation and width: slot and under load");
    std::vector<std::string> parts;
    for (const GpuReading& g : s.gpus) {
        const PcieLink card = card_max(g);
        if (g.pcie_max.gen == 0 || card.gen == 0)
            return unjudged(Tier::configuration, c.name, blind_reason(s, "the PCIe link (NVML, sysfs)"));
        const bool load_read = g.pcie_load.gen > 0;
        if (!load_read && s.transfer_skipped.empty())
            return unjudged(Tier::configuration, c.name, "the link was not read under load");
        parts.push_back(fmt::format("{} card Gen{} x{}, slot Gen{} x{}, {}", gpu_label(s, g), card.gen, card.width,
                                    g.pcie_max.gen, g.pcie_max.width,
                                    load_read ? fmt::format("under load Gen{} x{}", g.pcie_load.gen, g.pcie_load.width)
                                              : std::string("not read under load (no copy ran)")));
        if (g.pcie_max.gen < card.gen || g.pcie_max.width < card.width)
            raise(c, Verdict::fail,
                  fmt::format("{} sits in a slot (or behind a riser or BIOS setting) of Gen{} x{} where the card "
                              "does Gen{} x{}: every host copy runs at that fraction",
                              gpu_label(s, g), g.pcie_max.gen, g.pcie_max.width, card.gen, card.width),
                  "move the card to a slot wired x16 of its generation (the board manual's slot table), set the slot "
                  "to Gen auto and x16 in the BIOS, or remove the riser; lspci -vv: LnkCap of the bridge above it");
        else if (load_read && (g.pcie_load.gen < g.pcie_max.gen || g.pcie_load.width < g.pcie_max.width))
            raise(c, Verdict::fail,
                  fmt::format("{}'s link trained down to Gen{} x{} under load (Gen{} x{} possible): a riser, a dirty "
                              "or shared slot, or a BIOS lane setting",
                              gpu_label(s, g), g.pcie_load.gen, g.pcie_load.width, g.pcie_max.gen, g.pcie_max.width),
                  "reseat the card or riser, set the slot to Gen auto and x16 in the BIOS, check lspci -vv LnkSta");
    }
    c.figures = join(parts);
    return c;
}

Check check_bar1(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "BAR1 against memory");
    if (!any_pcie_p2p(s))
        return skipped(Tier::configuration, c.name,
                       "no P2P crosses PCIe here (NVLink carries it, or none is granted): BAR1 does not limit it");
    std::vector<std::string> parts;
    for (const GpuReading& g : s.gpus) {
        if (g.bar1_mib <= 0 || g.memory_mib <= 0)
            return unjudged(Tier::configuration, c.name, "BAR1 or the memory size was not read (sysfs resource)");
        parts.push_back(fmt::format("{} BAR1 {}, memory {}", gpu_label(s, g), mib_text(g.bar1_mib), mib_text(g.memory_mib)));
        if (g.bar1_mib >= g.memory_mib) continue;
        const ModelExpectation* m = find_expectation(g.name);
        if (m && m->bar1_max_gb > 0 && g.bar1_mib >= m->bar1_max_gb * 1024)
        {
            raise(c, Verdict::warn,
                  fmt::format("{}'s BAR1 ({}) is the card's largest yet below its memory ({}): peers reach only part "
                              "of it",
                              gpu_label(s, g), mib_text(g.bar1_mib), mib_text(g.memory_mib)),
                  "nothing in the BIOS raises it; the peer copy and collective rows show whether P2P still works "
                  "(if not, NCCL_P2P_DISABLE=1)");
            c.band = "the card's largest BAR1: " + m->bar1_source;
        }
        else
            raise(c, Verdict::fail,
                  fmt::format("{}'s BAR1 ({}) is smaller than its memory ({}) while P2P is granted: a peer copy "
                              "through BAR1 faults (tinygrad/open-gpu-kernel-modules#36)",
                              gpu_label(s, g), mib_text(g.bar1_mib), mib_text(g.memory_mib)),
                  "enable Resizable BAR and above-4G decoding in the BIOS (BAR1 then grows to the card's maximum), or "
                  "run without P2P (NCCL_P2P_DISABLE=1)");
    }
    c.figures = join(parts);
    return c;
}

Check check_acs(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "ACS on the bridges between GPUs");
    if (s.pairs.empty()) return skipped(Tier::configuration, c.name, "one GPU per host: no bridge between GPUs");
    if (!any_pcie_p2p(s))
        return skipped(Tier::configuration, c.name,
                       "no P2P crosses PCIe bridges here (NVLink carries it, or none is granted): ACS does not act on it");
    std::set<std::string> redirecting;
    for (const PairReading& p : s.pairs) {
        if (!pcie_p2p_pair(p)) continue;
        if (p.acs_read != 1)
            return unjudged(Tier::configuration, c.name,
                            "the bridges' PCI config space was not readable (needs root: sysfs config)");
        for (const std::string& b : p.acs_redirect_bridges) redirecting.insert(b);
    }
    c.figures = redirecting.empty() ? "no bridge on a PCIe P2P path redirects peer traffic"
                                    : "redirecting: " + join({redirecting.begin(), redirecting.end()}, ", ");
    if (!redirecting.empty())
        raise(c, Verdict::fail,
              "ACS redirects peer-to-peer requests up to the root complex: P2P traffic halves or hangs "
              "(NVIDIA/nccl#2079, NVIDIA/nccl#1285)",
              "disable ACS on those bridges (BIOS, or setpci -s BRIDGE ECAP_ACS+0x6.w=0000 at boot)");
    return c;
}

Check check_iommu(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "IOMMU mode");
    if (!any_pcie_p2p(s))
        return skipped(Tier::configuration, c.name,
                       "no P2P crosses PCIe here (NVLink carries it, or none is granted): the IOMMU does not act on it");
    std::vector<std::string> parts;
    bool translated = false;
    for (const GpuReading& g : s.gpus) {
        if (g.iommu.empty())
            return unjudged(Tier::configuration, c.name, "the GPU's IOMMU group type was not readable (sysfs)");
        parts.push_back(fmt::format("{} {}", gpu_label(s, g), g.iommu));
        translated = translated || g.iommu.rfind("DMA", 0) == 0;
    }
    c.figures = join(parts, ", ");
    if (translated)
        raise(c, Verdict::warn,
              "the IOMMU translates DMA: PCIe peer-to-peer transfers go through it and slow down or fail "
              "(NVIDIA/nccl-tests#115)",
              "boot with iommu=pt (or amd_iommu=off / intel_iommu=off where no VM needs it)");
    return c;
}

Check check_power(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "power limit against the default");
    std::vector<std::string> parts;
    for (const GpuReading& g : s.gpus) {
        if (g.power_limit_w <= 0 || g.power_default_w <= 0)
            return unjudged(Tier::configuration, c.name, blind_reason(s, "the power limits (NVML)"));
        const double ratio = g.power_limit_w / g.power_default_w;
        parts.push_back(fmt::format("{} {:.0f} W of {:.0f} W ({:.0f}%)", gpu_label(s, g), g.power_limit_w,
                                    g.power_default_w, ratio * 100));
        if (ratio < kPowerWarnFraction)
            raise(c, ratio < kPowerFailFraction ? Verdict::fail : Verdict::warn,
                  fmt::format("{} is capped at {:.0f}% of its default power: compute reads low by up to the same "
                              "(noonghunna/club-3090 PR#1277)",
                              gpu_label(s, g), ratio * 100),
                  "nvidia-smi -i N -pl DEFAULT_W, and remove the cap from boot scripts (nvidia-persistenced, "
                  "systemd units)");
    }
    c.figures = join(parts);
    return c;
}

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// One GPU's clock under load: the clock-event reason that explains a low clock, or a fail when none does.
void judge_clock(Check& c, const SystemSnapshot& s, const GpuReading& g) {
    const std::string who = gpu_label(s, g);
    const double fraction = g.sm_clock_max_mhz > 0 ? g.sm_clock_load_mhz / g.sm_clock_max_mhz : 1;
    const bool low = fraction < kClockLowFraction;
    const auto& e = g.clock_events_load;
    if (has(e, "hw_thermal_slowdown") || has(e, "sw_thermal_slowdown"))
        raise(c, low ? Verdict::fail : Verdict::warn,
              fmt::format("{} slows down for heat ({}) at {:.0f}% of its clock", who,
                          has(e, "hw_thermal_slowdown") ? "hw_thermal_slowdown" : "sw_thermal_slowdown", fraction * 100),
              "check airflow, fan curves and the inlet temperature (nvidia-smi -q -d TEMPERATURE); clean the heatsink");
    else if (has(e, "hw_power_brake_slowdown"))
        raise(c, low ? Verdict::fail : Verdict::warn,
              fmt::format("{} is held by the external power brake (hw_power_brake_slowdown)", who),
              "check the chassis power-brake signal and the power supplies' capacity and redundancy");
    else if (has(e, "hw_slowdown"))
        raise(c, low ? Verdict::fail : Verdict::warn,
              fmt::format("{} hardware slowdown (hw_slowdown) without a thermal or power-brake reason: the board's "
                          "slowdown signal, most often its power supply",
                          who),
              "check the PSU cables (every connector seated) and capacity");
    else if (low && g.clocks_locked == 1)
        raise(c, Verdict::fail,
              fmt::format("{} runs at {:.0f}% of its clock with locked or application clocks set", who, fraction * 100),
              "nvidia-smi -i N -rgc and -rac to restore the default clocks");
    else if (low && !has(e, "sw_power_cap"))
        raise(c, Verdict::fail,
              fmt::format("{} runs at {:.0f} of {:.0f} MHz under load with no clock-event reason: a locked clock, a "
                          "VBIOS limit or a reading error",
                          who, g.sm_clock_load_mhz, g.sm_clock_max_mhz),
              "nvidia-smi -q -d CLOCK,PERFORMANCE; nvidia-smi -rgc -rac; if it persists, the VBIOS or the card");
}

Check check_clocks(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "clocks and clock-event reasons under load");
    if (!s.load_skipped.empty()) return skipped(Tier::configuration, c.name, s.load_skipped);
    std::vector<std::string> parts;
    for (const GpuReading& g : s.gpus) {
        if (g.sm_clock_load_mhz <= 0 || g.sm_clock_max_mhz <= 0)
            return unjudged(Tier::configuration, c.name, blind_reason(s, "the SM clock under load (NVML)"));
        const std::string events = g.clock_events_load.empty() ? "none" : join(g.clock_events_load, ", ");
        parts.push_back(fmt::format("{} SM {:.0f} of {:.0f} MHz at {:.0f} W, events: {}", gpu_label(s, g),
                                    g.sm_clock_load_mhz, g.sm_clock_max_mhz, g.power_load_w, events));
        judge_clock(c, s, g);
    }
    c.figures = join(parts);
    c.band = fmt::format("sw_power_cap is a GPU at its power limit (normal at full load); a clock below {:.0f}% of "
                         "its maximum needs a reason",
                         kClockLowFraction * 100);
    return c;
}

Check check_ecc(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "ECC mode and uncorrected errors");
    std::vector<std::string> parts;
    for (const GpuReading& g : s.gpus) {
        const ModelExpectation* m = find_expectation(g.name);
        if (g.ecc_enabled < 0) {
            if (m && !m->ecc_on_by_default) {
                parts.push_back(fmt::format("{} not reported ({})", gpu_label(s, g), m->ecc_source));
                continue;
            }
            return unjudged(Tier::configuration, c.name, blind_reason(s, "the ECC mode (NVML)"));
        }
        parts.push_back(fmt::format("{} {}{}", gpu_label(s, g), g.ecc_enabled ? "on" : "off",
                                    g.ecc_uncorrected >= 0 ? fmt::format(", {} uncorrected", g.ecc_uncorrected) : ""));
        if (g.ecc_enabled == 0 && m && m->ecc_on_by_default)
            raise(c, Verdict::warn,
                  fmt::format("ECC is off on {}, a {} that ships with it on ({}): memory errors go unseen and its "
                              "memory size and bandwidth differ from the profile's",
                              gpu_label(s, g), g.name, m->ecc_source),
                  "nvidia-smi -i N -e 1 and reboot (or reset the GPU)");
        if (g.ecc_uncorrected > 0)
            raise(c, Verdict::fail, fmt::format("{} has {} uncorrected memory errors", gpu_label(s, g), g.ecc_uncorrected),
                  m && m->row_remapping
                      ? "nvidia-smi -q -d ROW_REMAPPER: reset the GPU (nvidia-smi -r) to apply a pending row remap; a "
                        "remap failure or errors that recur mean replacing the GPU (NVIDIA GPU Memory Error Management)"
                      : "nvidia-smi -q -d PAGE_RETIREMENT; reset the GPU to retire the pages, replace it if they recur");
    }
    c.figures = join(parts);
    return c;
}

// Model, memory, ECC, power limit and persistence alike on every GPU; driver, CUDA and NCCL on every host.
Check check_alike(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "GPUs and hosts alike");
    auto differs = [&](const char* what, auto value) {
        std::map<std::string, std::vector<std::string>> by;
        for (const GpuReading& g : s.gpus) by[value(g)].push_back(gpu_label(s, g));
        if (by.size() < 2) return;
        std::vector<std::string> parts;
        for (const auto& [v, who] : by) parts.push_back(fmt::format("{} on {}", v, join(who, ", ")));
        raise(c, Verdict::fail, fmt::format("{} differs between GPUs: {}", what, join(parts)),
              "make every GPU of the job alike (the same card, memory, ECC mode and limits), or keep the job to the "
              "GPUs that are");
    };
    differs("the model", [](const GpuReading& g) { return g.name; });
    differs("the memory", [](const GpuReading& g) { return fmt::format("{:.0f} GiB", g.memory_mib / 1024); });
    differs("ECC", [](const GpuReading& g) { return g.ecc_enabled < 0 ? "not read" : g.ecc_enabled ? "on" : "off"; });
    differs("the power limit", [](const GpuReading& g) { return fmt::format("{:.0f} W", g.power_limit_w); });
    std::vector<HostReading> hosts = s.hosts;
    if (hosts.empty()) hosts.push_back({"", s.versions.driver, s.versions.cuda_runtime, s.versions.nccl});
    std::map<std::string, std::vector<std::string>> versions;
    for (const HostReading& h : hosts) {
        if (h.driver.empty() && h.cuda_runtime.empty() && h.nccl.empty())
            return unjudged(Tier::configuration, c.name, blind_reason(s, "the driver, CUDA and NCCL versions"));
        versions[fmt::format("driver {}, CUDA runtime {}, NCCL {}", h.driver.empty() ? "?" : h.driver,
                             h.cuda_runtime.empty() ? "?" : h.cuda_runtime, h.nccl.empty() ? "?" : h.nccl)]
            .push_back(h.host);
    }
    std::vector<std::string> parts;
    for (const auto& [v, who] : versions) parts.push_back(hosts.size() > 1 ? v + " on " + join(who, ", ") : v);
    if (versions.size() > 1)
        raise(c, Verdict::fail, "the driver, CUDA or NCCL version differs between hosts: " + join(parts),
              "install the same driver, CUDA and NCCL on every host (NCCL across versions may hang or refuse)");
    c.figures = fmt::format("{} GPU(s), {} host(s); {}", s.gpus.size(), hosts.size(), join(parts));
    return c;
}

// One rate of every GPU against a band: low warns, above the ceiling is a measurement error.
Check check_card_rates(const SystemSnapshot& s, const ExpectedBands& bands) {
    Check c = check(Tier::configuration, "the card's GEMM and memory-copy rates");
    if (!s.load_skipped.empty()) return skipped(Tier::configuration, c.name, s.load_skipped);
    if (!bands.gemm.known() || !bands.memory_copy.known())
        return unjudged(Tier::configuration, c.name,
                        "no GEMM or memory-copy band: " + (bands.why_none.empty() ? "the profile has none" : bands.why_none));
    std::vector<std::string> parts;
    for (const GpuReading& g : s.gpus) {
        if (g.gemm_tflops <= 0 || g.memory_copy_gbps <= 0)
            return unjudged(Tier::configuration, c.name, blind_reason(s, "the GEMM or memory-copy rate"));
        parts.push_back(fmt::format("{} TF32 GEMM {:.1f} TFLOP/s, copy {:.0f} GB/s", gpu_label(s, g), g.gemm_tflops,
                                    g.memory_copy_gbps));
        for (const auto& [rate, band, what] :
             {std::tuple{g.gemm_tflops, bands.gemm, "TF32 GEMM"}, std::tuple{g.memory_copy_gbps, bands.memory_copy, "memory copy"}}) {
            if (rate > band.ceiling * 1.02)
                raise(c, Verdict::fail,
                      fmt::format("{}'s {} at {:.1f} is above the datasheet's {:.1f}: a unit or timing error",
                                  gpu_label(s, g), what, rate, band.ceiling),
                      "report it: the measurement is wrong, not the card");
            else if (rate < band.lo)
                raise(c, Verdict::warn,
                      fmt::format("{}'s {} reads low ({:.1f}, expected >= {:.1f}): clocks, power or heat (those rows)",
                                  gpu_label(s, g), what, rate, band.lo),
                      "fix what the power and clock rows name; a card low with both clean needs service");
        }
    }
    c.figures = join(parts);
    c.band = bands.gemm.source + "; " + bands.memory_copy.source;
    return c;
}

}  // namespace

std::vector<Check> configuration_checks(const SystemSnapshot& s, const ExpectedBands& bands) {
    std::vector<Check> out;
    if (s.gpus.empty()) {
        const std::string why = s.gpu_unavailable.empty() ? "no GPU was read" : s.gpu_unavailable;
        for (const char* n : {"PCIe generation and width: slot and under load", "BAR1 against memory",
                              "ACS on the bridges between GPUs", "IOMMU mode", "power limit against the default",
                              "clocks and clock-event reasons under load", "ECC mode and uncorrected errors",
                              "GPUs and hosts alike", "the card's GEMM and memory-copy rates"})
            out.push_back(skipped(Tier::configuration, n, why));
        return out;
    }
    for (Check c : {check_pcie(s), check_bar1(s), check_acs(s), check_iommu(s), check_power(s), check_clocks(s),
                    check_ecc(s), check_alike(s), check_card_rates(s, bands)})
        out.push_back(c);
    return out;
}

}  // namespace sb::doctor::detail
