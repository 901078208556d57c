// The plausible range of every number a hardware profile (or host section) gives, with the
// reason for its bounds: one table, read by the profile reader (hardware.cpp) for a value
// and both ends of its range. A number outside is a typo or a wrong unit, and would project
// figures no hardware gives (a kernel_gap_us of 1e9 makes every step take hours; a
// price_usd of 1e-6 makes samples per $10k astronomical).
#pragma once

#include <string>

#include "base/numbers.h"

namespace sb {

struct ProfileNumber {
    const char* key;  // the key's last part: gpu.price_usd is "price_usd"
    RealRange range;
};

// The range of `key` (its last part); every sourced number of a profile has a row.
const RealRange& profile_range(const std::string& key);

}  // namespace sb
