// `scalebench gemm`: how fast one GPU multiplies matrices, per rank, against its datasheet
// peak. cuBLASLt directly (not through Ops), random operands, warm-up, then every product
// timed with CUDA events; median/min/max ms, TFLOP/s = 2MNK / median, fraction of peak.
// The projection model scales its roofline by these measured efficiencies (DESIGN:
// Projection). CUDA builds only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>
#include <nlohmann/json.hpp>

#include "src/core/results.h"

namespace CLI {
class App;
}

namespace sb {

class TelemetrySampler;

struct GemmOptions {
    std::vector<std::string> sizes;   // "MxNxK" or "N" (cube)
    std::vector<std::string> dtypes;  // fp16, bf16, fp32, tf32
    int warmup = 5;
    int iters = 50;
    std::string out = default_output("gemm.jsonl");
    // Set when --size or --dtype was given. Without it (and with no sizes/dtypes) the
    // default cases run: fp16 and bf16 8192^3, fp32 and tf32 4096^3. With it, the cross
    // product sizes x dtypes; a side left empty takes its default (dtypes: all four;
    // sizes: each dtype's default size).
    bool explicit_cases = false;
};

// --size (repeatable, comma lists), --dtype (list), --warmup, --iters, --out.
void add_gemm_options(CLI::App& sub, GemmOptions& opts);

// Collective over `world`: every rank benchmarks the GPU of its local rank; rank 0 prints
// the table and appends one record per (rank, case) to opts.out. Returns 0. The options and
// the output path (as train's --out) are checked before any work. A fault is thrown on every
// rank alike (no rank is left waiting): AgreedError (a UserError) for bad options, an output
// that cannot be written or a rank without a GPU, std::runtime_error for an internal failure.
int run_gemm(const GemmOptions& opts, MPI_Comm world);

// ---- the pieces, exposed for tests

struct GemmCase {
    int64_t m = 0, n = 0, k = 0;  // C (m x n) = A (m x k) @ B (k x n), row-major
    std::string dtype;            // of A, B and C; fp32 accumulate throughout
};

// "MxNxK" or "N"; throws UserError naming --size.
GemmCase parse_gemm_size(const std::string& text);
// The cases opts asks for, in order; throws UserError naming --size, --dtype, --iters or
// --warmup.
std::vector<GemmCase> gemm_cases(const GemmOptions& opts);

struct GemmTiming {
    std::vector<double> times_ms;  // one per timed product, in issue order
    double median_ms = 0, min_ms = 0, max_ms = 0;
    int buffer_sets = 1;            // A/B sets rotated so the operands are not L2-resident
    size_t workspace_bytes = 0;
    nlohmann::json telemetry;       // the sampler's summary over warm-up + timed products
};

// Times c on the current CUDA device: warmup products, then iters products each between
// two events. A telemetry sampler, when given, runs over exactly that GPU work (not the
// operand set-up). Throws UserError when the operands do not fit in free device memory.
GemmTiming time_gemm(const GemmCase& c, int warmup, int iters, TelemetrySampler* telemetry = nullptr);

// One product through the same cuBLASLt path on the current device, for checking it:
// a (m x k) and b (k x n) row-major, converted to c.dtype on the host (fp32 for tf32);
// returns C (m x n) converted to float.
std::vector<float> gemm_product(const GemmCase& c, const std::vector<float>& a, const std::vector<float>& b);

}  // namespace sb
