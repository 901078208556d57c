// The number reader of base/numbers.h: a strict decimal grammar, then the range.
#include "base/numbers.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <regex>

#include <fmt/format.h>

#include "base/errors.h"

namespace sb {
namespace {

std::string with_reason(std::string problem, const char* why) {
    if (!problem.empty() && why && *why) problem += fmt::format(" ({})", why);
    return problem;
}

}  // namespace

std::string number_text(double v) { return fmt::format("{}", v); }
std::string number_text(float v) { return fmt::format("{}", v); }

std::string int_range_problem(int64_t v, IntRange r) {
    if (v < r.lo) return with_reason(fmt::format("must be >= {}, got {}", r.lo, v), r.why);
    if (v > r.hi) return with_reason(fmt::format("must be <= {}, got {}", r.hi, v), r.why);
    return "";
}

std::string real_range_problem(double v, const std::string& shown, RealRange r) {
    if (!std::isfinite(v)) return fmt::format("must be a finite number, got {}", shown);
    const bool low_ok = r.lo_open ? v > r.lo : v >= r.lo;
    const bool high_ok = std::isinf(r.hi) || (r.hi_open ? v < r.hi : v <= r.hi);
    if (low_ok && high_ok) return "";
    if (std::isinf(r.hi))
        return with_reason(fmt::format("must be {} {}, got {}", r.lo_open ? ">" : ">=", number_text(r.lo), shown), r.why);
    return with_reason(fmt::format("must be in {}{}, {}{}, got {}", r.lo_open ? "(" : "[", number_text(r.lo),
                                   number_text(r.hi), r.hi_open ? ")" : "]", shown),
                       r.why);
}

std::string parse_integer(const std::string& text, IntRange range, int64_t& out) {
    static const std::regex kInteger("[-+]?[0-9]+");
    if (!std::regex_match(text, kInteger)) return fmt::format("expected an integer, got '{}'", text);
    errno = 0;
    const long long v = std::strtoll(text.c_str(), nullptr, 10);  // base 10: "064" is 64
    // Beyond int64 is beyond every bound; strtoll clamped v to the side it overflowed.
    if (errno == ERANGE)
        return with_reason(fmt::format("must be {} {}, got {}", v < 0 ? ">=" : "<=", v < 0 ? range.lo : range.hi, text),
                           range.why);
    const std::string problem = int_range_problem(v, range);
    if (problem.empty()) out = v;
    return problem;
}

std::string parse_unsigned(const std::string& text, uint64_t& out) {
    static const std::regex kWhole("[+]?[0-9]+|-0+"), kNegative("-[0-9]+");
    if (!std::regex_match(text, kWhole))
        return std::regex_match(text, kNegative) ? fmt::format("must be >= 0, got {}", text)
                                                  : fmt::format("expected an integer, got '{}'", text);
    errno = 0;
    const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
    if (errno == ERANGE) return fmt::format("must be <= {}, got {}", std::numeric_limits<uint64_t>::max(), text);
    out = v;
    return "";
}

std::string parse_real(const std::string& text, RealRange range, double& out) {
    static const std::regex kReal("[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
    if (!std::regex_match(text, kReal)) return fmt::format("expected a number, got '{}'", text);
    errno = 0;
    const double v = std::strtod(text.c_str(), nullptr);
    if (errno == ERANGE && std::isinf(v)) return fmt::format("{} is too large to be a number", text);
    const std::string problem = real_range_problem(v, text, range);
    if (problem.empty()) out = v;
    return problem;
}

int64_t integer_or_refuse(const std::string& name, const std::string& text, IntRange range) {
    int64_t v = 0;
    if (const std::string problem = parse_integer(text, range, v); !problem.empty())
        throw UserError(fmt::format("{}='{}': {}", name, text, problem));
    return v;
}

double real_or_refuse(const std::string& name, const std::string& text, RealRange range) {
    double v = 0;
    if (const std::string problem = parse_real(text, range, v); !problem.empty())
        throw UserError(fmt::format("{}='{}': {}", name, text, problem));
    return v;
}

}  // namespace sb
