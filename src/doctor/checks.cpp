// The ladder of checks (checks.h): the verdict names, what every tier's checks share
// (check_util.h), and the run of every tier in order, its tier verdicts and the exit code.
// Each tier's checks live in their own file: checks_topology.cpp, checks_configuration.cpp,
// checks_settings.cpp, checks_transfer.cpp, checks_collective.cpp.
#include "src/doctor/checks.h"

#include <set>

#include <fmt/format.h>

#include "src/doctor/check_util.h"

namespace sb::doctor {

const char* verdict_name(Verdict v) {
    switch (v) {
        case Verdict::pass: return "pass";
        case Verdict::warn: return "warn";
        case Verdict::fail: return "fail";
        case Verdict::skipped: return "skipped";
        case Verdict::unjudged: return "unjudged";
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

namespace detail {

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

Check unjudged(Tier t, std::string name, std::string reason) {
    Check c = check(t, std::move(name));
    c.verdict = Verdict::unjudged;
    c.cause = std::move(reason);
    return c;
}

void raise(Check& c, Verdict v, const std::string& cause, const std::string& fix) {
    if (v == Verdict::fail || (v == Verdict::warn && c.verdict == Verdict::pass)) c.verdict = v;
    auto add = [](std::string& to, const std::string& text) {
        if (text.empty() || to.find(text) != std::string::npos) return;
        to += (to.empty() ? "" : "; ") + text;
    };
    add(c.cause, cause);
    add(c.fix, fix);
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
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

bool pcie_p2p_pair(const PairReading& p) { return p.cuda_p2p == 1 && p.path != "nvlink"; }

bool any_pcie_p2p(const SystemSnapshot& s) {
    for (const PairReading& p : s.pairs)
        if (pcie_p2p_pair(p)) return true;
    return false;
}

bool any_p2p(const SystemSnapshot& s) {
    for (const PairReading& p : s.pairs)
        if (p.cuda_p2p == 1) return true;
    return false;
}

std::string mib_text(double mib) {
    if (mib < 1024) return fmt::format("{:.0f} MiB", mib);
    return fmt::format("{:.0f} GiB", mib / 1024);
}

std::string blind_reason(const SystemSnapshot& s, const std::string& what) {
    if (!s.gpu_unavailable.empty()) return fmt::format("{} was not read: {}", what, s.gpu_unavailable);
    for (const GpuReading& g : s.gpus)
        if (!g.nvml_error.empty()) return fmt::format("{} was not read: NVML: {}", what, g.nvml_error);
    return what + " was not read";
}

const AllReduceRow* largest_row(const CollectiveRun& r, const std::string& op) {
    const AllReduceRow* best = nullptr;
    for (const AllReduceRow& row : r.rows)
        if (row.op == op && (!best || row.bytes > best->bytes)) best = &row;
    return best;
}

}  // namespace detail

std::vector<Check> run_checks(const SystemSnapshot& s, const ExpectedBands& bands) {
    using namespace detail;
    std::vector<Check> out;
    auto add = [&](std::vector<Check> more) {
        for (Check& c : more) out.push_back(std::move(c));
    };
    add(topology_checks(s, bands));
    add(configuration_checks(s, bands));
    add(settings_checks(s));
    add(transfer_checks(s, bands));
    std::vector<Check> collective = collective_checks(s, bands);
    // A collective below its band names the rows above it that explain it.
    for (Check& c : collective) {
        if (c.verdict != Verdict::fail || c.cause.find("below the band") == std::string::npos) continue;
        std::vector<std::string> suspects;
        for (const Check& x : out)
            if (x.verdict == Verdict::fail || x.verdict == Verdict::warn) suspects.push_back(x.name);
        c.cause += suspects.empty() ? "; no row above explains it: the fabric itself (nvidia-smi topo -m, NCCL_DEBUG=INFO)"
                                    : "; the rows above that explain it: " + join(suspects, ", ");
    }
    add(collective);
    out.push_back(training_check(s, bands));
    return out;
}

Verdict tier_verdict(const std::vector<Check>& checks, Tier t) {
    Verdict v = Verdict::skipped;
    for (const Check& c : checks) {
        if (c.tier != t) continue;
        if (c.verdict == Verdict::fail) return Verdict::fail;
        if (c.verdict == Verdict::unjudged) v = Verdict::unjudged;
        if (c.verdict == Verdict::warn && v != Verdict::unjudged) v = Verdict::warn;
        if (c.verdict == Verdict::pass && v == Verdict::skipped) v = Verdict::pass;
    }
    return v;
}

int exit_code(const std::vector<Check>& checks) {
    int bits = 0;
    for (size_t i = 0; i < std::size(kTiers); ++i) {
        const Verdict v = tier_verdict(checks, kTiers[i]);
        if (v == Verdict::fail) bits |= 1 << i;
        if (v == Verdict::unjudged) bits |= kCannotJudgeBit;
    }
    // A failing tier with an unjudged check in it still cannot be called judged.
    for (const Check& c : checks)
        if (c.verdict == Verdict::unjudged) bits |= kCannotJudgeBit;
    return bits == 0 ? 0 : 32 + bits;
}

}  // namespace sb::doctor
