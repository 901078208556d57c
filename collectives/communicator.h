// The Communicator interface (DESIGN: collectives/): collectives over backend memory,
// asynchronous with completion handles. Implementations: MpiCommunicator (host memory,
// non-blocking MPI) and NcclCommunicator (device memory, a dedicated CUDA stream).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "models/ops.h"

namespace sb {

enum class ReduceOp { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);

// A collective in flight. test() advances it without blocking (MPI needs to be
// called to make progress); wait() makes later work wait for it: the CPU blocks,
// CUDA makes the compute stream wait on the collective's completion event.
class CommRequest {
public:
    virtual ~CommRequest() = default;
    virtual bool test() = 0;
    virtual void wait() = 0;
};

class Communicator {
public:
    virtual ~Communicator() = default;
    virtual std::string name() const = 0;  // "mpi" or "nccl"
    virtual int rank() const = 0;
    virtual int size() const = 0;

    // In place when send == recv. Collectives start after all work issued so far on the
    // compute stream (Ops::stream()) that produced their input.
    virtual std::unique_ptr<CommRequest> all_reduce(const void* send, void* recv, size_t count,
                                                    DType dtype, ReduceOp op) = 0;
    // recv holds count elements; send holds count * size().
    virtual std::unique_ptr<CommRequest> reduce_scatter(const void* send, void* recv, size_t count,
                                                        DType dtype, ReduceOp op) = 0;
    // send holds count elements; recv holds count * size().
    virtual std::unique_ptr<CommRequest> all_gather(const void* send, void* recv, size_t count,
                                                    DType dtype) = 0;
    virtual std::unique_ptr<CommRequest> broadcast(void* buf, size_t count, DType dtype, int root) = 0;
    // Host-side barrier across the communicator's ranks.
    virtual void barrier() = 0;
    // Collective: a communicator of this one's first n ranks (MPI_Comm_split,
    // ncclCommSplit); ranks >= n get nullptr. Used for each world size of a sweep.
    virtual std::unique_ptr<Communicator> split_first(int n) = 0;
};

}  // namespace sb
