// A number of a result record read in its range: the ranges are base/numbers.h's RealRange
// (finite-only, so NaN and infinity are outside whatever the bounds), the one way a range is
// written, here applied to a JSON field rather than to text.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/numbers.h"

namespace sb {

// Empty when `v` lies in `range`, else "must be in (lo, hi], got V (WHY)".
std::string out_of_range(double v, RealRange range);

// `record[key]` as a number in `range`, or a UserError "WHERE: key 'KEY': ..." (a missing
// key or one that is not a number included): WHERE names the file and record.
double plausible_field(const nlohmann::json& record, const std::string& key, RealRange range, const std::string& where);

}  // namespace sb
