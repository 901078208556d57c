// The blocking MPI collectives this program calls, through the MPI profiling interface:
// each starts the non-blocking form (PMPI_I*) and waits with sb::wait_requests, so a
// barrier or broadcast outside the communicators (config broadcast, the sweep's barrier,
// result gathers) also has the collective timeout and answers pings while it waits.
// MPI_Comm_split has no non-blocking form: the watchdog thread guards it.
#include <mpi.h>

#include "collectives/deadline.h"

namespace {

int wait_one(int rc, MPI_Request* request, MPI_Comm comm, const char* what) {
    if (rc != MPI_SUCCESS) return rc;
    sb::wait_requests(1, request, comm, what);
    return MPI_SUCCESS;
}

}  // namespace

extern "C" {

int MPI_Barrier(MPI_Comm comm) {
    MPI_Request r;
    return wait_one(PMPI_Ibarrier(comm, &r), &r, comm, "MPI_Barrier");
}

int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
    MPI_Request r;
    return wait_one(PMPI_Ibcast(buffer, count, datatype, root, comm, &r), &r, comm, "MPI_Bcast");
}

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
    MPI_Request r;
    return wait_one(PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, &r), &r, comm, "MPI_Allreduce");
}

int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
               MPI_Comm comm) {
    MPI_Request r;
    return wait_one(PMPI_Ireduce(sendbuf, recvbuf, count, datatype, op, root, comm, &r), &r, comm, "MPI_Reduce");
}

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) {
    MPI_Request r;
    return wait_one(PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, &r), &r, comm,
                    "MPI_Allgather");
}

int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
               MPI_Datatype recvtype, int root, MPI_Comm comm) {
    MPI_Request r;
    return wait_one(PMPI_Igather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, &r), &r,
                    comm, "MPI_Gather");
}

int MPI_Gatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm) {
    MPI_Request r;
    return wait_one(
        PMPI_Igatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, &r), &r,
        comm, "MPI_Gatherv");
}

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* newcomm) {
    MPI_Request r;
    return wait_one(PMPI_Comm_idup(comm, newcomm, &r), &r, comm, "MPI_Comm_dup");
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm) {
    sb::WatchdogScope guard("MPI_Comm_split");
    return PMPI_Comm_split(comm, color, key, newcomm);
}

}  // extern "C"
