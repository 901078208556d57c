#include "collectives/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "models/cuda/cuda_check.h"
#include "base/errors.h"
#include "collectives/deadline.h"

namespace sb {

namespace {

ncclDataType_t nccl_type(DType dtype) {
    switch (dtype) {
        case DType::f32: return ncclFloat32;
        case DType::bf16: return ncclBfloat16;
        case DType::f16: return ncclFloat16;
        case DType::i32: return ncclInt32;
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

using Clock = std::chrono::steady_clock;

// Completion events are reused: creating and destroying two CUDA events per collective
// cost microseconds of host time, most of a small all-reduce's latency. An event goes
// back to its pool when the last holder (request or watchdog list) lets go of it.
class EventPool : public std::enable_shared_from_this<EventPool> {
public:
    ~EventPool() {
        for (cudaEvent_t e : free_) cudaEventDestroy(e);
    }
    std::shared_ptr<cudaEvent_t> take() {
        cudaEvent_t event = nullptr;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!free_.empty()) {
                event = free_.back();
                free_.pop_back();
            }
        }
        if (!event) SB_CHECK_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
        std::weak_ptr<EventPool> pool = shared_from_this();
        return std::shared_ptr<cudaEvent_t>(new cudaEvent_t(event), [pool](cudaEvent_t* e) {
            if (auto p = pool.lock()) {
                std::lock_guard<std::mutex> lock(p->mutex_);
                p->free_.push_back(*e);
            } else {
                cudaEventDestroy(*e);
            }
            delete e;
        });
    }

private:
    std::mutex mutex_;
    std::vector<cudaEvent_t> free_;
};
using Event = std::shared_ptr<cudaEvent_t>;

struct Pending {
    Event done;
    Clock::time_point issued;
    const char* what;
};

}  // namespace

// The watchdog thread (collectives/deadline.h) polls every communicator every 100 ms: an
// asynchronous NCCL error (a peer's connection broke) or a collective pending longer than
// the collective timeout (a peer stopped) ends the job. The order matters, as NCCL allows no
// two threads in calls on one communicator and frees it in ncclCommAbort: name the peer
// that failed (from this host's process table: no MPI from this thread), print the one line
// and write the incomplete record, take the fence so the main thread never enters NCCL on
// this communicator again, abort the communicator, and end the job (deadline.h's abort_job).
// The hot path only takes the fence around the NCCL call and appends to `pending`.
struct NcclCommunicator::Impl {
    MPI_Comm mpi = MPI_COMM_NULL;  // own duplicate, for the unique id and host barriers
    ncclComm_t nccl = nullptr;
    cudaStream_t compute = nullptr;
    cudaStream_t stream = nullptr;  // communication stream
    cudaEvent_t inputs_ready = nullptr;  // reused: a wait takes the event's state when issued
    std::shared_ptr<EventPool> events = std::make_shared<EventPool>();
    std::mutex mutex;
    std::deque<Pending> pending;
    // Held by whichever thread is in an NCCL call on `nccl`: the main thread while it issues,
    // the watchdog while it queries, and, once it aborts, by the watchdog until the process ends.
    std::timed_mutex fence;
    std::vector<int> members;  // world ranks
    long monitor = 0;
    std::atomic<bool> aborted{false};
    // Arrival clock (mark_arrivals): timed events on the compute stream, the origin and one
    // per all_reduce since the mark, reused step after step (a captured graph re-records them);
    // and where each all_reduce started on the communication stream.
    cudaEvent_t arrival_origin = nullptr;
    std::vector<cudaEvent_t> arrival_events, start_events;
    size_t arrivals = 0;
    bool marking = false;
    ~Impl() {
        if (monitor) unregister_monitor(monitor);
        for (cudaEvent_t e : arrival_events) cudaEventDestroy(e);
        for (cudaEvent_t e : start_events) cudaEventDestroy(e);
        if (arrival_origin) cudaEventDestroy(arrival_origin);
        if (nccl && !aborted) ncclCommDestroy(nccl);
        if (inputs_ready) cudaEventDestroy(inputs_ready);
        if (stream && stream != compute) cudaStreamDestroy(stream);
        if (mpi != MPI_COMM_NULL) MPI_Comm_free(&mpi);
    }

    std::string members_text() const {
        std::vector<std::string> named;
        for (int r : members) named.push_back(rank_and_host_text(r));
        return fmt::format("world ranks {}", fmt::join(named, ", "));
    }

    // On the watchdog thread: empty while healthy.
    // The fence is taken before the failure is announced, so the main thread appends no record
    // after the incomplete one.
    std::string poll() {
        std::string failure = async_failure();
        if (failure.empty()) failure = overdue_failure();
        if (failure.empty()) return "";
        const bool fenced = take_fence();
        announce_failure(failure);
        if (fenced) abort_comm();
        return failure;
    }
    // NCCL's asynchronous error, queried while the main thread is outside NCCL (the fence is
    // free); a main thread held inside NCCL by a broken peer is left to the timeout. The peers
    // are named after the fence is released: naming waits for them to settle.
    std::string async_failure() {
        ncclResult_t async = ncclSuccess;
        std::string detail;
        {
            std::unique_lock<std::timed_mutex> lock(fence, std::try_to_lock);
            if (!lock.owns_lock()) return "";
            if (ncclCommGetAsyncError(nccl, &async) != ncclSuccess || async == ncclSuccess || async == ncclInProgress)
                return "";
            detail = ncclGetLastError(nccl);
        }
        return fmt::format("{}: NCCL communicator of {} reported an asynchronous error: {}{}{}; {}", this_rank_text(),
                           members_text(), ncclGetErrorString(async), detail.empty() ? "" : ": ", detail,
                           find_failed_peers(members, kSettleS).text);
    }
    std::string overdue_failure() {
        const char* what = nullptr;
        {
            std::lock_guard<std::mutex> lock(mutex);
            while (!pending.empty() && cudaEventQuery(*pending.front().done) != cudaErrorNotReady) pending.pop_front();
            if (pending.empty()) return "";
            const double age = std::chrono::duration<double>(Clock::now() - pending.front().issued).count();
            if (age <= collective_timeout_s()) return "";
            what = pending.front().what;
        }
        return fmt::format("{}: NCCL collective {} did not complete within {} s; {}", this_rank_text(), what,
                           collective_timeout_s(), find_failed_peers(members, kSettleS).text);
    }
    // Where the main thread's NCCL call failed: a peer that stopped or is gone ends the job
    // with it named (the watchdog may be aborting the communicator: the fence is released
    // first); any other failure is rethrown, an internal error.
    [[noreturn]] void call_failed(const char* what, const std::exception& error) {
        const FailedPeers peers = find_failed_peers(members, kSettleS);
        if (peers.ranks.empty()) throw;
        abort_job(fmt::format("{}: NCCL {} failed ({}); {}", this_rank_text(), what, error.what(), peers.text));
    }
    static constexpr double kSettleS = 2;
    // Highest priority, so bucket all-reduces are not queued behind backward kernels.
    void create_stream() {
        int least = 0, greatest = 0;
        SB_CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
        SB_CHECK_CUDA(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest));
        SB_CHECK_CUDA(cudaEventCreateWithFlags(&inputs_ready, cudaEventDisableTiming));
    }
    // Puts a completion event under the deadline. Completed entries are dropped here too,
    // so the list stays short where no watchdog thread runs (tests).
    void track(const Event& event, const char* what) {
        std::lock_guard<std::mutex> lock(mutex);
        while (!pending.empty() && cudaEventQuery(*pending.front().done) != cudaErrorNotReady) pending.pop_front();
        pending.push_back({event, Clock::now(), what});
    }
    // Takes the fence for good: from here the main thread cannot enter NCCL on this
    // communicator (it blocks in issue() until the job ends; the locked mutex is never
    // destroyed, as abort_job does not return). Where the main thread is inside NCCL (waiting
    // for room in its queue behind the stalled collective) the fence is not free: no abort,
    // the job's end tears the communicator down.
    bool take_fence() {
        if (aborted) return false;
        aborted = true;
        if (fence.try_lock_for(std::chrono::seconds(1))) return true;
        fmt::print(stderr, "{}: a thread is inside NCCL on the stalled communicator; ending the job without "
                           "ncclCommAbort\n", this_rank_text());
        return false;
    }
    // NCCL's way to stop kernels waiting on a peer that will not come, called holding the
    // fence. ncclCommAbort also frees device memory, which waits for the device: where the
    // stall is not NCCL's own (work ahead of the collective that never ends) it does not
    // return, so it runs on a thread of its own with a grace period.
    void abort_comm() {
        auto finished = std::make_shared<std::promise<void>>();
        std::future<void> done = finished->get_future();
        std::thread([comm = nccl, finished] {
            ncclCommAbort(comm);
            finished->set_value();
        }).detach();
        if (done.wait_for(std::chrono::seconds(kAbortGraceS)) != std::future_status::ready)
            fmt::print(stderr, "{}: ncclCommAbort did not return within {} s; ending the job anyway\n", this_rank_text(),
                       kAbortGraceS);
    }
    static constexpr int kAbortGraceS = 10;

    // An external record in a capture, so the graph timestamps the event at each replay.
    void record_timed(cudaEvent_t event, cudaStream_t on) {
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        SB_CHECK_CUDA(cudaStreamIsCapturing(on, &capture));
        SB_CHECK_CUDA(cudaEventRecordWithFlags(
            event, on, capture == cudaStreamCaptureStatusNone ? cudaEventRecordDefault : cudaEventRecordExternal));
    }
    // The next of `events` (created on first use), recorded on `on`.
    static void record_next(std::vector<cudaEvent_t>& events, size_t index, cudaStream_t on, Impl& impl) {
        if (index == events.size()) {
            events.emplace_back();
            SB_CHECK_CUDA(cudaEventCreate(&events.back()));
        }
        impl.record_timed(events[index], on);
    }
    void note_arrival() {
        if (marking) record_next(arrival_events, arrivals, compute, *this);
    }
    // On the communication stream, after its wait for the inputs: where the collective starts.
    void note_start() {
        if (marking) record_next(start_events, arrivals++, stream, *this);
    }
    std::vector<double> elapsed_since_mark(const std::vector<cudaEvent_t>& events, size_t n) const {
        if (!arrival_origin || events.size() < n) return {};
        std::vector<double> out;
        // Both ends must have completed: the origin is on the compute stream, the events may be on
        // the communication stream, and either may come from a graph replay still in flight.
        SB_CHECK_CUDA(cudaEventSynchronize(arrival_origin));
        for (size_t i = 0; i < n; ++i) {
            SB_CHECK_CUDA(cudaEventSynchronize(events[i]));
            float ms = 0;
            SB_CHECK_CUDA(cudaEventElapsedTime(&ms, arrival_origin, events[i]));
            out.push_back(ms);
        }
        return out;
    }
};

namespace {

// A collective issued on the communicator's stream. Its completion event is recorded on
// the first test() or wait(), not at issue: on the in-order stream that point follows
// this collective (and perhaps later ones, which only makes a wait conservative), and a
// collective nobody asks about costs nothing but the NCCL call. The communicator
// outlives its requests.
class NcclRequest final : public CommRequest {
public:
    NcclRequest(NcclCommunicator::Impl* impl, const char* what) : impl_(impl), what_(what) {}
    // A collective recorded into a CUDA graph has not run: it completes only in a replay.
    bool test() override {
        if (in_capture()) return false;
        cudaError_t rc = cudaEventQuery(*done());
        if (rc == cudaErrorNotReady) return false;
        SB_CHECK_CUDA(rc);
        return true;
    }
    // Device-side wait: the compute stream goes on only after the collective.
    void wait() override {
        const Event& event = done();
        if (impl_->stream != impl_->compute) SB_CHECK_CUDA(cudaStreamWaitEvent(impl_->compute, *event, 0));
    }

private:
    // Captured work is put under the deadline when its graph is replayed (watch_stream).
    const Event& done() {
        if (!done_) {
            done_ = impl_->events->take();
            SB_CHECK_CUDA(cudaEventRecord(*done_, impl_->stream));
            if (!in_capture()) impl_->track(done_, what_);
        }
        return done_;
    }
    bool in_capture() const {
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        SB_CHECK_CUDA(cudaStreamIsCapturing(impl_->compute, &capture));
        return capture != cudaStreamCaptureStatusNone;
    }

    NcclCommunicator::Impl* impl_;
    const char* what_;  // a literal
    Event done_;
};

std::vector<int> world_ranks_of(MPI_Comm comm) {
    int size = 0;
    SB_CHECK_MPI(MPI_Comm_size(comm, &size));
    std::vector<int> ranks(static_cast<size_t>(size));
    int mine = 0;
    SB_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &mine));
    SB_CHECK_MPI(MPI_Allgather(&mine, 1, MPI_INT, ranks.data(), 1, MPI_INT, comm));
    return ranks;
}

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm comm, void* compute_stream, CollectiveStream stream)
    : impl_(std::make_unique<Impl>()) {
    SB_CHECK_MPI(MPI_Comm_dup(comm, &impl_->mpi));
    SB_CHECK_MPI(MPI_Comm_set_errhandler(impl_->mpi, MPI_ERRORS_RETURN));
    SB_CHECK_MPI(MPI_Comm_rank(impl_->mpi, &rank_));
    SB_CHECK_MPI(MPI_Comm_size(impl_->mpi, &size_));
    impl_->compute = static_cast<cudaStream_t>(compute_stream);
    ncclUniqueId id;
    if (rank_ == 0) SB_CHECK_NCCL(ncclGetUniqueId(&id));
    SB_CHECK_MPI(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, impl_->mpi));
    {
        WatchdogScope guard("ncclCommInitRank");
        SB_CHECK_NCCL(ncclCommInitRank(&impl_->nccl, size_, id, rank_));
    }
    impl_->members = world_ranks_of(impl_->mpi);
    Impl* impl = impl_.get();
    impl_->monitor = register_monitor([impl] { return impl->poll(); });
    impl_->stream = impl_->compute;
    if (stream == CollectiveStream::own) impl_->create_stream();
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
    SB_CHECK_NCCL(ncclCommUserRank(impl_->nccl, &rank_));
    SB_CHECK_NCCL(ncclCommCount(impl_->nccl, &size_));
    impl_->members = world_ranks_of(impl_->mpi);
    Impl* raw = impl_.get();
    impl_->monitor = register_monitor([raw] { return raw->poll(); });
}

NcclCommunicator::~NcclCommunicator() = default;

template <class Launch>
std::unique_ptr<CommRequest> NcclCommunicator::issue(const char* what, Launch&& launch) {
    if (impl_->stream != impl_->compute) {  // after the compute stream's work issued so far
        SB_CHECK_CUDA(cudaEventRecord(impl_->inputs_ready, impl_->compute));
        SB_CHECK_CUDA(cudaStreamWaitEvent(impl_->stream, impl_->inputs_ready, 0));
    }
    try {
        std::lock_guard<std::timed_mutex> fence(impl_->fence);
        launch(impl_->nccl, impl_->stream);
    } catch (const std::runtime_error& error) {
        impl_->call_failed(what, error);
    }
    return std::make_unique<NcclRequest>(impl_.get(), what);
}

void NcclCommunicator::watch_stream(const char* what) {
    Event event = impl_->events->take();
    SB_CHECK_CUDA(cudaEventRecord(*event, impl_->compute));
    impl_->track(event, what);
}

void NcclCommunicator::mark_arrivals() {
    if (!impl_->arrival_origin) SB_CHECK_CUDA(cudaEventCreate(&impl_->arrival_origin));
    impl_->record_timed(impl_->arrival_origin, impl_->compute);
    impl_->arrivals = 0;
    impl_->marking = true;
}

std::vector<double> NcclCommunicator::arrivals_ms(size_t n) {
    impl_->marking = false;
    return impl_->elapsed_since_mark(impl_->arrival_events, n);
}

std::vector<double> NcclCommunicator::starts_ms(size_t n) { return impl_->elapsed_since_mark(impl_->start_events, n); }

std::unique_ptr<CommRequest> NcclCommunicator::all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                                          ReduceOp op) {
    impl_->note_arrival();
    return issue("all_reduce", [&](ncclComm_t c, cudaStream_t s) {
        impl_->note_start();
        SB_CHECK_NCCL(ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op), c, s));
    });
}

std::unique_ptr<CommRequest> NcclCommunicator::reduce_scatter(const void* send, void* recv, size_t count,
                                                              DType dtype, ReduceOp op) {
    return issue("reduce_scatter", [&](ncclComm_t c, cudaStream_t s) {
        SB_CHECK_NCCL(ncclReduceScatter(send, recv, count, nccl_type(dtype), nccl_op(op), c, s));
    });
}

std::unique_ptr<CommRequest> NcclCommunicator::all_gather(const void* send, void* recv, size_t count, DType dtype) {
    return issue("all_gather", [&](ncclComm_t c, cudaStream_t s) {
        SB_CHECK_NCCL(ncclAllGather(send, recv, count, nccl_type(dtype), c, s));
    });
}

std::unique_ptr<CommRequest> NcclCommunicator::broadcast(void* buf, size_t count, DType dtype, int root) {
    return issue("broadcast", [&](ncclComm_t c, cudaStream_t s) {
        SB_CHECK_NCCL(ncclBroadcast(buf, buf, count, nccl_type(dtype), root, c, s));
    });
}

std::unique_ptr<CommRequest> NcclCommunicator::broadcast(const void* send, void* recv, size_t count, DType dtype,
                                                         int root) {
    return issue("broadcast", [&](ncclComm_t c, cudaStream_t s) {
        SB_CHECK_NCCL(ncclBroadcast(send, recv, count, nccl_type(dtype), root, c, s));
    });
}

std::unique_ptr<CommRequest> NcclCommunicator::reduce(const void* send, void* recv, size_t count, DType dtype,
                                                      ReduceOp op, int root) {
    return issue("reduce", [&](ncclComm_t c, cudaStream_t s) {
        SB_CHECK_NCCL(ncclReduce(send, recv, count, nccl_type(dtype), nccl_op(op), root, c, s));
    });
}

// One send and one receive per peer in a group, as nccl-tests' alltoall (NCCL 2.28's
// ncclAlltoAll is the same pattern inside the library).
std::unique_ptr<CommRequest> NcclCommunicator::alltoall(const void* send, void* recv, size_t count_per_peer,
                                                        DType dtype) {
    const size_t block = count_per_peer * dtype_size(dtype);
    return issue("alltoall", [&](ncclComm_t c, cudaStream_t s) {
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
    return issue("sendrecv", [&](ncclComm_t c, cudaStream_t s) {
        SB_CHECK_NCCL(ncclGroupStart());
        SB_CHECK_NCCL(ncclSend(send, count, nccl_type(dtype), peer_send, c, s));
        SB_CHECK_NCCL(ncclRecv(recv, count, nccl_type(dtype), peer_recv, c, s));
        SB_CHECK_NCCL(ncclGroupEnd());
    });
}

// Polls the stream instead of cudaStreamSynchronize, so the watchdog's abort of a stuck
// communicator is not waited on forever here; the MPI barrier has the timeout too.
void NcclCommunicator::barrier() {
    for (;;) {
        cudaError_t rc = cudaStreamQuery(impl_->stream);
        if (rc != cudaErrorNotReady) {
            SB_CHECK_CUDA(rc);
            break;
        }
        serve_side_channel();
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    MPI_Request r;
    SB_CHECK_MPI(MPI_Ibarrier(impl_->mpi, &r));
    wait_requests(1, &r, impl_->mpi, "barrier");
}

std::unique_ptr<Communicator> NcclCommunicator::split_first(int n) {
    auto impl = std::make_unique<Impl>();
    impl->compute = impl_->compute;
    const bool member = rank_ < n;
    SB_CHECK_MPI(MPI_Comm_split(impl_->mpi, member ? 0 : MPI_UNDEFINED, rank_, &impl->mpi));
    {
        WatchdogScope guard("ncclCommSplit");
        std::lock_guard<std::timed_mutex> fence(impl_->fence);
        SB_CHECK_NCCL(ncclCommSplit(impl_->nccl, member ? 0 : NCCL_SPLIT_NOCOLOR, rank_, &impl->nccl, nullptr));
    }
    if (!member) return nullptr;
    impl->stream = impl->compute;
    if (impl_->stream != impl_->compute) impl->create_stream();
    return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(impl)));
}

}  // namespace sb
