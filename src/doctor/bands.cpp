// What the detected hardware should give: the link class between GPUs (told from readings,
// never guessed), the hardware profile of the GPU model and link, and the bands it implies
// for the collectives, peer and host copies, the card's GEMM and its memory copy.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "src/doctor/checks.h"
#include "src/doctor/expectations.h"

namespace sb::doctor {

namespace {

double line_rate(const HardwareProfile& hw) {
    if (hw.link == LinkClass::nvlink) return hw.link_gbps.value;
    return pcie_gbps(static_cast<int>(hw.pcie_gen.value), static_cast<int>(hw.pcie_lanes.value));
}

double low_end(const Sourced& x) { return x.is_range() ? x.lo : x.value; }

// The profile of `name` nearest in memory, among those with `link` (any link when nullopt).
const HardwareProfile* find_profile(const std::vector<HardwareProfile>& profiles, const std::string& name,
                                    double memory_mib, std::optional<LinkClass> link) {
    const HardwareProfile* best = nullptr;
    auto gap = [&](const HardwareProfile& p) { return std::abs(p.memory_gb.value * 1024 - memory_mib); };
    for (const HardwareProfile& hw : profiles) {
        if (hw.device_name != name || (link && hw.link != *link)) continue;
        if (!best || gap(hw) < gap(*best)) best = &hw;
    }
    return best;
}

// Why the GPUs are not one model of one memory size ("" when they are).
std::string mixed_gpus(const SystemSnapshot& s) {
    const GpuReading& first = s.gpus.front();
    for (const GpuReading& g : s.gpus) {
        if (g.name != first.name)
            return fmt::format("mixed models ({}:GPU{} {}, {}:GPU{} {})", first.host, first.index, first.name, g.host,
                               g.index, g.name);
        if (std::abs(g.memory_mib - first.memory_mib) > 0.05 * first.memory_mib)
            return fmt::format("mixed memory sizes ({}:GPU{} {:.0f} MiB, {}:GPU{} {:.0f} MiB)", first.host, first.index,
                               first.memory_mib, g.host, g.index, g.memory_mib);
    }
    return "";
}

void set_card_bands(ExpectedBands& b, const HardwareProfile& hw) {
    double lowest = 0;
    std::string source;
    for (const PublishedGemm& g : hw.gemm)
        if (g.precision == Precision::tf32 && g.m >= 4096 && (lowest == 0 || g.tflops < lowest)) {
            lowest = g.tflops;
            source = g.source;
        }
    if (lowest > 0 && hw.peak.tf32_tflops > 0) {
        b.gemm.lo = kCardLowFraction * lowest;
        b.gemm.ceiling = hw.peak.tf32_tflops;
        b.gemm.source = fmt::format("profile {}: lowest published TF32 GEMM {:.1f} TFLOP/s ({}); low below {:.0f}% of "
                                    "it; ceiling the datasheet's {:.1f} ({})",
                                    hw.name, lowest, source, kCardLowFraction * 100, hw.peak.tf32_tflops, hw.peak.source);
    }
    if (hw.copy_gbps.value > 0 && hw.peak.mem_bw_gbps > 0) {
        b.memory_copy.lo = kCardLowFraction * hw.copy_gbps.value;
        b.memory_copy.ceiling = hw.peak.mem_bw_gbps;
        b.memory_copy.source = fmt::format("profile {}: device copy {:.0f} GB/s ({}); low below {:.0f}% of it; ceiling "
                                           "the datasheet's {:.0f} GB/s",
                                           hw.name, hw.copy_gbps.value, hw.copy_gbps.source, kCardLowFraction * 100,
                                           hw.peak.mem_bw_gbps);
    }
}

void set_link_bands(ExpectedBands& b, const HardwareProfile& best, const ModelExpectation* model) {
    const double line = line_rate(best);
    const std::string line_text =
        best.link == LinkClass::nvlink
            ? fmt::format("NVLink {:.0f} GB/s per direction ({})", line, best.link_gbps.source)
            : fmt::format("PCIe Gen{:.0f} x{:.0f} {:.1f} GB/s per direction", best.pcie_gen.value,
                          best.pcie_lanes.value, line);
    b.busbw.ceiling = line;
    b.busbw.lo = kBusbwAllowance * low_end(best.link_efficiency) * line;
    b.busbw.source = fmt::format("profile {}: link efficiency {:.2f} ({}) x {}; low below {:.0f}% of that", best.name,
                                 low_end(best.link_efficiency),
                                 best.link_efficiency.is_range() ? best.link_efficiency.lo_source
                                                                 : best.link_efficiency.source,
                                 line_text, kBusbwAllowance * 100);
    if (best.link == LinkClass::nvlink && model && model->nvls) {
        // NVLS reduces inside the NVSwitch: each GPU sends and receives its data once instead of
        // 2(N-1)/N times, so nccl-tests' busbw (which counts 2(N-1)/N) reaches up to twice the link.
        b.busbw.ceiling = 2 * line;
        b.busbw.source += fmt::format("; ceiling {:.0f} GB/s: NCCL's NVLS algorithm reduces in the NVSwitch (NVLink "
                                      "SHARP, {}), so busbw may exceed the link rate",
                                      2 * line, model->nvlink_source);
    }
    if (best.link != LinkClass::host_staged) {
        b.peer_copy.ceiling = line;
        b.peer_copy.lo = kCopyLowFraction * line;
        b.peer_copy.source =
            fmt::format("profile {}: {}; low below {:.0f}% of it", best.name, line_text, kCopyLowFraction * 100);
    }
}

}  // namespace

LinkDetection detect_link(const SystemSnapshot& s) {
    LinkDetection d;
    std::map<std::string, int> per_host;
    for (const GpuReading& g : s.gpus) per_host[g.host]++;
    bool several = false;
    for (const auto& [host, n] : per_host) several = several || n > 1;
    if (!several) {
        d.single_gpu = true;
        d.how = "one GPU per host: no link between GPUs to judge";
        return d;
    }
    int up = 0, unread = 0, may_have_nvlink = 0;
    for (const GpuReading& g : s.gpus) {
        if (g.nvlink_active > 0) ++up;
        if (g.nvlink_active < 0) ++unread;
        const ModelExpectation* m = find_expectation(g.name);
        if (!m || m->nvlink_links != std::vector<int>{0}) ++may_have_nvlink;
    }
    if (up > 0) {
        d.link = LinkClass::nvlink;
        d.how = fmt::format("nvlink: NVML shows links up on {} of {} GPUs", up, s.gpus.size());
        return d;
    }
    if (unread > 0 && may_have_nvlink > 0) {
        d.how = fmt::format("unknown: NVML gave no NVLink state for {} GPU(s) of a model that may have NVLink, so NVLink "
                            "cannot be told from PCIe",
                            unread);
        return d;
    }
    int granted = 0, denied = 0, unknown = 0;
    for (const PairReading& p : s.pairs) (p.cuda_p2p == 1 ? granted : p.cuda_p2p == 0 ? denied : unknown)++;
    const std::string no_nvlink = unread > 0 ? "the model has no NVLink" : "NVML shows no NVLink link up";
    if (unknown > 0 || granted + denied == 0) {
        d.how = "unknown: peer access between the GPUs was not read";
    } else if (denied == 0) {
        d.link = LinkClass::pcie_p2p;
        d.how = fmt::format("pcie_p2p: {}, every pair granted peer access", no_nvlink);
    } else if (granted == 0) {
        d.link = LinkClass::host_staged;
        d.how = fmt::format("host_staged: {}, no pair granted peer access", no_nvlink);
    } else {
        d.how = fmt::format("unknown: peer access on {} of {} pairs only", granted, granted + denied);
    }
    return d;
}

ExpectedBands expected_bands(const SystemSnapshot& s, const std::vector<HardwareProfile>& profiles,
                             const std::vector<PublishedBusbw>& published) {
    ExpectedBands b;
    if (s.gpus.empty()) {
        b.why_none = "no GPU was read";
        return b;
    }
    if (std::string mixed = mixed_gpus(s); !mixed.empty()) {
        b.why_none = mixed + ": no one profile fits (the uniformity row)";
        return b;
    }
    const GpuReading& g = s.gpus.front();
    const LinkDetection link = detect_link(s);
    b.link = link.how;
    const ModelExpectation* model = find_expectation(g.name);
    if (link.single_gpu) {
        // One GPU per host: the card's own profile (any link): no link band applies.
        if (const HardwareProfile* hw = find_profile(profiles, g.name, g.memory_mib, std::nullopt)) {
            b.profile = hw->name;
            set_card_bands(b, *hw);
        } else {
            b.why_none = fmt::format("no hardware profile in configs/hardware for '{}'", g.name);
        }
        return b;
    }
    if (!link.link) {
        b.why_none = fmt::format("the link between the GPUs is {}", link.how);
        if (const HardwareProfile* hw = find_profile(profiles, g.name, g.memory_mib, std::nullopt)) set_card_bands(b, *hw);
        return b;
    }
    const HardwareProfile* best = find_profile(profiles, g.name, g.memory_mib, link.link);
    if (!best) {
        b.why_none = fmt::format("no hardware profile in configs/hardware for '{}' with a {} link", g.name,
                                 link_class_name(*link.link));
        if (const HardwareProfile* hw = find_profile(profiles, g.name, g.memory_mib, std::nullopt)) set_card_bands(b, *hw);
        return b;
    }
    b.profile = best->name;
    set_card_bands(b, *best);
    set_link_bands(b, *best, model);
    // A published all-reduce figure is the fabric's: it counts for every profile with the same link.
    const double line = line_rate(*best);
    for (const PublishedBusbw& p : published)
        for (const HardwareProfile& hw : profiles)
            if (hw.name == p.profile && hw.link == best->link && line_rate(hw) == line) b.published.push_back(p);
    return b;
}

Band host_copy_band(const GpuReading& g) {
    Band b;
    PcieLink card = g.pcie_card_max;
    std::string whose = "the card's own maximum";
    if (card.gen == 0) {
        if (const ModelExpectation* m = find_expectation(g.name)) {
            card = {m->pcie_gen, m->pcie_width};
            whose = "the model's, " + m->pcie_source;
        } else {
            card = g.pcie_max;
            whose = "the link's maximum";
        }
    }
    if (card.gen < 3 || card.gen > 5 || card.width <= 0) return b;
    b.ceiling = pcie_gbps(card.gen, card.width);
    b.lo = kCopyLowFraction * b.ceiling;
    b.source = fmt::format("PCIe Gen{} x{} line rate {:.1f} GB/s per direction ({}); low below {:.0f}%", card.gen,
                           card.width, b.ceiling, whose, kCopyLowFraction * 100);
    return b;
}

int gpus_sharing_switch(const SystemSnapshot& s, const GpuReading& g) {
    std::set<int> group = {g.index};
    for (const PairReading& p : s.pairs)
        if (p.host == g.host && p.pcie_path == "same_switch" && (p.a == g.index || p.b == g.index))
            group.insert(p.a == g.index ? p.b : p.a);
    return static_cast<int>(group.size());
}

}  // namespace sb::doctor
