// Stragglers: which rank holds the others back. From every rank's step and compute time per
// step and the step-relative time each bucket's all-reduce was ready on it (the ranks' steps
// start together, since each begins after the previous step's last all-reduce), the per-rank
// figures, per bucket the rank that arrived last and by how much, and the ranks consistently
// behind. Pure functions: `train` and `stress` records carry the result as `straggler_check`,
// and `report` and `stress` name the stragglers from it.
#pragma once

#include <string>
#include <vector>

#include <mpi.h>
#include <nlohmann/json.hpp>

namespace sb {

// Two tests name a rank; each compares it with the other ranks (with 2 ranks, the other one),
// never with a median over all ranks, which for 2 ranks is their midpoint and halves the lag.
//
// By arrival (the test that works on GPUs, where the wait for a slow rank lands in every
// rank's compute time): at each bucket of each measured step, the rank whose gradients were
// ready last and its lag behind the latest of the others. A rank is named when it is last at
// no less than 75% of the bucket-steps (chance gives 1/n; three steps of four is a rank that is
// consistently late, which noise on 10+ steps does not give a rank that is not slower; this
// share is the consistency test, as a slow rank's lag grows over the backward's buckets), and
// the median of its lags where it is last exceeds 10% of its median step (less costs the step
// less than the steps' own spread on shared hardware) and 0.25 ms (the scheduler's noise on CPU
// ranks sharing cores).
constexpr double kArrivalLastShare = 0.75;
//
// By compute time (CPU-bound ranks, where a slow rank's compute is longer): its compute time
// exceeds the median of the other ranks', step by step, by a median of more than 10% of that
// median compute time, more than 2 standard deviations of the excess over the steps (estimated
// as 1.4826 times its median absolute deviation, so a few held-up steps do not hide it), and
// more than 0.25 ms (below that, on steps of a millisecond or less, it is the scheduler's
// noise: CPU ranks sharing cores).
constexpr double kStragglerFraction = 0.10;
constexpr double kStragglerSigmas = 2.0;
constexpr double kStragglerMinMs = 0.25;

struct RankLocation {
    std::string host = "?";
    std::string gpu_bus_id = "-";  // "-" on CPU ranks
};

// Each rank's measured steps: step_ms[rank][step], compute_ms[rank][step] and
// arrivals_ms[rank][step][bucket] (a rank's steps may be empty where arrivals were not
// measured; NaN marks a missing one); who[rank]. Returns
//   {"per_rank": [{rank, host, gpu_bus_id,
//                  compute_ms (median), others_compute_ms, behind_ms, behind_fraction,
//                  behind_sigma_ms (the robust sigma): the compute test;
//                  last_share, lag_ms, lag_fraction (of step_ms), lag_sigma_ms, step_ms: the
//                  arrival test (lag_ms: median lag behind the latest other rank where last);
//                  named_by: ["arrival", "compute"], the tests that name it}],
//    "buckets": [{bucket, last_rank, last_share, lag_ms}],   (lag: behind the latest other rank)
//    "stragglers": [the per_rank entries that a test names]}
struct RankSteps {
    std::vector<std::vector<double>> step_ms, compute_ms;
    std::vector<std::vector<std::vector<double>>> arrivals_ms;
};
nlohmann::json straggler_check(const RankSteps& steps, const std::vector<RankLocation>& who);

// "rank 1 on node3 (GPU 0000:1b:00.0) arrives last at 100% of buckets, 30.100 ms after the
// other ranks (18% of the 165.000 ms step)" and/or "... compute 12.300 ms, 2.200 ms (+22%) over
// the other ranks' 10.100 ms per step (spread 0.400 ms)", for one entry of "stragglers".
std::string straggler_line(const nlohmann::json& straggler);

// Collective over `comm`, whose rank r is world rank r (the first n ranks): this rank's
// step and compute time per step and its buckets' arrivals (`buckets` per step, NaN where not
// measured), gathered; rank 0 returns straggler_check of them (with identities from the
// run's environment record), the other ranks null.
nlohmann::json gather_straggler_check(const std::vector<double>& step_ms, const std::vector<double>& compute_ms,
                                      const std::vector<double>& arrivals_ms, size_t buckets,
                                      const nlohmann::json& environment, MPI_Comm comm);

// Every rank's host and GPU from a run's environment record: its hostnames and, where there are
// GPUs, gpus_by_rank's bus ids.
std::vector<RankLocation> rank_locations(const nlohmann::json& environment, int ranks);

}  // namespace sb
