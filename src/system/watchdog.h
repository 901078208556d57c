// Faults that must not hang the job (DESIGN: Conventions; issue 8): the collective
// timeout, waits on MPI requests that poll with a deadline, a ping side channel that
// names the ranks that stopped answering, one watchdog thread for work that cannot be
// polled from the caller (MPI_Comm_split, NCCL kernels), and the abort that writes the
// "incomplete" record first. Fast path: a wait that completes costs MPI_Testall calls
// and a clock read; the thread only looks at work registered with it.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <string>

namespace sb {

// SCALEBENCH_COLLECTIVE_TIMEOUT_S (seconds, > 0), default 600; read once.
double collective_timeout_s();
void set_collective_timeout_s(double seconds);  // tests

// After MPI_Init and init_process_info: the side channel (a duplicate of world), world
// hostnames for messages, MPI_ERRORS_RETURN on world, and the watchdog thread.
void init_fault_handling(MPI_Comm world);
void shutdown_fault_handling();  // before MPI_Finalize

// Rank 0's "incomplete" record (results/SCHEMA.md): appended to `out` before the job is
// aborted for a fault, and from a SIGTERM handler (mpirun and Slurm stop the other
// ranks with SIGTERM when one dies). Empty `out` turns it off.
void set_incomplete_record(const std::string& out, const std::string& subcommand);

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

// Rank 0 appends the incomplete record now (main's error path, before MPI_Abort).
void record_incomplete(const std::string& error);

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
