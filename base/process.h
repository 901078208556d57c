// The process's place in the job: world rank and size, local rank from the MPI
// shared-memory split (works under mpirun and srun), and host. Below every layer, as
// every layer's error messages name the rank and host.
#pragma once

#include <string>

#include <mpi.h>

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

}  // namespace sb
