// The doctor's CUDA, NVML and NCCL readings (CUDA builds only): the GPUs of this host and
// the pairs between them, timed and verified copies, a short load for the clocks, and a
// collective sweep run by a fresh process per rank so NCCL reads its environment anew
// (NCCL caches NCCL_P2P_DISABLE and NCCL_DEBUG_FILE at its first use in a process).
#pragma once

#include <cstddef>
#include <string>

#include <mpi.h>

#include "src/doctor/snapshot.h"

namespace sb::doctor {

// The GPUs visible to this process (0 when CUDA cannot count them).
int visible_gpu_count();
// Why CUDA counts no GPU: cudaGetDeviceCount's error, or "no device".
std::string cuda_unavailable_reason();

// This host's part of the snapshot: versions, gpus and pairs (NVML, CUDA and sysfs), the
// copies (h2d, d2h per GPU one at a time and all at once, peer where granted and staged,
// both directions, each verified) with the PCIe link read while they run, and the clocks,
// power and clock-event reasons under `load_s` seconds of GEMMs on every GPU.
SystemSnapshot read_host(const std::string& host, double load_s);

// The hidden first argument that makes the binary an all-reduce probe (before MPI_Init).
constexpr const char* kAllReduceProbeArgument = "__scalebench_doctor_allreduce";
// The probe's main: argv = {exe, kAllReduceProbeArgument, unique-id hex, rank, nranks,
// device, max bytes, target busbw, ranks on the device, result file}. all_reduce, all_gather and
// reduce_scatter, each from 1 MiB doubling until busbw reaches the target or levels off, within
// max bytes and the device's free memory shared by its ranks (sweep_sizes.h). Writes {rows,
// stops, target_gbps, max_bytes, memory_bytes} or {error: "..."} to the result file.
int run_allreduce_probe(int argc, char** argv);

// Collective over `world`: each rank starts a probe on `device` (shared by `device_ranks`
// ranks) with NCCL_DEBUG=INFO into a log of its own (and NCCL_P2P_DISABLE=1 when
// `p2p_disabled`), kills it past `deadline_s`, and reads back its rows, where each collective
// stopped and the transports NCCL logged. `target_gbps` is the band's low end (0: none). Rank 0
// returns the merged run (the slowest rank's times, the wrong elements summed, every rank's
// transports).
CollectiveRun run_allreduce_sweep(const std::string& label, bool p2p_disabled, int device, int device_ranks,
                                  size_t max_bytes, double target_gbps, double deadline_s,
                                  const std::string& scratch_dir, MPI_Comm world);

}  // namespace sb::doctor
