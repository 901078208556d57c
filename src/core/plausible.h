// The plausible range of a number read from a flag, a hardware profile or a result record:
// finite, above its lower end (or at it), at most its upper end. Every test is written as
// "the value is inside", so NaN, which fails every comparison, is outside: `v <= 0` alone
// lets NaN through.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace sb {

struct Plausible {
    double lo;
    bool lo_open;  // (lo, hi] rather than [lo, hi]
    double hi;
};

// Empty when `v` lies in `range`, else "must be in (lo, hi], got V".
std::string implausible(double v, Plausible range);

// `record[key]` as a number in `range`, or a UserError "WHERE: key 'KEY': ..." (a missing
// key or one that is not a number included): WHERE names the file and record.
double plausible_field(const nlohmann::json& record, const std::string& key, Plausible range, const std::string& where);

}  // namespace sb
