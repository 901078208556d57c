// Plausible ranges of numbers from flags, profiles and records (see plausible.h).
#include "src/core/plausible.h"

#include <fmt/format.h>

#include "base/errors.h"

namespace sb {

std::string implausible(double v, Plausible range) {
    const bool inside = (range.lo_open ? v > range.lo : v >= range.lo) && v <= range.hi;  // false for NaN
    if (inside) return "";
    return fmt::format("must be in {}{:g}, {:g}], got {:g}", range.lo_open ? "(" : "[", range.lo, range.hi, v);
}

double plausible_field(const nlohmann::json& record, const std::string& key, Plausible range, const std::string& where) {
    const auto it = record.find(key);
    if (it == record.end() || !it->is_number())
        throw UserError(fmt::format("{}: key '{}': {}", where, key, it == record.end() ? "missing" : "not a number"));
    const double v = it->get<double>();
    if (const std::string problem = implausible(v, range); !problem.empty())
        throw UserError(fmt::format("{}: key '{}': {}", where, key, problem));
    return v;
}

}  // namespace sb
