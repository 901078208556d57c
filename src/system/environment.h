// The process's place in the job and the machine it runs on (DESIGN: Environment):
// world rank and host, local rank from the MPI shared-memory split, and the
// environment record written into every result.
#pragma once

#include <string>
#include <vector>

#include <mpi.h>
#include <nlohmann/json.hpp>

namespace sb {

struct ProcessInfo {
    int world_rank = 0;
    int world_size = 1;
    int local_rank = 0;   // rank among the processes on this host
    int local_size = 1;
    std::string host;
};

// Set once by main after MPI_Init; read by error messages.
const ProcessInfo& process_info();
void init_process_info(MPI_Comm world);

// Collective over `world`: hostnames, ranks per host, MPI library, compiler, git commit,
// CPU model, Slurm job facts when present. Rank 0's copy is complete.
nlohmann::json collect_environment(MPI_Comm world);

// Collective over comm: every rank's JSON, in rank order, on rank 0 (empty elsewhere).
std::vector<nlohmann::json> gather_json(const nlohmann::json& mine, MPI_Comm comm);

}  // namespace sb
