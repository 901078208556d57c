// Where scalebench's shipped data is: configs/ (workload presets, hardware profiles, hosts,
// scenarios) and results/ (the committed records, published figures, the plot scripts). Found from
// the running binary, never from the working directory, so every subcommand reads the same data
// from any folder: PREFIX/share/scalebench beside an installed PREFIX/bin/scalebench, else the
// source tree the binary was built from (a build tree).
#pragma once

#include <string>

namespace sb {

// The folder that holds the shipped configs/ and results/; empty when neither place has configs/.
const std::string& data_dir();

// A shipped file or folder, data_dir()/relative ("configs/hardware", "results/compare_report.py"):
// `relative` itself when the working directory is the data folder (a checkout); empty when there is
// no data folder.
std::string shipped_path(const std::string& relative);

// The file to open for a path a user gave: the path itself, unless it is relative, under configs/,
// missing from the working directory and shipped (then the shipped file), so the README's
// `--config configs/NAME.yaml` works from any folder.
std::string input_path(const std::string& path);

}  // namespace sb
