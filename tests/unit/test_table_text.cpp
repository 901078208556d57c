// The one escaping of table text (src/core/table_text.h): a name with `|` and a newline
// cannot break a Markdown table, and a CSV field holds no control character and is never a
// formula.
#include <gtest/gtest.h>

#include "src/core/table_text.h"

namespace sb {
namespace {

TEST(TableText, MarkdownCellsCannotBreakTheTable) {
    EXPECT_EQ(markdown_cell("H100 | evil\nrow"), "H100 \\| evil\\x0arow");
    EXPECT_EQ(markdown_cell("plain"), "plain");
}

TEST(TableText, CsvFieldsHoldNoControlCharacterAndNoFormula) {
    EXPECT_EQ(csv_field("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
    EXPECT_EQ(csv_field("+1+cmd"), "'+1+cmd");
    EXPECT_EQ(csv_field("@SUM(A1)"), "'@SUM(A1)");
    EXPECT_EQ(csv_field("-5.25"), "-5.25");  // a negative figure is data
    EXPECT_EQ(csv_field("-6.0%"), "-6.0%");  // and a negative share
    EXPECT_EQ(csv_field("-"), "-");          // and the mark of no figure
    EXPECT_EQ(csv_field("-cmd"), "'-cmd");
    EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
    EXPECT_EQ(csv_field("line\nbreak\r\x1b"), "line\\x0abreak\\x0d\\x1b");
}

}  // namespace
}  // namespace sb
