#include "collectives/mpi_communicator.h"

#include <climits>

#include <fmt/format.h>

#include "src/errors.h"

namespace sb {

namespace {

MPI_Datatype mpi_type(DType dtype) {
    if (dtype == DType::f32) return MPI_FLOAT;
    throw UserError(fmt::format("the MPI communicator reduces f32 only; got {}", dtype_name(dtype)));
}

MPI_Op mpi_op(ReduceOp op) {
    switch (op) {
        case ReduceOp::sum:
        case ReduceOp::avg: return MPI_SUM;  // avg = sum, then divided on completion
        case ReduceOp::max: return MPI_MAX;
        case ReduceOp::min: return MPI_MIN;
    }
    return MPI_SUM;
}

int mpi_count(size_t count) {
    if (count > static_cast<size_t>(INT_MAX))
        throw UserError(fmt::format("MPI collective of {} elements exceeds INT_MAX", count));
    return static_cast<int>(count);
}

// One MPI request; for ReduceOp::avg the result is scaled once it has completed.
class MpiRequest final : public CommRequest {
public:
    MpiRequest(MPI_Request request, float* scale_data, size_t scale_count, float scale)
        : request_(request), scale_data_(scale_data), scale_count_(scale_count), scale_(scale) {}
    ~MpiRequest() override {
        if (!done_) MPI_Wait(&request_, MPI_STATUS_IGNORE);
    }
    bool test() override {
        if (done_) return true;
        int flag = 0;
        SB_CHECK_MPI(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
        if (flag) finish();
        return done_;
    }
    void wait() override {
        if (done_) return;
        SB_CHECK_MPI(MPI_Wait(&request_, MPI_STATUS_IGNORE));
        finish();
    }

private:
    void finish() {
        done_ = true;
        if (scale_data_)
            for (size_t i = 0; i < scale_count_; ++i) scale_data_[i] *= scale_;
    }
    MPI_Request request_;
    float* scale_data_;
    size_t scale_count_;
    float scale_;
    bool done_ = false;
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) {
    SB_CHECK_MPI(MPI_Comm_dup(comm, &comm_));
    SB_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
    SB_CHECK_MPI(MPI_Comm_size(comm_, &size_));
}

MpiCommunicator::~MpiCommunicator() {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<CommRequest> MpiCommunicator::all_reduce(const void* send, void* recv, size_t count,
                                                         DType dtype, ReduceOp op) {
    MPI_Request request;
    const void* src = send == recv ? MPI_IN_PLACE : send;
    SB_CHECK_MPI(MPI_Iallreduce(src, recv, mpi_count(count), mpi_type(dtype), mpi_op(op), comm_, &request));
    const bool avg = op == ReduceOp::avg;
    return std::make_unique<MpiRequest>(request, avg ? static_cast<float*>(recv) : nullptr, count,
                                        1.0f / static_cast<float>(size_));
}

std::unique_ptr<CommRequest> MpiCommunicator::reduce_scatter(const void* send, void* recv, size_t count,
                                                             DType dtype, ReduceOp op) {
    MPI_Request request;
    SB_CHECK_MPI(MPI_Ireduce_scatter_block(send, recv, mpi_count(count), mpi_type(dtype), mpi_op(op), comm_,
                                           &request));
    const bool avg = op == ReduceOp::avg;
    return std::make_unique<MpiRequest>(request, avg ? static_cast<float*>(recv) : nullptr, count,
                                        1.0f / static_cast<float>(size_));
}

std::unique_ptr<CommRequest> MpiCommunicator::all_gather(const void* send, void* recv, size_t count,
                                                         DType dtype) {
    MPI_Request request;
    SB_CHECK_MPI(MPI_Iallgather(send, mpi_count(count), mpi_type(dtype), recv, mpi_count(count), mpi_type(dtype),
                                comm_, &request));
    return std::make_unique<MpiRequest>(request, nullptr, 0, 1.0f);
}

std::unique_ptr<CommRequest> MpiCommunicator::broadcast(void* buf, size_t count, DType dtype, int root) {
    MPI_Request request;
    SB_CHECK_MPI(MPI_Ibcast(buf, mpi_count(count), mpi_type(dtype), root, comm_, &request));
    return std::make_unique<MpiRequest>(request, nullptr, 0, 1.0f);
}

void MpiCommunicator::barrier() { SB_CHECK_MPI(MPI_Barrier(comm_)); }

std::unique_ptr<Communicator> MpiCommunicator::split_first(int n) {
    MPI_Comm sub = split_first_ranks(comm_, n);
    if (sub == MPI_COMM_NULL) return nullptr;
    auto result = std::make_unique<MpiCommunicator>(sub);
    SB_CHECK_MPI(MPI_Comm_free(&sub));
    return result;
}

MPI_Comm split_first_ranks(MPI_Comm parent, int n) {
    int rank = 0;
    SB_CHECK_MPI(MPI_Comm_rank(parent, &rank));
    MPI_Comm sub = MPI_COMM_NULL;
    SB_CHECK_MPI(MPI_Comm_split(parent, rank < n ? 0 : MPI_UNDEFINED, rank, &sub));
    return sub;
}

}  // namespace sb
