// The train record: one JSON object per (run, world size), as results/SCHEMA.md describes
// it, with the replica check's verdict; and the UTC timestamp every record carries.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/ops.h"
#include "src/commands/scaling_table.h"
#include "src/commands/size_figures.h"
#include "src/core/config.h"

namespace sb {

std::string utc_timestamp();  // "2026-12-02T15:13:20Z"

// Rank 0: the ranks whose parameters differ from rank 0's ({rank, host}), each also printed.
nlohmann::json mismatched_replicas(const SizeFigures& f, const std::vector<std::string>& hosts);

// Rank 0: the record of world size `row.world_size` (results/SCHEMA.md, train); `at_1` is the
// n = 1 row (world_size 0 where the scaling list has no 1). `cfg` as with_conv_engine_resolved
// returns it: its engine is the record's conv_engine and the one the memory prediction traces.
nlohmann::json train_record(const TrainConfig& cfg, Ops& ops, const DataParallelTrainer& trainer,
                            const SizeFigures& f, const ScalingRow& row, const ScalingRow& at_1, int launched,
                            const nlohmann::json& mismatched, const SweepChecks& checks,
                            const nlohmann::json& environment);

}  // namespace sb
