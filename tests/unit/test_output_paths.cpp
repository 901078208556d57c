// The one output-path check (src/core/files.h: note_input, output_path_problem): no output
// of a run is one of its inputs or, unless both append records, another of its outputs, in
// either order of checking, whatever the spelling of the path.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "base/errors.h"
#include "src/core/files.h"

namespace sb {
namespace {

namespace fs = std::filesystem;

fs::path fresh(const std::string& name) {
    const fs::path dir = fs::temp_directory_path() / ("sb-output-paths-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const fs::path p = dir / name;
    fs::remove(p);
    return p;
}

std::string note_error(const std::string& path, const std::string& what) {
    try {
        note_input(path, what);
    } catch (const UserError& e) {
        return e.what();
    }
    return "";
}

TEST(OutputPaths, AnOutputThatIsAnInputIsRefusedInEitherOrder) {
    // doctor --from-snapshot s --report s (and --snapshot-out s)
    const fs::path s = fresh("s.json");
    std::ofstream(s) << "{}";
    note_input(s.string(), "snapshot");
    EXPECT_EQ(output_path_problem(s.string(), "--report", OutputKind::whole_file),
              "--report " + s.string() + ": is the snapshot " + s.string() + "; writing it would replace it");
    EXPECT_NE(output_path_problem(s.string(), "--snapshot-out", OutputKind::whole_file), "");
    // project --calibrate X --out X, the output checked first: the input is refused.
    const fs::path x = fresh("x.jsonl");
    std::ofstream(x) << "";
    EXPECT_EQ(output_path_problem(x.string(), "--out"), "");
    EXPECT_EQ(note_error(x.string(), "--calibrate file"),
              x.string() + ": cannot read --calibrate file: it is the output --out " + x.string() + " of this run");
    // ... and another spelling of it, checked the other way round.
    const fs::path y = fresh("y.jsonl");
    std::ofstream(y) << "";
    note_input(y.string(), "--calibrate file");
    const std::string other_spelling = (y.parent_path() / "." / y.filename()).string();
    EXPECT_NE(output_path_problem(other_spelling, "--out").find("is the --calibrate file"), std::string::npos);
}

TEST(OutputPaths, TwoOutputsShareAFileOnlyWhenBothAppendRecords) {
    // doctor --report X --snapshot-out X, X not made yet.
    const fs::path x = fresh("both.md");
    EXPECT_EQ(output_path_problem(x.string(), "--report", OutputKind::whole_file), "");
    EXPECT_EQ(output_path_problem(x.string(), "--snapshot-out", OutputKind::whole_file),
              "--snapshot-out " + x.string() + ": is also the output --report " + x.string() +
                  "; two outputs cannot share one file");
    EXPECT_FALSE(fs::exists(x));
    // compare --out R --report (whose JSON is R)
    const fs::path r = fresh("r.json");
    EXPECT_EQ(output_path_problem(r.string(), "--out"), "");
    EXPECT_NE(output_path_problem(r.string(), "--report", OutputKind::whole_file).find("is also the output --out"),
              std::string::npos);
    // train --out T --profile-ops T: both append records, as designed.
    const fs::path t = fresh("t.jsonl");
    EXPECT_EQ(output_path_problem(t.string(), "--out"), "");
    EXPECT_EQ(output_path_problem(t.string(), "--profile-ops"), "");
}

// The one whole-file writer (reports, snapshots, the guide's JSON): the whole text, or, where
// the write fails, no file at all and an error naming the path (exit 1: the path was checked).
TEST(OutputPaths, AWholeFileIsWrittenWholeOrNotAtAll) {
    const fs::path p = fresh("whole.md");
    write_whole_file(p.string(), "first\n");
    write_whole_file(p.string(), "# report\n");
    std::ifstream in(p);
    EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), {}), "# report\n");
    try {
        write_whole_file("/dev/full", std::string(1 << 16, 'x'));
        ADD_FAILURE() << "a write to /dev/full succeeded";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("/dev/full: cannot write (0 of 65536 bytes written): No space left on device"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_TRUE(fs::exists("/dev/full")) << "the writer removes a partial regular file, never a device";
}

}  // namespace
}  // namespace sb
