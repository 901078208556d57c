// `scalebench stress`: training steps for a wall-clock duration (a 72-hour soak or a
// few seconds in CI), one summary per interval (throughput and its drift against the
// first interval, step times, GPU telemetry) printed and appended as a JSONL record, so
// an interrupted run keeps every interval it finished; and the silent-data-corruption
// check: every K steps all ranks compare checksums of their parameter replicas.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <mpi.h>
#include <nlohmann/json.hpp>

#include "models/ops.h"
#include "src/core/config.h"
#include "src/core/results.h"

namespace CLI {
class App;
}

namespace sb {

class DataParallelTrainer;

// "90s", "15m", "2h", "72h", "1h30m", "1d12h", "1.5h"; a bare number is seconds.
// Returns seconds, each number and the whole in the flag's entry of the flag table
// (src/core/flag_reading.cpp: more than 0, at most 366 days). Throws UserError naming `flag`
// and the text for anything else.
double parse_duration(const std::string& text, const std::string& flag);
// 259200 s -> "72h00m00s", 75 s -> "1m15s", 3.2 s -> "3.2s".
std::string format_duration(double seconds);

struct StressOptions {
    std::vector<std::string> configs;  // --config A.yaml,B.yaml or repeated; empty = built-in default
    std::string duration = "1h";
    std::string interval = "10m";
    std::optional<int> sdc_check_every;  // steps between replica checks (0 = off); else the config's
    std::string backend, precision;  // override every workload's when given
    std::optional<int> batch_size;
    std::string out = default_output("stress.jsonl");
    std::string plant_bit_flip;  // "RANK@STEP": corrupt one replica, to see the check fire
    bool share_gpu = false;      // ranks may share a GPU (as any workload's share_gpu: true)
};

void add_stress_options(CLI::App& sub, StressOptions& opts);

// A planted corruption: rank `rank` flips one parameter bit after global step `step`.
struct PlantedFlip {
    int rank = 0;
    int64_t step = 0;
};
// "1@250", RANK and STEP each in its entry of the flag table (a world rank; a step from 1);
// UserError naming the flag, the text and the part otherwise.
PlantedFlip parse_planted_flip(const std::string& text);
// A flip that cannot fire in this run is refused (UserError naming `text`): a rank not launched,
// or a step past what `duration_s` can run.
void check_planted_flip(const PlantedFlip& flip, const std::string& text, int world_size, double duration_s);

// Everything resolved and checked against the launched world size.
struct StressPlan {
    std::vector<TrainConfig> workloads;  // alternated interval by interval
    double duration_s = 0, interval_s = 0;
    int sdc_check_every = 0;
    std::string out;
    std::optional<PlantedFlip> planted_flip;
};

// Per world rank: the host and device environment named by a divergence.
struct RankIdentity {
    std::string host;
    nlohmann::json gpu;  // device_environment(ops); {} on the CPU
};

// One divergence found by a replica check.
struct SdcEvent {
    int64_t step = 0;  // global step (over all workloads) after which the check ran
    int workload = 0;
    int rank = 0;
    std::string host;
    nlohmann::json gpu;
    std::string checksum, expected;  // hex models/checksum.h checksum of this rank's and the majority's parameters
};
nlohmann::json to_json(const SdcEvent& e);

// Collective over `comm` (the trainer's ranks, in rank order): gathers every rank's
// parameter checksum, takes the majority value (a tie goes to the group holding the
// lowest rank) and returns one event per rank that differs, identical on every rank.
// The differing ranks then receive the majority's parameters, so one corruption is
// reported once and later ones are still seen.
std::vector<SdcEvent> check_replicas(DataParallelTrainer& trainer, MPI_Comm comm, int64_t step, int workload,
                                     const std::vector<RankIdentity>& ranks);

// Collective over `world`: the whole soak with `ops` built for the plan's backend and
// precision. Rank 0 prints progress and appends the records. Returns 0, or 3 when a
// replica check found a divergence or the loss stopped being finite (the run stops after that
// interval; its records' loss_check say where).
int run_stress_plan(const StressPlan& plan, Ops& ops, MPI_Comm world, const nlohmann::json& environment);

// Collective over `world`: loads and checks the configs, builds the backend, collects
// the environment and runs the plan.
int run_stress(const StressOptions& opts, MPI_Comm world);

}  // namespace sb
