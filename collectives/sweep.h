// The collective sweep behind `scalebench comm`, in the manner of NVIDIA's nccl-tests: this
// harness owns the sizes, the warm-up and timing, the check, the nccl-tests table and the
// alpha-beta fit; each collective (one small file in collectives/ops/) only says how its
// buffers are laid out, what its result must be, how to run it and its bus-bandwidth
// factor (nccl-tests' doc/PERFORMANCE.md). Adding a collective is adding one such file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "collectives/communicator.h"
#include "models/ops.h"

namespace sb {

// Element counts of one call for a size of `count` elements, as nccl-tests' getCollByteCount.
struct CollectiveCounts {
    size_t send = 0;                 // elements in the send buffer
    size_t recv = 0;                 // elements in the recv buffer
    size_t param = 0;                // the call's count argument
    size_t send_inplace_offset = 0;  // in place, send = recv buffer + rank * this (elements)
    size_t recv_inplace_offset = 0;  // in place, recv = recv buffer + rank * this (elements)
};

// count / nranks, rounded down to whole 16-byte groups of elements, as nccl-tests does for
// the collectives whose count is per rank (reduce_scatter, all_gather, alltoall).
size_t per_rank_count(size_t count, size_t element_size, int nranks);

// The inputs and the expected results of one checked run. Input element i of rank r is a
// small positive integer, exact in the dtype, that depends on r, i and the seed, so a
// misplaced, stale or missing element shows; the sums of a reduction stay exact too.
struct CheckContext {
    int rank = 0, nranks = 1, root = 0;
    size_t count = 0;  // the call's count argument
    ReduceOp op = ReduceOp::sum;
    bool in_place = false;
    uint64_t seed = 1;
    uint64_t value_mask = 0;  // inputs are 1 + (hash & mask): mask + 1 is a power of two

    double input(int r, size_t i) const {
        const uint64_t h = static_cast<uint64_t>(i) * 0x9E3779B1ull + static_cast<uint64_t>(r) * 40503ull +
                           seed * 0x632BE5ABull;
        return static_cast<double>(1 + (h & value_mask));
    }
    // op over every rank's input(r, i); avg is the exact quotient.
    double reduced(size_t i) const;
};

// The CheckContext for a run; value_mask keeps every input (and, for a reducing collective,
// the sum over nranks) an integer the dtype holds exactly.
CheckContext make_check_context(DType dtype, bool reduces, int rank, int nranks, int root, size_t count,
                                ReduceOp op, bool in_place, uint64_t seed);

struct CollectiveArgs {
    const void* send = nullptr;
    void* recv = nullptr;
    size_t count = 0;  // CollectiveCounts::param
    DType dtype = DType::f32;
    ReduceOp op = ReduceOp::sum;
    int root = 0;
};

// What a collective says about itself; see collectives/ops/*.cpp.
struct Collective {
    const char* name;      // "all_reduce"; blocks are titled "<name>_perf" as nccl-tests' binaries
    bool reduces;          // takes --redop ("none" in the redop column otherwise)
    bool rooted;           // takes --root (-1 in the root column otherwise)
    bool checks_in_place;  // false: in place is timed but not checked ("N/A"), as nccl-tests
    CollectiveCounts (*counts)(size_t count, size_t element_size, int nranks);
    double (*bus_factor)(int nranks);  // busbw = algbw * bus_factor
    // Expected values of recv elements [first, first + n) on c.rank, into out.
    void (*expected)(const CheckContext& c, size_t first, size_t n, double* out);
    std::unique_ptr<CommRequest> (*run)(Communicator& comm, const CollectiveArgs& args);
};

const Collective& all_reduce_collective();
const Collective& reduce_scatter_collective();
const Collective& all_gather_collective();
const Collective& broadcast_collective();
const Collective& reduce_collective();
const Collective& alltoall_collective();
const Collective& sendrecv_collective();

// Every collective, in the order `--op all` runs them; nullptr for an unknown name.
const std::vector<const Collective*>& all_collectives();
const Collective* find_collective(const std::string& name);

// ---- sizes and names

// min, then times step_factor (when > 1) or plus step_bytes, while <= max. Throws UserError
// for min > max, a sweep that would never end, or more than kMaxSweepSizes sizes.
constexpr size_t kMaxSweepSizes = 10000;
std::vector<size_t> sweep_sizes(size_t min_bytes, size_t max_bytes, size_t step_bytes, int step_factor);

// nccl-tests' names: "float", "half", "bfloat16".
const char* nccl_type_name(DType dtype);
// float|half|bfloat16 (also f32/fp32, f16/fp16, bf16); UserError otherwise.
DType parse_comm_dtype(const std::string& text);
// sum|avg|max|min; UserError otherwise.
ReduceOp parse_reduce_op(const std::string& text);

// ---- the sweep

struct SweepOptions {
    std::vector<size_t> sizes;  // bytes, in the order measured
    DType dtype = DType::f32;
    ReduceOp redop = ReduceOp::sum;
    int root = 0;
    int warmup_iters = 1;  // nccl-tests' -w: untimed runs of each size (doubling from the smallest)
    int iters = 20;        // nccl-tests' -n: launches timed as one interval
    int check_iters = 1;   // nccl-tests' -c: checked runs per measurement (0: no check)
    bool out_of_place = true, in_place = true;
    // Test hook: runs on every rank after each checked run has completed and before its
    // result is read back, with that run's recv (backend memory) — a test plants a wrong
    // element through it and expects #wrong > 0.
    std::function<void(Ops& ops, void* recv, size_t recv_bytes)> tamper;
};

struct Measurement {
    bool ran = false;
    double time_us = 0;      // per operation; mean over ranks, as nccl-tests' default (-a 1)
    double time_us_max = 0;  // the slowest rank's
    double algbw_gbps = 0;   // size / time, GB/s (10^9 bytes)
    double busbw_gbps = 0;   // algbw * bus_factor
    bool checked = false;    // false: #wrong is N/A
    int64_t wrong = 0;       // wrong elements, summed over ranks
};

struct SweepRow {
    size_t bytes = 0;  // the size column: the larger of the send and recv buffers
    size_t count = 0;  // the count column: the call's count argument
    Measurement out_of_place, in_place;
};

// time_us = alpha_us + bytes / beta fitted to every measured size > 0, by least squares of
// the relative residuals (weights 1/t^2), so the small sizes set alpha and the large ones
// beta. r2 is the plain coefficient of determination of the fitted times.
struct AlphaBetaFit {
    bool valid = false;  // at least two sizes and a time that grows with size
    double alpha_us = 0;
    double beta_gbps = 0;  // in the algbw sense (bytes of the size column)
    double r2 = 0;
    int points = 0;
};
AlphaBetaFit fit_alpha_beta(const std::vector<double>& bytes, const std::vector<double>& time_us);

struct SweepResult {
    const Collective* collective = nullptr;
    int nranks = 0;
    DType dtype = DType::f32;
    ReduceOp redop = ReduceOp::sum;
    int root = -1;  // as printed: -1 for a collective without a root
    std::vector<SweepRow> rows;
    double avg_busbw_gbps = 0;   // mean busbw over every measurement, both placements, as nccl-tests
    int wrong_measurements = 0;  // measurements with #wrong > 0 ("Out of bounds values")
    AlphaBetaFit fit;            // over the out-of-place times (in-place when only those ran)
};

// Collective over comm's ranks; `mpi` is a communicator of the same ranks, used only to
// reduce the figures (mean and max time, #wrong). Every rank returns the same result.
// on_row, when set, runs on every rank as each row is measured (the table streams).
SweepResult run_sweep(const Collective& c, const SweepOptions& opts, Ops& ops, Communicator& comm, MPI_Comm mpi,
                      const std::function<void(const SweepResult&, const SweepRow&)>& on_row = {});

// ---- nccl-tests' text: the three header lines of the table, one row, and the closing
// "# Out of bounds values" and "# Avg bus bandwidth" lines (plus scalebench's fit line).
std::string format_table_header();
std::string format_row(const SweepResult& r, const SweepRow& row);
std::string format_footer(const SweepResult& r);

// Reads the rows and the closing lines of nccl-tests output (or ours) back, as the
// scripts that parse nccl-tests do; lets the projection calibrate from nccl-tests logs.
struct ParsedPlacement {
    bool ran = true;  // false where the table shows "-" (a placement --inplace left out)
    double time_us = 0, algbw_gbps = 0, busbw_gbps = 0;
    int64_t wrong = -1;  // -1: N/A
};
struct ParsedRow {
    size_t bytes = 0, count = 0;
    std::string type, redop;
    int root = -1;
    ParsedPlacement out_of_place, in_place;
};
struct ParsedTable {
    std::vector<ParsedRow> rows;
    bool has_avg_busbw = false;
    double avg_busbw_gbps = 0;
    bool has_out_of_bounds = false;
    int out_of_bounds = 0;
};
// Rows are the lines that are not comments and have 13 fields. Throws std::runtime_error
// naming the line for a row whose numbers do not parse.
ParsedTable parse_nccl_tests_output(const std::string& text);

}  // namespace sb
