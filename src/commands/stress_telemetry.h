// What the stress soak gathers and merges of the ranks' telemetry: every rank's JSON on every
// rank, one rank's telemetry over the whole run from its interval summaries, and the progress
// line's brief of it.
#pragma once

#include <string>
#include <vector>

#include <mpi.h>
#include <nlohmann/json.hpp>

namespace sb {

// Collective: every rank's JSON on every rank, in rank order.
std::vector<nlohmann::json> allgather_json(const nlohmann::json& mine, MPI_Comm comm);
// Telemetry of one rank over the whole run from its interval summaries (TelemetrySampler's
// format): sample-weighted averages, extremes, throttle reasons seen, ECC deltas summed.
nlohmann::json merge_telemetry(const nlohmann::json& total, const nlohmann::json& add);
// What the progress line shows of the ranks' telemetry: hottest GPU, mean power.
std::string telemetry_brief(const std::vector<nlohmann::json>& by_rank);

}  // namespace sb
