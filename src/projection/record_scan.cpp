// Records found in a results folder (src/projection/record_scan.h), each file read once per
// process unless it changes.
#include "src/projection/record_scan.h"
#include "src/core/results.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <vector>

#include "src/core/files.h"

namespace sb {

namespace {

// The regular *.jsonl files under `dir`, sorted. Folders that cannot be read are passed over;
// symbolic links to folders are not followed (no loops).
std::vector<std::string> record_files(const std::string& dir) {
    namespace fs = std::filesystem;
    std::vector<std::string> files;
    std::error_code ec;
    if (dir.empty() || !fs::is_directory(dir, ec)) return files;
    fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
    for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        std::error_code type_ec;
        if (it->path().extension() == ".jsonl" && it->is_regular_file(type_ec)) files.push_back(it->path().string());
    }
    std::sort(files.begin(), files.end());
    return files;
}

}  // namespace

// The measured records of one file, read once: compare asks for them for every profile and
// every table, and a file is read, checked and parsed again only when it changed (its size,
// modification time or identity).
struct ScannedFile {
    struct stat seen {};
    std::vector<nlohmann::json> records;
};

const std::vector<nlohmann::json>& measured_records_of(const std::string& file) {
    static std::map<std::string, ScannedFile> scanned;
    struct stat now {};
    const bool known = ::stat(file.c_str(), &now) == 0;
    if (const auto it = scanned.find(file); it != scanned.end() && known) {
        const struct stat& was = it->second.seen;
        if (was.st_size == now.st_size && was.st_mtim.tv_sec == now.st_mtim.tv_sec &&
            was.st_mtim.tv_nsec == now.st_mtim.tv_nsec && was.st_ino == now.st_ino && was.st_dev == now.st_dev)
            return it->second.records;
    }
    ScannedFile read;
    read.seen = now;
    std::istringstream lines(read_input_file(file, "record file", kMaxRecordFileBytes));
    for (std::string line; std::getline(lines, line);) {
        nlohmann::json r = parse_json_or_discarded(line);
        if (r.is_discarded() || !r.is_object() || (r.contains("projected") && r["projected"] == true)) continue;
        read.records.push_back(std::move(r));
    }
    ScannedFile& kept = scanned[file];
    kept = std::move(read);
    return kept.records;
}

void for_each_measured_record(const std::string& dir,
                              const std::function<void(const nlohmann::json& record, const std::string& file)>& visit) {
    for (const std::string& file : record_files(dir))
        for (const nlohmann::json& record : measured_records_of(file)) visit(record, file);
}

std::pair<nlohmann::json, std::string> latest_record(const std::string& dir,
                                                     const std::function<bool(const nlohmann::json&)>& matches) {
    std::pair<nlohmann::json, std::string> found;
    for_each_measured_record(dir, [&](const nlohmann::json& r, const std::string& file) {
        if (matches(r) && (found.first.is_null() || text_of(r, "timestamp") > text_of(found.first, "timestamp")))
            found = {r, file};
    });
    return found;
}

std::string text_of(const nlohmann::json& r, const char* key) {
    return r.is_object() && r.contains(key) && r[key].is_string() ? r[key].get<std::string>() : "";
}

double number_of(const nlohmann::json& r, const char* key) {
    return r.is_object() && r.contains(key) && r[key].is_number() ? r[key].get<double>() : 0.0;
}

long count_of(const nlohmann::json& r, const char* key) {
    const double v = number_of(r, key);
    return std::isfinite(v) && std::abs(v) < 1e15 ? static_cast<long>(v) : 0;
}

std::string gpu_name_of(const nlohmann::json& r) {
    if (r.contains("gpu")) return text_of(r["gpu"], "name");
    if (r.contains("environment") && r["environment"].is_object() && r["environment"].contains("gpu"))
        return text_of(r["environment"]["gpu"], "name");
    return "";
}

}  // namespace sb
