// Topology checks: which GPUs, each against its model's datasheet (expectations.h), the rank
// binding, NVLink links up against the model's count, P2P access and the path between pairs.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "src/doctor/check_util.h"

namespace sb::doctor::detail {

namespace {

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

// Memory, the card's own PCIe maximum and the default power limit against the model's row.
Check check_models(const SystemSnapshot& s) {
    Check c = check(Tier::topology, "each GPU against its model's datasheet");
    std::vector<std::string> parts, sources;
    for (const GpuReading& g : s.gpus) {
        const ModelExpectation* m = find_expectation(g.name);
        if (!m)
            return unjudged(Tier::topology, c.name,
                            fmt::format("no expectations for '{}' (src/doctor/expectations.cpp): nothing is guessed",
                                        g.name.empty() ? "an unnamed GPU" : g.name));
        if (g.memory_mib <= 0) return unjudged(Tier::topology, c.name, blind_reason(s, "the memory size"));
        const double gib = g.memory_mib / 1024;
        const bool memory_ok = std::any_of(m->memory_gb.begin(), m->memory_gb.end(),
                                           [&](double gb) { return gib >= 0.95 * gb && gib <= 1.03 * gb; });
        parts.push_back(fmt::format("{} {:.1f} GiB", gpu_label(s, g), gib));
        if (!memory_ok)
            raise(c, Verdict::fail,
                  fmt::format("{} shows {:.1f} GiB where a {} has {} GB ({})", gpu_label(s, g), gib, g.name,
                              join([&] {
                                  std::vector<std::string> v;
                                  for (double gb : m->memory_gb) v.push_back(fmt::format("{:.0f}", gb));
                                  return v;
                              }(), " or "),
                              m->memory_source),
                  "nvidia-smi -q -d MEMORY: a different card or a memory fault; have the card serviced");
        if (g.pcie_card_max.gen > 0 &&
            (g.pcie_card_max.gen < m->pcie_gen || g.pcie_card_max.width < m->pcie_width))
            raise(c, Verdict::fail,
                  fmt::format("{} reports its own maximum as Gen{} x{} where the model is Gen{} x{} ({})",
                              gpu_label(s, g), g.pcie_card_max.gen, g.pcie_card_max.width, m->pcie_gen, m->pcie_width,
                              m->pcie_source),
                  "update the VBIOS; a card that still reports less needs service");
        if (g.power_default_w > 0 && std::abs(g.power_default_w - m->power_default_w) > 0.05 * m->power_default_w)
            raise(c, Verdict::warn,
                  fmt::format("{}'s default power limit is {:.0f} W where the model's is {:.0f} W ({}): an OEM variant "
                              "or a VBIOS that changes the card's rates",
                              gpu_label(s, g), g.power_default_w, m->power_default_w, m->power_source),
                  "compare the VBIOS (nvidia-smi -q | grep VBIOS) with the vendor's; expect the rates of its limit");
        if (std::find(sources.begin(), sources.end(), m->memory_source) == sources.end())
            sources.push_back(m->memory_source);
    }
    c.figures = "memory: " + join(parts, ", ");
    c.band = join(sources);
    return c;
}

Check check_binding(const SystemSnapshot& s) {
    Check c = check(Tier::topology, "rank binding against each GPU's CPUs");
    std::vector<std::string> parts;
    int judged = 0, on_gpu = 0;
    for (const RankReading& r : s.ranks) {
        const GpuReading* g = r.device < 0 ? nullptr : find_gpu(s, r.host, r.device);
        if (g) ++on_gpu;
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
    if (on_gpu == 0) return skipped(Tier::topology, c.name, "no rank drives a GPU that was read");
    if (judged == 0)
        return unjudged(Tier::topology, c.name, "no rank's CPU binding and its GPU's CPU list (sysfs local_cpulist) "
                                                "were both readable");
    c.figures = join(parts);
    return c;
}

Check check_nvlink(const SystemSnapshot& s, const LinkDetection& link) {
    Check c = check(Tier::topology, "NVLink links up");
    if (link.single_gpu) return skipped(Tier::topology, c.name, "one GPU per host: its NVLinks lead to no GPU seen here");
    std::vector<std::string> parts;
    for (const GpuReading& g : s.gpus) {
        const ModelExpectation* m = find_expectation(g.name);
        if (g.nvlink_active < 0) {
            if (m && m->nvlink_links == std::vector<int>{0}) {
                parts.push_back(fmt::format("{} none (the model has no NVLink)", gpu_label(s, g)));
                continue;
            }
            return unjudged(Tier::topology, c.name, blind_reason(s, "NVLink state (NVML)"));
        }
        if (!m) return unjudged(Tier::topology, c.name, fmt::format("no expected NVLink count for '{}'", g.name));
        parts.push_back(fmt::format("{} {}", gpu_label(s, g), g.nvlink_active));
        const auto& ok = m->nvlink_links;
        if (std::find(ok.begin(), ok.end(), g.nvlink_active) == ok.end()) {
            const int expected = *std::max_element(ok.begin(), ok.end());
            raise(c, Verdict::fail,
                  fmt::format("{} has {} NVLink links up where a {} has {} ({}): a link is down", gpu_label(s, g),
                              g.nvlink_active, g.name, expected, m->nvlink_source),
                  "nvidia-smi nvlink -s and -e to find the link; check nvidia-fabricmanager is running (NVSwitch "
                  "systems); reseat or have the board serviced");
        }
        c.band = m->nvlink_source;
    }
    // Cards with an optional bridge: all bridged or none.
    std::set<int> counts;
    for (const GpuReading& g : s.gpus) counts.insert(g.nvlink_active);
    if (counts.size() > 1 && c.verdict == Verdict::pass)
        raise(c, Verdict::fail, "GPUs of one model show different NVLink counts: a bridge is missing or a link is down",
              "nvidia-smi nvlink -s; seat the missing bridge");
    c.figures = join(parts, ", ");
    return c;
}

Check check_p2p_matrix(const SystemSnapshot& s) {
    Check c = check(Tier::topology, "P2P access between GPUs");
    if (s.pairs.empty()) return skipped(Tier::topology, c.name, "one GPU per host: no pair of GPUs to connect");
    int granted = 0, denied = 0;
    std::vector<std::string> parts;
    for (const PairReading& p : s.pairs) {
        if (p.cuda_p2p < 0) return unjudged(Tier::topology, c.name, blind_reason(s, "cudaDeviceCanAccessPeer"));
        (p.cuda_p2p == 1 ? granted : denied)++;
        parts.push_back(fmt::format("{}-{} {}", p.a, p.b, p.cuda_p2p == 1 ? "yes" : "no"));
    }
    c.figures = fmt::format("{} of {} pairs granted ({})", granted, granted + denied, join(parts, ", "));
    const ModelExpectation* m = find_expectation(s.gpus.front().name);
    if (granted == 0 && m && !m->stock_p2p) {
        c.figures += "; the stock driver grants no P2P between GeForce cards (NVIDIA/nccl#1309): NCCL uses host memory "
                     "(SHM), as the model's host-staged profile expects";
    } else if (granted == 0) {
        raise(c, Verdict::warn,
              "no pair has peer access on a model whose driver grants it: a virtual machine, the IOMMU or ACS",
              "check the IOMMU and ACS rows; in a VM, pass the GPUs through with P2P enabled");
    } else if (denied > 0) {
        raise(c, Verdict::warn, "peer access for some pairs only: GPUs behind different bridges, ACS, or mixed cards",
              "keep each job's GPUs to the granted pairs, or clear ACS on the bridges between them");
    }
    return c;
}

Check check_paths(const SystemSnapshot& s) {
    Check c = check(Tier::topology, "what lies between each pair");
    if (s.pairs.empty()) return skipped(Tier::topology, c.name, "one GPU per host: no pair of GPUs");
    std::map<std::string, int> kinds, beside;  // beside: the PCIe path of pairs that talk over NVLink
    int socket_p2p = 0;
    for (const PairReading& p : s.pairs) {
        const std::string pcie = p.pcie_path.empty() && p.path != "nvlink" ? p.path : p.pcie_path;
        if (p.path.empty() && pcie.empty())
            return unjudged(Tier::topology, c.name, "the path between the GPUs was not read (sysfs device tree)");
        kinds[p.path == "nvlink" ? "nvlink" : pcie]++;
        if (p.path == "nvlink" && !pcie.empty()) beside[pcie]++;
        if (pcie == "socket_link" && pcie_p2p_pair(p)) ++socket_p2p;
    }
    auto text = [](const std::map<std::string, int>& m) {
        std::vector<std::string> parts;
        for (const auto& [kind, n] : m) parts.push_back(fmt::format("{} {}", n, kind));
        return join(parts, ", ");
    };
    c.figures = "pairs by path: " + text(kinds);
    if (!beside.empty()) c.figures += " (their PCIe paths: " + text(beside) + ")";
    if (socket_p2p > 0)
        c.figures += fmt::format("; {} pair(s) granted P2P across the socket link (NCCL may use it or not: the "
                                 "control row compares it with host memory, NVIDIA/nccl#1086)",
                                 socket_p2p);
    return c;
}

}  // namespace

std::vector<Check> topology_checks(const SystemSnapshot& s, const ExpectedBands&) {
    const char* names[] = {"GPUs, PCIe address, NUMA node", "each GPU against its model's datasheet",
                           "rank binding against each GPU's CPUs", "NVLink links up", "P2P access between GPUs",
                           "what lies between each pair"};
    std::vector<Check> out;
    if (s.gpus.empty()) {
        const std::string why = s.gpu_unavailable.empty() ? "no GPU was read" : s.gpu_unavailable;
        for (const char* n : names) out.push_back(skipped(Tier::topology, n, why));
        return out;
    }
    const LinkDetection link = detect_link(s);
    for (Check c : {check_gpus(s), check_models(s), check_binding(s), check_nvlink(s, link), check_p2p_matrix(s),
                    check_paths(s)})
        out.push_back(c);
    return out;
}

}  // namespace sb::doctor::detail
