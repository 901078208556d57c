// Files through the real binary (docs/reliability.md): a write that cannot be completed is
// undone and exits 1 naming the path, a refused run leaves no file or folder, an output path
// that is an input, a special file or holds a control character is refused up front (exit 2,
// naming the flag), and an input that is not a regular file or is too large is refused before
// it is read. Every command runs under `timeout`, so a regression that blocks on a FIFO fails
// instead of hanging the suite.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/e2e/e2e_util.h"

namespace {

namespace fs = std::filesystem;
using sb::e2e::mpirun;
using sb::e2e::slurp;

fs::path scratch() { return sb::e2e::scratch("robust-files"); }

const std::string kConfig = std::string(SCALEBENCH_SOURCE_DIR) + "/configs/ci-small.yaml";
const std::string kTrain = "train --config " + kConfig + " --backend cpu --steps 2 --warmup 0";

sb::e2e::Result run(const std::string& args, int np = 1) {
    return sb::e2e::run_shell("timeout 120 " + (np > 1 ? mpirun(np) : "") + SCALEBENCH_BINARY + " " + args,
                              scratch() / "run");
}

// Every line of `path` is a JSON object (no torn record); the records in order.
std::vector<nlohmann::json> whole_records(const fs::path& path) {
    const std::string text = slurp(path);
    EXPECT_TRUE(text.empty() || text.back() == '\n') << path << " ends mid-line:\n" << text;
    std::vector<nlohmann::json> records;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        const nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
        EXPECT_TRUE(r.is_object()) << path << ": a line that is not a whole record: " << line;
        records.push_back(r);
    }
    return records;
}

// A 64 KiB tmpfs mounted for one test and removed after it; `mounted` is false (with the
// reason) where mounting is refused (no root, no CAP_SYS_ADMIN in a container).
struct SmallDisk {
    fs::path dir;
    bool mounted = false;
    std::string why;
    explicit SmallDisk(const std::string& name) : dir(scratch() / name) {
        fs::create_directories(dir);
        if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") == 0)
            mounted = true;
        else
            why = std::string("cannot mount a tmpfs here (") + std::strerror(errno) + "): needs root";
    }
    ~SmallDisk() {
        if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
        fs::remove_all(dir);
    }
    // Fills the disk with 4 KiB pages until no page is left.
    void fill() {
        std::ofstream filler(dir / "filler", std::ios::binary);
        const std::string page(4096, 'x');
        while (filler.write(page.data(), static_cast<std::streamsize>(page.size())) && filler.flush()) {
        }
    }
};

TEST(RobustFiles, ARecordThatDoesNotFitIsUndoneAndTheRunExitsOne) {
    SmallDisk disk("full-later");
    if (!disk.mounted) GTEST_SKIP() << disk.why;
    // A file whose last page has room for the start record (under 200 bytes) but not the
    // train record (about 2.8 KB): the write fails in the middle of the run.
    const fs::path out = disk.dir / "r.jsonl";
    const std::string first = nlohmann::json({{"subcommand", "note"}, {"pad", std::string(3000, 'p')}}).dump() + "\n";
    std::ofstream(out) << first;
    disk.fill();
    const auto r = run(kTrain + " --out " + out.string());
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find(out.string() + ": cannot write a record"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
    const std::vector<nlohmann::json> records = whole_records(out);
    ASSERT_GE(records.size(), 2u) << slurp(out);
    EXPECT_EQ(slurp(out).rfind(first, 0), 0u) << "the line before the run changed";
    EXPECT_EQ(records[1]["subcommand"], "start");
    for (const nlohmann::json& record : records) EXPECT_NE(record["subcommand"], "train") << record.dump();
    if (records.size() == 3) {  // the incomplete record fitted in what was left
        EXPECT_EQ(records[2]["subcommand"], "incomplete");
        EXPECT_NE(records[2]["error"].get<std::string>().find("cannot write a record"), std::string::npos);
    }
}

// A full disk is found by the output-path check, before any work: exit 2 naming the flag and the
// path, nothing printed, no file or folder made; for the records of every command and for the
// doctor's whole-file outputs alike.
TEST(RobustFiles, ADiskFullFromTheStartIsRefusedBeforeAnyWork) {
    SmallDisk disk("full-now");
    if (!disk.mounted) GTEST_SKIP() << disk.why;
    disk.fill();
    const fs::path out = disk.dir / "new" / "deeper" / "r.jsonl";
    for (const std::string& command :
         {kTrain, std::string("comm --backend mpi -b 8 -e 1K"), std::string("project --hardware a100-sxm4-40gb --gpus 1,2"),
          "compare --hardware a100-sxm4-40gb,h100-sxm --config " + kConfig}) {
        const auto r = run(command + " --out " + out.string());
        EXPECT_EQ(r.code, 2) << command << "\n" << r.err;
        EXPECT_NE(r.err.find("--out " + out.string() + ": the file system it is on is full"), std::string::npos) << r.err;
        EXPECT_TRUE(r.out.empty()) << command << " printed before the refusal:\n" << r.out;
        EXPECT_FALSE(fs::exists(disk.dir / "new")) << command << " left a folder behind";
    }
    const fs::path report = disk.dir / "rep.md";
    const auto r = run("doctor --from-snapshot " + std::string(SCALEBENCH_SOURCE_DIR) +
                       "/tests/fixtures/doctor/slot-x8.json --report " + report.string());
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("--report " + report.string() + ": the file system it is on is full"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(report));
}

// Where the disk fills after the check (here: a file whose last page has a little room), the
// projected records go in as one append or not at all, before any line is printed: the file is
// as it was and no table half printed. A report written whole that does not fit is removed.
TEST(RobustFiles, ProjectedRecordsThatDoNotFitLeaveTheFileAsItWasAndAReportThatDoesNotFitIsRemoved) {
    SmallDisk disk("full-project");
    if (!disk.mounted) GTEST_SKIP() << disk.why;
    const fs::path out = disk.dir / "p.jsonl";
    const std::string first = "{\"subcommand\":\"note\"}\n";
    std::ofstream(out) << first;
    disk.fill();
    for (const std::string& command : {std::string("project --hardware a100-sxm4-40gb --gpus 1,2"),
                                       "compare --hardware a100-sxm4-40gb,h100-sxm --config " + kConfig}) {
        const auto r = run(command + " --out " + out.string());
        EXPECT_EQ(r.code, 1) << command << "\n" << r.err;
        EXPECT_NE(r.err.find(out.string() + ": cannot write a record"), std::string::npos) << r.err;
        EXPECT_TRUE(r.out.empty()) << command << " printed a table it could not record:\n" << r.out;
        EXPECT_EQ(slurp(out), first);
    }
    fs::resize_file(disk.dir / "filler", fs::file_size(disk.dir / "filler") - 4096);  // one page free: less than the report
    const fs::path report = disk.dir / "rep.md";
    const auto r = run("doctor --from-snapshot " + std::string(SCALEBENCH_SOURCE_DIR) +
                       "/tests/fixtures/doctor/slot-x8.json --report " + report.string());
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find(report.string() + ": cannot write"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("the partial file is removed"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(report)) << "a partial report was left";
}

TEST(RobustFiles, AnOutputThatIsAnInputIsRefused) {
    const fs::path config = scratch() / "input.yaml", link = scratch() / "link.yaml", hard = scratch() / "hard.yaml";
    fs::remove(config);
    fs::remove(link);
    fs::remove(hard);
    fs::copy_file(kConfig, config);
    fs::create_symlink(config, link);
    fs::create_hard_link(config, hard);
    const std::string before = slurp(config);
    for (const fs::path& out : {config, link, hard}) {
        const auto r = run("train --config " + config.string() + " --backend cpu --out " + out.string());
        EXPECT_EQ(r.code, 2) << r.err;
        EXPECT_EQ(r.err, "scalebench: error: --out " + out.string() + ": is the config file " + config.string() +
                             "; results appended to it would break it\n");
        EXPECT_TRUE(r.out.empty()) << r.out;
    }
    const fs::path profile = scratch() / "profile.yaml";
    fs::remove(profile);
    fs::copy_file(std::string(SCALEBENCH_SOURCE_DIR) + "/configs/hardware/a100-sxm4-40gb.yaml", profile);
    const auto r = run("project --hardware " + profile.string() + " --out " + profile.string());
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("--out " + profile.string() + ": is the hardware profile"), std::string::npos) << r.err;
    EXPECT_EQ(slurp(config), before);
    EXPECT_EQ(slurp(profile), slurp(std::string(SCALEBENCH_SOURCE_DIR) + "/configs/hardware/a100-sxm4-40gb.yaml"));
}

TEST(RobustFiles, AnOutputThatIsASpecialFileIsRefusedUpFront) {
    const fs::path fifo = scratch() / "out.fifo";
    fs::remove(fifo);
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
    for (const std::string& out : {fifo.string(), std::string("/dev/full"), std::string("/dev/null")}) {
        for (const std::string& command :
             {kTrain, std::string("comm --backend mpi -b 8 -e 1K"), std::string("project --hardware a100-sxm4-40gb"),
              "stress --config " + kConfig + " --backend cpu --duration 10m --interval 1s"}) {
            const auto r = run(command + " --out " + out, 2);
            EXPECT_EQ(r.code, 2) << command << " --out " << out << "\n" << r.err;
            EXPECT_NE(r.err.find("--out " + out + ": is a "), std::string::npos) << r.err;
            EXPECT_NE(r.err.find(", not a regular file"), std::string::npos) << r.err;
            EXPECT_TRUE(r.out.empty()) << command << " did work first:\n" << r.out;
        }
    }
    const auto r = run(kTrain + " --out " + (scratch() / "ok.jsonl").string() + " --profile-ops " + fifo.string());
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("--profile-ops " + fifo.string() + ": is a FIFO"), std::string::npos) << r.err;
}

TEST(RobustFiles, AnOutputPathWithAControlCharacterIsRefused) {
    for (const std::string& name : {std::string("a\nb.jsonl"), std::string("a\tb.jsonl"), std::string("a\x1b[2Jb.jsonl")}) {
        const fs::path out = scratch() / name;
        const auto r = run(kTrain + " --out '" + out.string() + "'");
        EXPECT_EQ(r.code, 2) << r.err;
        EXPECT_NE(r.err.find("the path holds a control character"), std::string::npos) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "not one line:\n" << r.err;
        EXPECT_FALSE(fs::exists(out));
    }
}

TEST(RobustFiles, ARefusedRunLeavesNoFileOrFolder) {
    const fs::path top = scratch() / "refused";
    fs::remove_all(top);
    const std::string out = (top / "deeper" / "r.jsonl").string();
    // Refused by a flag, before the output is checked, and by the memory check after it.
    const fs::path huge = scratch() / "huge.yaml";
    std::ofstream(huge) << "mlp:\n  input_dim: 1000000\n  hidden: [1000000, 1000000]\n";
    for (const std::string& args : {kTrain + " --batch-size 100000000", "train --backend cpu --config " + huge.string()}) {
        const auto r = run(args + " --out " + out, 2);
        EXPECT_EQ(r.code, 2) << r.err;
        EXPECT_FALSE(fs::exists(top)) << args << " left " << top;
    }
}

TEST(RobustFiles, InputsThatAreNotRegularFilesAreRefusedBeforeTheyAreRead) {
    const fs::path fifo = scratch() / "in.fifo";
    fs::remove(fifo);
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
    const std::string out = (scratch() / "none.jsonl").string();
    fs::remove(out);
    struct Case {
        std::string args, want;
        int np;  // train and stress read their configs on rank 0 for every rank; report and project run on one
    };
    for (const std::string& input : {fifo.string(), std::string("/dev/zero")}) {
        const std::string kind = input == "/dev/zero" ? "a character device" : "a FIFO";
        for (const Case& c : std::vector<Case>{
                 {"train --backend cpu --config " + input + " --out " + out, "config file", 2},
                 {"stress --backend cpu --config " + input + " --duration 1m --out " + out, "config file", 2},
                 {"report " + input, "results file", 1},
                 {"project --hardware " + input, "hardware profile", 1},
                 {"project --hardware a100-sxm4-40gb --config " + input, "config file", 1},
                 {"project --hardware a100-sxm4-40gb --calibrate " + input, "results file", 1}}) {
            const auto r = run(c.args, c.np);
            EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
            // One line, printed once (mpirun may add its own lines after it).
            const std::string want = input + ": cannot read " + c.want + ": it is " + kind + ", not a regular file\n";
            EXPECT_EQ(r.err.rfind("scalebench: error", 0), 0u) << r.err;
            EXPECT_EQ(r.err.find('\n'), r.err.find(want) + want.size() - 1) << c.args << "\n" << r.err;
            EXPECT_EQ(r.err.find("scalebench:", 1), std::string::npos) << c.args << " said it twice:\n" << r.err;
        }
    }
    EXPECT_FALSE(fs::exists(out));
}

TEST(RobustFiles, AnOversizedConfigIsRefusedBeforeItIsParsed) {
    const fs::path big = scratch() / "big.yaml";
    {
        std::ofstream yaml(big);
        yaml << "scaling:\n";
        for (int i = 0; i < 2'000'000; ++i) yaml << "- 1\n";
    }
    const auto start = std::chrono::steady_clock::now();
    const auto r = run("train --backend cpu --config " + big.string(), 2);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(r.code, 2) << r.err;
    const std::string want = "scalebench: error: " + big.string() +
                             ": cannot read config file: it is 8000009 bytes, more than the 1048576 bytes a config "
                             "file may have\n";
    EXPECT_EQ(r.err.substr(0, want.size()), want);
    EXPECT_EQ(r.err.find("scalebench:", 1), std::string::npos) << "said more than once:\n" << r.err;
    EXPECT_LT(seconds, 30) << "the refusal is not up front";
    fs::remove(big);
}

TEST(RobustFiles, AReportThatCannotBePrintedExitsOne) {
    const fs::path records = scratch() / "report.jsonl";
    fs::remove(records);
    ASSERT_EQ(run(kTrain + " --out " + records.string()).code, 0);
    const auto r = sb::e2e::run_shell("{ " + std::string(SCALEBENCH_BINARY) + " report " + records.string() + " >/dev/full; }",
                                      scratch() / "full");
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find("cannot write the standard output: No space left on device"), std::string::npos) << r.err;
}

// train's table is part of its result: one that could not be printed whole ends the run
// incomplete with exit 1, never an end record that says it completed.
TEST(RobustFiles, ATrainThatCannotPrintItsTableEndsIncomplete) {
    const fs::path records = scratch() / "train-full.jsonl";
    fs::remove(records);
    const auto r = sb::e2e::run_shell("{ " + std::string(SCALEBENCH_BINARY) + " " + kTrain + " --out " +
                                          records.string() + " >/dev/full; }",
                                      scratch() / "train-full");
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find("cannot write the standard output: No space left on device"), std::string::npos) << r.err;
    const std::vector<nlohmann::json> written = whole_records(records);
    ASSERT_FALSE(written.empty());
    EXPECT_EQ(written.back().value("subcommand", ""), "incomplete") << written.back().dump();
}

// A long command stops at the first block it cannot print: comm's first block is the table's
// heading, printed before any size is measured, so the run ends with exit 1, one line and its
// incomplete record, and no size is measured for a table that cannot be shown.
TEST(RobustFiles, ACommThatCannotPrintItsTableStopsAndExitsOne) {
    const fs::path records = scratch() / "comm-full.jsonl";
    fs::remove(records);
    const auto r = sb::e2e::run_shell("{ timeout 120 " + std::string(SCALEBENCH_BINARY) +
                                          " comm --backend mpi -b 8 -e 8M -f 2 -n 2 --out " + records.string() +
                                          " >/dev/full; }",
                                      scratch() / "comm-full");
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find("cannot write the standard output: No space left on device"), std::string::npos) << r.err;
    const std::vector<nlohmann::json> written = whole_records(records);
    size_t sizes = 0;
    for (const nlohmann::json& record : written) sizes += record.value("subcommand", "") == "comm_size";
    EXPECT_EQ(sizes, 0u) << "the sweep went on after its table could not be printed";
    ASSERT_FALSE(written.empty());
    EXPECT_EQ(written.back().value("subcommand", ""), "incomplete") << written.back().dump();
}

// gemm's --out is checked before any work, as train's: here a folder, refused before the
// command looks for a GPU (so this holds on a CUDA build without one).
TEST(RobustFiles, GemmOutputIsCheckedBeforeAnyWork) {
    const fs::path folder = scratch() / "gemm-out-folder";
    fs::create_directories(folder);
    const auto r = run("gemm --size 64 --out " + folder.string(), 2);
    if (r.err.find("unknown subcommand 'gemm'") != std::string::npos)
        GTEST_SKIP() << "this scalebench is built without CUDA, so it has no gemm subcommand";
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("scalebench: error: --out " + folder.string() + ": is a folder, not a results file"),
              std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("gemm:"), std::string::npos) << "work began before the refusal:\n" << r.out;
}

}  // namespace
