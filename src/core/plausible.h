// A number already read (a record's field, a flag's value) checked against its range:
// base/numbers.h's RealRange (finite-only, so NaN and infinity are outside whatever the
// bounds), the one way a range is written, the number shown as %g.
#pragma once

#include <string>

#include "base/numbers.h"

namespace sb {

// Empty when `v` lies in `range`, else "must be in (lo, hi], got V (WHY)".
std::string out_of_range(double v, RealRange range);

}  // namespace sb
