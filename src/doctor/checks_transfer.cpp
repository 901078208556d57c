// Transfer checks: host-device copies (one GPU at a time, and all at once against the share of
// a PCIe switch uplink each GPU has), peer copies and host-staged copies, each verified and set
// against its band.
#include <functional>

#include <fmt/format.h>

#include "src/doctor/check_util.h"

namespace sb::doctor::detail {

namespace {

// Judges each copy of one kind against its band: a wrong byte or a rate above the ceiling
// fails, a rate below the low end warns; the slowest is named.
Check check_copies(const SystemSnapshot& s, const std::string& kind, const std::string& name,
                   const std::function<Band(const CopyReading&)>& band_of, const std::string& low_cause,
                   const std::string& low_fix) {
    Check c = check(Tier::transfer, name);
    std::vector<std::string> parts, bands;
    const CopyReading* slowest = nullptr;
    auto end = [](int d) { return d < 0 ? std::string("host") : "GPU" + std::to_string(d); };
    for (const CopyReading& x : s.copies) {
        if (x.kind != kind) continue;
        const std::string what = fmt::format("{}->{}{}", end(x.src), end(x.dst), x.concurrent ? " (all at once)" : "");
        parts.push_back(fmt::format("{} {:.1f} GB/s, {:.1f} us", what, x.gbps, x.latency_us));
        if (!slowest || x.gbps < slowest->gbps) slowest = &x;
        if (!x.error.empty())
            raise(c, Verdict::fail, fmt::format("{} failed: {}", what, x.error),
                  "do not use this path: NCCL_P2P_DISABLE=1 for peer copies; check the driver, BAR1, IOMMU and ACS rows");
        else if (!x.correct)
            raise(c, Verdict::fail, fmt::format("{} returned wrong data", what),
                  "do not use this path: NCCL_P2P_DISABLE=1 for peer copies; check the driver, IOMMU and ACS rows");
        const Band b = band_of(x);
        if (!b.known()) continue;
        if (std::find(bands.begin(), bands.end(), b.source) == bands.end()) bands.push_back(b.source);
        if (x.gbps > b.ceiling * 1.02)
            raise(c, Verdict::fail,
                  fmt::format("{} at {:.1f} GB/s is above what the link carries ({:.1f} GB/s): a unit or timing error",
                              what, x.gbps, b.ceiling),
                  "report it: the measurement is wrong, not the machine");
        else if (x.gbps < b.lo)
            raise(c, Verdict::warn,
                  fmt::format("{} reads low ({:.1f} GB/s, expected >= {:.1f}): {}", what, x.gbps, b.lo, low_cause),
                  low_fix);
    }
    if (!slowest) return Check{};  // the caller skips
    c.figures = join(parts) + fmt::format("; slowest {}->{}", end(slowest->src), end(slowest->dst));
    if (bands.empty()) return unjudged(Tier::transfer, name, "no band: the card's PCIe link or its profile is unknown");
    c.band = join(bands);
    return c;
}

// The host-copy band of the GPU a copy serves; all at once, its share of a switch uplink.
Band host_band(const SystemSnapshot& s, const CopyReading& x) {
    const GpuReading* g = find_gpu(s, x.host, x.src < 0 ? x.dst : x.src);
    if (!g) return {};
    Band b = host_copy_band(*g);
    const int sharing = gpus_sharing_switch(s, *g);
    if (!x.concurrent || sharing < 2 || !b.known()) return b;
    b.lo /= sharing;
    b.source += fmt::format("; all at once: {} GPUs share one switch uplink by design, so each has 1/{} of it", sharing,
                            sharing);
    return b;
}

Band staged_band(const SystemSnapshot& s, const CopyReading& x) {
    CopyReading one_way = x;  // the staged copy's first hop: the source GPU's own link, alone
    one_way.dst = -1;
    one_way.concurrent = false;
    Band b = host_band(s, one_way);
    if (!b.known()) return b;
    b.lo = kStagedLowFraction * b.ceiling;
    b.source = fmt::format("PCIe line rate {:.1f} GB/s; low below {:.1f}% of it, the lowest published host-staged "
                           "copy (NVIDIA/nccl-tests#117, profile rtx4090-24gb-pcie4)",
                           b.ceiling, kStagedLowFraction * 100);
    return b;
}

}  // namespace

std::vector<Check> transfer_checks(const SystemSnapshot& s, const ExpectedBands& bands) {
    std::vector<Check> out;
    const char* names[] = {"host to device (pinned)", "device to host (pinned)", "peer copy (cudaMemcpyPeer)",
                           "host-staged copy between GPUs"};
    const bool blind = !s.gpus.empty() && !s.gpu_unavailable.empty();
    if (!s.transfer_skipped.empty() || s.gpus.empty() || blind) {
        const std::string why = blind                       ? s.gpu_unavailable
                                : !s.transfer_skipped.empty() ? s.transfer_skipped
                                                              : "no GPU was read";
        for (const char* n : names) out.push_back(blind ? unjudged(Tier::transfer, n, why) : skipped(Tier::transfer, n, why));
        return out;
    }
    const std::string host_cause =
        "the link trained down, a pinned buffer on the far NUMA node, or another device sharing the link";
    const std::string host_fix = "see the PCIe and binding rows; bind the rank to the GPU's NUMA node";
    auto by_host = [&](const CopyReading& x) { return host_band(s, x); };
    Check h2d = check_copies(s, "h2d", names[0], by_host, host_cause, host_fix);
    Check d2h = check_copies(s, "d2h", names[1], by_host, host_cause, host_fix);
    out.push_back(h2d.name.empty() ? unjudged(Tier::transfer, names[0], "no host-to-device copy was measured") : h2d);
    out.push_back(d2h.name.empty() ? unjudged(Tier::transfer, names[1], "no device-to-host copy was measured") : d2h);
    Check peer = check_copies(s, "peer", names[2], [&](const CopyReading&) { return bands.peer_copy; },
                              "the path crosses a socket link or a bridge with ACS, or the link trained down",
                              "see the path, ACS and PCIe rows");
    if (peer.name.empty())
        peer = s.pairs.empty() ? skipped(Tier::transfer, names[2], "one GPU per host: no pair to copy between")
               : any_p2p(s)    ? unjudged(Tier::transfer, names[2], "P2P is granted but no peer copy was measured")
                               : skipped(Tier::transfer, names[2], "peer access is not granted on any pair (topology row)");
    else if (peer.verdict == Verdict::unjudged)
        peer.cause = "no peer-copy band: " + bands.why_none;
    out.push_back(peer);
    Check staged = check_copies(s, "staged", names[3], [&](const CopyReading& x) { return staged_band(s, x); },
                                "host memory bandwidth, the far NUMA node, or a trained-down link",
                                "see the binding and PCIe rows");
    if (staged.name.empty())
        staged = s.pairs.empty() ? skipped(Tier::transfer, names[3], "one GPU per host: no pair to copy between")
                                 : unjudged(Tier::transfer, names[3], "no staged copy was measured");
    out.push_back(staged);
    return out;
}

}  // namespace sb::doctor::detail
