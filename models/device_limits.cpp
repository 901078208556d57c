// DeviceLimits' table, the override, occupancy, the attention launch plan and the static
// resource check (models/device_limits.h).
#include "models/device_limits.h"

#include <algorithm>
#include <regex>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/errors.h"

namespace sb {
namespace {

constexpr int64_t KiB = 1024;
constexpr int64_t kStaticSmemLimit = 48 * KiB;  // static __shared__ arrays: no opt-in beyond this

// CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" (and the
// "Compute Capability 8.x / 9.0" shared-memory sections: the 1 KB each block leaves the system).
DeviceLimits row(const char* arch, int major, int minor, int64_t block_kib, int64_t sm_kib, int threads, int blocks) {
    DeviceLimits l;
    l.arch = arch;
    l.major = major;
    l.minor = minor;
    l.smem_per_block_optin = block_kib * KiB;
    l.smem_per_sm = sm_kib * KiB;
    l.smem_reserved_per_block = 1 * KiB;
    l.regs_per_sm = 64 * 1024;
    l.max_regs_per_thread = 255;
    l.max_threads_per_sm = threads;
    l.max_blocks_per_sm = blocks;
    l.source = fmt::format("CUDA C++ Programming Guide, Technical Specifications per Compute Capability ({}.{})",
                           major, minor);
    return l;
}

}  // namespace

const std::vector<DeviceLimits>& claimed_architectures() {
    static const std::vector<DeviceLimits> table = {
        row("sm_80", 8, 0, 163, 164, 2048, 32),  // A100
        row("sm_86", 8, 6, 99, 100, 1536, 16),   // RTX 3090, A6000
        row("sm_89", 8, 9, 99, 100, 1536, 24),   // RTX 4090, L40S
        row("sm_90", 9, 0, 227, 228, 2048, 32),  // H100, H200
    };
    return table;
}

nlohmann::json to_json(const DeviceLimits& l) {
    return {{"arch", l.arch},
            {"compute_capability", fmt::format("{}.{}", l.major, l.minor)},
            {"smem_per_block_optin", l.smem_per_block_optin},
            {"smem_per_sm", l.smem_per_sm},
            {"smem_reserved_per_block", l.smem_reserved_per_block},
            {"regs_per_sm", l.regs_per_sm},
            {"max_threads_per_sm", l.max_threads_per_sm},
            {"max_blocks_per_sm", l.max_blocks_per_sm},
            {"sm_count", l.sm_count},
            {"l2_bytes", l.l2_bytes},
            {"source", l.source}};
}

std::optional<DeviceLimits> architecture_limits(const std::string& arch) {
    for (const DeviceLimits& l : claimed_architectures())
        if (l.arch == arch) return l;
    return std::nullopt;
}

std::string claimed_architecture_list() {
    std::string list;
    for (const DeviceLimits& l : claimed_architectures()) list += (list.empty() ? "" : ", ") + l.arch;
    return list;
}

DeviceLimits effective_limits(const DeviceLimits& device, const std::string& override_arch) {
    if (override_arch.empty()) return device;
    const std::optional<DeviceLimits> table = architecture_limits(override_arch);
    if (!table)
        throw UserError(fmt::format("{}={}: not a claimed architecture; use one of {}", kDeviceLimitsVariable,
                                    override_arch, claimed_architecture_list()));
    DeviceLimits l = *table;
    l.sm_count = device.sm_count;
    l.l2_bytes = device.l2_bytes;
    l.source = fmt::format("{} ({} on {})", l.source, kDeviceLimitsVariable, device.arch);
    return l;
}

int resident_blocks(const DeviceLimits& limits, int threads, int regs_per_thread, int64_t smem) {
    if (threads <= 0 || threads > limits.max_threads_per_sm || smem > limits.smem_per_block_optin) return 0;
    int blocks = std::min(limits.max_blocks_per_sm, limits.max_threads_per_sm / threads);
    if (regs_per_thread > 0) {
        if (regs_per_thread > limits.max_regs_per_thread) return 0;
        // Registers are allocated per warp in units of 256.
        const int per_warp = (regs_per_thread * 32 + 255) / 256 * 256;
        const int warps = (threads + 31) / 32;
        blocks = std::min(blocks, limits.regs_per_sm / (per_warp * warps));
    }
    blocks = std::min<int64_t>(blocks, limits.smem_per_sm / (smem + limits.smem_reserved_per_block));
    return std::max(blocks, 0);
}

namespace attention_plan {

const char* backward_variant(const DeviceLimits& limits, DType dtype, const Ops::AttentionShape& shape) {
    if (shape.seq > kShortSeq) return kTiled;
    const int64_t smem = backward_short_smem(static_cast<int>(dtype_size(dtype)), shape.head_dim);
    return smem <= limits.smem_per_block_optin && kShortThreads <= limits.max_threads_per_sm ? kOneBlock : kTiled;
}

}  // namespace attention_plan

std::vector<PlannedLaunch> planned_launches(const DeviceLimits& limits) {
    using namespace attention_plan;
    std::vector<PlannedLaunch> plan;
    for (DType dtype : {DType::bf16, DType::f16}) {
        const int elem = static_cast<int>(dtype_size(dtype));
        const char* t = dtype == DType::bf16 ? "__nv_bfloat16" : "__half";
        for (int d : {64, 128}) {
            plan.push_back({fmt::format("attention_forward_kernel<{}, {}, {}>", t, d, forward_cols(d)), kThreads,
                            forward_smem(elem, d), 1});
            // Beyond kShortSeq the backward is always tiled; at or below it, as the limits allow.
            plan.push_back({fmt::format("attention_backward_dq_kernel<{}, {}, {}>", t, d, backward_cols(d)), kThreads,
                            backward_dq_smem(elem, d), 1});
            plan.push_back({fmt::format("attention_backward_dkdv_kernel<{}, {}, {}>", t, d, backward_cols(d)),
                            kThreads, backward_dkdv_smem(elem, d), 1});
            Ops::AttentionShape s{};
            s.seq = kShortSeq;
            s.head_dim = d;
            if (std::string(backward_variant(limits, dtype, s)) == kOneBlock)
                plan.push_back({fmt::format("attention_backward_short_kernel<{}, {}, {}>", t, d, kShortCols),
                                kShortThreads, backward_short_smem(elem, d), d == 64 ? 2 : 1});
        }
    }
    return plan;
}

std::vector<KernelResources> parse_resource_usage(const std::string& text) {
    static const std::regex ptxas_entry(R"(Compiling entry function '(.*)' for '(sm_[0-9]+a?)')");
    static const std::regex ptxas_frame(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
    static const std::regex ptxas_used(R"(Used (\d+) registers)");
    static const std::regex ptxas_smem(R"((\d+) bytes smem)");
    std::vector<KernelResources> out;
    bool open = false;  // the last entry awaits its figures
    std::istringstream in(text);
    std::string line;
    std::smatch m;
    while (std::getline(in, line)) {
        if (std::regex_search(line, m, ptxas_entry)) {
            out.push_back({m[1], m[2]});
            open = true;
        } else if (open && std::regex_search(line, m, ptxas_frame)) {
            out.back().stack_bytes = std::stoll(m[1]);
            out.back().spill_bytes = std::stoll(m[2]);
        } else if (open && std::regex_search(line, m, ptxas_used)) {
            out.back().registers = std::stoi(m[1]);
            if (std::regex_search(line, m, ptxas_smem)) out.back().static_smem = std::stoll(m[1]);
            open = false;
        }
    }
    return out;
}

ResourceCheck check_resources(const std::vector<KernelResources>& kernels, const std::vector<PlannedLaunch>& plan,
                              const DeviceLimits& limits) {
    ResourceCheck check;
    std::vector<const KernelResources*> mine;
    for (const KernelResources& k : kernels)
        if (k.arch == limits.arch) mine.push_back(&k);
    for (const KernelResources* k : mine) {
        if (k->registers > limits.max_regs_per_thread || k->static_smem > kStaticSmemLimit)
            check.failures.push_back(fmt::format("{}: {}: {} registers, {} bytes of static shared memory (at most {} "
                                                 "and {})",
                                                 limits.arch, k->name, k->registers, k->static_smem,
                                                 limits.max_regs_per_thread, kStaticSmemLimit));
        if (k->spill_bytes > 0)
            check.spills.push_back(fmt::format("{}: {}: {} bytes spilled", limits.arch, k->name, k->spill_bytes));
    }
    for (const PlannedLaunch& p : plan) {
        const KernelResources* k = nullptr;
        for (const KernelResources* c : mine)
            if (c->name.find(p.kernel) != std::string::npos) k = c;
        if (!k) {
            check.failures.push_back(fmt::format("{}: {}: planned, but not in the resource report", limits.arch,
                                                 p.kernel));
            continue;
        }
        const int64_t smem = k->static_smem + p.dynamic_smem;
        const int blocks = resident_blocks(limits, p.threads, k->registers, smem);
        const std::string what = fmt::format("{}: {}: {} threads x {} registers, {} bytes of shared memory",
                                             limits.arch, p.kernel, p.threads, k->registers, smem);
        if (blocks == 0)
            check.failures.push_back(fmt::format("{}: does not fit (at most {} bytes a block, {} registers and {} "
                                                 "threads an SM)",
                                                 what, limits.smem_per_block_optin, limits.regs_per_sm,
                                                 limits.max_threads_per_sm));
        else
            check.notes.push_back(fmt::format("{}: {} block(s) per SM{}", what, blocks,
                                              blocks < p.min_blocks_per_sm
                                                  ? fmt::format(", fewer than the {} it is tuned for", p.min_blocks_per_sm)
                                                  : ""));
    }
    return check;
}

}  // namespace sb
