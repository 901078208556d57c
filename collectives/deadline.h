// The collective deadline (DESIGN: Conventions, nothing waits forever): the collective
// timeout, waits on MPI requests that poll with a deadline, a ping side channel that names
// the ranks that stopped answering, one watchdog thread for work that cannot be polled from
// the caller (MPI_Comm_split, NCCL kernels), and the job abort. Fast path: a wait that
// completes costs MPI_Testall calls and a clock read; the thread only looks at work
// registered with it. Below the program (collectives use it); the run's records hook in
// through set_incomplete_recorder.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "base/numbers.h"

namespace sb {

// The range of every deadline a person sets in seconds: SCALEBENCH_COLLECTIVE_TIMEOUT_S and the
// doctor's --deadline (src/core/flag_reading.cpp). Past a week the millisecond clock is near
// overflow (1e10 s would make every wait endless) and no hang is caught any sooner.
constexpr RealRange kDeadlineSecondsRange{0, true, 7 * 24 * 3600.0, false,
                                          "seconds: past a week a deadline catches no hang"};

// SCALEBENCH_COLLECTIVE_TIMEOUT_S (seconds, in kDeadlineSecondsRange), default 600; read once.
double collective_timeout_s();
void set_collective_timeout_s(double seconds);  // tests

// After MPI_Init: the side channel (a duplicate of world), this rank and the world's
// hostnames for messages, MPI_ERRORS_RETURN on world, and the watchdog thread.
void init_fault_handling(MPI_Comm world);
void shutdown_fault_handling();  // before MPI_Finalize

// A deadline on start-up, armed before MPI_Init: if MPI_Init and the first collective
// (init_fault_handling) have not completed within the collective timeout, the process
// says so, naming its rank and host, and exits 1 (there is no MPI to abort with yet), so
// the launcher ends the job instead of every rank waiting for one that never arrives.
class StartupDeadline {
public:
    StartupDeadline();
    ~StartupDeadline();
    void passed();  // start-up is done
    StartupDeadline(const StartupDeadline&) = delete;
    StartupDeadline& operator=(const StartupDeadline&) = delete;

private:
    struct State;
    State* state_;
};

// MPI_Finalize under a deadline: a launcher that is stopped (or gone) never answers it, and
// the run's records are already written, so after the collective timeout the process exits
// with `code` instead of sitting there. Returns `code`.
int finalize_with_deadline(int code);

// Waits for `count` requests of `comm`: MPI_Testall polling, answering pings, and on
// expiry of the timeout the diagnosis and abort below. `what` names the collective.
void wait_requests(int count, MPI_Request* requests, MPI_Comm comm, const char* what);

// Answers pings of other ranks (rate-limited, so cheap to call from test()).
void serve_side_channel();

// The deadline of `what` on `comm` passed: pings the ranks of comm, names those that do
// not answer, writes the incomplete record (rank 0, or through rank 0) and aborts the job.
// Returns only when every peer answered (they are alive: a long phase elsewhere).
void collective_deadline_passed(const char* what, MPI_Comm comm, double waited_s);

// Prints "scalebench: error: MESSAGE", writes the incomplete record on rank 0, and ends
// every rank (MPI_Abort(MPI_COMM_WORLD, 1)). Callable from the watchdog thread.
[[noreturn]] void abort_job(const std::string& message);
// Prints the failure and writes the run's incomplete record, once per process: called before a
// step that may not return (ncclCommAbort waits for the device), so the failed rank is named
// whatever happens next. abort_job calls it.
void announce_failure(const std::string& message);

// What abort_job and the launcher-ended check call (before ending the process) to close
// the open run with an `incomplete` record; nullptr (the default) writes nothing.
void set_incomplete_recorder(void (*record)(const std::string& error));

// "rank 3 on host-a" for this process, and "3 (host-a)" for any world rank, in messages.
std::string this_rank_text();
std::string rank_and_host_text(int world_rank);

// What this host can tell of a process without MPI (callable from the watchdog thread), from
// /proc: running (or sleeping, or waiting), stopped (SIGSTOP, a debugger), gone (exited or
// killed: absent, or a zombie its parent has not reaped).
enum class ProcessState { running, stopped, gone };
ProcessState process_state(long pid);
// Which of `world_ranks` stopped answering, as far as this host can see (no MPI: callable
// from the watchdog thread): the ranks whose process here is stopped or gone, and the
// sentence for messages, "rank(s) 1 (h0, process stopped) stopped answering", or, where none
// is, one saying so and which ranks run on other hosts (the watchdogs of those hosts' ranks
// name them). A failure seen as a broken connection can come a moment before the peer's
// process shows as gone: while none is found it looks again every 10 ms for up to `settle_s`.
struct FailedPeers {
    std::vector<int> ranks;
    std::string text;
};
FailedPeers find_failed_peers(const std::vector<int>& world_ranks, double settle_s);

// Arms the watchdog thread around a call that cannot be polled (MPI_Comm_split,
// ncclCommInitRank): if it is still running after the timeout, abort_job.
class WatchdogScope {
public:
    explicit WatchdogScope(std::string what);
    ~WatchdogScope();
    WatchdogScope(const WatchdogScope&) = delete;
    WatchdogScope& operator=(const WatchdogScope&) = delete;

private:
    long id_;
};

// Asynchronous work the watchdog thread watches (NCCL communicators): `poll` returns an
// empty string while healthy, else the failure (after aborting the work itself). Runs on
// the watchdog thread every 100 ms until unregister_monitor.
long register_monitor(std::function<std::string()> poll);
void unregister_monitor(long id);

}  // namespace sb
