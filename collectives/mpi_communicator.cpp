#include "collectives/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "collectives/host_dtype.h"
#include "base/errors.h"
#include "collectives/deadline.h"

namespace sb {

namespace {

// ---- half and bfloat16. MPI has neither, so they travel as 2-byte datatypes and reduce
// through user-defined ops that compute each pair in fp32 and round back to nearest even.
// Created once, on first use; MPI_Finalize frees them.

MPI_Datatype make_16bit_type(const char* name) {
    MPI_Datatype type;
    SB_CHECK_MPI(MPI_Type_contiguous(2, MPI_BYTE, &type));
    SB_CHECK_MPI(MPI_Type_set_name(type, name));
    SB_CHECK_MPI(MPI_Type_commit(&type));
    return type;
}

template <DType D, ReduceOp Op>
void reduce_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
    for (int i = 0; i < *len; ++i) {
        const float a = load_as_float(D, in, static_cast<size_t>(i));
        const float b = load_as_float(D, inout, static_cast<size_t>(i));
        const float r = Op == ReduceOp::max ? std::max(a, b) : Op == ReduceOp::min ? std::min(a, b) : a + b;
        store_from_float(D, inout, static_cast<size_t>(i), r);
    }
}

MPI_Op make_op(MPI_User_function* function) {
    MPI_Op op;
    SB_CHECK_MPI(MPI_Op_create(function, /*commute=*/1, &op));
    return op;
}

template <DType D>
MPI_Op op_16bit(ReduceOp op) {
    static const MPI_Op sum = make_op(&reduce_16bit<D, ReduceOp::sum>);
    static const MPI_Op max = make_op(&reduce_16bit<D, ReduceOp::max>);
    static const MPI_Op min = make_op(&reduce_16bit<D, ReduceOp::min>);
    return op == ReduceOp::max ? max : op == ReduceOp::min ? min : sum;  // avg = sum, scaled on completion
}

MPI_Datatype mpi_type(DType dtype) {
    switch (dtype) {
        case DType::f32: return MPI_FLOAT;
        case DType::f16: {
            static const MPI_Datatype half = make_16bit_type("scalebench_half");
            return half;
        }
        case DType::bf16: {
            static const MPI_Datatype bfloat16 = make_16bit_type("scalebench_bfloat16");
            return bfloat16;
        }
        case DType::i32: return MPI_INT32_T;
    }
    throw UserError(fmt::format("the MPI communicator has no datatype for {}", dtype_name(dtype)));
}

MPI_Op mpi_op(ReduceOp op, DType dtype) {
    if (dtype == DType::f16) return op_16bit<DType::f16>(op);
    if (dtype == DType::bf16) return op_16bit<DType::bf16>(op);
    switch (op) {
        case ReduceOp::sum:
        case ReduceOp::avg: return MPI_SUM;  // avg = sum, then divided on completion
        case ReduceOp::max: return MPI_MAX;
        case ReduceOp::min: return MPI_MIN;
    }
    return MPI_SUM;
}

// The most elements one MPI call takes (MPI counts are ints); larger ones go in pieces.
size_t g_max_count = static_cast<size_t>(INT_MAX);

int mpi_count(size_t count) {
    SB_REQUIRE(count <= g_max_count, fmt::format("an MPI call of {} elements was not split into pieces", count));
    return static_cast<int>(count);
}

// Calls issue(offset, length) for consecutive pieces of at most g_max_count of `count`
// elements (one call, of length 0, when count is 0).
void for_each_piece(size_t count, const std::function<void(size_t, size_t)>& issue) {
    size_t offset = 0;
    do {
        const size_t length = std::min(count - offset, g_max_count);
        issue(offset, length);
        offset += length;
    } while (offset < count);
}

char* at(void* base, size_t elements, DType dtype) { return static_cast<char*>(base) + elements * dtype_size(dtype); }
const char* at(const void* base, size_t elements, DType dtype) {
    return static_cast<const char*>(base) + elements * dtype_size(dtype);
}

// A datatype of `length` elements whose extent is `block` elements: the piece of every
// rank's block at one offset, for all_gather and alltoall in pieces (freed when done).
MPI_Datatype piece_of_each_block(size_t length, size_t block, DType dtype) {
    MPI_Datatype piece, strided;
    SB_CHECK_MPI(MPI_Type_contiguous(static_cast<int>(length), mpi_type(dtype), &piece));
    SB_CHECK_MPI(MPI_Type_create_resized(piece, 0, static_cast<MPI_Aint>(block * dtype_size(dtype)), &strided));
    SB_CHECK_MPI(MPI_Type_commit(&strided));
    SB_CHECK_MPI(MPI_Type_free(&piece));
    return strided;
}

// The average is the sum times 1/size, applied once the sum has arrived.
std::function<void()> scale_on_completion(ReduceOp op, void* data, size_t count, DType dtype, int size) {
    if (op != ReduceOp::avg) return {};
    const float scale = 1.0f / static_cast<float>(size);
    return [=] {
        for (size_t i = 0; i < count; ++i) store_from_float(dtype, data, i, load_as_float(dtype, data, i) * scale);
    };
}

// One operation of zero or more MPI requests; `finish` runs once they have all completed
// (the avg scaling, moving an in-place reduce-scatter block into place). wait() polls
// with the collective timeout (collectives/deadline.h), so a rank that stopped answering ends
// the job with its name instead of a hang.
class MpiRequest final : public CommRequest {
public:
    MpiRequest(std::vector<MPI_Request> requests, std::function<void()> finish, MPI_Comm comm, const char* what)
        : requests_(std::move(requests)), finish_(std::move(finish)), comm_(comm), what_(what) {}
    ~MpiRequest() override {
        if (done_) return;
        try {
            wait();
        } catch (const std::exception& e) {
            abort_job(e.what());  // a destructor cannot throw; an MPI error here is fatal
        }
    }
    bool test() override {
        if (done_) return true;
        serve_side_channel();
        int flag = 0;
        SB_CHECK_MPI(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag, MPI_STATUSES_IGNORE));
        if (flag) complete();
        return done_;
    }
    void wait() override {
        if (done_) return;
        wait_requests(static_cast<int>(requests_.size()), requests_.data(), comm_, what_);
        complete();
    }

private:
    void complete() {
        done_ = true;
        if (finish_) finish_();
    }
    std::vector<MPI_Request> requests_;
    std::function<void()> finish_;
    MPI_Comm comm_;
    const char* what_;
    bool done_ = false;
};

std::unique_ptr<CommRequest> request(std::vector<MPI_Request> r, MPI_Comm comm, const char* what,
                                     std::function<void()> finish = {}) {
    return std::make_unique<MpiRequest>(std::move(r), std::move(finish), comm, what);
}

constexpr int kSendRecvTag = 17;

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) {
    SB_CHECK_MPI(MPI_Comm_dup(comm, &comm_));
    // MPI errors come back as codes that become exceptions with their text (not MPI's abort).
    SB_CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    SB_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
    SB_CHECK_MPI(MPI_Comm_size(comm_, &size_));
}

MpiCommunicator::~MpiCommunicator() {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::set_max_count(size_t count) { g_max_count = count; }

std::unique_ptr<CommRequest> MpiCommunicator::all_reduce(const void* send, void* recv, size_t count,
                                                         DType dtype, ReduceOp op) {
    if (marking_)
        arrivals_.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - arrival_origin_)
                                .count());
    std::vector<MPI_Request> r;
    for_each_piece(count, [&](size_t offset, size_t length) {
        r.emplace_back();
        const void* src = send == recv ? MPI_IN_PLACE : at(send, offset, dtype);
        SB_CHECK_MPI(MPI_Iallreduce(src, at(recv, offset, dtype), mpi_count(length), mpi_type(dtype),
                                    mpi_op(op, dtype), comm_, &r.back()));
    });
    return request(std::move(r), comm_, "all_reduce", scale_on_completion(op, recv, count, dtype, size_));
}

std::unique_ptr<CommRequest> MpiCommunicator::reduce_scatter(const void* send, void* recv, size_t count,
                                                             DType dtype, ReduceOp op) {
    const size_t block = count * dtype_size(dtype);
    auto scale = scale_on_completion(op, recv, count, dtype, size_);
    std::vector<MPI_Request> r(1);
    if (count <= g_max_count) {
        if (recv != static_cast<const char*>(send) + rank_ * block) {
            SB_CHECK_MPI(MPI_Ireduce_scatter_block(send, recv, mpi_count(count), mpi_type(dtype), mpi_op(op, dtype),
                                                   comm_, &r[0]));
            return request(std::move(r), comm_, "reduce_scatter", scale);
        }
        // In place, NCCL's way (recv is this rank's block of send). MPI's in-place form leaves
        // the result at the start of the buffer, so it is moved to the rank's block afterwards.
        void* buffer = const_cast<void*>(send);
        SB_CHECK_MPI(MPI_Ireduce_scatter_block(MPI_IN_PLACE, buffer, mpi_count(count), mpi_type(dtype),
                                               mpi_op(op, dtype), comm_, &r[0]));
        return request(std::move(r), comm_, "reduce_scatter", [=] {
            if (recv != buffer) std::memmove(recv, buffer, block);
            if (scale) scale();
        });
    }
    // Blocks past an int count: piece j of every rank's block is packed next to the others
    // (a reduction needs contiguous blocks) and reduce-scattered into piece j of recv.
    auto packed = std::make_shared<std::vector<char>>(static_cast<size_t>(size_) * block);
    r.clear();
    for_each_piece(count, [&](size_t offset, size_t length) {
        char* pieces = at(packed->data(), static_cast<size_t>(size_) * offset, dtype);
        for (int peer = 0; peer < size_; ++peer)
            std::memcpy(at(pieces, static_cast<size_t>(peer) * length, dtype),
                        at(send, static_cast<size_t>(peer) * count + offset, dtype), length * dtype_size(dtype));
        r.emplace_back();
        SB_CHECK_MPI(MPI_Ireduce_scatter_block(pieces, at(recv, offset, dtype), mpi_count(length), mpi_type(dtype),
                                               mpi_op(op, dtype), comm_, &r.back()));
    });
    return request(std::move(r), comm_, "reduce_scatter", [packed, scale] {
        if (scale) scale();
    });
}

std::unique_ptr<CommRequest> MpiCommunicator::all_gather(const void* send, void* recv, size_t count,
                                                         DType dtype) {
    // In place, NCCL's way, is MPI's: send is this rank's block of recv.
    const bool in_place = send == static_cast<const char*>(recv) + rank_ * count * dtype_size(dtype);
    std::vector<MPI_Request> r;
    if (count <= g_max_count) {
        r.emplace_back();
        SB_CHECK_MPI(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, mpi_count(count), mpi_type(dtype), recv,
                                    mpi_count(count), mpi_type(dtype), comm_, &r.back()));
        return request(std::move(r), comm_, "all_gather");
    }
    // Piece j of each rank's block lands at offset j of that rank's block of recv.
    std::vector<MPI_Datatype> types;
    for_each_piece(count, [&](size_t offset, size_t length) {
        types.push_back(piece_of_each_block(length, count, dtype));
        r.emplace_back();
        SB_CHECK_MPI(MPI_Iallgather(in_place ? MPI_IN_PLACE : at(send, offset, dtype), mpi_count(length),
                                    mpi_type(dtype), at(recv, offset, dtype), 1, types.back(), comm_, &r.back()));
    });
    return request(std::move(r), comm_, "all_gather", [types]() mutable {
        for (MPI_Datatype& t : types) MPI_Type_free(&t);
    });
}

std::unique_ptr<CommRequest> MpiCommunicator::broadcast(void* buf, size_t count, DType dtype, int root) {
    std::vector<MPI_Request> r;
    for_each_piece(count, [&](size_t offset, size_t length) {
        r.emplace_back();
        SB_CHECK_MPI(MPI_Ibcast(at(buf, offset, dtype), mpi_count(length), mpi_type(dtype), root, comm_, &r.back()));
    });
    return request(std::move(r), comm_, "broadcast");
}

std::unique_ptr<CommRequest> MpiCommunicator::broadcast(const void* send, void* recv, size_t count, DType dtype,
                                                        int root) {
    if (rank_ == root && send != recv) std::memcpy(recv, send, count * dtype_size(dtype));
    return broadcast(recv, count, dtype, root);
}

std::unique_ptr<CommRequest> MpiCommunicator::reduce(const void* send, void* recv, size_t count, DType dtype,
                                                     ReduceOp op, int root) {
    const bool root_in_place = rank_ == root && send == recv;
    std::vector<MPI_Request> r;
    for_each_piece(count, [&](size_t offset, size_t length) {
        r.emplace_back();
        SB_CHECK_MPI(MPI_Ireduce(root_in_place ? MPI_IN_PLACE : at(send, offset, dtype), at(recv, offset, dtype),
                                 mpi_count(length), mpi_type(dtype), mpi_op(op, dtype), root, comm_, &r.back()));
    });
    return request(std::move(r), comm_, "reduce",
                   rank_ == root ? scale_on_completion(op, recv, count, dtype, size_) : nullptr);
}

std::unique_ptr<CommRequest> MpiCommunicator::alltoall(const void* send, void* recv, size_t count_per_peer,
                                                       DType dtype) {
    std::vector<MPI_Request> r;
    if (count_per_peer <= g_max_count) {
        r.emplace_back();
        SB_CHECK_MPI(MPI_Ialltoall(send == recv ? MPI_IN_PLACE : send, mpi_count(count_per_peer), mpi_type(dtype),
                                   recv, mpi_count(count_per_peer), mpi_type(dtype), comm_, &r.back()));
        return request(std::move(r), comm_, "alltoall");
    }
    // Piece j of every block, on both sides: one strided datatype per piece.
    std::vector<MPI_Datatype> types;
    for_each_piece(count_per_peer, [&](size_t offset, size_t length) {
        types.push_back(piece_of_each_block(length, count_per_peer, dtype));
        r.emplace_back();
        SB_CHECK_MPI(MPI_Ialltoall(send == recv ? MPI_IN_PLACE : at(send, offset, dtype), 1, types.back(),
                                   at(recv, offset, dtype), 1, types.back(), comm_, &r.back()));
    });
    return request(std::move(r), comm_, "alltoall", [types]() mutable {
        for (MPI_Datatype& t : types) MPI_Type_free(&t);
    });
}

std::unique_ptr<CommRequest> MpiCommunicator::sendrecv(const void* send, void* recv, size_t count, DType dtype,
                                                       int peer_send, int peer_recv) {
    if (send == recv) {  // MPI has no non-blocking form of the in-place exchange
        WatchdogScope guard("sendrecv (MPI_Sendrecv_replace)");
        for_each_piece(count, [&](size_t offset, size_t length) {
            SB_CHECK_MPI(MPI_Sendrecv_replace(at(recv, offset, dtype), mpi_count(length), mpi_type(dtype), peer_send,
                                              kSendRecvTag, peer_recv, kSendRecvTag, comm_, MPI_STATUS_IGNORE));
        });
        return request({}, comm_, "sendrecv");
    }
    std::vector<MPI_Request> r;
    for_each_piece(count, [&](size_t offset, size_t length) {
        r.resize(r.size() + 2);
        SB_CHECK_MPI(MPI_Irecv(at(recv, offset, dtype), mpi_count(length), mpi_type(dtype), peer_recv, kSendRecvTag,
                               comm_, &r[r.size() - 2]));
        SB_CHECK_MPI(MPI_Isend(at(send, offset, dtype), mpi_count(length), mpi_type(dtype), peer_send, kSendRecvTag,
                               comm_, &r.back()));
    });
    return request(std::move(r), comm_, "sendrecv");
}

void MpiCommunicator::barrier() {
    MPI_Request r;
    SB_CHECK_MPI(MPI_Ibarrier(comm_, &r));
    wait_requests(1, &r, comm_, "barrier");
}

void MpiCommunicator::mark_arrivals() {
    marking_ = true;
    arrivals_.clear();
    arrival_origin_ = std::chrono::steady_clock::now();
}

std::vector<double> MpiCommunicator::arrivals_ms(size_t n) {
    marking_ = false;
    return starts_ms(n);  // the same moments: see starts_ms
}

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

// A non-blocking MPI collective starts where it is issued: at its arrival.
std::vector<double> MpiCommunicator::starts_ms(size_t n) {
    if (arrivals_.size() < n) return {};
    return std::vector<double>(arrivals_.begin(), arrivals_.begin() + static_cast<std::ptrdiff_t>(n));
}

}  // namespace sb
