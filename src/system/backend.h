// Backend choice and construction (DESIGN: Environment step 2): `auto` takes CUDA when
// this build has it and a GPU is visible, else the CPU; the device is the local rank.
// Also the error agreement that keeps a local failure from hanging the other ranks.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <mpi.h>
#include <nlohmann/json.hpp>

#include "collectives/communicator.h"
#include "models/ops.h"
#include "src/core/config.h"

namespace sb {

// Collective: when any rank passes a non-empty error, every rank throws AgreedError
// with the message of the lowest failing rank.
void agree_on_errors(MPI_Comm comm, const std::string& local_error);

// Collective: rank 0 reads the config file (its type and size checked first) and parses it;
// once it parsed, its text is broadcast, so every rank parses the same bytes even where the
// file exists only on rank 0's host; errors are agreed on.
// An empty path is the built-in default.
TrainConfig load_config_everywhere(const std::string& path, MPI_Comm world);

// ---- Ranks sharing a GPU (DESIGN: Ranks sharing a GPU)
// NCCL refuses two ranks of one host on one GPU ("Duplicate GPU detected"): it tells hosts
// apart by NCCL_HOSTID. Giving every rank its own makes NCCL treat each rank as a host of
// its own and link them through its network transport (NET/Socket).
struct SharedGpuEnv {
    std::string host_id;        // NCCL_HOSTID: the one set (or the host name), then the world rank
    std::string socket_ifname;  // NCCL_SOCKET_IFNAME to set, or empty to leave as it is
};
// The NCCL settings the mode adds unless the user set them (docs/multi-gpu.md, "What the fabric
// is"). All_reduce of 64 MiB between two ranks sharing one H100 under MPS, 3 repetitions each:
// 4 socket threads of 4 sockets each 5.66 GB/s busbw (4.49-6.58) against 2.49 (2.45-2.51)
// without them, both at NCCL_BUFFSIZE 16 MiB, the fastest combination measured.
// Every connection made at init (NCCL_RUNTIME_CONNECT=0): with connections made at a
// collective's first use, 2 ranks time-slicing one H100 receive socket messages of another
// collective's size and stop (results/h200-sharding/sliced/).
struct NcclDefault {
    const char* name;
    const char* value;
};
constexpr NcclDefault kSharedGpuNcclDefaults[] = {
    {"NCCL_BUFFSIZE", "16777216"},
    {"NCCL_SOCKET_NTHREADS", "4"},
    {"NCCL_NSOCKS_PERTHREAD", "4"},
    {"NCCL_RUNTIME_CONNECT", "0"}};
// What enable_shared_gpu sets, for rank `world_rank` on `host`, given the values already
// in the environment (nullptr when unset) and whether every rank runs on this one host:
// loopback only then (on several hosts the ranks must reach each other over a real link).
SharedGpuEnv shared_gpu_env(const std::string& host, int world_rank, bool one_host, const char* nccl_hostid,
                            const char* nccl_socket_ifname);
// The GPU of a local rank when ranks share GPUs: round-robin over the visible ones.
int shared_gpu_device(int local_rank, int visible_gpus);

// Collective over `world`, before any NCCL communicator exists: sets each rank's NCCL
// environment (shared_gpu_env) and turns the mode on for this process, so create_ops places
// ranks round-robin over the visible GPUs and records say `shared_gpu: true`.
void enable_shared_gpu(MPI_Comm world);
// Without the mode: the error when two ranks of `host` (world `ranks`, by local rank) drive
// the same GPU (`bus_ids`, by local rank), naming them and --share-gpu; "" when none do.
std::string one_rank_per_gpu_problem(const std::vector<std::string>& bus_ids, const std::vector<int>& ranks,
                                     const std::string& host);
// Whether enable_shared_gpu ran in this process.
bool shared_gpu_enabled();
// The line above every table of the mode.
constexpr const char* kSharedGpuNote =
    "shared GPU mode (--share-gpu): ranks may share a GPU, linked by NCCL's network transport; these figures "
    "rehearse a multi-rank run and are not hardware figures";

// Collective over `world`: resolves `auto`, checks the GPUs on each host and builds the
// Ops. Errors (no GPU, more ranks on a host than GPUs without --share-gpu, CPU with a
// precision it lacks) are AgreedErrors naming rank and host.
// `backend_origin` and `precision_origin` name where the choices came from (the flag, or the
// config's line: key_origin), so an error says what the user typed.
std::unique_ptr<Ops> create_ops(BackendChoice choice, Precision precision, MPI_Comm world,
                                const std::string& backend_origin = "--backend",
                                const std::string& precision_origin = "--precision");

// Collective over `comm`: the communicator the backend uses for gradients (MPI for the
// CPU, NCCL for CUDA), over its own duplicate of `comm`.
std::unique_ptr<Communicator> create_communicator(Ops& ops, MPI_Comm comm,
                                                  CollectiveStream stream = CollectiveStream::own);

bool cuda_built();

// What result records need from the backend, so the runner stays backend-neutral:
// the device's part of the environment ({} on the CPU; with `device_limits`, the limits launches
// are planned against: the device's, or SCALEBENCH_DEVICE_LIMITS's), the datasheet peak TFLOP/s at
// the run's precision (nullopt on the CPU or for an unknown GPU), and telemetry sampled
// while the measured steps run (nullptr on the CPU).
nlohmann::json device_environment(Ops& ops);
// Which variant each limit-dependent kernel ran so far ({} on the CPU): CudaOps::kernel_variants.
nlohmann::json kernel_variants(Ops& ops);
// The environment record of a run (collective over world): collect_environment's host
// facts plus, where there are GPUs, rank 0's GPU as `gpu` and every rank's as `gpus_by_rank`.
nlohmann::json run_environment(Ops& ops, MPI_Comm world);
// A 16-bit gradient all-reduce needs the CUDA backend: an AgreedError naming where the
// grad_dtype came from (`origin`: the flag, or the config's file, line and key).
void check_grad_dtype_backend(const TrainConfig& cfg, const Ops& ops, const std::string& origin);
std::optional<double> device_peak_tflops(Ops& ops);

// Collective over `world`, before the first allocation: the memory one rank needs to hold
// every workload at once (a stress run builds them all): parameters, gradients, optimizer
// state, activations and workspace as the model's own code asks for them, traced without
// allocating, plus the data shard, at each workload's largest local batch; against the memory
// free to that rank: the GPU's free memory, or the host's available memory shared by the
// ranks on the host; and the host memory the data is generated in (dataset_host_bytes: an MLP's
// teacher network) against the host's, added to the rest on the CPU. Too little is an
// AgreedError naming both sizes. `workloads` as with_conv_engine_resolved returns them.
void check_memory_footprint(const std::vector<TrainConfig>& workloads, const Ops& ops, MPI_Comm world);

// (bytes free to this rank, where they come from): the GPU's free memory (shared by the ranks
// sharing the GPU) for the CUDA backend, else the host's available memory shared by the ranks
// on the host; 0 bytes when unknown.
std::pair<double, std::string> memory_free_to_rank(const Ops& ops);

class Telemetry {
public:
    virtual ~Telemetry() = default;
    virtual void start() = 0;
    virtual nlohmann::json stop() = 0;
};
std::unique_ptr<Telemetry> start_telemetry(Ops& ops);

}  // namespace sb
