// RealRange ranges of numbers from flags, profiles and records (see plausible.h).
#include "src/core/plausible.h"

#include <fmt/format.h>

#include "base/errors.h"

namespace sb {

std::string out_of_range(double v, RealRange range) { return real_range_problem(v, fmt::format("{:g}", v), range); }

double plausible_field(const nlohmann::json& record, const std::string& key, RealRange range, const std::string& where) {
    const auto it = record.find(key);
    if (it == record.end() || !it->is_number())
        throw UserError(fmt::format("{}: key '{}': {}", where, key, it == record.end() ? "missing" : "not a number"));
    const double v = it->get<double>();
    if (const std::string problem = out_of_range(v, range); !problem.empty())
        throw UserError(fmt::format("{}: key '{}': {}", where, key, problem));
    return v;
}

}  // namespace sb
