// Faults that must not hang the job (DESIGN: Conventions): the collective
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
#include <vector>

namespace sb {

// SCALEBENCH_COLLECTIVE_TIMEOUT_S (seconds, > 0), default 600; read once.
double collective_timeout_s();
void set_collective_timeout_s(double seconds);  // tests

// After MPI_Init and init_process_info: the side channel (a duplicate of world), world
// hostnames for messages, MPI_ERRORS_RETURN on world, and the watchdog thread.
void init_fault_handling(MPI_Comm world);
void shutdown_fault_handling();  // before MPI_Finalize

// The records that bracket a run (results/SCHEMA.md; DESIGN: Records that tell the truth).
// Collective over `world`: rank 0 appends a `start` record to each output file before any
// work (a file that cannot take it is bad input: every rank throws the same AgreedError,
// exit 2) and arms the `incomplete` record, which rank 0 appends instead of the end when
// the run is cut short: by abort_job, main's error paths, a signal a launcher stops a job
// with (SIGTERM, SIGINT, SIGHUP, SIGPIPE once its output pipe is gone), the launcher's own
// end (the parent process changes), or an exit() from inside a library.
void begin_run(const std::vector<std::string>& outputs, const std::string& subcommand, MPI_Comm world);
// The record guard: a small process rank 0 starts at begin_run (the same executable, run
// with kRecordGuardArgument) that holds the end of a pipe and, when rank 0 ends without
// closing the run (SIGKILL, or a library's _exit when the launcher goes away, which no
// handler sees), appends the `incomplete` record for it. enable_record_guard names the
// executable (main's argv[0] through /proc/self/exe); without it there is no guard (tests).
constexpr const char* kRecordGuardArgument = "__scalebench_record_guard";
void enable_record_guard();
int run_record_guard();  // the guard process's main: reads fd 3 until rank 0 ends

// Rank 0 appends the `end` record with the exit code to each output; the run is closed.
void end_run(int exit_code);

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
