// Communicator over MPI for host memory (the CPU backend): non-blocking collectives
// (MPI_Iallreduce & co.) whose progress is driven by test() calls during backward.
// f32 maps to MPI_FLOAT; half and bfloat16 to 2-byte MPI datatypes with user-defined
// reduction ops that compute in fp32 and round to nearest even. Counts past an int go in
// pieces (set_max_count).
#pragma once

#include <mpi.h>

#include <chrono>
#include <vector>

#include "collectives/communicator.h"

namespace sb {

class MpiCommunicator final : public Communicator {
public:
    // Works on its own duplicate of `comm`, so its traffic never matches the caller's.
    explicit MpiCommunicator(MPI_Comm comm);
    ~MpiCommunicator() override;
    MpiCommunicator(const MpiCommunicator&) = delete;
    MpiCommunicator& operator=(const MpiCommunicator&) = delete;

    std::string name() const override { return "mpi"; }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    MPI_Comm comm() const { return comm_; }

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
    void mark_arrivals() override;
    std::vector<double> arrivals_ms(size_t n) override;
    std::vector<double> starts_ms(size_t n) override;
    std::unique_ptr<Communicator> split_first(int n) override;

    // The most elements one MPI call takes: INT_MAX (MPI counts are ints); a collective of
    // more goes in pieces of at most this many. Tests lower it to check the pieces.
    static void set_max_count(size_t count);

private:
    MPI_Comm comm_ = MPI_COMM_NULL;
    int rank_ = 0;
    int size_ = 1;
    bool marking_ = false;
    std::chrono::steady_clock::time_point arrival_origin_;
    std::vector<double> arrivals_;  // ms after the origin, one per all_reduce since the mark
};

// Collective over `parent`: a communicator of its first n ranks; the others get
// nullptr (MPI_Comm_split with MPI_UNDEFINED).
MPI_Comm split_first_ranks(MPI_Comm parent, int n);

}  // namespace sb
