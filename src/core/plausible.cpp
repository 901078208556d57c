// RealRange ranges of numbers already read (see plausible.h).
#include "src/core/plausible.h"

#include <fmt/format.h>

namespace sb {

std::string out_of_range(double v, RealRange range) { return real_range_problem(v, fmt::format("{:g}", v), range); }

}  // namespace sb
