// What a GPU's soaks (`stress` runs) say about it: each run read back from its records, and the
// verdict a buyer's-guide rule requiring `soak` takes from them.
#pragma once

#include <string>
#include <vector>

#include "src/projection/hardware.h"

namespace sb {

// One `stress` run (a soak) of a GPU, from its records: the interval records, the summary
// (complete) and, for a run cut short, its `incomplete` record (matched by run_id).
struct SoakRun {
    std::string file, timestamp;
    bool complete = false;     // its summary record was written
    double elapsed_s = 0;
    int world_size = 0;
    long replica_checks = 0;
    long mismatches = 0;       // replica checks that found a rank's parameters differing (sdc_events)
    long ecc_uncorrected = 0;  // uncorrected ECC errors over the run, every rank
    double drift_pct = 0;      // the largest |throughput drift| of any workload against its first interval
    std::string ended;         // a run cut short: its incomplete record's error
    // Cut short by a signal or its launcher: the record cannot tell a fault from a stop, so not scored.
    bool interrupted() const;
    bool faulted() const { return !complete && !ended.empty() && !interrupted(); }  // a hang or an error of its own
};
// Every soak of a profile's GPU under `results_dir` (recursively, *.jsonl), latest first: a record
// is of the profile's GPU when the device name matches and, where the record gives the GPU's
// memory, it is within 15% of the profile's (the 24 GB card's soak does not vouch for the 48 GB board).
std::vector<SoakRun> soak_runs(const HardwareProfile& hw, const std::string& results_dir);

// The bound on a soak's throughput drift, % either way: an assumption, so a range. A verdict is
// decided at the central value and decided again at each end; a winner that changes is a flip.
struct SoakDriftBound {
    double value = 5, lo = 2, hi = 10;
};
inline constexpr SoakDriftBound kSoakDriftBound{};
// What a profile's soaks say under a drift bound: what counts against it (a replica mismatch, an
// uncorrected ECC error, a run ended by a hang or fault, drift beyond the bound; each with its
// file), or that they passed, or that none was measured (never a pass).
struct SoakVerdict {
    enum class Status { not_measured, passed, counts_against } status = Status::not_measured;
    std::string said;   // one line: the status, the figures and the files
    std::string brief;  // the status and the figures, as a verdict's reason ends with it
};
SoakVerdict soak_verdict(const std::vector<SoakRun>& runs, double drift_bound_pct = kSoakDriftBound.value);
const char* soak_status_name(SoakVerdict::Status s);  // "not measured", "passed", "counts against"

// The latest completed `stress` (soak) summary of the profile's GPU (matched as soak_runs does)
// under `results_dir`, said in one line (duration, replica checks, throughput drift, ECC,
// temperature, power, throttling) with its file; empty when there is none.
std::string soak_summary(const HardwareProfile& hw, const std::string& results_dir);

}  // namespace sb
