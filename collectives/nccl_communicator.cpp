#include "collectives/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <fmt/format.h>

#include "models/cuda/cuda_check.h"
#include "src/errors.h"

namespace sb {

namespace {

ncclDataType_t nccl_type(DType dtype) {
    switch (dtype) {
        case DType::f32: return ncclFloat32;
        case DType::bf16: return ncclBfloat16;
        case DType::f16: return ncclFloat16;
    }
    return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
    switch (op) {
        case ReduceOp::sum: return ncclSum;
        case ReduceOp::avg: return ncclAvg;
        case ReduceOp::max: return ncclMax;
        case ReduceOp::min: return ncclMin;
    }
    return ncclSum;
}

// A collective on the communication stream; done_ is recorded right after it.
class NcclRequest final : public CommRequest {
public:
    NcclRequest(cudaEvent_t done, cudaStream_t compute) : done_(done), compute_(compute) {}
    ~NcclRequest() override { cudaEventDestroy(done_); }
    bool test() override {
        cudaError_t rc = cudaEventQuery(done_);
        if (rc == cudaErrorNotReady) return false;
        SB_CHECK_CUDA(rc);
        return true;
    }
    // Device-side wait: the compute stream goes on only after the collective.
    void wait() override { SB_CHECK_CUDA(cudaStreamWaitEvent(compute_, done_, 0)); }

private:
    cudaEvent_t done_;
    cudaStream_t compute_;
};

}  // namespace

struct NcclCommunicator::Impl {
    MPI_Comm mpi = MPI_COMM_NULL;  // own duplicate, for the unique id and host barriers
    ncclComm_t nccl = nullptr;
    cudaStream_t compute = nullptr;
    cudaStream_t stream = nullptr;  // communication stream
    ~Impl() {
        if (nccl) ncclCommDestroy(nccl);
        if (stream) cudaStreamDestroy(stream);
        if (mpi != MPI_COMM_NULL) MPI_Comm_free(&mpi);
    }
};

NcclCommunicator::NcclCommunicator(MPI_Comm comm, void* compute_stream) : impl_(std::make_unique<Impl>()) {
    SB_CHECK_MPI(MPI_Comm_dup(comm, &impl_->mpi));
    SB_CHECK_MPI(MPI_Comm_rank(impl_->mpi, &rank_));
    SB_CHECK_MPI(MPI_Comm_size(impl_->mpi, &size_));
    impl_->compute = static_cast<cudaStream_t>(compute_stream);
    ncclUniqueId id;
    if (rank_ == 0) SB_CHECK_NCCL(ncclGetUniqueId(&id));
    SB_CHECK_MPI(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, impl_->mpi));
    SB_CHECK_NCCL(ncclCommInitRank(&impl_->nccl, size_, id, rank_));
    // Highest priority, so bucket all-reduces are not queued behind backward kernels.
    int least = 0, greatest = 0;
    SB_CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    SB_CHECK_CUDA(cudaStreamCreateWithPriority(&impl_->stream, cudaStreamNonBlocking, greatest));
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
    SB_CHECK_NCCL(ncclCommUserRank(impl_->nccl, &rank_));
    SB_CHECK_NCCL(ncclCommCount(impl_->nccl, &size_));
}

NcclCommunicator::~NcclCommunicator() = default;

template <class Launch>
std::unique_ptr<CommRequest> NcclCommunicator::issue(Launch&& launch) {
    cudaEvent_t inputs_ready, done;
    SB_CHECK_CUDA(cudaEventCreateWithFlags(&inputs_ready, cudaEventDisableTiming));
    SB_CHECK_CUDA(cudaEventRecord(inputs_ready, impl_->compute));
    SB_CHECK_CUDA(cudaStreamWaitEvent(impl_->stream, inputs_ready, 0));
    SB_CHECK_CUDA(cudaEventDestroy(inputs_ready));  // destruction is deferred until it completes
    launch(impl_->nccl, impl_->stream);
    SB_CHECK_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    SB_CHECK_CUDA(cudaEventRecord(done, impl_->stream));
    return std::make_unique<NcclRequest>(done, impl_->compute);
}

std::unique_ptr<CommRequest> NcclCommunicator::all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                                          ReduceOp op) {
    return issue([&](ncclComm_t c, cudaStream_t s) {
        SB_CHECK_NCCL(ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op), c, s));
    });
}

std::unique_ptr<CommRequest> NcclCommunicator::reduce_scatter(const void* send, void* recv, size_t count,
                                                              DType dtype, ReduceOp op) {
    return issue([&](ncclComm_t c, cudaStream_t s) {
        SB_CHECK_NCCL(ncclReduceScatter(send, recv, count, nccl_type(dtype), nccl_op(op), c, s));
    });
}

std::unique_ptr<CommRequest> NcclCommunicator::all_gather(const void* send, void* recv, size_t count, DType dtype) {
    return issue([&](ncclComm_t c, cudaStream_t s) {
        SB_CHECK_NCCL(ncclAllGather(send, recv, count, nccl_type(dtype), c, s));
    });
}

std::unique_ptr<CommRequest> NcclCommunicator::broadcast(void* buf, size_t count, DType dtype, int root) {
    return issue([&](ncclComm_t c, cudaStream_t s) {
        SB_CHECK_NCCL(ncclBroadcast(buf, buf, count, nccl_type(dtype), root, c, s));
    });
}

std::unique_ptr<CommRequest> NcclCommunicator::broadcast(const void* send, void* recv, size_t count, DType dtype,
                                                         int root) {
    return issue([&](ncclComm_t c, cudaStream_t s) {
        SB_CHECK_NCCL(ncclBroadcast(send, recv, count, nccl_type(dtype), root, c, s));
    });
}

std::unique_ptr<CommRequest> NcclCommunicator::reduce(const void* send, void* recv, size_t count, DType dtype,
                                                      ReduceOp op, int root) {
    return issue([&](ncclComm_t c, cudaStream_t s) {
        SB_CHECK_NCCL(ncclReduce(send, recv, count, nccl_type(dtype), nccl_op(op), root, c, s));
    });
}

// One send and one receive per peer in a group, as nccl-tests' alltoall (NCCL 2.28's
// ncclAlltoAll is the same pattern inside the library).
std::unique_ptr<CommRequest> NcclCommunicator::alltoall(const void* send, void* recv, size_t count_per_peer,
                                                        DType dtype) {
    const size_t block = count_per_peer * dtype_size(dtype);
    return issue([&](ncclComm_t c, cudaStream_t s) {
        SB_CHECK_NCCL(ncclGroupStart());
        for (int peer = 0; peer < size_; ++peer) {
            SB_CHECK_NCCL(ncclSend(static_cast<const char*>(send) + peer * block, count_per_peer, nccl_type(dtype),
                                   peer, c, s));
            SB_CHECK_NCCL(ncclRecv(static_cast<char*>(recv) + peer * block, count_per_peer, nccl_type(dtype), peer,
                                   c, s));
        }
        SB_CHECK_NCCL(ncclGroupEnd());
    });
}

std::unique_ptr<CommRequest> NcclCommunicator::sendrecv(const void* send, void* recv, size_t count, DType dtype,
                                                        int peer_send, int peer_recv) {
    return issue([&](ncclComm_t c, cudaStream_t s) {
        SB_CHECK_NCCL(ncclGroupStart());
        SB_CHECK_NCCL(ncclSend(send, count, nccl_type(dtype), peer_send, c, s));
        SB_CHECK_NCCL(ncclRecv(recv, count, nccl_type(dtype), peer_recv, c, s));
        SB_CHECK_NCCL(ncclGroupEnd());
    });
}

void NcclCommunicator::barrier() {
    SB_CHECK_CUDA(cudaStreamSynchronize(impl_->stream));
    SB_CHECK_MPI(MPI_Barrier(impl_->mpi));
}

std::unique_ptr<Communicator> NcclCommunicator::split_first(int n) {
    auto impl = std::make_unique<Impl>();
    impl->compute = impl_->compute;
    const bool member = rank_ < n;
    SB_CHECK_MPI(MPI_Comm_split(impl_->mpi, member ? 0 : MPI_UNDEFINED, rank_, &impl->mpi));
    SB_CHECK_NCCL(ncclCommSplit(impl_->nccl, member ? 0 : NCCL_SPLIT_NOCOLOR, rank_, &impl->nccl, nullptr));
    if (!member) return nullptr;
    int least = 0, greatest = 0;
    SB_CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    SB_CHECK_CUDA(cudaStreamCreateWithPriority(&impl->stream, cudaStreamNonBlocking, greatest));
    return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(impl)));
}

}  // namespace sb
