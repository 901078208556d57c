// The README's commands leave the checkout as they found it. In a fresh clone of this commit,
// with the binary under test where the README expects it (build/, which git ignores), the quick
// start (README command 1's run step: launch/setup.sh --run-only) and every subcommand left to
// its default output write under runs/ and nothing that `git status` shows. .ci/run holds the
// whole of both README commands (build and full suite included) to the same rule on CI.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "src/core/results.h"
#include "tests/e2e/e2e_util.h"

namespace {

namespace fs = std::filesystem;
using sb::e2e::mpirun;
using sb::e2e::Result;
using sb::e2e::run_shell;

const std::string kSource = SCALEBENCH_SOURCE_DIR;

std::string shell_word(const fs::path& p) { return "'" + p.string() + "'"; }

// A clone of the source tree's HEAD in a folder of its own, with build/scalebench linking to the
// binary under test. Empty when the source is not a git checkout (then the test is skipped).
fs::path fresh_clone(const std::string& name) {
    const fs::path dir = sb::e2e::scratch("clean-checkout") / name;
    fs::remove_all(dir);
    const Result head = run_shell("git -C " + shell_word(kSource) + " rev-parse HEAD", dir.string() + "-log");
    if (head.code != 0) return {};
    const std::string commit = head.out.substr(0, head.out.find('\n'));
    const Result clone = run_shell("git clone -q --shared --no-checkout " + shell_word(kSource) + " " + shell_word(dir) +
                                       " && git -C " + shell_word(dir) + " checkout -q --detach " + commit,
                                   dir.string() + "-log");
    EXPECT_EQ(clone.code, 0) << clone.err;
    fs::create_directories(dir / "build");
    fs::create_symlink(SCALEBENCH_BINARY, dir / "build" / "scalebench");
    return dir;
}

// What `git status` shows in the clone: changed tracked files and untracked files git does not ignore.
std::string git_status(const fs::path& clone) {
    const Result r = run_shell("git -C " + shell_word(clone) + " status --porcelain --untracked-files=all",
                               clone.string() + "-log");
    EXPECT_EQ(r.code, 0) << r.err;
    return r.out;
}

// Runs `command` in the clone, as a user in the checkout would.
Result run_in(const fs::path& clone, const std::string& command) {
    return run_shell("cd " + shell_word(clone) + " && " + command, clone.string() + "-log");
}

#define SKIP_WITHOUT_CLONE(clone) \
    if ((clone).empty()) GTEST_SKIP() << kSource << " is not a git checkout (or git is missing): nothing to keep clean"

// A clone is a whole checkout: kept to look into when its test failed, else removed.
void remove_unless_failed(const fs::path& clone) {
    if (!::testing::Test::HasFailure()) fs::remove_all(clone);
}

TEST(CleanCheckout, QuickStartWritesRunsTrainJsonlAndLeavesGitStatusClean) {
    const fs::path clone = fresh_clone("quick-start");
    SKIP_WITHOUT_CLONE(clone);
    ASSERT_EQ(git_status(clone), "") << "the fresh clone is not clean";

    const Result r = run_in(clone, "launch/setup.sh --run-only");
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_EQ(git_status(clone), "") << "README command 1's run left files that git shows";

    // The run really ran and wrote where the README says: one record per world size, 1 and 2.
    const auto records = sb::read_records((clone / "runs" / "train.jsonl").string()).records;
    std::set<int> sizes;
    for (const auto& rec : records) sizes.insert(rec.at("world_size").get<int>());
    EXPECT_EQ(sizes, (std::set<int>{1, 2})) << r.out;
    remove_unless_failed(clone);
}

TEST(CleanCheckout, EverySubcommandsDefaultOutputGoesToRunsAndLeavesGitStatusClean) {
    const fs::path clone = fresh_clone("defaults");
    SKIP_WITHOUT_CLONE(clone);
    struct Case {
        std::string command, writes;  // writes: the file the default output names ("" writes none)
    };
    const std::vector<Case> cases = {
        {"build/scalebench --backend cpu --steps 2 --warmup 1", "runs/train.jsonl"},
        {"build/scalebench train --config configs/ci-small.yaml --backend cpu --steps 2 --warmup 1",
         "runs/ci-small.jsonl"},
        {mpirun(2) + "build/scalebench comm --backend mpi -b 8 -e 1K -f 4 -n 2", "runs/comm.jsonl"},
        {"build/scalebench stress --config configs/ci-small.yaml --backend cpu --duration 2s --interval 1s",
         "runs/stress.jsonl"},
        {"build/scalebench project --hardware a100-sxm4-40gb --config configs/ci-small.yaml", "runs/projected.jsonl"},
        {"build/scalebench compare --hardware a100-sxm4-40gb,rtx4090-48gb-pcie4 --config configs/ci-small.yaml", ""},
        {"build/scalebench report runs/ci-small.jsonl", ""},
    };
    for (const auto& c : cases) {
        const Result r = run_in(clone, c.command);
        ASSERT_EQ(r.code, 0) << c.command << "\n" << r.out << r.err;
        if (!c.writes.empty()) EXPECT_TRUE(fs::is_regular_file(clone / c.writes)) << c.command << " wrote no " << c.writes;
        EXPECT_EQ(git_status(clone), "") << c.command << " left files that git shows";
    }
    remove_unless_failed(clone);
}

TEST(CleanCheckout, ThePlotsDefaultFolderIsRunsPlots) {
    if (std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") != 0)
        GTEST_SKIP() << "/usr/bin/python3 cannot import matplotlib";
    const fs::path clone = fresh_clone("plots");
    SKIP_WITHOUT_CLONE(clone);
    const Result train = run_in(clone, "build/scalebench --backend cpu --steps 2 --warmup 1");
    ASSERT_EQ(train.code, 0) << train.err;
    const Result plot = run_in(clone, "/usr/bin/python3 results/plot_scaling.py runs/train.jsonl --formats png");
    ASSERT_EQ(plot.code, 0) << plot.out << plot.err;
    EXPECT_TRUE(fs::is_regular_file(clone / "runs" / "plots" / "efficiency.png")) << plot.out;
    EXPECT_EQ(git_status(clone), "") << "the plot script left files that git shows";
    remove_unless_failed(clone);
}

}  // namespace
