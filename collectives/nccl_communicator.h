// Communicator over NCCL for device memory (the CUDA backend): ncclUniqueId broadcast
// over MPI, collectives on a dedicated communication stream that first waits for the
// compute stream's work issued so far, and completion events the compute stream can
// wait on, so gradient all-reduce overlaps the rest of backward. For collective sweeps
// (`scalebench comm`) the collectives may instead run on the compute stream itself, as
// nccl-tests issues them: nothing but the NCCL call per collective. The watchdog thread
// aborts a communicator with an asynchronous error or a collective older than the
// collective timeout (ncclCommAbort), then the job (collectives/deadline.h).
#pragma once

#include <mpi.h>

#include <memory>

#include "collectives/communicator.h"

namespace sb {

class NcclCommunicator final : public Communicator {
public:
    // Collective over `comm`; the CUDA device must already be set. compute_stream is
    // the cudaStream_t of the Ops whose buffers are reduced.
    NcclCommunicator(MPI_Comm comm, void* compute_stream, CollectiveStream stream = CollectiveStream::own);
    ~NcclCommunicator() override;
    NcclCommunicator(const NcclCommunicator&) = delete;
    NcclCommunicator& operator=(const NcclCommunicator&) = delete;

    std::string name() const override { return "nccl"; }
    int rank() const override { return rank_; }
    int size() const override { return size_; }

    std::unique_ptr<CommRequest> all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                            ReduceOp op) override;
    std::unique_ptr<CommRequest> reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                                ReduceOp op) override;
    std::unique_ptr<CommRequest> all_gather(const void* send, void* recv, size_t count, DType dtype) override;
    std::unique_ptr<CommRequest> broadcast(void* buf, size_t count, DType dtype, int root) override;
    std::unique_ptr<CommRequest> broadcast(const void* send, void* recv, size_t count, DType dtype,
                                           int root) override;
    std::unique_ptr<CommRequest> reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                                        int root) override;
    std::unique_ptr<CommRequest> alltoall(const void* send, void* recv, size_t count_per_peer,
                                          DType dtype) override;
    std::unique_ptr<CommRequest> sendrecv(const void* send, void* recv, size_t count, DType dtype, int peer_send,
                                          int peer_recv) override;
    void barrier() override;
    void watch_stream(const char* what) override;
    void mark_arrivals() override;
    std::vector<double> arrivals_ms(size_t n) override;
    std::vector<double> starts_ms(size_t n) override;
    std::unique_ptr<Communicator> split_first(int n) override;

    struct Impl;  // in the .cpp; its requests use it too

private:
    NcclCommunicator(std::unique_ptr<Impl> impl);
    template <class Launch>
    std::unique_ptr<CommRequest> issue(const char* what, Launch&& launch);
    std::unique_ptr<Impl> impl_;
    int rank_ = 0;
    int size_ = 1;
};

}  // namespace sb
