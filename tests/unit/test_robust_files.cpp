// src/core/files.h: inputs checked for type and size before they are read, output paths
// checked for type, identity and control characters before any work, and folders made by a
// failed append removed again (docs/reliability.md).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/errors.h"
#include "src/core/files.h"
#include "src/core/results.h"

namespace sb {
namespace {

namespace fs = std::filesystem;

fs::path scratch() {
    const fs::path dir = fs::temp_directory_path() / ("scalebench-robust-unit-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    return dir;
}

std::string user_error(const std::function<void()>& f) {
    try {
        f();
    } catch (const UserError& e) {
        return e.what();
    }
    return "";
}

TEST(RobustFiles, AnInputIsReadWholeWhenItIsARegularFileWithinItsLimit) {
    const fs::path path = scratch() / "in.txt";
    std::ofstream(path) << "steps: 3\n";
    EXPECT_EQ(read_input_file(path.string(), "config file", 100), "steps: 3\n");
    EXPECT_EQ(user_error([&] { read_input_file(path.string(), "config file", 8); }),
              path.string() + ": cannot read config file: it is 9 bytes, more than the 8 bytes a config file may have");
}

TEST(RobustFiles, AnInputThatIsNotARegularFileIsNeverOpenedForReading) {
    const fs::path fifo = scratch() / "in.fifo";
    fs::remove(fifo);
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
    // A blocking open or read of the FIFO would hang here: no writer ever comes.
    EXPECT_EQ(user_error([&] { read_input_file(fifo.string(), "results file", 100); }),
              fifo.string() + ": cannot read results file: it is a FIFO, not a regular file");
    EXPECT_EQ(user_error([&] { read_input_file("/dev/zero", "config file", kMaxYamlBytes); }),
              "/dev/zero: cannot read config file: it is a character device, not a regular file");
    EXPECT_EQ(user_error([&] { read_input_file(scratch().string(), "config file", 100); }),
              scratch().string() + ": cannot read config file: Is a directory");
    EXPECT_EQ(user_error([&] { read_records(fifo.string()); }),
              fifo.string() + ": cannot read results file: it is a FIFO, not a regular file");
}

TEST(RobustFiles, AnOutputPathIsNoYamlInputOfThisProcess) {
    const fs::path yaml = scratch() / "profile.yaml", hard = scratch() / "profile-hard.yaml";
    fs::remove(yaml);
    fs::remove(hard);
    std::ofstream(yaml) << "name: x\n";
    fs::create_hard_link(yaml, hard);
    const fs::path other = scratch() / "other.jsonl";
    std::ofstream(other) << "";
    read_text_file(yaml.string(), "hardware profile");
    EXPECT_EQ(output_path_problem(hard.string(), "--out"),
              "--out " + hard.string() + ": is the hardware profile " + yaml.string() +
                  "; results appended to it would break it");
    EXPECT_EQ(output_path_problem(other.string(), "--out"), "");
    // The other way round: a path checked as an output is not then read as a YAML input.
    EXPECT_EQ(user_error([&] { read_text_file(other.string(), "config file"); }),
              other.string() + ": cannot read config file: it is the output --out " + other.string() + " of this run");
}

TEST(RobustFiles, AnOutputPathIsARegularFileWithoutControlCharacters) {
    EXPECT_EQ(output_path_problem("", "--out"), "--out: the file name is empty");
    EXPECT_EQ(output_path_problem("/dev/null", "--out"),
              "--out /dev/null: is a character device, not a regular file; results go to a regular file");
    EXPECT_EQ(output_path_problem(scratch().string(), "--out"), "--out " + scratch().string() + ": is a folder, not a results file");
    EXPECT_EQ(output_path_problem("r\n{\"x\":1}.jsonl", "--out"),
              "--out r\\x0a{\"x\":1}.jsonl: the path holds a control character (byte 0x0a at offset 1); choose another name");
    EXPECT_EQ(output_path_problem("/proc/no/such.jsonl", "--out").rfind("--out /proc/no/such.jsonl: cannot create folder in /proc", 0), 0u);
    const fs::path file = scratch() / "a-file";
    std::ofstream(file) << "x";
    EXPECT_EQ(output_path_problem((file / "r.jsonl").string(), "--out"),
              "--out " + (file / "r.jsonl").string() + ": cannot open results file: Not a directory");
}

TEST(RobustFiles, CheckingAnOutputLeavesNothingBehind) {
    const fs::path top = scratch() / "fresh";
    fs::remove_all(top);
    EXPECT_EQ(output_path_problem((top / "a" / "r.jsonl").string(), "--out"), "");
    EXPECT_FALSE(fs::exists(top));
    fs::create_directories(top);
    EXPECT_EQ(output_path_problem((top / "r.jsonl").string(), "--out"), "");
    EXPECT_TRUE(fs::is_empty(top));
}

TEST(RobustFiles, AFailedAppendRemovesTheFoldersItMade) {
    const fs::path top = scratch() / "made";
    fs::remove_all(top);
    const std::vector<fs::path> made = create_parent_folders(top / "a" / "b" / "r.jsonl");
    ASSERT_EQ(made.size(), 3u);
    EXPECT_EQ(made.front(), top);
    EXPECT_TRUE(fs::is_directory(top / "a" / "b"));
    std::ofstream(top / "keep") << "";  // a folder someone else wrote into stays
    remove_folders(made);
    EXPECT_FALSE(fs::exists(top / "a"));
    EXPECT_TRUE(fs::exists(top / "keep"));
    // An append whose file cannot be opened (a name past the file system's 255 bytes) removes
    // the folders it made for it.
    EXPECT_ANY_THROW(append_record((top / "x" / std::string(300, 'r')).string(), {{"name", "n"}}));
    EXPECT_FALSE(fs::exists(top / "x"));
}

TEST(RobustFiles, PrintableEscapesControlCharacters) {
    EXPECT_EQ(printable("a\tb\x7f" "c\xc3\xa9"), "a\\x09b\\x7fc\xc3\xa9");
    EXPECT_EQ(printable("r\xff" "\xc3\xa9"), "r\\xff\xc3\xa9");  // the bad byte, as a record writes it
}

// Records are JSON, whose strings are UTF-8: a path bound for a record is UTF-8 or refused.
TEST(RobustFiles, APathThatIsNotUtf8IsRefusedUpFront) {
    EXPECT_EQ(invalid_utf8_at(""), std::string::npos);
    EXPECT_EQ(invalid_utf8_at("runs/caf\xc3\xa9-\xe2\x82\xac-\xf0\x9f\x98\x80.jsonl"), std::string::npos);
    EXPECT_EQ(invalid_utf8_at("r\xff"), 1u);
    EXPECT_EQ(invalid_utf8_at("ab\xc3"), 2u);                  // cut short
    EXPECT_EQ(invalid_utf8_at("a\xc3\x28"), 1u);              // not a continuation byte
    EXPECT_EQ(invalid_utf8_at("\xc0\xaf"), 0u);               // overlong '/'
    EXPECT_EQ(invalid_utf8_at("\xed\xa0\x80"), 0u);          // a surrogate
    EXPECT_EQ(invalid_utf8_at("\xf4\x90\x80\x80"), 0u);     // past U+10FFFF
    EXPECT_EQ(invalid_utf8_at("x\xf4\x8f\xbf\xbf"), std::string::npos);  // U+10FFFF itself
    EXPECT_EQ(output_path_problem("r\xff.jsonl", "--out"),
              "--out r\\xff.jsonl: the path is not UTF-8 text (byte 0xff at offset 1), which records, being JSON, "
              "cannot hold; choose another name");
    EXPECT_EQ(user_error([] { read_text_file("c\xff.yaml", "config file"); }),
              "c\\xff.yaml: cannot read config file: the path is not UTF-8 text (byte 0xff at offset 1), which "
              "records, being JSON, cannot hold");
}

}  // namespace
}  // namespace sb
