// Settings checks (configuration tier): the GPU modes that change every result (persistence,
// MIG, compute mode, locked clocks), NCCL and CUDA variables that force a transport, and the
// error history (row remapping, PCIe replays, NVLink error counters, XIDs in the kernel log).
#include <algorithm>

#include <fmt/format.h>

#include "src/doctor/check_util.h"

namespace sb::doctor::detail {

namespace {

// Thresholds on cumulative counters (assumption: a handful of replays over a boot is noise).
constexpr int64_t kReplayWarn = 100, kNvlinkErrorWarn = 100;

Check check_modes(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "persistence, MIG, compute mode, locked clocks");
    std::vector<std::string> parts;
    for (const GpuReading& g : s.gpus) {
        if (g.persistence < 0 || g.mig < 0 || g.compute_mode.empty() || g.clocks_locked < 0)
            return unjudged(Tier::configuration, c.name, blind_reason(s, "the GPU modes (NVML)"));
        const std::string who = gpu_label(s, g);
        parts.push_back(fmt::format("{} persistence {}, MIG {}, compute {}, clocks {}", who, g.persistence ? "on" : "off",
                                    g.mig ? "on" : "off", g.compute_mode, g.clocks_locked ? "locked" : "default"));
        if (g.persistence == 0)
            raise(c, Verdict::warn,
                  fmt::format("persistence mode is off on {}: the driver unloads between jobs, so each start pays "
                              "seconds of initialisation and loses settings such as power limits",
                              who),
                  "run nvidia-persistenced (or nvidia-smi -pm 1)");
        if (g.mig == 1)
            raise(c, Verdict::fail, fmt::format("MIG is on on {}: a job sees a slice of the GPU, not the card", who),
                  "nvidia-smi -i N -mig 0 (and reset the GPU) unless slices are what you mean to measure");
        if (g.compute_mode == "prohibited")
            raise(c, Verdict::fail, fmt::format("{}'s compute mode is prohibited: no process may use it", who),
                  "nvidia-smi -i N -c DEFAULT");
        if (g.clocks_locked == 1)
            raise(c, Verdict::warn,
                  fmt::format("{} has locked or application clocks set: every rate follows that clock, not the card's",
                              who),
                  "nvidia-smi -i N -rgc -rmc -rac to restore the defaults (unless the lock is the experiment)");
    }
    c.figures = join(parts);
    return c;
}

Check check_env(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "NCCL and CUDA variables that force a transport");
    if (s.ranks.empty()) return skipped(Tier::configuration, c.name, "no rank was read");
    std::vector<std::string> set;
    for (const RankReading& r : s.ranks)
        for (const std::string& kv : r.env)
            if (std::find(set.begin(), set.end(), kv) == set.end()) set.push_back(kv);
    c.figures = set.empty() ? "none set" : join(set, ", ");
    if (!set.empty())
        raise(c, Verdict::warn,
              fmt::format("{} set in the ranks' environment: NCCL takes the transport or algorithm it forces, not the "
                          "one the hardware allows (frameworks set NCCL_P2P_DISABLE silently on RTX 40 boxes)",
                          join(set, ", ")),
              "unset them (check the shell profile, the container's ENV and the launcher), unless they are the fix for "
              "a row above");
    return c;
}

Check check_error_history(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "error history: row remapping, PCIe replays, NVLink errors");
    std::vector<std::string> parts;
    for (const GpuReading& g : s.gpus) {
        const ModelExpectation* m = find_expectation(g.name);
        const bool remaps = m && m->row_remapping;
        if (g.pcie_replays < 0 || (remaps && g.row_remap_pending < 0))
            return unjudged(Tier::configuration, c.name, blind_reason(s, "the error counters (NVML)"));
        const std::string who = gpu_label(s, g);
        std::string text = fmt::format("{} PCIe replays {}", who, g.pcie_replays);
        if (g.nvlink_errors >= 0) text += fmt::format(", NVLink errors {}", g.nvlink_errors);
        if (remaps)
            text += fmt::format(", rows remapped for uncorrectable errors {}, pending {}, failure {}",
                                g.remapped_rows_uncorrectable, g.row_remap_pending ? "yes" : "no",
                                g.row_remap_failure == 1 ? "yes" : "no");
        parts.push_back(text);
        if (g.row_remap_failure == 1)
            raise(c, Verdict::fail, fmt::format("{} failed to remap a row: its memory has no spare rows left", who),
                  "replace the GPU (NVIDIA GPU Memory Error Management: a remap failure is an RMA condition)");
        if (g.row_remap_pending == 1)
            raise(c, Verdict::warn, fmt::format("{} has a row remap pending: it takes effect at the next reset", who),
                  "nvidia-smi -i N -r (or reboot) when the GPU is idle");
        if (g.pcie_replays > kReplayWarn)
            raise(c, Verdict::warn,
                  fmt::format("{} replayed {} PCIe packets: the link has signal errors", who, g.pcie_replays),
                  "reseat the card or riser; a slot at Gen4/Gen5 may need a shorter riser or Gen3 in the BIOS");
        if (g.nvlink_errors > kNvlinkErrorWarn)
            raise(c, Verdict::warn,
                  fmt::format("{} counts {} NVLink CRC/replay/recovery errors", who, g.nvlink_errors),
                  "nvidia-smi nvlink -e to find the link; have the board serviced if a link keeps counting");
    }
    c.figures = join(parts);
    c.band = fmt::format("replays and NVLink errors warn above {} since boot (assumption)", kReplayWarn);
    return c;
}

Check check_xids(const SystemSnapshot& s) {
    Check c = check(Tier::configuration, "XID errors in the kernel log");
    std::vector<std::string> parts;
    for (const GpuReading& g : s.gpus) {
        if (g.xid_count < 0)
            return skipped(Tier::configuration, c.name,
                           "the kernel log was not readable (dmesg needs root where dmesg_restrict is set); NVML keeps "
                           "no XID history: journalctl -k | grep Xid");
        parts.push_back(fmt::format("{} {}{}", gpu_label(s, g), g.xid_count, g.xids.empty() ? "" : " (" + g.xids + ")"));
        if (g.xid_count > 0)
            raise(c, Verdict::warn,
                  fmt::format("{} logged XID {} since boot", gpu_label(s, g), g.xids),
                  "look each XID up in NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors); 79 (fell off the "
                  "bus), 48/95 (uncorrectable memory) and 74 (NVLink) call for service");
    }
    c.figures = join(parts);
    return c;
}

}  // namespace

std::vector<Check> settings_checks(const SystemSnapshot& s) {
    std::vector<Check> out;
    if (s.gpus.empty()) {
        const std::string why = s.gpu_unavailable.empty() ? "no GPU was read" : s.gpu_unavailable;
        for (const char* n : {"persistence, MIG, compute mode, locked clocks",
                              "error history: row remapping, PCIe replays, NVLink errors", "XID errors in the kernel log"})
            out.push_back(skipped(Tier::configuration, n, why));
        out.push_back(check_env(s));
        return out;
    }
    for (Check c : {check_modes(s), check_env(s), check_error_history(s), check_xids(s)})
        out.push_back(c);
    return out;
}

}  // namespace sb::doctor::detail
