// The files the program reads and writes, checked before use (DESIGN: Records that tell
// the truth). An input is a regular file of bounded size, read whole: a FIFO, a device or
// a 50 MB YAML is refused before a byte is parsed. An output path holds no control
// character, is not a special file or folder, and is neither an input of this process (a
// config, a profile, a calibration, a snapshot) nor another of its outputs.
// Folders an append creates are removed again when the append fails.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace sb {

// Upper bounds of the inputs: the largest shipped YAML is under 64 KiB and the largest
// record file (an op profile) under 1 MiB, so these leave room and still stop a runaway
// (yaml-cpp takes about 240 bytes of memory per byte of a long YAML list).
constexpr int64_t kMaxYamlBytes = int64_t{1} << 20;          // config, hardware profile, scenario
constexpr int64_t kMaxRecordFileBytes = int64_t{512} << 20;  // JSONL records (report, calibrate)
constexpr int64_t kMaxSnapshotBytes = int64_t{16} << 20;     // a doctor snapshot (the shipped ones are under 64 KiB)

// The whole of an input file, or a UserError "PATH: cannot read WHAT: why" when it is missing,
// a folder, not a regular file (never opened for a blocking read), or over max_bytes.
std::string read_input_file(const std::string& path, const std::string& what, int64_t max_bytes);

// A YAML input (config, hardware profile, scenario, published figures): read_input_file with kMaxYamlBytes, noted
// as an input of this run (note_input), and refused when its path is not UTF-8 (it is written
// into the records).
std::string read_text_file(const std::string& path, const std::string& what);

// The one check that no output of a run is one of its inputs or another of its outputs
// (DESIGN: Records that tell the truth). Every file a command names as an input (a config,
// a profile, --calibrate records, a snapshot, report's files) is noted here, and every output
// checked by output_path_problem, in either order; by file identity, so a link or another
// spelling is the same file, and by the resolved path for a file not made yet. Throws
// UserError "PATH: cannot read WHAT: it is the output FLAG PATH of this run".
void note_input(const std::string& path, const std::string& what);

// "" when no two of `paths` are one file (by identity, so another spelling or a link is the
// same file), else "PATH is given twice (entries I and J)": report's files, --calibrate files.
std::string repeated_file(const std::vector<std::string>& paths);

// Appended records may share a file (train --out and --profile-ops); a file written whole
// (a report, a snapshot) shares it with nothing.
enum class OutputKind { appended_records, whole_file };

// Empty when `path` may be written, else one line naming `flag` (when given) and the path:
// empty, a control character or invalid UTF-8 in it, a folder or special file (FIFO, device,
// socket), an input of this process (note_input), another output of it (unless both append
// records), a file or folder that cannot be written, or one on a full file system (no block
// free, and no room in the file's own blocks: a full disk is refused before any work). Nothing is left behind: a file it
// creates to test is removed, and missing folders are only checked.
std::string output_path_problem(const std::string& path, const std::string& flag = "",
                                OutputKind kind = OutputKind::appended_records);

// Writes `text` as the whole of `path` (checked before the run with output_path_problem, kind
// whole_file): a write that fails (a full disk) removes the partial file and throws
// std::runtime_error naming the path, an internal failure (exit 1). Reports, snapshots, the
// guide's JSON.
void write_whole_file(const std::string& path, const std::string& text);

// Writes all of `text` to `fd` and syncs it (EINTR retried; a write of nothing is a full disk);
// 0 or the errno that stopped it, with `written` the bytes that reached the file.
int write_all_and_sync(int fd, const std::string& text, size_t& written);

// Flushes standard output; a table that could not be printed whole (stdout on a full disk,
// /dev/full) throws std::runtime_error "cannot write the standard output: why", an internal
// failure (exit 1), so a long run does not go on printing into nothing.
void flush_stdout();

// The offset of the first byte of `text` that is not part of valid UTF-8, or npos: records are
// JSON, whose strings must be UTF-8, so a path or name bound for a record is checked up front.
size_t invalid_utf8_at(const std::string& text);

// The two ways text leaves the program safely, one built on the other. recordable_text: `text`
// as valid UTF-8, each byte that is not part of UTF-8 as \xNN (what json_text does to each
// string it writes). printable: that, and control characters as \xNN too, for messages that
// must stay one line (markdown_cell and csv_field build on it: src/core/table_text.h).
std::string recordable_text(const std::string& text);
std::string printable(const std::string& text);

// The folders above `file` that do not exist yet, created outermost first; throws
// std::runtime_error naming the folder when one cannot be made (after removing those it made).
std::vector<std::filesystem::path> create_parent_folders(const std::filesystem::path& file);
// Removes `made` (from create_parent_folders) innermost first, where they are empty.
void remove_folders(const std::vector<std::filesystem::path>& made);

}  // namespace sb
