// Parsing a command line in a test as main does (src/main.cpp): numeric flags read by the one
// number parser, list flags checked for repeats. Shared by the unit and GPU tests.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "src/core/flag_reading.h"

namespace sb::test {

// CLI11's message for `args` (the words after the program name, subcommand first) parsed by
// `app` after its options were added, or "" when they parse.
inline std::string parse_error(CLI::App& app, std::vector<std::string> args) {
    read_numeric_flags_with_one_parser(app);
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    try {
        app.parse(args);
        refuse_repeated_list_entries(app);
    } catch (const CLI::ParseError& e) {
        return e.what();
    }
    return "";
}

}  // namespace sb::test
