// The machine the job runs on (DESIGN: Environment): the environment record written into
// every result. The process's own place in the job is base/process.h.
#pragma once

#include <string>
#include <vector>

#include <mpi.h>
#include <nlohmann/json.hpp>

#include "base/process.h"

namespace sb {

// Collective over `world`: hostnames, ranks per host, MPI library, compiler, git commit,
// CPU model, Slurm job facts when present. Rank 0's copy is complete.
nlohmann::json collect_environment(MPI_Comm world);

// Collective over comm: every rank's JSON, in rank order, on rank 0 (empty elsewhere).
std::vector<nlohmann::json> gather_json(const nlohmann::json& mine, MPI_Comm comm);

}  // namespace sb
