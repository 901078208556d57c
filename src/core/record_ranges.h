// The plausible range of each number of a record that is shown or drawn, from one table:
// results/record_ranges.json, compiled into the binary (CMakeLists.txt writes it into a
// generated source) and read beside themselves by the results/ tools (tool_input.py), so
// `scalebench report` and the plots refuse the same records, in the checkout and installed.
#pragma once

#include <string>

#include "base/numbers.h"

namespace sb {

struct RecordRange {
    RealRange range;  // closed at both ends, with the table's reason
    bool whole;       // a count: a whole number
};

// The range of the record field `field` (for an object field such as step_ms, of its
// statistics); std::logic_error for a field the table does not hold (a program error).
RecordRange record_range(const std::string& field);

}  // namespace sb
