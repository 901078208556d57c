// JSONL result files: whole-line appends (one write of a complete line, then fsync) and
// a reader that reports unparseable lines instead of failing on them.
#include "src/core/results.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "src/core/errors.h"

namespace sb {

std::string results_file_problem(const std::string& path) {
    std::filesystem::path p(path);
    std::error_code ec;
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
    if (ec) return fmt::format("{}: cannot create folder for results: {}", path, ec.message());
    const std::string probe = std::filesystem::exists(p) ? path : (p.has_parent_path() ? p.parent_path().string() : ".");
    if (::access(probe.c_str(), W_OK) != 0)
        return fmt::format("{}: results file is not writable: {}", path, std::strerror(errno));
    return "";
}

void append_record(const std::string& path, const nlohmann::json& record) {
    std::filesystem::path p(path);
    std::error_code ec;
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
    if (ec) throw UserError(fmt::format("{}: cannot create folder: {}", p.parent_path().string(), ec.message()));
    const std::string line = record.dump() + "\n";
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) throw UserError(fmt::format("{}: cannot open results file: {}", path, std::strerror(errno)));
    size_t written = 0;
    while (written < line.size()) {
        ssize_t n = ::write(fd, line.data() + written, line.size() - written);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int err = errno;
            ::close(fd);
            throw std::runtime_error(fmt::format("{}: write failed: {}", path, std::strerror(err)));
        }
        written += static_cast<size_t>(n);
    }
    ::fsync(fd);
    ::close(fd);
}

ReadResult read_records(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw UserError(fmt::format("{}: cannot read results file: {}", path, std::strerror(errno)));
    ReadResult result;
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
        ++number;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        try {
            auto record = nlohmann::json::parse(line);
            if (!record.is_object()) throw std::runtime_error("not a JSON object");
            result.records.push_back(std::move(record));
        } catch (const std::exception& e) {
            bool last = in.peek() == std::char_traits<char>::eof();
            result.warnings.push_back(fmt::format("{}:{}: skipped {} line: {}", path, number,
                                                  last ? "torn last" : "unparseable", e.what()));
        }
    }
    return result;
}

}  // namespace sb
