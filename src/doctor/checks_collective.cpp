// Collective and training checks: all_reduce, all_gather and reduce_scatter through NCCL, each
// checked element by element, grown in size until busbw reaches the band or levels off
// (sweep_sizes.h), and its busbw set against the link's band (NVLS-aware); the
// transport NCCL chose; the NCCL_P2P_DISABLE=1 control; and the short training run, whose
// efficiency line comes from the same band (no fixed percentage).
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "src/doctor/check_util.h"
#include "src/doctor/sweep_sizes.h"

namespace sb::doctor::detail {

namespace {

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

// A run that did not finish, or a wrong element of `op`: the fail's cause and fix.
void judge_run(Check& c, const CollectiveRun& r, const std::string& op, bool is_control) {
    const bool p2p = uses(r, "P2P");
    const std::string where = is_control ? "the control (NCCL_P2P_DISABLE=1)" : "the " + op;
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
    for (const AllReduceRow& row : r.rows)
        if (row.op == op || is_control) wrong += row.wrong;
    if (wrong > 0)
        raise(c, Verdict::fail,
              fmt::format("{} returned {} wrong elements{}", where, wrong,
                          p2p ? " over P2P: the peer path corrupts data (tinygrad/open-gpu-kernel-modules#45, "
                                "noonghunna/club-3090 PR#926)"
                              : ""),
              p2p ? "NCCL_P2P_DISABLE=1 now; then the driver, BAR1, IOMMU and ACS rows"
                  : "check the host memory and the network path");
}

std::string op_title(const std::string& op) {
    return op == "all_reduce" ? "all-reduce" : op == "all_gather" ? "all-gather" : "reduce-scatter";
}

const SweepStop* find_stop(const CollectiveRun& r, const std::string& op) {
    for (const SweepStop& x : r.stops)
        if (x.op == op) return &x;
    return nullptr;
}

std::string size_text(double bytes) {
    return bytes >= 1048576 ? fmt::format("{:.0f} MiB", bytes / 1048576.0) : fmt::format("{:.0f} KiB", bytes / 1024.0);
}

// What the sweep of `op` measured and where it stopped growing, and why.
std::string sweep_figures(const CollectiveRun& run, const std::string& op) {
    std::vector<std::string> parts;
    for (const AllReduceRow& x : run.rows)
        if (x.op == op) parts.push_back(fmt::format("{} {:.2f} GB/s", size_text(x.bytes), x.busbw_gbps));
    std::string text = fmt::format("{} ranks, busbw {}", run.nranks, join(parts, ", "));
    if (const SweepStop* stop = find_stop(run, op))
        text += fmt::format("; grew to {}: {}{}", size_text(stop->bytes), sweep_stop_text(stop->reason),
                            stop->reason == kStopBandReached ? fmt::format(" ({:.1f} GB/s)", run.target_gbps) : "");
    return text;
}

Check check_collective(const SystemSnapshot& s, const ExpectedBands& bands, const CollectiveRun& run,
                       const std::string& op) {
    Check c = check(Tier::collective, op_title(op) + ", checked and timed");
    judge_run(c, run, op, false);
    const AllReduceRow* row = largest_row(run, op);
    if (!row) {
        if (c.verdict == Verdict::pass)
            return unjudged(Tier::collective, c.name, fmt::format("the sweep returned no {} measurement", op));
        return c;
    }
    c.figures = sweep_figures(run, op);
    if (s.shared_gpu) {
        c.band = "no band: the ranks share one GPU and talk through NCCL's network transport (not a hardware figure)";
        return c;
    }
    if (!bands.busbw.known()) {
        if (c.verdict == Verdict::pass) return unjudged(Tier::collective, c.name, "no band: " + bands.why_none);
        return c;
    }
    c.band = bands.busbw.source;
    for (const PublishedBusbw& p : bands.published)
        c.band += fmt::format("; published all-reduce {:.1f} GB/s on {} GPUs at {:.0f} MiB ({})", p.busbw_gbps, p.gpus,
                              p.bytes / 1048576.0, p.source);
    const AllReduceRow* reached = nullptr;
    const AllReduceRow* fastest = row;
    for (const AllReduceRow& x : run.rows) {
        if (x.op != op) continue;
        if (!reached && x.busbw_gbps >= bands.busbw.lo) reached = &x;
        if (x.busbw_gbps > fastest->busbw_gbps) fastest = &x;
    }
    const SweepStop* stop = find_stop(run, op);
    if (!stop || stop->reason != kStopBandReached)
        c.figures += reached ? fmt::format("; the band's low end reached at {}", size_text(reached->bytes))
                             : "; the band's low end is not reached at any size";
    const bool capped = stop && (stop->reason == kStopMaxBytes || stop->reason == kStopMemory);
    if (fastest->busbw_gbps > bands.busbw.ceiling * 1.02) {
        raise(c, Verdict::fail,
              fmt::format("busbw {:.1f} GB/s at {} is above the link's {:.1f} GB/s: a unit or timing error",
                          fastest->busbw_gbps, size_text(fastest->bytes), bands.busbw.ceiling),
              "report it: the measurement is wrong, not the machine");
    } else if (row->busbw_gbps < bands.busbw.lo && capped && c.verdict == Verdict::pass) {
        // Still rising where the sweep had to stop: the band is for sizes where busbw has levelled off.
        Check u = unjudged(Tier::collective, c.name,
                           fmt::format("busbw {:.1f} GB/s at {} is below the band ({:.1f} GB/s) but still rising where "
                                       "the sweep stopped ({}): {}",
                                       row->busbw_gbps, size_text(row->bytes), bands.busbw.lo,
                                       sweep_stop_text(stop->reason),
                                       stop->reason == kStopMaxBytes ? "raise --max-bytes"
                                                                     : "free GPU memory (other processes) and rerun"));
        u.figures = c.figures;
        u.band = c.band;
        return u;
    } else if (row->busbw_gbps < bands.busbw.lo) {
        raise(c, Verdict::fail,
              fmt::format("busbw {:.1f} GB/s at {} is below the band ({:.1f} GB/s){}", row->busbw_gbps,
                          size_text(row->bytes), bands.busbw.lo,
                          stop && stop->reason == kStopLevel ? ", and levelled off there" : ""),
              "fix what the rows above name; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=GRAPH shows the rings and the transport");
    }
    return c;
}

Check check_transport(const SystemSnapshot& s, const CollectiveRun& run) {
    const std::string name = "transport NCCL chose";
    if (run.transports.empty()) return unjudged(Tier::collective, name, "NCCL's log named no channel connection");
    Check c = check(Tier::collective, name);
    c.figures = transports_text(run);
    const LinkDetection link = detect_link(s);
    if (s.shared_gpu) {
        c.figures += " (ranks share one GPU: NCCL's network transport between host identities)";
        if (!uses(run, "NET"))
            raise(c, Verdict::warn, "ranks sharing a GPU should connect through NET (each its own NCCL_HOSTID)",
                  "set a distinct NCCL_HOSTID per rank (--share-gpu does)");
    } else if (link.link && *link.link != LinkClass::host_staged && !uses(run, "P2P") && !uses(run, "NVLS")) {
        raise(c, Verdict::warn,
              "CUDA grants peer access but NCCL went through host memory: NCCL_P2P_DISABLE or NCCL_P2P_LEVEL is set, "
              "or NCCL judged the path too slow",
              "unset NCCL_P2P_DISABLE/NCCL_P2P_LEVEL (the variables row); NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=GRAPH "
              "shows why");
    }
    return c;
}

Check check_control(const CollectiveRun& as_is, const CollectiveRun* control) {
    const std::string name = "control with NCCL_P2P_DISABLE=1";
    if (!control) return skipped(Tier::collective, name, "the control did not run");
    Check c = check(Tier::collective, name);
    judge_run(c, *control, "all_reduce", true);
    // The largest all-reduce size both sweeps measured: each grows to its own stop.
    const AllReduceRow *a = nullptr, *b = nullptr;
    for (const AllReduceRow& x : as_is.rows)
        for (const AllReduceRow& y : control->rows)
            if (x.op == "all_reduce" && y.op == "all_reduce" && x.bytes == y.bytes && (!a || x.bytes > a->bytes)) {
                a = &x;
                b = &y;
            }
    if (a && b) {
        c.figures = fmt::format("all-reduce at {}: as is {:.2f} GB/s ({}), control {:.2f} GB/s ({})", size_text(a->bytes),
                                a->busbw_gbps, transports_text(as_is), b->busbw_gbps, transports_text(*control));
        if (uses(as_is, "P2P") && a->busbw_gbps < b->busbw_gbps)
            raise(c, Verdict::fail,
                  "P2P is slower than going through host memory: a socket link, ACS or the IOMMU in the peer path "
                  "(NVIDIA/nccl#1086)",
                  "NCCL_P2P_DISABLE=1 on this machine, or fix the path (ACS, IOMMU rows)");
    }
    return c;
}

}  // namespace

std::vector<Check> collective_checks(const SystemSnapshot& s, const ExpectedBands& bands) {
    std::vector<Check> out;
    const char* names[] = {"all-reduce, checked and timed", "all-gather, checked and timed",
                           "reduce-scatter, checked and timed", "transport NCCL chose",
                           "control with NCCL_P2P_DISABLE=1"};
    const CollectiveRun* as_is = find_run(s, "as_is");
    if (!s.collective_skipped.empty() || !as_is) {
        const bool blind = !s.gpus.empty() && !s.gpu_unavailable.empty() && s.world_size > 1;
        const std::string why = s.collective_skipped.empty() ? "no collective ran" : s.collective_skipped;
        for (const char* n : names)
            out.push_back(blind ? unjudged(Tier::collective, n, why + " (" + s.gpu_unavailable + ")")
                                : skipped(Tier::collective, n, why));
        return out;
    }
    for (const char* op : {"all_reduce", "all_gather", "reduce_scatter"}) out.push_back(check_collective(s, bands, *as_is, op));
    out.push_back(check_transport(s, *as_is));
    out.push_back(check_control(*as_is, find_run(s, "p2p_disabled")));
    return out;
}

Check training_check(const SystemSnapshot& s, const ExpectedBands& bands) {
    const std::string name = "short training run at 1 and N ranks";
    if (!s.training_skipped.empty()) return skipped(Tier::training, name, s.training_skipped);
    const TrainingReading& t = s.training;
    if (t.world_size <= 0) return unjudged(Tier::training, name, "no training run was recorded");
    Check c = check(Tier::training, name);
    c.figures = fmt::format("{} at {} rank{}: {:.1f} samples/s (1 rank {:.1f}), efficiency {:.1f}%, step {:.2f} ms, "
                            "exposed communication {:.2f} ms",
                            t.preset, t.world_size, t.world_size == 1 ? "" : "s", t.samples_per_s_n, t.samples_per_s_1,
                            t.efficiency * 100, t.step_ms, t.exposed_comm_ms);
    if (!t.checks_passed)
        raise(c, Verdict::fail, "a replica or all-reduce check of the run failed: ranks disagree on the weights",
              "the collective tier names the path; rerun `scalebench train --recheck-allreduce`");
    const bool cpu_ranks = !s.ranks.empty() && std::all_of(s.ranks.begin(), s.ranks.end(),
                                                           [](const RankReading& r) { return r.device < 0; });
    if (s.shared_gpu) {
        c.band = "no band: the ranks share one GPU, so efficiency is not a hardware figure";
    } else if (cpu_ranks) {
        c.band = "no band: CPU ranks, whose efficiency depends on the cores they share";
    } else if (t.world_size > 1) {
        if (!bands.busbw.known() || t.step_ms_1 <= 0 || t.gradient_bytes <= 0) {
            c.band = "no band: " + (bands.busbw.known() ? std::string("the 1-rank step or gradient size was not recorded")
                                                        : bands.why_none);
            return c;
        }
        // The efficiency a run reaches with its all-reduce at the band's low end and nothing
        // overlapped: a healthy rig hides some of it, so it stays at or above this line.
        const int n = t.world_size;
        const double ar_ms = t.gradient_bytes * 2.0 * (n - 1) / n / (bands.busbw.lo * 1e9) * 1e3;
        const double line = t.step_ms_1 / (t.step_ms_1 + ar_ms);
        c.band = fmt::format("efficiency >= {:.0f}%: the 1-rank step {:.2f} ms plus the all-reduce of {:.1f} MB at the "
                             "band's low end ({:.1f} GB/s busbw, {:.2f} ms), none of it overlapped",
                             line * 100, t.step_ms_1, t.gradient_bytes / 1e6, bands.busbw.lo, ar_ms);
        if (t.efficiency < line)
            raise(c, Verdict::warn,
                  fmt::format("efficiency {:.0f}% is below even an unoverlapped all-reduce at the band's low end, with "
                              "{:.2f} ms of a {:.2f} ms step waiting on it: {}",
                              t.efficiency * 100, t.exposed_comm_ms, t.step_ms,
                              t.exposed_comm_ms > 0.2 * t.step_ms ? "communication is exposed (collective tier)"
                                                                  : "the ranks slow each other (clocks, power rows)"),
                  "fix what the collective and configuration rows name; larger buckets or batches hide more");
    }
    return c;
}

}  // namespace sb::doctor::detail
