// The one escaping of text put into a table the program writes, whatever the text holds (a
// host, a GPU, a profile or file name from a record): a Markdown cell never breaks its table
// (`|` written `\|`, control characters such as a newline as \xNN), and a CSV field stays one
// field of one row (quoted where it holds a comma, quote or line break; control characters as
// \xNN) and is never read as a formula by a spreadsheet (text starting with = + - @ gets a
// leading '). results/compare_report.py applies the same rule to the guide's Markdown.
#pragma once

#include <string>

namespace sb {

std::string markdown_cell(const std::string& text);
std::string csv_field(const std::string& text);

}  // namespace sb
