// How every flag of every subcommand is read, whatever its subcommand declares: each numeric
// flag by the one number parser (base/numbers.h) rather than CLI11's own (which reads "064"
// as octal 52 and says "could not convert" for 2147483648), a flag that sets a config key in
// the key's range with its reason (src/core/config_keys.h), a flag with a bound of its own
// (comm's and gemm's launch counts, the doctor's seconds, compare's cost terms) in its entry of
// one table, any other in the range of the type it is read into; each part of a value a
// command reads out of a text of its own (stress's durations and RANK@STEP, the test hooks'
// RANK:NUMBER) in its entry of the same table; and no list flag (--scaling 2,2,1, --hardware
// a,a, report's files) naming one thing twice.
#pragma once

#include <string>

#include "base/numbers.h"

namespace CLI {
class App;
}

namespace sb {

// Each side of `gemm --size` (MxNxK or N), read out of its text by the command; also the range
// of a gemm record's m, n and k (src/projection/calibration_checks.cpp).
constexpr IntRange kGemmSideRange{1, int64_t{1} << 20, "a GEMM side past 2^20 is past any GPU's memory"};

// Puts the one parser in front of every numeric option of `app` and its subcommands; call
// once, after every subcommand's flags were added.
void read_numeric_flags_with_one_parser(CLI::App& app);

// After app.parse: throws CLI::ValidationError "FLAG: ENTRY is given twice ..." when a list
// flag or positional list of `app` or its subcommands names one thing twice.
void refuse_repeated_list_entries(const CLI::App& app);

// The range a numeric flag of `subcommand` is read in: --steps takes the steps key's range,
// comm's --iters its own (the table in flag_reading.cpp, each bound with its reason).
IntRange integer_flag_range(const std::string& subcommand, const std::string& flag);
RealRange real_flag_range(const std::string& subcommand, const std::string& flag);

// No training step takes less than a microsecond (a kernel launch or an MPI call alone takes
// about that): a soak of D seconds runs at most D x 10^6 steps.
constexpr double kMostStepsPerSecond = 1e6;

// A value written in parts has an entry per part, named "NAME PART": "stress --duration" (each
// number of a unit, and the whole, in seconds), "stress --plant-bit-flip RANK" and "... STEP",
// "SCALEBENCH_TEST_DELAY_RANK RANK" and "... MS" (each test hook, trainer.h). The table must
// hold the entry (an internal error otherwise: a caller names only entries it declares).
IntRange integer_entry(const std::string& name);
RealRange real_entry(const std::string& name);
// Reads `text` as the part `entry` names by the one parser in that entry's range, as a whole
// number where the entry is an integer range: "" and `out` set, else "PART: REASON"
// ("STEP: must be >= 1, got 0 (...)").
std::string parse_part(const std::string& entry, const std::string& text, int64_t& out);
std::string parse_part(const std::string& entry, const std::string& text, double& out);

// A size in bytes, `comm`'s -b/-e/-i and doctor's --max-bytes: "8", "128K", "32M", "1G", "1.5M"
// (K, M, G are powers of 1024, either case, as nccl-tests), within the table's "SIZE bytes";
// throws UserError naming `flag`.
size_t parse_size(const std::string& text, const std::string& flag);

}  // namespace sb
