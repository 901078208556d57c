// Bounded depth and size in every reader: the one JSON reader (src/core/results.h:
// parse_json) refuses nesting past kMaxJsonDepth before parsing, so a record nested 150,000
// deep is one named bad line for report and is passed over by compare's results scan; a
// doctor snapshot is read through the checked input reader (a FIFO, /dev/zero or a file
// past its bound refused before a byte is parsed); the results scan reads each file once.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "base/errors.h"
#include "src/core/files.h"
#include "src/core/results.h"
#include "src/doctor/snapshot.h"
#include "src/projection/record_scan.h"

namespace sb {
namespace {

namespace fs = std::filesystem;

std::string nested(int depth) { return std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']'); }

fs::path fresh_folder(const std::string& name) {
    const fs::path dir = fs::temp_directory_path() / ("sb-bounded-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

TEST(BoundedReaders, ARecordNested150000DeepIsOneBadLineNotACrash) {
    const std::string deep = "{\"a\":" + nested(150000) + "}";
    EXPECT_TRUE(parse_json_or_discarded(deep).is_discarded());
    EXPECT_TRUE(parse_json_or_discarded(nested(kMaxJsonDepth + 1)).is_discarded());
    EXPECT_FALSE(parse_json_or_discarded(nested(kMaxJsonDepth)).is_discarded());
    // Brackets inside strings are text, not depth.
    EXPECT_FALSE(parse_json_or_discarded("{\"s\":\"" + std::string(1000, '[') + "\\\"\"}").is_discarded());
    const ReadResult read = parse_records(deep + "\n{\"subcommand\":\"train\"}\n", "deep.jsonl");
    ASSERT_EQ(read.records.size(), 1u);
    ASSERT_EQ(read.warnings.size(), 1u);
    EXPECT_EQ(read.warnings[0], "deep.jsonl:1: skipped invalid line: nested deeper than 64 levels");
}

TEST(BoundedReaders, TheResultsScanPassesOverADeepRecordAndReadsEachFileOnce) {
    const fs::path dir = fresh_folder("scan");
    std::ofstream(dir / "r.jsonl") << "{\"a\":" << nested(150000) << "}\n{\"subcommand\":\"gemm\"}\n";
    int seen = 0;
    for_each_measured_record(dir.string(), [&](const nlohmann::json&, const std::string&) { ++seen; });
    EXPECT_EQ(seen, 1);
    // The file read again would show 0 records: an unchanged file (same size, time, identity) is
    // not read again, so the scan still sees 1.
    const auto when = fs::last_write_time(dir / "r.jsonl");
    const auto size = fs::file_size(dir / "r.jsonl");
    {
        std::fstream f(dir / "r.jsonl", std::ios::in | std::ios::out);
        f << std::string(static_cast<size_t>(size) - 1, ' ');  // same size, no record left
    }
    fs::last_write_time(dir / "r.jsonl", when);
    seen = 0;
    for_each_measured_record(dir.string(), [&](const nlohmann::json&, const std::string&) { ++seen; });
    EXPECT_EQ(seen, 1);
    // A changed file is read again.
    std::ofstream(dir / "r.jsonl", std::ios::app) << "{\"subcommand\":\"gemm\"}\n{\"subcommand\":\"gemm\"}\n";
    seen = 0;
    for_each_measured_record(dir.string(), [&](const nlohmann::json&, const std::string&) { ++seen; });
    EXPECT_EQ(seen, 2);
    fs::remove_all(dir);
}

std::string snapshot_error(const std::string& path) {
    try {
        doctor::load_snapshot(path);
    } catch (const UserError& e) {
        return e.what();
    }
    return "<read>";
}

TEST(BoundedReaders, ASnapshotIsReadThroughTheCheckedReader) {
    const fs::path dir = fresh_folder("snapshot");
    fs::create_symlink("/dev/zero", dir / "zero.json");
    EXPECT_NE(snapshot_error((dir / "zero.json").string()).find("not a regular file"), std::string::npos);
    ASSERT_EQ(::mkfifo((dir / "fifo.json").c_str(), 0644), 0);
    EXPECT_NE(snapshot_error((dir / "fifo.json").string()).find("it is a FIFO"), std::string::npos);
    std::ofstream(dir / "big.json").close();
    fs::resize_file(dir / "big.json", static_cast<uintmax_t>(kMaxSnapshotBytes) + 1);
    EXPECT_NE(snapshot_error((dir / "big.json").string()).find("more than"), std::string::npos);
    std::ofstream(dir / "deep.json") << nested(150000);
    EXPECT_NE(snapshot_error((dir / "deep.json").string()).find("nested deeper than 64 levels"), std::string::npos);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace sb
