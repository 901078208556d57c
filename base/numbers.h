// The one reader of numbers a person types: command-line flags (src/core/flag_reading.h),
// environment variables and YAML scalars (src/core/yaml_reader.h) all read through it, so
// "064" is 64 everywhere (decimal only, never octal; "0x40" is not a number), a value out
// of range is named with its bound and the bound's reason (2147483648 for a 32-bit key says
// "must be <= ...", not "could not convert"), and the whole text must be the number.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

namespace sb {

// Whole numbers in [lo, hi]; `why` says where the bounds come from (shown with a refusal).
struct IntRange {
    int64_t lo;
    int64_t hi;
    const char* why = "";
};

// A real interval; open ends exclude the bound; hi = infinity means unbounded above. Every
// range is finite-only: inf and NaN are refused whatever the bounds.
struct RealRange {
    double lo;
    bool lo_open;
    double hi;
    bool hi_open;
    const char* why = "";
};
constexpr double kNoUpperBound = std::numeric_limits<double>::infinity();

// Shortest text that reads back to the same value (0.001, not 0.0010000000474974513).
std::string number_text(double v);
std::string number_text(float v);

// "" when v is in range, else "must be <= HI, got V (WHY)".
std::string int_range_problem(int64_t v, IntRange r);
std::string real_range_problem(double v, const std::string& shown, RealRange r);

// "" and `out` set when `text` is a decimal integer ([-+]?[0-9]+, leading zeros allowed) in
// `range`; else the reason ("expected an integer, got '1e3'", "must be <= 1000, got 1001 (...)").
std::string parse_integer(const std::string& text, IntRange range, int64_t& out);
// A whole number in [0, 2^64 - 1] (a seed: any 64-bit pattern), the same grammar.
std::string parse_unsigned(const std::string& text, uint64_t& out);
// The same for a decimal real ([-+]?digits[.digits][e[-+]digits]; no hex, inf or nan).
std::string parse_real(const std::string& text, RealRange range, double& out);

// The throwing forms for an environment variable or flag: UserError "NAME='TEXT': reason".
int64_t integer_or_refuse(const std::string& name, const std::string& text, IntRange range);
double real_or_refuse(const std::string& name, const std::string& text, RealRange range);

}  // namespace sb
