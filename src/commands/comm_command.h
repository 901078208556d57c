// `scalebench comm`: collective sweeps in the style of NVIDIA's nccl-tests (the harness is
// collectives/sweep.h). Flags as nccl-tests where it has them (-b -e -i -f -n -w -c -d -r),
// its table and closing lines on stdout, one JSONL record per (world size, collective,
// dtype, redop) with the rows and an alpha-beta fit for the projection.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <mpi.h>

#include "collectives/sweep.h"
#include "src/core/config.h"
#include "src/core/results.h"

namespace CLI {
class App;
}

namespace sb {

struct CommOptions {
    std::string op = "all_reduce";  // a collective's name or "all"
    std::string min_bytes = "32M", max_bytes = "32M";  // nccl-tests' defaults
    std::optional<std::string> step_bytes;             // -i (default 1M)
    std::optional<int> step_factor;                    // -f (default: off)
    int iters = 20;
    int warmup_iters = 1;
    int check = 1;
    std::string datatype = "float";  // float, half, bfloat16 or all
    std::string redop = "sum";       // sum, avg, max, min or all
    int root = 0;
    std::string inplace = "both";  // both, in, out
    std::string backend = "auto";  // nccl, mpi, auto
    std::vector<int> scaling;      // world sizes; empty = the launched world
    std::string out = default_output("comm.jsonl");
    bool share_gpu = false;        // ranks may share a GPU (enable_shared_gpu)
};

void add_comm_options(CLI::App& sub, CommOptions& opts);

// The options resolved and checked against the launched world size.
struct CommPlan {
    std::vector<const Collective*> collectives;
    std::vector<DType> dtypes;
    std::vector<ReduceOp> redops;
    std::vector<int> scaling;
    SweepOptions sweep;  // sizes, iterations, placements; dtype and redop set per run
    BackendChoice backend = BackendChoice::auto_select;
    size_t min_bytes = 0, max_bytes = 0, step_bytes = 0;
    int step_factor = 1;
    std::string out;
};

// Throws UserError naming the flag for anything wrong (the same on every rank).
CommPlan plan_comm(const CommOptions& opts, int world_size);

// The most memory one rank's sweep buffers take over the plan (send and receive buffers as
// collectives/sweep.cpp allocates them, for every collective, dtype and world size swept),
// and the sweep that takes it ("all_gather, float, world size 4").
struct CommBuffers {
    double bytes = 0;
    std::string sweep;
};
CommBuffers largest_buffers(const CommPlan& plan);

// "" when the plan's buffers fit the `free_bytes` (0: unknown) of memory free to rank `who`
// ("rank 1 on node7"; `where` says what memory), else the refusal naming -e.
std::string comm_memory_problem(const CommPlan& plan, double free_bytes, const std::string& who,
                                const std::string& where);

// Collective over `world`: every sweep of the plan; rank 0 prints the blocks and appends
// the records. Returns 0, or 3 when a check found a wrong element.
int run_comm(const CommOptions& opts, MPI_Comm world);

}  // namespace sb
