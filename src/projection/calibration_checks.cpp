// The calibration record checks of src/projection/calibration_checks.h: the table of the
// numbers calibration reads, and the backend a comm record must have.
#include "src/projection/calibration_checks.h"

#include <vector>

#include <fmt/format.h>

#include "base/errors.h"
#include "base/numbers.h"
#include "src/core/config.h"
#include "src/core/flag_reading.h"

namespace sb {
namespace {

struct CalibrationNumber {
    const char* kind;  // the record's subcommand
    const char* key;   // a dotted path into the record; "last" is an array's last entry
    RealRange range;
};

constexpr double kMaxMs = 1e5;

// A gemm record's sides were given by `gemm --size`: that flag's range.
constexpr RealRange kGemmSide{static_cast<double>(kGemmSideRange.lo), false, static_cast<double>(kGemmSideRange.hi),
                              false, kGemmSideRange.why};

const std::vector<CalibrationNumber>& calibration_numbers() {
    static const std::vector<CalibrationNumber> table = {
        {"op_profile", "ms.median", {0, true, kMaxMs, false, "one op of over 100 s is a stalled GPU, not a kernel"}},
        {"op_profile", "calls_per_step", {1, false, 1e6, false, "a step launches each op at least once"}},
        {"op_profile", "local_batch", {1, false, kMaxBatchSize, false, "the batch of the run the op was timed in"}},
        {"train", "local_batch", {1, false, kMaxBatchSize, false, "the batch each rank trained"}},
        {"train", "world_size", {1, false, kMaxWorldSize, false, "ranks of the run"}},
        {"train", "optimizer_ms.median", {0, true, kMaxMs, false, "an optimizer step of over 100 s is a stalled GPU"}},
        {"gemm", "m", kGemmSide},
        {"gemm", "n", kGemmSide},
        {"gemm", "k", kGemmSide},
        {"gemm", "fraction_of_peak", {1e-4, false, 1.2, false, "a measured GEMM runs at a fraction of peak"}},
        {"comm", "world_size", {1, false, kMaxWorldSize, false, "ranks of the sweep"}},
        {"comm", "fit.alpha_us", {0, false, 1e9, false, "a collective's call latency past 1,000 s is a stalled run"}},
        {"comm", "fit.beta_busbw_gbps", {0, false, 1e6, false, "10^6 GB/s is past any link; one rank's is 0"}},
        {"comm", "rows.last.size_bytes", {0, true, 1e15, false, "the largest size moves bytes; past 10^15 is past any GPU's memory"}},
        {"comm", "rows.last.out_of_place.time_us", {0, true, 1e12, false, "a collective of over 11 days is a stalled run"}},
    };
    return table;
}

// The value at a dotted path, or nullptr where a part is missing.
const nlohmann::json* at_path(const nlohmann::json& record, const std::string& path) {
    const nlohmann::json* node = &record;
    size_t start = 0;
    while (start <= path.size()) {
        const size_t dot = std::min(path.find('.', start), path.size());
        const std::string part = path.substr(start, dot - start);
        if (part == "last" && node->is_array() && !node->empty()) {
            node = &node->back();
        } else {
            if (!node->is_object() || !node->contains(part)) return nullptr;
            node = &(*node)[part];
        }
        start = dot + 1;
    }
    return node;
}

}  // namespace

void check_calibration_record(const nlohmann::json& record, const std::string& where) {
    const std::string kind = record.value("subcommand", "");
    if (kind == "comm" && record.value("backend", "nccl") != "nccl")
        throw UserError(fmt::format("{}: a comm record of backend '{}' times host memory, not the GPU; calibrate from "
                                    "`comm --backend nccl` records",
                                    where, record.value("backend", "")));
    for (const CalibrationNumber& n : calibration_numbers()) {
        if (kind != n.kind) continue;
        const nlohmann::json* value = at_path(record, n.key);
        // A missing field, or one of the wrong type, is the calibration's own "not a scalebench
        // record" (it reads every field with its type).
        if (!value || !value->is_number()) continue;
        const double v = value->get<double>();
        if (const std::string problem = real_range_problem(v, number_text(v), n.range); !problem.empty())
            throw UserError(fmt::format("{}: key '{}': {}", where, n.key, problem));
    }
}

}  // namespace sb
