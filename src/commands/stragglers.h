// Stragglers: which rank holds the others back. From every rank's compute time per step
// and the step-relative time each bucket's all-reduce was ready on it (the ranks' steps
// start together, since each begins after the previous step's last all-reduce), the
// per-rank figures, per bucket the rank that arrived last and by how much, and the ranks
// consistently behind. Pure functions: `train` and `stress` records carry the result as
// `straggler_check`, and `report` and `stress` name the stragglers from it.
#pragma once

#include <string>
#include <vector>

#include <mpi.h>
#include <nlohmann/json.hpp>

namespace sb {

// A rank is consistently behind when its compute time exceeds the median rank's, step by
// step, by a median of more than 10% of the median compute time, more than 2 standard
// deviations of that excess over the steps (estimated as 1.4826 times its median absolute
// deviation, so a few held-up steps do not hide it), and more than 0.25 ms (below that, on
// steps of a millisecond or less, it is the scheduler's noise: CPU ranks sharing cores).
constexpr double kStragglerFraction = 0.10;
constexpr double kStragglerSigmas = 2.0;
constexpr double kStragglerMinMs = 0.25;

struct RankLocation {
    std::string host = "?";
    std::string gpu_bus_id = "-";  // "-" on CPU ranks
};

// compute_ms[rank][step]; arrivals_ms[rank][step][bucket] (a rank's steps may be empty where
// arrivals were not measured; NaN marks a missing one); who[rank]. Returns
//   {"per_rank": [{rank, host, gpu_bus_id, compute_ms (median), median_rank_compute_ms,
//                  behind_ms, behind_fraction, behind_sigma_ms (the robust sigma)}],
//    "buckets": [{bucket, last_rank, last_share, lag_ms}],   (lag: behind the median rank)
//    "stragglers": [the per_rank entries that are consistently behind]}
nlohmann::json straggler_check(const std::vector<std::vector<double>>& compute_ms,
                               const std::vector<std::vector<std::vector<double>>>& arrivals_ms,
                               const std::vector<RankLocation>& who);

// "rank 1 on node3 (GPU 0000:1b:00.0) is behind: compute 12.300 ms, 2.200 ms (+22%) over the
// median rank's 10.100 ms per step (spread 0.400 ms)", for one entry of "stragglers".
std::string straggler_line(const nlohmann::json& straggler);

// Collective over `comm`, whose rank r is world rank r (the first n ranks): this rank's
// compute time per step and its buckets' arrivals (`buckets` per step, NaN where not
// measured), gathered; rank 0 returns straggler_check of them (with identities from the
// run's environment record), the other ranks null.
nlohmann::json gather_straggler_check(const std::vector<double>& compute_ms, const std::vector<double>& arrivals_ms,
                                      size_t buckets, const nlohmann::json& environment, MPI_Comm comm);

// Every rank's host and GPU from a run's environment record: its hostnames and, where there are
// GPUs, gpus_by_rank's bus ids.
std::vector<RankLocation> rank_locations(const nlohmann::json& environment, int ranks);

}  // namespace sb
