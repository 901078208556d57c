// Result records (DESIGN: Results, Records that tell the truth): one JSON object per line,
// appended whole and always on a fresh line, so a reader never sees half a record and a
// torn line never swallows the next one. A run is bracketed by a `start` record and an
// `end` (or `incomplete`) record; the reader names a run whose end is missing.
// The schema is documented in results/SCHEMA.md.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sb {

constexpr int kSchemaVersion = 1;

// Where a subcommand writes when neither --out nor the config's `out` names a file: runs/ in the
// working directory, which git ignores, so a user's own runs never mix with the committed
// evidence under results/.
inline std::string default_output(const std::string& file) { return "runs/" + file; }

// The id of the run in progress, the same on every rank ("" outside a run): every record
// of the run carries it as `run_id`, and its start and end records bracket it. Set by
// begin_run and end_run (src/system/run_records.h).
const std::string& run_id();
void set_run_id(const std::string& id);

// Checked before any work is done (output_path_problem): `path` can take appended records
// and is no input or special file. Empty when fine, else the reason, naming `flag` when given
// and the path. Nothing is left behind.
std::string results_file_problem(const std::string& path, const std::string& flag = "");

// The one way JSON leaves the program (records, snapshots, reports, gathers between ranks):
// its text, with every string made recordable first. Strings that are valid UTF-8 pass as
// they are; in one that is not (an environment variable holding a byte 0xff), each byte that
// is not part of UTF-8 is written as the four characters \xNN. So no run loses its
// measurements to a name it recorded.
std::string json_text(const nlohmann::json& value, int indent = -1);

// The one way JSON enters the program (records, the results scan, snapshots, gathers between
// ranks): nesting deeper than kMaxJsonDepth is refused before the text is parsed, so a line
// nested 150,000 deep is one bad line, never a stack overflow. The shipped records nest at
// most 5 levels and snapshots 6. parse_json throws std::runtime_error (a syntax error is
// nlohmann's parse_error, one); parse_json_or_discarded gives a discarded value instead.
constexpr int kMaxJsonDepth = 64;
nlohmann::json parse_json(const std::string& text);
nlohmann::json parse_json_or_discarded(const std::string& text);

// Appends one line (creating folders as needed), flushed and fsynced. When the file's last
// byte is not a newline (a writer killed mid-line), the record starts on a fresh line. A line
// that cannot be written whole (a full disk) is undone: the file is cut back to its size
// before it (a file or folder the append created is removed) and std::runtime_error names
// the path: an internal failure, exit 1, as the path was checked before the run.
void append_record(const std::string& path, const nlohmann::json& record);
// Several records as one append, all or none (a command whose records are ready at once:
// project, compare): the same write, lock and undo as append_record.
void append_records(const std::string& path, const std::vector<nlohmann::json>& records);

// One run as its bracket records show it: the `start` record and, once it ended, its `end`
// or `incomplete` record (0 when none is in the file: the run was cut short, or still runs).
struct RunBracket {
    std::string run_id, subcommand;
    int start_line = 0, end_line = 0;
    bool incomplete = false;
};

struct ReadResult {
    std::vector<nlohmann::json> records;  // every record but the `start` and `end` brackets
    std::vector<int> lines;               // the line of each record
    std::vector<RunBracket> runs;         // in the order they started
    // "FILE:LINE: skipped ..." for a line that is not a JSON object (a torn last line is the
    // one that lacks its newline), and one warning per run whose end record is missing.
    std::vector<std::string> warnings;
};
ReadResult read_records(const std::string& path);  // the file checked and read whole (src/core/files.h)
// The same for text already read; `path` names it in warnings.
ReadResult parse_records(const std::string& text, const std::string& path);

}  // namespace sb
