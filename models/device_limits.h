// What a GPU grants a kernel, and the launch plans that depend on it (DESIGN: Every GPU it
// claims). DeviceLimits is read once per device into the CUDA context (CudaOps), or taken
// from the table of the architectures scalebench claims (sm_80, sm_86, sm_89, sm_90: the
// CUDA C++ Programming Guide's "Technical Specifications per Compute Capability"), for
// SCALEBENCH_DEVICE_LIMITS, for the projection's target and for the static resource check.
// The shared-memory formulas of the limit-dependent launchers live here, as host code, so the
// launchers, the trace and the check use one copy. Pure C++: built in every build.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "models/ops.h"

namespace sb {

struct DeviceLimits {
    std::string arch;  // "sm_90"
    int major = 0, minor = 0;
    int64_t smem_per_block_optin = 0;  // bytes a block may ask for with cudaFuncSetAttribute
    int64_t smem_per_sm = 0;           // the largest shared-memory carveout of an SM
    int64_t smem_reserved_per_block = 0;  // taken from the SM's shared memory by each resident block
    int regs_per_sm = 0;
    int max_regs_per_thread = 0;
    int max_threads_per_sm = 0;
    int max_blocks_per_sm = 0;
    // A product's, not an architecture's: the device's, also under emulated limits (0 in
    // the table, where no product is named).
    int sm_count = 0;
    int64_t l2_bytes = 0;
    // "device" when read from the GPU; else where the numbers come from.
    std::string source;
};

// The record's form: {arch, compute_capability, smem_per_block_optin, smem_per_sm, ..., source}.
nlohmann::json to_json(const DeviceLimits& limits);

// The environment variable that replaces a device's limits with a claimed architecture's.
inline constexpr const char* kDeviceLimitsVariable = "SCALEBENCH_DEVICE_LIMITS";

// The architectures scalebench claims, oldest first, each with its source.
const std::vector<DeviceLimits>& claimed_architectures();
// "sm_89" -> its table row; nullopt for anything else.
std::optional<DeviceLimits> architecture_limits(const std::string& arch);
// The claimed architectures as "sm_80, sm_86, sm_89, sm_90".
std::string claimed_architecture_list();

// The limits a run uses: `device`'s, or with `override_arch` (SCALEBENCH_DEVICE_LIMITS's
// value; empty: none) that architecture's per-block and per-SM limits, keeping the device's SM
// count and L2 (a product's, which size grids only). An unknown value is a UserError naming
// the variable.
DeviceLimits effective_limits(const DeviceLimits& device, const std::string& override_arch);

// Blocks of `threads` threads, `regs_per_thread` registers (0: not known) and `smem` bytes of
// shared memory (static + dynamic) that one SM holds at once; 0 when one block does not fit.
int resident_blocks(const DeviceLimits& limits, int threads, int regs_per_thread, int64_t smem);

// ---- the fused attention kernels' launch geometry (models/cuda/attention_kernels.cu)
namespace attention_plan {
inline constexpr int kWarps = 4;              // warps of a tiled block
inline constexpr int kRows = 16 * kWarps;     // rows a tiled block owns
inline constexpr int kThreads = kWarps * 32;  // threads of a tiled block
inline constexpr int kPad = 8;                // elements of padding per shared row
inline constexpr int kShortSeq = Ops::kAttentionOneBlockSeq;  // the longest sequence one block owns
inline constexpr int kShortThreads = kShortSeq / 16 * 32;     // 8 warps: 16 rows each
// Key/query tile: 64, or 32 where 128-wide heads would spill registers.
constexpr int forward_cols(int) { return 64; }
constexpr int backward_cols(int head_dim) { return head_dim == 128 ? 32 : 64; }
inline constexpr int kShortCols = 32;  // queries per step of the one-block kernel's phase 1

// Dynamic shared memory, bytes, of each kernel for an element of `elem` bytes.
constexpr int64_t forward_smem(int elem, int head_dim) {
    return int64_t{kRows + 2 * forward_cols(head_dim)} * (head_dim + kPad) * elem;
}
constexpr int64_t backward_dq_smem(int elem, int head_dim) {
    return int64_t{2 * kRows + 2 * backward_cols(head_dim)} * (head_dim + kPad) * elem;
}
constexpr int64_t backward_dkdv_smem(int elem, int head_dim) {
    return backward_dq_smem(elem, head_dim) + 2 * int64_t{backward_cols(head_dim)} * 4;
}
// Q, K, V, dO and dS^T of every position, and the LSE and Dsum rows (fp32).
constexpr int64_t backward_short_smem(int elem, int head_dim) {
    return (4 * int64_t{head_dim + kPad} + (kShortSeq + kPad)) * kShortSeq * elem + 2 * int64_t{kShortSeq} * 4;
}

// The backward's variants, fastest first: "one_block" (seq <= kShortSeq, one block per
// (batch, head), 5 products) and "tiled" (the Dsum, dQ and dK/dV kernels, 7 products).
inline constexpr const char* kOneBlock = "one_block";
inline constexpr const char* kTiled = "tiled";
// The variant the backward of `shape` runs under `limits` (fused shapes only).
const char* backward_variant(const DeviceLimits& limits, DType dtype, const Ops::AttentionShape& shape);
}  // namespace attention_plan

// One launch a limit check holds against an architecture: the kernel (a substring of its
// demangled name), its block, the dynamic shared memory its launcher asks for, and the blocks
// per SM its design counts on (its __launch_bounds__ minimum: fewer is slower, not wrong).
struct PlannedLaunch {
    std::string kernel;
    int threads = 0;
    int64_t dynamic_smem = 0;
    int min_blocks_per_sm = 1;
};
// The launches the launchers make under `limits` for every fused attention shape the presets
// use (bf16 and fp16; head_dim 64 and 128; sequences up to kShortSeq and beyond), each
// backward in the variant backward_variant() picks.
std::vector<PlannedLaunch> planned_launches(const DeviceLimits& limits);

// A kernel's resources as the compiler reports them (ptxas, or cuobjdump's resource usage).
struct KernelResources {
    std::string name;  // demangled
    std::string arch;  // "sm_89"
    int registers = 0;
    int64_t static_smem = 0;
    int64_t stack_bytes = 0;
    // ptxas: spill stores; cuobjdump: LOCAL (local memory per thread, spills included).
    int64_t spill_bytes = 0;
};
// Parses `nvcc --resource-usage` / `-Xptxas -v` output (ptxas's report); names as the text spells
// them (demangle before parsing to match PlannedLaunch).
std::vector<KernelResources> parse_resource_usage(const std::string& text);

// A claimed architecture's verdict on the kernels compiled for it (those of `kernels` with its
// arch) and the launches planned under its limits: one line per kernel that cannot launch
// (failures: more registers or static shared memory than any launch may use, a planned launch
// whose shared memory, registers or threads do not fit, a planned kernel missing from the
// report) and per kernel that spills (spills).
struct ResourceCheck {
    std::vector<std::string> failures;
    std::vector<std::string> spills;
    std::vector<std::string> notes;  // per planned launch: blocks per SM, or the variant it loses to
};
ResourceCheck check_resources(const std::vector<KernelResources>& kernels, const std::vector<PlannedLaunch>& plan,
                              const DeviceLimits& limits);

}  // namespace sb
