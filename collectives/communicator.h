// The Communicator interface (DESIGN: collectives/): collectives over backend memory,
// asynchronous with completion handles. Implementations: MpiCommunicator (host memory,
// non-blocking MPI) and NcclCommunicator (device memory, a dedicated CUDA stream).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "models/ops.h"

namespace sb {

enum class ReduceOp { sum, avg, max, min };

// Where a device communicator issues its collectives: on a stream of its own, ordered
// after the compute stream's work and overlapping what follows it (training), or on the
// compute stream itself, as nccl-tests does (collective sweeps). MPI has no streams.
enum class CollectiveStream { own, compute };
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
    // recv holds count elements; send holds count * size(). In place, as NCCL, when
    // recv == send + rank() * count elements.
    virtual std::unique_ptr<CommRequest> reduce_scatter(const void* send, void* recv, size_t count,
                                                        DType dtype, ReduceOp op) = 0;
    // send holds count elements; recv holds count * size(). In place, as NCCL, when
    // send == recv + rank() * count elements.
    virtual std::unique_ptr<CommRequest> all_gather(const void* send, void* recv, size_t count,
                                                    DType dtype) = 0;
    virtual std::unique_ptr<CommRequest> broadcast(void* buf, size_t count, DType dtype, int root) = 0;
    // Out of place: recv on every rank (root included) gets root's send; send is read on
    // root only. In place when send == recv.
    virtual std::unique_ptr<CommRequest> broadcast(const void* send, void* recv, size_t count, DType dtype,
                                                   int root) = 0;
    // recv on root gets the reduction of every rank's send; recv is not written elsewhere.
    // In place when send == recv.
    virtual std::unique_ptr<CommRequest> reduce(const void* send, void* recv, size_t count, DType dtype,
                                                ReduceOp op, int root) = 0;
    // send and recv hold count_per_peer * size() elements: block j of send goes to rank j,
    // block j of recv comes from rank j. In place (send == recv) only on MPI; NCCL reads and
    // writes the same blocks concurrently, so nccl-tests times it but does not check it.
    virtual std::unique_ptr<CommRequest> alltoall(const void* send, void* recv, size_t count_per_peer,
                                                  DType dtype) = 0;
    // One exchange: count elements of send to rank peer_send while count elements arrive in
    // recv from rank peer_recv (a ring shift when every rank sends to rank + 1). In place
    // (send == recv) only on MPI (MPI_Sendrecv_replace); on NCCL it races, so nccl-tests
    // times it but does not check it.
    virtual std::unique_ptr<CommRequest> sendrecv(const void* send, void* recv, size_t count, DType dtype,
                                                  int peer_send, int peer_recv) = 0;
    // Host-side barrier across the communicator's ranks.
    virtual void barrier() = 0;
    // Puts work already queued on the compute stream under the collective deadline, as
    // if it were a collective: a replayed CUDA graph holding collectives. No-op on MPI.
    virtual void watch_stream(const char* /*what*/) {}
    // Arrival clock of the gradient buckets, for straggler reports. After mark_arrivals(),
    // each all_reduce notes when this rank's input became ready, on the clock its work runs
    // by: the host's steady clock on MPI; on NCCL a timed event on the compute stream (which
    // a CUDA graph captured after the mark replays). arrivals_ms(n) gives the first n, in ms
    // after the last mark (empty where this communicator has no arrival clock or fewer
    // arrived), and ends the marking.
    virtual void mark_arrivals() {}
    virtual std::vector<double> arrivals_ms(size_t /*n*/) { return {}; }
    // Where each of those all_reduces started, on the same clock: on NCCL a timed event on the
    // communication stream just before the collective, reached once its inputs are ready and
    // the collectives before it are done; on MPI the arrival (a non-blocking call starts as
    // it is issued). Read after the step's work is issued; empty as arrivals_ms.
    virtual std::vector<double> starts_ms(size_t /*n*/) { return {}; }
    // Collective: a communicator of this one's first n ranks (MPI_Comm_split,
    // ncclCommSplit); ranks >= n get nullptr. Used for each world size of a sweep.
    virtual std::unique_ptr<Communicator> split_first(int n) = 0;
};

}  // namespace sb
