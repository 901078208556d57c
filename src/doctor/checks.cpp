// The doctor's checks, tier by tier: each reads only the snapshot and the bands, so the
// fixture tests (tests/unit/test_doctor.cpp) decide every verdict without hardware.
#include "src/doctor/checks.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

namespace sb::doctor {

const char* verdict_name(Verdict v) {
    switch (v) {
        case Verdict::pass: return "pass";
        case Verdict::warn: return "warn";
        case Verdict::fail: return "fail";
        case Verdict::skipped: return "skipped";
    }
    return "?";
}

const char* tier_name(Tier t) {
    switch (t) {
        case Tier::topology: return "topology";
        case Tier::configuration: return "configuration";
        case Tier::transfer: return "transfer";
        case Tier::collective: return "collective";
        case Tier::training: return "training";
    }
    return "?";
}

std::vector<int> parse_cpu_list(const std::string& text) {
    std::vector<int> cpus;
    std::stringstream in(text);
    std::string part;
    while (std::getline(in, part, ',')) {
        while (!part.empty() && std::isspace(static_cast<unsigned char>(part.back()))) part.pop_back();
        if (part.empty()) continue;
        int lo = 0, hi = 0;
        char extra = 0;
        if (std::sscanf(part.c_str(), "%d-%d%c", &lo, &hi, &extra) == 2) {
        } else if (std::sscanf(part.c_str(), "%d%c", &lo, &extra) == 1) {
            hi = lo;
        } else {
            return {};
        }
        if (lo < 0 || hi < lo) return {};
        for (int c = lo; c <= hi; ++c) cpus.push_back(c);
    }
    return cpus;
}

int acs_redirect(const std::vector<unsigned char>& config) {
    if (config.size() < 4096) return -1;
    auto u32 = [&](size_t at) {
        return static_cast<uint32_t>(config[at]) | static_cast<uint32_t>(config[at + 1]) << 8 |
               static_cast<uint32_t>(config[at + 2]) << 16 | static_cast<uint32_t>(config[at + 3]) << 24;
    };
    // Extended capabilities: a list from 0x100, each header ID (16 bits), version (4), next (12).
    size_t at = 0x100;
    for (int hops = 0; at >= 0x100 && at + 8 <= config.size() && hops < 64; ++hops) {
        const uint32_t header = u32(at);
        if (header == 0 || header == 0xffffffffu) return 0;
        if ((header & 0xffff) == 0x000d) {  // ACS: control register at +6; bit 2 request, bit 3 completion redirect
            const unsigned control = config[at + 6] | config[at + 7] << 8;
            return (control & 0x0c) ? 1 : 0;
        }
        at = header >> 20;
        if (at == 0) return 0;
    }
    return 0;
}

std::vector<std::string> parse_nccl_transports(const std::string& log) {
    std::vector<std::string> out;
    std::stringstream in(log);
    std::string line;
    while (std::getline(in, line)) {
        if (line.find("Channel") == std::string::npos) continue;
        const size_t via = line.find(" via ");
        if (via == std::string::npos) continue;
        std::string rest = line.substr(via + 5);
        const size_t end = rest.find_first_of(" \t\r");
        if (end != std::string::npos) rest.resize(end);
        // Keep the transport and its kind: "P2P/IPC/read" -> "P2P/IPC", "SHM/direct/direct" -> "SHM",
        // "NET/Socket/0" -> "NET/Socket".
        const size_t first = rest.find('/');
        std::string name = rest.substr(0, first);
        if (name != "SHM" && first != std::string::npos) {
            const size_t second = rest.find('/', first + 1);
            name = rest.substr(0, second);
        }
        if (!name.empty()) out.push_back(name);
    }
    return out;
}

LinkClass detected_link(const SystemSnapshot& s) {
    for (const GpuReading& g : s.gpus)
        if (g.nvlink_active > 0) return LinkClass::nvlink;
    bool all_p2p = !s.pairs.empty();
    for (const PairReading& p : s.pairs) all_p2p = all_p2p && p.cuda_p2p == 1;
    return all_p2p ? LinkClass::pcie_p2p : LinkClass::host_staged;
}

namespace {

double line_rate(const HardwareProfile& hw) {
    if (hw.link == LinkClass::nvlink) return hw.link_gbps.value;
    return pcie_gbps(static_cast<int>(hw.pcie_gen.value), static_cast<int>(hw.pcie_lanes.value));
}

double low_end(const Sourced& x) { return x.is_range() ? x.lo : x.value; }

}  // namespace

ExpectedBands expected_bands(const SystemSnapshot& s, const std::vector<HardwareProfile>& profiles,
                             const std::vector<PublishedBusbw>& published) {
    ExpectedBands b;
    if (s.gpus.empty()) {
        b.why_none = "no GPU was read";
        return b;
    }
    const GpuReading& g = s.gpus.front();
    const LinkClass link = detected_link(s);
    const HardwareProfile* best = nullptr;
    for (const HardwareProfile& hw : profiles) {
        if (hw.device_name != g.name || hw.link != link) continue;
        auto gap = [&](const HardwareProfile& p) { return std::abs(p.memory_gb.value * 1024 - g.memory_mib); };
        if (!best || gap(hw) < gap(*best)) best = &hw;
    }
    if (!best) {
        b.why_none = fmt::format("no hardware profile in configs/hardware for '{}' with a {} link", g.name,
                                 link_class_name(link));
        return b;
    }
    b.profile = best->name;
    const double line = line_rate(*best);
    const std::string line_text = best->link == LinkClass::nvlink
                                      ? fmt::format("NVLink {:.0f} GB/s per direction ({})", line, best->link_gbps.source)
                                      : fmt::format("PCIe Gen{:.0f} x{:.0f} {:.1f} GB/s per direction", best->pcie_gen.value,
                                                    best->pcie_lanes.value, line);
    b.busbw.ceiling = line;
    b.busbw.lo = kBusbwAllowance * low_end(best->link_efficiency) * line;
    b.busbw.source = fmt::format("profile {}: link efficiency {:.2f} ({}) x {}; low below {:.0f}% of that",
                                 best->name, low_end(best->link_efficiency), best->link_efficiency.is_range()
                                     ? best->link_efficiency.lo_source : best->link_efficiency.source,
                                 line_text, kBusbwAllowance * 100);
    if (best->link != LinkClass::host_staged) {
        b.peer_copy.ceiling = line;
        b.peer_copy.lo = kCopyLowFraction * line;
        b.peer_copy.source = fmt::format("profile {}: {}; low below {:.0f}% of it", best->name, line_text,
                                         kCopyLowFraction * 100);
    }
    // A published all-reduce figure is the fabric's: it counts for every profile with the same link.
    for (const PublishedBusbw& p : published)
        for (const HardwareProfile& hw : profiles)
            if (hw.name == p.profile && hw.link == best->link && line_rate(hw) == line) b.published.push_back(p);
    return b;
}

Band host_copy_band(const GpuReading& g) {
    Band b;
    if (g.pcie_max.gen < 3 || g.pcie_max.gen > 5 || g.pcie_max.width <= 0) return b;
    b.ceiling = pcie_gbps(g.pcie_max.gen, g.pcie_max.width);
    b.lo = kCopyLowFraction * b.ceiling;
    b.source = fmt::format("PCIe Gen{} x{} line rate {:.1f} GB/s per direction (the link's maximum); low below {:.0f}%",
                           g.pcie_max.gen, g.pcie_max.width, b.ceiling, kCopyLowFraction * 100);
    return b;
}

namespace {

Check check(Tier t, std::string name) {
    Check c;
    c.tier = t;
    c.name = std::move(name);
    return c;
}

Check skipped(Tier t, std::string name, std::string reason) {
    Check c = check(t, std::move(name));
    c.verdict = Verdict::skipped;
    c.cause = std::move(reason);
    return c;
}

// Raises c to `v` (fail > warn > pass), adding the cause and the fix.
void raise(Check& c, Verdict v, const std::string& cause, const std::string& fix) {
    if (v == Verdict::fail || (v == Verdict::warn && c.verdict == Verdict::pass)) c.verdict = v;
    auto add = [](std::string& to, const std::string& text) {
        if (text.empty() || to.find(text) != std::string::npos) return;
        to += (to.empty() ? "" : "; ") + text;
    };
    add(c.cause, cause);
    add(c.fix, fix);
}

std::string join(const std::vector<std::string>& parts, const char* sep = "; ") {
    std::string out;
    for (const std::string& p : parts) out += (out.empty() ? "" : sep) + p;
    return out;
}

std::string gpu_label(const SystemSnapshot& s, const GpuReading& g) {
    std::set<std::string> hosts;
    for (const GpuReading& x : s.gpus) hosts.insert(x.host);
    return hosts.size() > 1 ? fmt::format("{}:GPU{}", g.host, g.index) : fmt::format("GPU{}", g.index);
}

const GpuReading* find_gpu(const SystemSnapshot& s, const std::string& host, int index) {
    for (const GpuReading& g : s.gpus)
        if (g.host == host && g.index == index) return &g;
    return nullptr;
}

bool any_p2p(const SystemSnapshot& s) {
    for (const PairReading& p : s.pairs)
        if (p.cuda_p2p == 1) return true;
    return false;
}

// ---- topology

Check check_gpus(const SystemSnapshot& s) {
    Check c = check(Tier::topology, "GPUs, PCIe address, NUMA node");
    std::vector<std::string> parts;
    for (const GpuReading& g : s.gpus)
        parts.push_back(fmt::format("{} {} at {}, NUMA node {}{}", gpu_label(s, g), g.name, g.pci_bus_id,
                                    g.numa_node < 0 ? std::string("unknown") : std::to_string(g.numa_node),
                                    g.local_cpus.empty() ? "" : " (CPUs " + g.local_cpus + ")"));
    c.figures = join(parts);
    return c;
}

Check check_binding(const SystemSnapshot& s) {
    Check c = check(Tier::topology, "rank binding against each GPU's CPUs");
    std::vector<std::string> parts;
    int judged = 0;
    for (const RankReading& r : s.ranks) {
        const GpuReading* g = r.device < 0 ? nullptr : find_gpu(s, r.host, r.device);
        const std::vector<int> bound = parse_cpu_list(r.bound_cpus);
        const std::vector<int> local = g ? parse_cpu_list(g->local_cpus) : std::vector<int>{};
        if (!g || bound.empty() || local.empty()) continue;
        ++judged;
        const std::set<int> near(local.begin(), local.end());
        const bool inside = std::all_of(bound.begin(), bound.end(), [&](int cpu) { return near.count(cpu) > 0; });
        parts.push_back(fmt::format("rank {} on CPUs {} drives {} (CPUs {})", r.rank, r.bound_cpus, gpu_label(s, *g),
                                    g->local_cpus));
        if (!inside)
            raise(c, Verdict::warn,
                  fmt::format("rank {} may run on CPUs away from {}'s NUMA node: its host copies cross the socket link",
                              r.rank, gpu_label(s, *g)),
                  "bind each rank to its GPU's NUMA node: mpirun --bind-to numa, or launch/bind_numa.sh");
    }
    if (judged == 0)
        return skipped(Tier::topology, c.name, "no rank's CPU binding and GPU CPU list were both readable");
    c.figures = join(parts);
    return c;
}

Check check_nvlink(const SystemSnapshot& s) {
    Check c = check(Tier::topology, "NVLink links up");
    int most = -1;
    for (const GpuReading& g : s.gpus) most = std::max(most, g.nvlink_active);
    if (most < 0) return skipped(Tier::topology, c.name, "NVML did not report NVLink state");
    std::vector<std::string> parts;
    for (const GpuReading& g : s.gpus) {
        parts.push_back(fmt::format("{} {}", gpu_label(s, g), g.nvlink_active));
        if (g.nvlink_active >= 0 && g.nvlink_active < most)
            raise(c, Verdict::fail,
                  fmt::format("{} has {} NVLink links up where its peers have {}: a link is down", gpu_label(s, g),
                              g.nvlink_active, most),
                  "nvidia-smi nvlink -s and -e to find the link; check nvidia-fabricmanager is running (NVSwitch "
                  "systems); reseat or have the board serviced");
    }
    c.figures = most == 0 ? "no NVLink (PCIe only)" : join(parts, ", ");
    return c;
}

Check check_p2p_matrix(const SystemSnapshot& s) {
    Check c = check(Tier::topology, "P2P access between GPUs");
    if (s.pairs.empty()) return skipped(Tier::topology, c.name, "one GPU per host: no pair of GPUs to connect");
    int granted = 0, denied = 0;
    std::vector<std::string> parts;
    for (const PairReading& p : s.pairs) {
        if (p.cuda_p2p < 0) return skipped(Tier::topology, c.name, "cudaDeviceCanAccessPeer was not read");
        (p.cuda_p2p == 1 ? granted : denied)++;
        parts.push_back(fmt::format("{}-{} {}", p.a, p.b, p.cuda_p2p == 1 ? "yes" : "no"));
    }
    c.figures = fmt::format("{} of {} pairs granted ({})", granted, granted + denied, join(parts, ", "));
    if (granted == 0)
        raise(c, Verdict::warn,
              "no pair has peer access: NCCL moves every byte through host memory (SHM); on GeForce cards this is "
              "the stock driver (NVIDIA/nccl#1309), elsewhere a virtual machine, the IOMMU or ACS",
              "on GeForce expect host-staged figures (or a patched driver, whose BAR1 and correctness the checks "
              "below judge); elsewhere check the IOMMU and ACS rows");
    else if (denied > 0)
        raise(c, Verdict::warn, "peer access for some pairs only: GPUs behind different bridges, ACS, or mixed cards",
              "keep each job's GPUs to the granted pairs, or clear ACS on the bridges between them");
    return c;
}

Check check_paths(const SystemSnapshot& s) {
    Check c = check(Tier::topology, "what lies between each pair");
    if (s.pairs.empty()) return skipped(Tier::topology, c.name, "one GPU per host: no pair of GPUs");
    std::map<std::string, int> kinds;
    for (const PairReading& p : s.pairs) {
        if (p.path.empty()) return skipped(Tier::topology, c.name, "the PCIe path between the GPUs was not read");
        kinds[p.path]++;
        if (p.path == "socket_link" && p.cuda_p2p == 1)
            raise(c, Verdict::warn,
                  fmt::format("GPUs {} and {} use P2P across the socket link, slower than host memory on many "
                              "boards (NVIDIA/nccl#1086)",
                              p.a, p.b),
                  "keep communicating GPUs on one socket, or NCCL_P2P_LEVEL=PHB so NCCL does not use P2P across it");
    }
    std::vector<std::string> parts;
    for (const auto& [kind, n] : kinds) parts.push_back(fmt::format("{} {}", n, kind));
    c.figures = "pairs by path: " + join(parts, ", ");
    return c;
}

// ---- configuration

Check check_pcie(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "PCIe generation and width under load");
    std::vector<std::string> parts;
    for (const GpuReading& g : s.gpus) {
        if (g.pcie_max.gen == 0) return skipped(Tier::configuration, c.name, "NVML did not report the PCIe link");
        if (g.pcie_load.gen == 0)
            return skipped(Tier::configuration, c.name, "the link was not read under load (no copy ran)");
        parts.push_back(fmt::format("{} Gen{} x{} of Gen{} x{} (idle Gen{} x{})", gpu_label(s, g), g.pcie_load.gen,
                                    g.pcie_load.width, g.pcie_max.gen, g.pcie_max.width, g.pcie_idle.gen,
                                    g.pcie_idle.width));
        if (g.pcie_load.gen < g.pcie_max.gen || g.pcie_load.width < g.pcie_max.width)
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
    std::vector<std::string> parts;
    for (const GpuReading& g : s.gpus) {
        if (g.bar1_mib <= 0 || g.memory_mib <= 0)
            return skipped(Tier::configuration, c.name, "BAR1 or memory size was not read (sysfs resource)");
        parts.push_back(fmt::format("{} BAR1 {:.0f} GiB, memory {:.0f} GiB", gpu_label(s, g), g.bar1_mib / 1024,
                                    g.memory_mib / 1024));
        if (g.bar1_mib < g.memory_mib && any_p2p(s))
            raise(c, Verdict::fail,
                  fmt::format("{}'s BAR1 ({:.0f} GiB) is smaller than its memory ({:.0f} GiB) while P2P is granted: a "
                              "peer copy through BAR1 faults at the first transfer (tinygrad/open-gpu-kernel-modules#36)",
                              gpu_label(s, g), g.bar1_mib / 1024, g.memory_mib / 1024),
                  "a BIOS with Resizable BAR and above-4G decoding giving BAR1 >= memory, or run without P2P "
                  "(NCCL_P2P_DISABLE=1)");
    }
    c.figures = join(parts);
    if (c.verdict == Verdict::pass && !any_p2p(s)) c.figures += " (BAR1 matters to P2P only; none is granted)";
    return c;
}

Check check_acs(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "ACS on the bridges between GPUs");
    if (s.pairs.empty()) return skipped(Tier::configuration, c.name, "one GPU per host: no bridge between GPUs");
    std::set<std::string> redirecting;
    for (const PairReading& p : s.pairs) {
        if (p.acs_read != 1)
            return skipped(Tier::configuration, c.name,
                           "the bridges' PCI config space was not readable (needs root: sysfs config)");
        for (const std::string& b : p.acs_redirect_bridges) redirecting.insert(b);
    }
    c.figures = redirecting.empty() ? "no bridge redirects peer traffic"
                                    : "redirecting: " + join({redirecting.begin(), redirecting.end()}, ", ");
    if (!redirecting.empty())
        raise(c, any_p2p(s) ? Verdict::fail : Verdict::warn,
              "ACS redirects peer-to-peer requests up to the root complex: P2P traffic halves or hangs "
              "(NVIDIA/nccl#2079, NVIDIA/nccl#1285)",
              "disable ACS on those bridges (BIOS, or setpci -s BRIDGE ECAP_ACS+0x6.w=0000 at boot)");
    return c;
}

Check check_iommu(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "IOMMU mode");
    std::vector<std::string> parts;
    bool translated = false;
    for (const GpuReading& g : s.gpus) {
        if (g.iommu.empty()) return skipped(Tier::configuration, c.name, "the GPU's IOMMU group was not readable");
        parts.push_back(fmt::format("{} {}", gpu_label(s, g), g.iommu));
        translated = translated || g.iommu.rfind("DMA", 0) == 0;
    }
    c.figures = join(parts, ", ");
    if (translated && any_p2p(s))
        raise(c, Verdict::warn,
              "the IOMMU translates DMA: peer-to-peer transfers go through it and slow down or fail "
              "(NVIDIA/nccl-tests#115)",
              "boot with iommu=pt (or amd_iommu=off / intel_iommu=off where no VM needs it)");
    return c;
}

Check check_power(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "power limit against the default");
    std::vector<std::string> parts;
    for (const GpuReading& g : s.gpus) {
        if (g.power_limit_w <= 0 || g.power_default_w <= 0)
            return skipped(Tier::configuration, c.name, "NVML did not report the power limits");
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

Check check_clocks(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "clocks and clock-event reasons under load");
    std::vector<std::string> parts;
    for (const GpuReading& g : s.gpus) {
        if (g.sm_clock_load_mhz <= 0) return skipped(Tier::configuration, c.name, "no load ran to read the clocks under");
        const std::string events = g.clock_events_load.empty() ? "none" : join(g.clock_events_load, ", ");
        parts.push_back(fmt::format("{} SM {:.0f} of {:.0f} MHz at {:.0f} W, events: {}", gpu_label(s, g),
                                    g.sm_clock_load_mhz, g.sm_clock_max_mhz, g.power_load_w, events));
        for (const std::string& e : g.clock_events_load) {
            if (e.find("thermal") != std::string::npos)
                raise(c, Verdict::warn, fmt::format("{} slows down for heat ({})", gpu_label(s, g), e),
                      "check airflow, fan curves and the inlet temperature; clean the heatsink");
            else if (e == "hw_slowdown" || e == "hw_power_brake_slowdown")
                raise(c, Verdict::warn,
                      fmt::format("{} hardware slowdown ({}): power supply or external power brake", gpu_label(s, g), e),
                      "check the PSU cables and capacity and the chassis power-brake signal");
        }
    }
    c.figures = join(parts);
    return c;
}

Check check_ecc(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "ECC mode and uncorrected errors");
    std::vector<std::string> parts;
    bool read = false;
    for (const GpuReading& g : s.gpus) {
        read = read || g.ecc_enabled >= 0;
        parts.push_back(fmt::format("{} {}{}", gpu_label(s, g),
                                    g.ecc_enabled < 0 ? "not reported" : g.ecc_enabled ? "on" : "off",
                                    g.ecc_uncorrected >= 0 ? fmt::format(", {} uncorrected", g.ecc_uncorrected) : ""));
        if (g.ecc_uncorrected > 0)
            raise(c, Verdict::fail, fmt::format("{} has uncorrected memory errors", gpu_label(s, g)),
                  "nvidia-smi -q -d ECC,PAGE_RETIREMENT; reset the GPU to retire the pages, replace it if they recur");
    }
    if (!read) return skipped(Tier::configuration, c.name, "ECC is not reported (a GeForce card has none)");
    c.figures = join(parts);
    return c;
}

Check check_versions(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "driver, CUDA and NCCL versions");
    const Versions& v = s.versions;
    if (v.driver.empty() && v.cuda_runtime.empty() && v.nccl.empty())
        return skipped(Tier::configuration, c.name, "no version was read");
    c.figures = fmt::format("driver {}, CUDA runtime {}, NCCL {}", v.driver.empty() ? "?" : v.driver,
                            v.cuda_runtime.empty() ? "?" : v.cuda_runtime, v.nccl.empty() ? "?" : v.nccl);
    return c;
}

// ---- transfer

// Judges each copy of one kind against its band: a wrong byte or a rate above the ceiling
// fails, a rate below the low end warns; the slowest is named.
Check check_copies(const SystemSnapshot& s, const std::string& kind, const std::string& name,
                   const std::function<Band(const CopyReading&)>& band_of, const std::string& low_cause,
                   const std::string& low_fix) {
    Check c = check(Tier::transfer, name);
    std::vector<std::string> parts;
    const CopyReading* slowest = nullptr;
    std::string band_text;
    for (const CopyReading& x : s.copies) {
        if (x.kind != kind) continue;
        auto end = [](int d) { return d < 0 ? std::string("host") : "GPU" + std::to_string(d); };
        const std::string what = fmt::format("{}->{}{}", end(x.src), end(x.dst), x.concurrent ? " (all at once)" : "");
        parts.push_back(fmt::format("{} {:.1f} GB/s, {:.1f} us", what, x.gbps, x.latency_us));
        if (!slowest || x.gbps < slowest->gbps) slowest = &x;
        if (!x.correct)
            raise(c, Verdict::fail, fmt::format("{} returned wrong data", what),
                  "do not use this path: NCCL_P2P_DISABLE=1 for peer copies; check the driver, IOMMU and ACS rows");
        const Band b = band_of(x);
        if (!b.known()) continue;
        band_text = b.source;
        if (x.gbps > b.ceiling * 1.02)
            raise(c, Verdict::fail,
                  fmt::format("{} at {:.1f} GB/s is above what the link carries ({:.1f} GB/s): a unit or timing error",
                              what, x.gbps, b.ceiling),
                  "report it: the measurement is wrong, not the machine");
        else if (x.gbps < b.lo)
            raise(c, Verdict::warn, fmt::format("{} reads low ({:.1f} GB/s, expected >= {:.1f}): {}", what, x.gbps,
                                                b.lo, low_cause),
                  low_fix);
    }
    if (!slowest) return Check{};  // the caller skips
    c.figures = join(parts) + fmt::format("; slowest {}->{}", slowest->src < 0 ? "host" : "GPU" + std::to_string(slowest->src),
                                          slowest->dst < 0 ? "host" : "GPU" + std::to_string(slowest->dst));
    c.band = band_text.empty() ? "no band: the link's maximum was not read" : band_text;
    return c;
}

std::vector<Check> transfer_checks(const SystemSnapshot& s, const ExpectedBands& bands) {
    std::vector<Check> out;
    const char* names[] = {"host to device (pinned)", "device to host (pinned)", "peer copy (cudaMemcpyPeer)",
                           "host-staged copy between GPUs"};
    if (!s.transfer_skipped.empty()) {
        for (const char* n : names) out.push_back(skipped(Tier::transfer, n, s.transfer_skipped));
        return out;
    }
    auto gpu_band = [&](int device, const std::string& host) {
        const GpuReading* g = find_gpu(s, host, device);
        return g ? host_copy_band(*g) : Band{};
    };
    const std::string host_cause =
        "the link trained down, a pinned buffer on the far NUMA node, or another device sharing the link";
    const std::string host_fix = "see the PCIe and binding rows; bind the rank to the GPU's NUMA node";
    Check h2d = check_copies(s, "h2d", names[0], [&](const CopyReading& x) { return gpu_band(x.dst, x.host); },
                             host_cause, host_fix);
    Check d2h = check_copies(s, "d2h", names[1], [&](const CopyReading& x) { return gpu_band(x.src, x.host); },
                             host_cause, host_fix);
    out.push_back(h2d.name.empty() ? skipped(Tier::transfer, names[0], "no host-to-device copy was measured") : h2d);
    out.push_back(d2h.name.empty() ? skipped(Tier::transfer, names[1], "no device-to-host copy was measured") : d2h);
    Check peer = check_copies(s, "peer", names[2], [&](const CopyReading&) { return bands.peer_copy; },
                              "the path crosses a socket link or a bridge with ACS, or the link trained down",
                              "see the path, ACS and PCIe rows");
    if (peer.name.empty())
        peer = skipped(Tier::transfer, names[2],
                       s.pairs.empty() ? "one GPU per host: no pair to copy between"
                                       : "peer access is not granted on any pair (topology row)");
    out.push_back(peer);
    Check staged = check_copies(
        s, "staged", names[3],
        [&](const CopyReading& x) {
            Band b = gpu_band(x.src, x.host);
            if (!b.known()) return b;
            b.lo = kStagedLowFraction * b.ceiling;
            b.source = fmt::format("PCIe line rate {:.1f} GB/s; low below {:.1f}% of it, the lowest published "
                                   "host-staged copy (NVIDIA/nccl-tests#117, profile rtx4090-24gb-pcie4)",
                                   b.ceiling, kStagedLowFraction * 100);
            return b;
        },
        "host memory bandwidth, the far NUMA node, or a trained-down link", "see the binding and PCIe rows");
    if (staged.name.empty())
        staged = skipped(Tier::transfer, names[3],
                         s.pairs.empty() ? "one GPU per host: no pair to copy between" : "no staged copy was measured");
    out.push_back(staged);
    return out;
}

// ---- collective

const CollectiveRun* find_run(const SystemSnapshot& s, const std::string& label) {
    for (const CollectiveRun& r : s.collectives)
        if (r.label == label) return &r;
    return nullptr;
}

bool uses(const CollectiveRun& r, const std::string& prefix) {
    for (const std::string& t : r.transports)
        if (t.rfind(prefix, 0) == 0) return true;
    return false;
}

std::string transports_text(const CollectiveRun& r) {
    std::map<std::string, int> n;
    for (const std::string& t : r.transports) n[t]++;
    std::vector<std::string> parts;
    for (const auto& [t, k] : n) parts.push_back(fmt::format("{} on {} connection{}", t, k, k == 1 ? "" : "s"));
    return join(parts, ", ");
}

// A run that did not finish, or returned a wrong element: the fail's cause and fix.
void judge_run(Check& c, const CollectiveRun& r, bool is_control) {
    const bool p2p = uses(r, "P2P");
    const std::string where = is_control ? "the control (NCCL_P2P_DISABLE=1)" : "the all-reduce";
    if (r.timed_out)
        raise(c, Verdict::fail,
              fmt::format("{} did not finish within its {:.0f} s deadline{}", where, r.deadline_s,
                          p2p ? ": a P2P path that deadlocks inside NCCL (patched drivers: noonghunna/club-3090 PR#902)"
                              : ""),
              p2p ? "run with NCCL_P2P_DISABLE=1 until the P2P path is fixed (driver, ACS, IOMMU)"
                  : "look for a rank that stopped answering: NCCL_DEBUG=INFO, the network interfaces");
    else if (!r.error.empty())
        raise(c, Verdict::fail, fmt::format("{} failed: {}", where, r.error),
              "read NCCL's message; NCCL_DEBUG=INFO shows the transport it tried");
    int64_t wrong = 0;
    for (const AllReduceRow& row : r.rows) wrong += row.wrong;
    if (wrong > 0)
        raise(c, Verdict::fail,
              fmt::format("{} returned {} wrong elements{}", where, wrong,
                          p2p ? " over P2P: the peer path corrupts data (tinygrad/open-gpu-kernel-modules#45, "
                                "noonghunna/club-3090 PR#926)"
                              : ""),
              p2p ? "NCCL_P2P_DISABLE=1 now; then the driver, BAR1, IOMMU and ACS rows" : "check the host memory and "
                                                                                          "the network path");
}

const AllReduceRow* largest(const CollectiveRun& r) {
    const AllReduceRow* best = nullptr;
    for (const AllReduceRow& row : r.rows)
        if (!best || row.bytes > best->bytes) best = &row;
    return best;
}

std::vector<Check> collective_checks(const SystemSnapshot& s, const ExpectedBands& bands) {
    std::vector<Check> out;
    const char* names[] = {"all-reduce, checked and timed", "transport NCCL chose",
                           "control with NCCL_P2P_DISABLE=1"};
    const CollectiveRun* as_is = find_run(s, "as_is");
    if (!s.collective_skipped.empty() || !as_is) {
        const std::string why = s.collective_skipped.empty() ? "no all-reduce ran" : s.collective_skipped;
        for (const char* n : names) out.push_back(skipped(Tier::collective, n, why));
        return out;
    }
    Check ar = check(Tier::collective, names[0]);
    judge_run(ar, *as_is, false);
    if (const AllReduceRow* row = largest(*as_is)) {
        std::vector<std::string> parts;
        for (const AllReduceRow& x : as_is->rows)
            parts.push_back(fmt::format("{:.0f} MiB {:.2f} GB/s", x.bytes / 1048576.0, x.busbw_gbps));
        ar.figures = fmt::format("{} ranks, busbw {}", as_is->nranks, join(parts, ", "));
        if (s.shared_gpu) {
            ar.band = "no band: the ranks share one GPU and talk through NCCL's network transport (not a hardware figure)";
        } else if (!bands.busbw.known()) {
            ar.band = "no band: " + bands.why_none;
        } else {
            ar.band = bands.busbw.source;
            for (const PublishedBusbw& p : bands.published)
                ar.band += fmt::format("; published {:.1f} GB/s on {} GPUs at {:.0f} MiB ({})", p.busbw_gbps, p.gpus,
                                       p.bytes / 1048576.0, p.source);
            if (row->busbw_gbps > bands.busbw.ceiling * 1.02)
                raise(ar, Verdict::fail,
                      fmt::format("busbw {:.1f} GB/s is above the link's {:.1f} GB/s: a unit or timing error",
                                  row->busbw_gbps, bands.busbw.ceiling),
                      "report it: the measurement is wrong, not the machine");
            else if (row->busbw_gbps < bands.busbw.lo)
                raise(ar, Verdict::warn,
                      fmt::format("busbw {:.1f} GB/s at {:.0f} MiB is below {:.1f} GB/s: see the transport, PCIe, "
                                  "ACS and power rows for the cause",
                                  row->busbw_gbps, row->bytes / 1048576.0, bands.busbw.lo),
                      "fix what those rows name; NCCL_DEBUG=INFO shows the rings and the transport");
        }
    } else if (ar.verdict == Verdict::pass) {
        raise(ar, Verdict::fail, "the all-reduce returned no measurement", "rerun with NCCL_DEBUG=INFO");
    }
    out.push_back(ar);

    Check tr = check(Tier::collective, names[1]);
    if (as_is->transports.empty()) {
        tr = skipped(Tier::collective, names[1], "NCCL's log named no channel connection");
    } else {
        tr.figures = transports_text(*as_is);
        const bool all_p2p = detected_link(s) != LinkClass::host_staged;
        if (s.shared_gpu) {
            tr.figures += " (ranks share one GPU: NCCL's network transport between host identities)";
            if (!uses(*as_is, "NET"))
                raise(tr, Verdict::warn, "ranks sharing a GPU should connect through NET (each its own NCCL_HOSTID)",
                      "set a distinct NCCL_HOSTID per rank (--share-gpu does)");
        } else if (all_p2p && !uses(*as_is, "P2P") && !uses(*as_is, "NVLS")) {
            raise(tr, Verdict::warn,
                  "CUDA grants peer access but NCCL went through host memory: NCCL_P2P_DISABLE or NCCL_P2P_LEVEL is "
                  "set, or NCCL judged the path too slow",
                  "unset NCCL_P2P_DISABLE/NCCL_P2P_LEVEL; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=GRAPH shows why");
        }
    }
    out.push_back(tr);

    const CollectiveRun* control = find_run(s, "p2p_disabled");
    if (!control) {
        out.push_back(skipped(Tier::collective, names[2], "the control did not run"));
        return out;
    }
    Check ct = check(Tier::collective, names[2]);
    judge_run(ct, *control, true);
    const AllReduceRow* a = largest(*as_is);
    const AllReduceRow* b = largest(*control);
    if (a && b) {
        ct.figures = fmt::format("at {:.0f} MiB: as is {:.2f} GB/s ({}), control {:.2f} GB/s ({})", a->bytes / 1048576.0,
                                 a->busbw_gbps, transports_text(*as_is), b->busbw_gbps, transports_text(*control));
        if (uses(*as_is, "P2P") && a->busbw_gbps < b->busbw_gbps)
            raise(ct, Verdict::fail,
                  "P2P is slower than going through host memory: a socket link, ACS or the IOMMU in the peer path "
                  "(NVIDIA/nccl#1086)",
                  "NCCL_P2P_DISABLE=1 on this machine, or fix the path (ACS, IOMMU rows)");
    }
    out.push_back(ct);
    return out;
}

// ---- training

Check training_check(const SystemSnapshot& s) {
    const std::string name = "short training run at 1 and N ranks";
    if (!s.training_skipped.empty()) return skipped(Tier::training, name, s.training_skipped);
    const TrainingReading& t = s.training;
    if (t.world_size <= 0) return skipped(Tier::training, name, "no training run was recorded");
    Check c = check(Tier::training, name);
    c.figures = fmt::format("{} at {} rank{}: {:.1f} samples/s (1 rank {:.1f}), efficiency {:.1f}%, step {:.2f} ms, "
                            "exposed communication {:.2f} ms",
                            t.preset, t.world_size, t.world_size == 1 ? "" : "s", t.samples_per_s_n, t.samples_per_s_1,
                            t.efficiency * 100, t.step_ms, t.exposed_comm_ms);
    if (!t.checks_passed)
        raise(c, Verdict::fail, "a replica or all-reduce check of the run failed: ranks disagree on the weights",
              "the collective tier names the path; rerun `scalebench train --recheck-allreduce`");
    const bool cpu_ranks =
        !s.ranks.empty() && std::all_of(s.ranks.begin(), s.ranks.end(), [](const RankReading& r) { return r.device < 0; });
    if (s.shared_gpu) {
        c.band = "no band: the ranks share one GPU, so efficiency is not a hardware figure";
    } else if (cpu_ranks) {
        c.band = "no band: CPU ranks, whose efficiency depends on the cores they share";
    } else if (t.world_size > 1) {
        c.band = fmt::format("efficiency >= {:.0f}% (assumption, docs/doctor.md)", kTrainingLowEfficiency * 100);
        if (t.efficiency < kTrainingLowEfficiency)
            raise(c, Verdict::warn,
                  fmt::format("efficiency {:.0f}% with {:.2f} ms of a {:.2f} ms step waiting on the all-reduce: {}",
                              t.efficiency * 100, t.exposed_comm_ms, t.step_ms,
                              t.exposed_comm_ms > 0.2 * t.step_ms ? "communication is exposed (collective tier)"
                                                                  : "the ranks slow each other (clocks, power rows)"),
                  "fix what the collective and configuration rows name; larger buckets or batches hide more");
    }
    return c;
}

}  // namespace

std::vector<Check> run_checks(const SystemSnapshot& s, const ExpectedBands& bands) {
    std::vector<Check> out;
    if (s.gpus.empty()) {
        const std::string why = s.gpu_unavailable.empty() ? "no GPU was read" : s.gpu_unavailable;
        for (const char* n : {"GPUs, PCIe address, NUMA node", "rank binding against each GPU's CPUs", "NVLink links up",
                              "P2P access between GPUs", "what lies between each pair"})
            out.push_back(skipped(Tier::topology, n, why));
        for (const char* n : {"PCIe generation and width under load", "BAR1 against memory",
                              "ACS on the bridges between GPUs", "IOMMU mode", "power limit against the default",
                              "clocks and clock-event reasons under load", "ECC mode and uncorrected errors"})
            out.push_back(skipped(Tier::configuration, n, why));
        out.push_back(check_versions(s));
        out.back().tier = Tier::configuration;
    } else {
        for (Check c : {check_gpus(s), check_binding(s), check_nvlink(s), check_p2p_matrix(s), check_paths(s)})
            out.push_back(c);
        for (Check c : {check_pcie(s), check_bar1(s), check_acs(s), check_iommu(s), check_power(s), check_clocks(s),
                        check_ecc(s), check_versions(s)})
            out.push_back(c);
        // GPUs seen through sysfs alone (a build without CUDA): say why NVML and CUDA were not read.
        if (!s.gpu_unavailable.empty())
            for (Check& c : out)
                if (c.verdict == Verdict::skipped) c.cause += " (" + s.gpu_unavailable + ")";
    }
    for (Check& c : transfer_checks(s, bands)) out.push_back(c);
    for (Check& c : collective_checks(s, bands)) out.push_back(c);
    out.push_back(training_check(s));
    return out;
}

Verdict tier_verdict(const std::vector<Check>& checks, Tier t) {
    Verdict v = Verdict::skipped;
    for (const Check& c : checks) {
        if (c.tier != t) continue;
        if (c.verdict == Verdict::fail) return Verdict::fail;
        if (c.verdict == Verdict::warn) v = Verdict::warn;
        if (c.verdict == Verdict::pass && v == Verdict::skipped) v = Verdict::pass;
    }
    return v;
}

int exit_code(const std::vector<Check>& checks) {
    int bits = 0;
    for (size_t i = 0; i < std::size(kTiers); ++i)
        if (tier_verdict(checks, kTiers[i]) == Verdict::fail) bits |= 1 << i;
    return bits == 0 ? 0 : 32 + bits;
}

}  // namespace sb::doctor
