// The records that bracket a run (results/SCHEMA.md; DESIGN: Records that tell the truth):
// the start record, the end record or the `incomplete` one, whoever cuts the run short, and
// the record-guard process that writes it when rank 0 itself is killed.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace sb {

// A fresh run id: 16 hex digits from the random device and the process id.
std::string new_run_id();

// Collective over `world`: rank 0 appends a `start` record to each output file before any
// work (the paths were checked before: a file that cannot take it now, a full disk, is an
// internal failure that rank 0 throws, exit 1, with the job aborted) and arms the `incomplete` record, which rank 0 appends instead of the end when
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

// Rank 0 appends the incomplete record now (main's error path, before MPI_Abort).
void record_incomplete(const std::string& error);

}  // namespace sb
