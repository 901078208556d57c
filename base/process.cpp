#include "base/process.h"

#include "base/errors.h"

namespace sb {

namespace {
ProcessInfo g_process;
}  // namespace

const ProcessInfo& process_info() { return g_process; }

void init_process_info(MPI_Comm world) {
    SB_CHECK_MPI(MPI_Comm_rank(world, &g_process.world_rank));
    SB_CHECK_MPI(MPI_Comm_size(world, &g_process.world_size));
    char name[MPI_MAX_PROCESSOR_NAME];
    int length = 0;
    SB_CHECK_MPI(MPI_Get_processor_name(name, &length));
    g_process.host.assign(name, static_cast<size_t>(length));
    // Local rank: ranks that share memory are on one host (works under mpirun and srun).
    MPI_Comm local;
    SB_CHECK_MPI(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, g_process.world_rank, MPI_INFO_NULL, &local));
    SB_CHECK_MPI(MPI_Comm_rank(local, &g_process.local_rank));
    SB_CHECK_MPI(MPI_Comm_size(local, &g_process.local_size));
    SB_CHECK_MPI(MPI_Comm_free(&local));
}

}  // namespace sb
