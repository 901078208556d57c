// JSONL result files: whole-line appends that start on a fresh line (one write of the
// complete line under an exclusive lock, then fsync), and a reader that reports bad lines
// and runs cut short instead of failing on them.
#include "src/core/results.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "base/errors.h"
#include "src/core/files.h"

namespace sb {

namespace {
std::string g_run_id;
}

const std::string& run_id() { return g_run_id; }
void set_run_id(const std::string& id) { g_run_id = id; }

std::string results_file_problem(const std::string& path, const std::string& flag) {
    return output_path_problem(path, flag);
}

namespace {

// Whether the file behind `fd` is empty or ends with a newline (a non-regular file does).
bool ends_on_fresh_line(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return true;
    char last = '\n';
    return ::pread(fd, &last, 1, st.st_size - 1) != 1 || last == '\n';
}

std::string string_field(const nlohmann::json& record, const char* key) {
    const auto it = record.find(key);
    return it != record.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

namespace {

nlohmann::json recordable(const nlohmann::json& value) {
    if (value.is_string()) return recordable_text(value.get<std::string>());
    if (value.is_array()) {
        nlohmann::json out = nlohmann::json::array();
        for (const auto& item : value) out.push_back(recordable(item));
        return out;
    }
    if (value.is_object()) {
        nlohmann::json out = nlohmann::json::object();
        for (const auto& [key, item] : value.items()) out[recordable_text(key)] = recordable(item);
        return out;
    }
    return value;
}

}  // namespace

nlohmann::json parse_json(const std::string& text) {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (const char c : text) {
        if (in_string) {
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > kMaxJsonDepth)
                throw std::runtime_error(fmt::format("nested deeper than {} levels", kMaxJsonDepth));
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return nlohmann::json::parse(text);
}

nlohmann::json parse_json_or_discarded(const std::string& text) {
    try {
        return parse_json(text);
    } catch (const std::exception&) {
        return nlohmann::json(nlohmann::json::value_t::discarded);
    }
}

std::string json_text(const nlohmann::json& value, int indent) {
    try {
        return value.dump(indent);
    } catch (const nlohmann::json::type_error&) {  // 316: a string that is not UTF-8
        return recordable(value).dump(indent);
    }
}

void append_record(const std::string& path, const nlohmann::json& record) { append_records(path, {record}); }

void append_records(const std::string& path, const std::vector<nlohmann::json>& records) {
    std::string body;
    for (const nlohmann::json& record : records) body += json_text(record) + "\n";
    if (body.empty()) return;
    const std::vector<std::filesystem::path> made = create_parent_folders(path);
    bool created = true;
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) {
        created = false;
        fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);  // write-only files
    }
    if (fd < 0) {
        const int err = errno;
        remove_folders(made);
        throw std::runtime_error(fmt::format("{}: cannot open results file: {}", printable(path), std::strerror(err)));
    }
    ::flock(fd, LOCK_EX);  // concurrent writers: the fresh-line check, the write and its undo as one
    struct stat st {};
    const off_t before = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : -1;
    const std::string line = (ends_on_fresh_line(fd) ? "" : "\n") + body;
    size_t written = 0;
    const int err = write_all_and_sync(fd, line, written);
    if (err == 0) {
        ::close(fd);  // releases the lock
        return;
    }
    // A record that cannot be written whole is not written at all: the file goes back to its
    // size before the append, and a file or folder this append created goes away.
    const bool undone = before >= 0 && ::ftruncate(fd, before) == 0;
    if (created && before == 0 && undone) ::unlink(path.c_str());
    ::close(fd);
    remove_folders(made);
    throw std::runtime_error(fmt::format("{}: cannot write a record ({} of {} bytes written): {}; {}", printable(path),
                                         written, line.size(), std::strerror(err),
                                         before < 0 ? std::string("it is not a regular file")
                                         : undone   ? fmt::format("the file is back to its {} bytes before it", before)
                                                    : std::string("cutting the file back failed")));
}

ReadResult read_records(const std::string& path) {
    return parse_records(read_input_file(path, "results file", kMaxRecordFileBytes), path);
}

ReadResult parse_records(const std::string& text, const std::string& path) {
    ReadResult result;
    std::map<std::string, size_t> open_runs;  // run_id -> index in result.runs
    size_t start = 0;
    for (int number = 1; start < text.size(); ++number) {
        size_t end = text.find('\n', start);
        const bool has_newline = end != std::string::npos;
        if (!has_newline) end = text.size();
        const std::string line = text.substr(start, end - start);
        start = end + 1;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        nlohmann::json record;
        try {
            record = parse_json(line);
            if (!record.is_object()) throw std::runtime_error("not a JSON object");
        } catch (const std::exception& e) {
            result.warnings.push_back(fmt::format("{}:{}: skipped {} line: {}", path, number,
                                                  has_newline ? "invalid" : "torn last", e.what()));
            continue;
        }
        const std::string kind = string_field(record, "subcommand"), id = string_field(record, "run_id");
        if ((kind == "start" || kind == "end" || kind == "incomplete") && !id.empty()) {
            if (kind == "start") {
                open_runs[id] = result.runs.size();
                result.runs.push_back({id, string_field(record, "run_subcommand"), number, 0, false});
            } else if (auto it = open_runs.find(id); it != open_runs.end()) {
                RunBracket& run = result.runs[it->second];
                run.end_line = number;
                run.incomplete = kind == "incomplete";
                open_runs.erase(it);
            }
            if (kind != "incomplete") continue;  // the brackets are not measurements
        }
        result.records.push_back(std::move(record));
        result.lines.push_back(number);
    }
    for (const RunBracket& run : result.runs)
        if (run.end_line == 0)
            result.warnings.push_back(fmt::format("{}:{}: the {} run started here (run_id {}) has no end record: "
                                                  "it was cut short (or is still running)",
                                                  path, run.start_line, run.subcommand, run.run_id));
    return result;
}

}  // namespace sb
