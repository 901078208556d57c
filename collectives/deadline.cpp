// The collective deadline (see deadline.h): the timeout, the ping side channel, the watchdog
// thread and the job abort. The thread never calls MPI except MPI_Abort; pings are answered
// by the main thread while it waits, so a rank that is stopped (SIGSTOP, a hung driver) is
// the one that does not answer.
#include "collectives/deadline.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/errors.h"
#include "base/numbers.h"

namespace sb {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kPingTag = 1, kPongTag = 2, kNoticeTag = 3;
constexpr double kDefaultTimeoutS = 600;

// Seconds, read by the one number parser in the deadlines' range.
double read_timeout() {
    const char* text = std::getenv("SCALEBENCH_COLLECTIVE_TIMEOUT_S");
    if (!text || !*text) return kDefaultTimeoutS;
    return real_or_refuse("SCALEBENCH_COLLECTIVE_TIMEOUT_S", text, kDeadlineSecondsRange);
}

std::atomic<double> g_timeout{-1};
MPI_Comm g_side = MPI_COMM_NULL;  // duplicate of world: pings, pongs, notices to rank 0
std::vector<std::string> g_hosts;  // by world rank
std::vector<long> g_pids;          // by world rank
std::atomic<bool> g_aborting{false};
Clock::time_point g_last_served;
int g_self_rank = 0;  // of world, set by init_fault_handling
std::string g_self_host;
void (*g_incomplete_recorder)(const std::string&) = nullptr;
pid_t g_parent = 0;  // the launcher (or its daemon): a change means it ended


// Watchdog thread state.
std::mutex g_mutex;
std::condition_variable g_cv;
std::thread g_thread;
bool g_stop = false;
std::atomic<long> g_next_id{1};
std::map<long, std::pair<std::string, Clock::time_point>> g_scopes;  // what, deadline
std::map<long, std::function<std::string()>> g_monitors;
std::mutex g_monitor_mutex;  // held while monitors run, so unregister waits for them

std::string rank_and_host(int rank) {
    const std::string host = rank >= 0 && rank < static_cast<int>(g_hosts.size()) ? g_hosts[rank] : "?";
    return fmt::format("{} ({})", rank, host);
}

std::string me() { return fmt::format("rank {} on {}", g_self_rank, g_self_host.empty() ? "?" : g_self_host); }

// The run's incomplete record, written through the hook the records unit installs.
void record_failure(const std::string& message) {
    if (g_incomplete_recorder) g_incomplete_recorder(message);
}

void watchdog_loop() {
    std::unique_lock<std::mutex> lock(g_mutex);
    while (!g_stop) {
        g_cv.wait_for(lock, std::chrono::milliseconds(100));
        if (g_stop) break;
        if (g_parent > 1 && ::getppid() != g_parent) {
            // The launcher ended without stopping this rank: nothing would ever end it.
            fmt::print(stderr, "scalebench: error: {}: its launcher (pid {}) ended; stopping\n", me(), g_parent);
            record_failure(fmt::format("{}: its launcher (pid {}) ended while the run was going", me(), g_parent));
            _exit(1);
        }
        const auto now = Clock::now();
        for (const auto& [id, scope] : g_scopes)
            if (now > scope.second)
                abort_job(fmt::format("{}: {} did not complete within {} s; a rank stopped answering", me(),
                                      scope.first, collective_timeout_s()));
        lock.unlock();
        {
            std::lock_guard<std::mutex> monitors(g_monitor_mutex);
            for (auto& [id, poll] : g_monitors) {
                std::string failure = poll();
                if (!failure.empty()) abort_job(failure);
            }
        }
        lock.lock();
    }
}

// World ranks of comm's members.
std::vector<int> world_ranks(MPI_Comm comm) {
    MPI_Group group, world;
    int size = 0;
    PMPI_Comm_group(comm, &group);
    PMPI_Comm_group(MPI_COMM_WORLD, &world);
    PMPI_Group_size(group, &size);
    std::vector<int> local(static_cast<size_t>(size)), global(static_cast<size_t>(size));
    for (int i = 0; i < size; ++i) local[i] = i;
    PMPI_Group_translate_ranks(group, size, local.data(), world, global.data());
    PMPI_Group_free(&group);
    PMPI_Group_free(&world);
    return global;
}

void serve_now(std::vector<char>* answered, int round) {
    int flag = 0;
    MPI_Status status;
    for (;;) {
        PMPI_Iprobe(MPI_ANY_SOURCE, kPingTag, g_side, &flag, &status);
        if (!flag) break;
        int payload = 0;
        PMPI_Recv(&payload, 1, MPI_INT, status.MPI_SOURCE, kPingTag, g_side, MPI_STATUS_IGNORE);
        PMPI_Send(&payload, 1, MPI_INT, status.MPI_SOURCE, kPongTag, g_side);  // eager: a stopped peer cannot block it
    }
    for (;;) {
        PMPI_Iprobe(MPI_ANY_SOURCE, kPongTag, g_side, &flag, &status);
        if (!flag) break;
        int payload = 0;
        PMPI_Recv(&payload, 1, MPI_INT, status.MPI_SOURCE, kPongTag, g_side, MPI_STATUS_IGNORE);
        if (answered && payload == round) (*answered)[static_cast<size_t>(status.MPI_SOURCE)] = 1;
    }
    if (g_self_rank == 0) {
        PMPI_Iprobe(MPI_ANY_SOURCE, kNoticeTag, g_side, &flag, &status);
        if (flag) {
            int length = 0;
            PMPI_Get_count(&status, MPI_CHAR, &length);
            std::string text(static_cast<size_t>(length), '\0');
            PMPI_Recv(text.data(), length, MPI_CHAR, status.MPI_SOURCE, kNoticeTag, g_side, MPI_STATUS_IGNORE);
            abort_job(text);
        }
    }
}

}  // namespace

double collective_timeout_s() {
    double t = g_timeout.load();
    if (t < 0) {
        try {
            t = read_timeout();
        } catch (const UserError&) {
            g_timeout = kDefaultTimeoutS;  // refused once; the shutdown that follows still has a deadline
            throw;
        }
        g_timeout = t;
    }
    return t;
}

void set_collective_timeout_s(double seconds) { g_timeout = seconds; }

void init_fault_handling(MPI_Comm world) {
    collective_timeout_s();  // a bad value is a UserError now, not at the first wait (main reads it first)
    SB_CHECK_MPI(MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN));
    SB_CHECK_MPI(PMPI_Comm_dup(world, &g_side));
    int size = 1;
    SB_CHECK_MPI(MPI_Comm_size(world, &size));
    SB_CHECK_MPI(MPI_Comm_rank(world, &g_self_rank));
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int length = 0;
    SB_CHECK_MPI(PMPI_Get_processor_name(name, &length));
    g_self_host.assign(name, static_cast<size_t>(length));
    std::vector<char> names(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME, '\0');
    std::string mine = g_self_host.substr(0, MPI_MAX_PROCESSOR_NAME - 1);
    mine.resize(MPI_MAX_PROCESSOR_NAME, '\0');
    SB_CHECK_MPI(PMPI_Allgather(mine.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME,
                                MPI_CHAR, world));
    g_hosts.clear();
    for (int r = 0; r < size; ++r) g_hosts.emplace_back(names.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME);
    const long pid = ::getpid();
    g_pids.assign(static_cast<size_t>(size), 0);
    SB_CHECK_MPI(PMPI_Allgather(&pid, 1, MPI_LONG, g_pids.data(), 1, MPI_LONG, world));
    // Under a launcher (not a singleton, whose parent is a shell that may end on purpose).
    if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK"))
        g_parent = ::getppid();
    std::lock_guard<std::mutex> lock(g_mutex);
    g_stop = false;
    if (!g_thread.joinable()) g_thread = std::thread(watchdog_loop);
}

void shutdown_fault_handling() {
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        g_stop = true;
    }
    g_cv.notify_all();
    if (g_thread.joinable()) g_thread.join();
    if (g_side != MPI_COMM_NULL) PMPI_Comm_free(&g_side);
}

struct StartupDeadline::State {
    std::mutex mutex;
    std::condition_variable cv;
    bool passed = false;
    std::thread thread;
};

namespace {
// The timeout before MPI is up: SCALEBENCH_COLLECTIVE_TIMEOUT_S when it is valid (a bad
// value is reported once MPI runs), else the default.
double startup_timeout_s() {
    try {
        return read_timeout();
    } catch (const std::exception&) {
        return kDefaultTimeoutS;
    }
}

// This process's rank as the launcher gave it (MPI cannot say yet), or "?".
std::string launcher_rank() {
    for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
        if (const char* value = std::getenv(name)) return value;
    return "?";
}
}  // namespace

StartupDeadline::StartupDeadline() : state_(new State) {
    const double timeout = startup_timeout_s();
    State* s = state_;
    s->thread = std::thread([s, timeout] {
        std::unique_lock<std::mutex> lock(s->mutex);
        if (s->cv.wait_for(lock, std::chrono::duration<double>(timeout), [s] { return s->passed; })) return;
        char host[256] = {};
        ::gethostname(host, sizeof host - 1);
        fmt::print(stderr, "scalebench: error: rank {} on {}: MPI start-up (MPI_Init and the first collective) did not "
                           "complete within {} s: a rank did not arrive (stopped, or failed to start)\n",
                   launcher_rank(), host, timeout);
        std::fflush(stderr);
        _exit(1);
    });
}

void StartupDeadline::passed() {
    {
        std::lock_guard<std::mutex> lock(state_->mutex);
        state_->passed = true;
    }
    state_->cv.notify_all();
    if (state_->thread.joinable()) state_->thread.join();
}

StartupDeadline::~StartupDeadline() {
    passed();
    delete state_;
}

int finalize_with_deadline(int code) {
    const double timeout = collective_timeout_s();
    std::thread([timeout, code] {
        std::this_thread::sleep_for(std::chrono::duration<double>(timeout));
        fmt::print(stderr, "scalebench: warning: MPI_Finalize did not complete within {} s (the launcher does not "
                           "answer); exiting with the run's code {}\n", timeout, code);
        std::fflush(stderr);
        _exit(code);
    }).detach();
    MPI_Finalize();
    return code;
}

void set_incomplete_recorder(void (*record)(const std::string& error)) { g_incomplete_recorder = record; }

std::string rank_and_host_text(int world_rank) { return rank_and_host(world_rank); }

std::string this_rank_text() { return me(); }

ProcessState process_state(long pid) {
    std::ifstream stat(fmt::format("/proc/{}/stat", pid));
    std::string text;
    if (!std::getline(stat, text)) return ProcessState::gone;
    const size_t name_end = text.rfind(')');  // the state follows the command name, which may hold anything
    if (name_end == std::string::npos || name_end + 2 >= text.size()) return ProcessState::gone;
    switch (text[name_end + 2]) {
        case 'T': case 't': return ProcessState::stopped;
        case 'Z': case 'X': return ProcessState::gone;
        default: return ProcessState::running;
    }
}

FailedPeers find_failed_peers(const std::vector<int>& world_ranks, double settle_s) {
    FailedPeers found;
    std::vector<std::string> named, elsewhere;
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(settle_s));
    for (;;) {
        named.clear();
        elsewhere.clear();
        int looked_at = 0;
        for (int rank : world_ranks) {
            if (rank == g_self_rank || rank < 0 || rank >= static_cast<int>(g_pids.size())) continue;
            if (g_hosts[static_cast<size_t>(rank)] != g_self_host) {
                elsewhere.push_back(rank_and_host(rank));
                continue;
            }
            ++looked_at;
            const ProcessState state = process_state(g_pids[static_cast<size_t>(rank)]);
            if (state == ProcessState::running) continue;
            found.ranks.push_back(rank);
            named.push_back(fmt::format("{} ({}, process {})", rank, g_self_host,
                                        state == ProcessState::stopped ? "stopped" : "gone"));
        }
        if (!found.ranks.empty() || looked_at == 0 || Clock::now() >= until) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!named.empty())
        found.text = fmt::format("rank(s) {} stopped answering", fmt::join(named, ", "));
    else if (world_ranks.size() <= 1)
        found.text = "it has no other rank: the stall is this rank's own";
    else if (elsewhere.empty())
        found.text = "every other rank of it is running on this host";
    else
        found.text = fmt::format("no rank of it on this host is stopped or gone; rank(s) {} run on other hosts, "
                                 "whose ranks name them", fmt::join(elsewhere, ", "));
    return found;
}

void serve_side_channel() {
    if (g_side == MPI_COMM_NULL) return;
    const auto now = Clock::now();
    if (now - g_last_served < std::chrono::milliseconds(20)) return;
    g_last_served = now;
    serve_now(nullptr, 0);
}

void wait_requests(int count, MPI_Request* requests, MPI_Comm comm, const char* what) {
    int flag = 0;
    int rc = PMPI_Testall(count, requests, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) throw_call_error("MPI", what, mpi_error_string(rc), __FILE__, __LINE__);
    if (flag) return;
    const auto start = Clock::now();
    const auto timeout = std::chrono::duration<double>(collective_timeout_s());
    auto deadline = start + std::chrono::duration_cast<Clock::duration>(timeout);
    for (long spins = 0;; ++spins) {
        serve_side_channel();
        rc = PMPI_Testall(count, requests, &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) throw_call_error("MPI", what, mpi_error_string(rc), __FILE__, __LINE__);
        if (flag) return;
        const auto now = Clock::now();
        if (now > deadline) {
            collective_deadline_passed(what, comm, std::chrono::duration<double>(now - start).count());
            deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
        }
        if (spins > 10000) std::this_thread::yield();  // a long wait: leave the core to the other ranks
    }
}

void collective_deadline_passed(const char* what, MPI_Comm comm, double waited_s) {
    const double timeout = collective_timeout_s();
    if (g_side == MPI_COMM_NULL)
        abort_job(fmt::format("{}: collective {} did not complete within {} s", me(), what, timeout));
    const int self = g_self_rank;
    int world_size = 1;
    PMPI_Comm_size(g_side, &world_size);
    static int round = 0;
    static std::vector<int> payloads;
    ++round;
    payloads.assign(static_cast<size_t>(world_size), round);
    const std::vector<int> peers = world_ranks(comm);
    for (int peer : peers) {
        if (peer == self) continue;
        MPI_Request r;
        PMPI_Isend(&payloads[static_cast<size_t>(peer)], 1, MPI_INT, peer, kPingTag, g_side, &r);
        PMPI_Request_free(&r);
    }
    // Peers waiting in MPI answer within microseconds; one in a long compute phase
    // answers at its next test() of a bucket. Grace: half the timeout, 1 to 10 s.
    const double grace = std::min(10.0, std::max(1.0, timeout / 2));
    std::vector<char> answered(static_cast<size_t>(world_size), 0);
    answered[static_cast<size_t>(self)] = 1;
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace));
    auto all_answered = [&] {
        for (int peer : peers)
            if (!answered[static_cast<size_t>(peer)]) return false;
        return true;
    };
    while (Clock::now() < until && !all_answered()) {
        serve_now(&answered, round);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::vector<std::string> missing;
    bool rank0_missing = false;
    for (int peer : peers)
        if (!answered[static_cast<size_t>(peer)]) {
            missing.push_back(rank_and_host(peer));
            rank0_missing |= peer == 0;
        }
    if (missing.empty()) {
        fmt::print(stderr, "scalebench: warning: {}: collective {} has waited {:.0f} s; every rank of it answers, "
                           "so it keeps waiting\n", me(), what, waited_s);
        return;
    }
    const std::string message =
        fmt::format("{}: collective {} did not complete within {} s; rank(s) {} stopped answering", me(), what,
                    timeout, fmt::join(missing, ", "));
    if (self != 0 && !rank0_missing) {
        // Rank 0 writes the incomplete record and aborts; give it the grace to do so.
        static std::string notice;
        notice = message;
        MPI_Request r;
        PMPI_Isend(notice.data(), static_cast<int>(notice.size()), MPI_CHAR, 0, kNoticeTag, g_side, &r);
        PMPI_Request_free(&r);
        const auto wait_until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(grace));
        while (Clock::now() < wait_until) {
            serve_now(nullptr, 0);
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    abort_job(message);
}

void announce_failure(const std::string& message) {
    static std::atomic<bool> announced{false};
    if (announced.exchange(true)) return;
    fmt::print(stderr, "scalebench: error: {}\n", message);
    std::fflush(stderr);
    record_failure(message);
}

[[noreturn]] void abort_job(const std::string& message) {
    if (g_aborting.exchange(true)) {
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // another thread is aborting the job
    }
    announce_failure(message);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

WatchdogScope::WatchdogScope(std::string what) : id_(g_next_id++) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(collective_timeout_s()));
    std::lock_guard<std::mutex> lock(g_mutex);
    g_scopes.emplace(id_, std::make_pair(std::move(what), deadline));
}

WatchdogScope::~WatchdogScope() {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_scopes.erase(id_);
}

long register_monitor(std::function<std::string()> poll) {
    const long id = g_next_id++;
    std::lock_guard<std::mutex> lock(g_monitor_mutex);
    g_monitors.emplace(id, std::move(poll));
    return id;
}

void unregister_monitor(long id) {
    std::lock_guard<std::mutex> lock(g_monitor_mutex);
    g_monitors.erase(id);
}

}  // namespace sb
