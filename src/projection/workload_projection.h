// A workload projected on a hardware profile (DESIGN: Projection): the projection model
// (src/projection/projection.h) over GPU and node counts, each world size a `train`-shaped record
// marked "projected" in the sharding mode it runs in (the first of those asked that fits its GPUs,
// by train's per-rank prediction), with the band every figure takes over the profile's ranges; and
// the projected all-reduce table of `project --comm`.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/core/config.h"
#include "src/core/stats.h"
#include "src/projection/hardware.h"
#include "src/projection/projection.h"

namespace sb {

// A projected figure's band: its lowest and highest over the corners of the profile's ranges
// (sources that disagree); a point where the profile has none.
struct Band {
    double lo = 0, hi = 0;
};
// Every figure of a projected configuration carries its band, each corner projected whole (its
// speed-up and efficiency against its own one GPU, not the central one). The compute model's error
// (gpu.compute_error_pct) is one of the ranges; samples_per_s_without_compute_error is the samples/s
// band over the others alone: compare's ties and flips, which judge cards against each other, use it
// (the compute error is largely shared between GPUs; docs/projection.md, Bands).
struct FigureBands {
    Band samples_per_s, efficiency, speedup, busbw, exposed_comm_ms, samples_per_s_without_compute_error;
};
// The busbw band's key says what it is: `allreduce_busbw_gbps`, or sharded `sharding_busbw_gbps`
// (the reduce-scatter's and the all-gather's together).
nlohmann::json to_json(const FigureBands& b, ShardingMode mode = ShardingMode::none);

// project --comm: one row of the projected all-reduce table, nccl-tests' all_reduce_perf columns
// (float sum, out of place) with the busbw band over the profile's ranges.
struct CommRow {
    int gpus_per_node = 0, nodes = 1;
    double bytes = 0, time_us = 0, algbw = 0, busbw = 0;
    Band busbw_band;
};
// The rows for every GPU count x node count, sizes 8 B to 4 GiB by factors of 2 (nccl-tests -b 8 -e 4G -f 2).
std::vector<CommRow> comm_table(const CostModel& model, const std::vector<int>& gpus, const std::vector<int>& nodes);

// A sharding mode's footprint per GPU at one configuration, against the profile's GPU memory.
struct ModeFit {
    ShardingMode mode = ShardingMode::none;
    double footprint_bytes = 0;  // footprint_bytes(predict_rank_memory(...)): train's prediction
    bool fits = false;
};
// The footprint of each of `modes` (empty: the config's own) the workload can train in, at
// `world_size` ranks of `local_batch` rows, in the order given.
std::vector<ModeFit> sharding_fits(const TrainConfig& cfg, const std::vector<ShardingMode>& modes, int world_size,
                                   int local_batch, const HardwareProfile& hw);

// One projected world size of a profile, as a `train`-shaped record (its timestamp and run_id are
// the run's: the command stamps them as it appends the record).
struct Projection {
    ProjectedStep step;
    ShardingMode sharding = ShardingMode::none;  // the mode the configuration runs in
    std::vector<ModeFit> fits;  // where several modes were asked: each one's footprint (the record's sharding_fit)
    // busbw: the step's collectives' (the all-reduce's; sharded, the reduce-scatter's and all-gather's together)
    double samples_per_s = 0, efficiency = 0, speedup = 0, busbw = 0;
    int64_t global_batch = 0;
    FigureBands bands;  // points at the central values until widen_to_ranges
    nlohmann::json record;
    bool fits_memory() const { return record["fits_memory"].get<bool>(); }
};

// The traces of one workload on one profile's GPU, by local batch, mode and (sharded) world size,
// and its modes' footprints by world size: the corners of the profile's ranges move nothing either
// depends on, so they share them.
class TraceCache {
public:
    const StepTrace& trace(const TrainConfig& cfg, int local_batch, int world_size, const DeviceLimits& limits);
    const std::vector<ModeFit>& fits(const TrainConfig& cfg, const std::vector<ShardingMode>& modes, int world_size,
                                     int local_batch, const HardwareProfile& hw);

private:
    std::map<std::tuple<int, int, ShardingMode>, StepTrace> traces_;
    std::map<std::tuple<int, int, double>, std::vector<ModeFit>> fits_;
};

// Projects cfg on hw at gpus x nodes for each entry (weak or strong scaling as cfg says). Each
// configuration runs in the first of `modes` whose footprint fits the GPU (none fitting: the one
// nearest to fitting, its record saying it does not fit); empty: the config's mode. `cache`: traces
// shared with other calls for the same workload and profile.
std::vector<Projection> project_workload(const TrainConfig& cfg, const CostModel& model, const std::vector<int>& gpus,
                                         const std::vector<int>& nodes, const std::vector<ShardingMode>& modes = {},
                                         TraceCache* cache = nullptr);
// Widens the bands of `rows` (project_workload of the same arguments) to every corner of the
// profile's ranges, and writes them into their records ("bands", "samples_per_s_band", "ranges").
// `real_input`: the rows' CostModel::real_input.
void widen_to_ranges(std::vector<Projection>& rows, const TrainConfig& cfg, const HardwareProfile& hw,
                     const Calibration& cal, const std::vector<int>& gpus, const std::vector<int>& nodes,
                     bool real_input = false, const std::vector<ShardingMode>& modes = {}, TraceCache* cache = nullptr);

// --batch: N sets the per-GPU batch; "max" the largest the profile's GPU holds at `world_size`
// ranks (weak scaling only; sharded, a rank's share shrinks as ranks join). A batch that is not a
// positive number or "max" is a UserError naming the flag.
void apply_batch_option(const std::string& batch, TrainConfig& cfg, const HardwareProfile& hw, int world_size = 1);

// The GPUs per node projected: `asked` (each within the profile's node, else a UserError naming
// --scaling), or 1, 2, 4, 8 up to the node's GPUs when none are asked.
std::vector<int> projected_gpu_counts(const std::vector<int>& asked, const HardwareProfile& hw);

// A projected figure as a Summary of one sample (train's records and table take Summaries).
Summary point_summary(double v);
// The profile's ranges, one line: "node.link_efficiency 0.187 [0.187-0.7], ..."; "none" when none.
std::string range_list(const HardwareProfile& hw);
// The memory footprint of a projected configuration, one line, against the GPU's memory.
std::string footprint_line(const Projection& p, const HardwareProfile& hw);
// ", convolutions traced as ENGINE" for a ResNet workload (the engine resolved as the trace runs it), else "".
std::string traced_engine(const TrainConfig& cfg);

}  // namespace sb
