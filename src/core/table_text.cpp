// Table text escaping (src/core/table_text.h).
#include "src/core/table_text.h"

#include "base/numbers.h"
#include "src/core/files.h"

namespace sb {

std::string markdown_cell(const std::string& text) {
    std::string cell;
    for (char c : printable(text)) cell += c == '|' ? std::string("\\|") : std::string(1, c);
    return cell;
}

namespace {

// Whether `text` is a figure: a number, a percentage, or "-" for none (a negative figure is data,
// not a formula).
bool is_figure(const std::string& text) {
    if (text == "-") return true;
    const std::string number = !text.empty() && text.back() == '%' ? text.substr(0, text.size() - 1) : text;
    double v = 0;
    return parse_real(number, RealRange{-kNoUpperBound, false, kNoUpperBound, false}, v).empty();
}

}  // namespace

std::string csv_field(const std::string& text) {
    std::string s = printable(text);  // no line break or other control character survives
    if (!s.empty() && std::string("=+-@").find(s[0]) != std::string::npos && !is_figure(s)) s = "'" + s;
    if (s.find_first_of(",\"") == std::string::npos) return s;
    std::string quoted = "\"";
    for (char c : s) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
}

}  // namespace sb
