// The one number parser (base/numbers.h) and everything that reads through it: YAML configs
// and profiles, every numeric flag (src/core/flag_reading.h), each part of a value written in
// parts (stress's durations and RANK@STEP, the test hooks) and environment variables. Each
// example of a number read three ways is here: "064" is 64 from a flag and from YAML alike,
// 2147483648 gets the bound and its reason, 1e10 seconds is refused naming the variable, and
// a profile number outside its key's range is refused with the key's reason.
#include <climits>
#include <functional>
#include <tuple>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/errors.h"
#include "base/numbers.h"
#include "collectives/deadline.h"
#include "src/commands/comm_command.h"
#include "src/commands/project_command.h"
#include "src/commands/stress.h"
#include "src/commands/trainer.h"
#include "src/core/config.h"
#include "src/core/files.h"
#include "src/core/flag_reading.h"
#include "src/doctor/doctor_command.h"
#include "src/projection/hardware.h"
#include "tests/cli_parse.h"

namespace sb {
namespace {

TEST(OneNumberParser, ReadsDecimalOnlyAndNamesTheBoundWithItsReason) {
    int64_t v = 0;
    EXPECT_EQ(parse_integer("064", {0, 100}, v), "");
    EXPECT_EQ(v, 64);
    EXPECT_EQ(parse_integer("010", {0, 100}, v), "");
    EXPECT_EQ(v, 10);
    EXPECT_EQ(parse_integer("0x40", {0, 100}, v), "expected an integer, got '0x40'");
    EXPECT_EQ(parse_integer(" 5", {0, 100}, v), "expected an integer, got ' 5'");
    EXPECT_EQ(parse_integer("2147483648", {0, 2147483647, "why"}, v), "must be <= 2147483647, got 2147483648 (why)");
    EXPECT_EQ(parse_integer("99999999999999999999", {0, 7, "why"}, v), "must be <= 7, got 99999999999999999999 (why)");
    double d = 0;
    EXPECT_EQ(parse_real("1e3", {0, false, kNoUpperBound, false}, d), "");
    EXPECT_EQ(d, 1000);
    EXPECT_EQ(parse_real("inf", {0, false, kNoUpperBound, false}, d), "expected a number, got 'inf'");
    EXPECT_EQ(parse_real("nan", {0, false, kNoUpperBound, false}, d), "expected a number, got 'nan'");
    EXPECT_EQ(parse_real("1e999", {0, false, kNoUpperBound, false}, d), "1e999 is too large to be a number");
}

// A train-like command with the flags as main.cpp declares them, read by the one parser.
struct Parsed {
    std::optional<int> steps, batch;
    std::optional<double> bucket_mb;
    std::vector<int> scaling;
    int other = 0;
};

std::string parse_flags(std::vector<std::string> args, Parsed& p) {
    CLI::App app{"t"};
    CLI::App* train = app.add_subcommand("train");
    train->add_option("--steps", p.steps);
    train->add_option("--batch-size", p.batch);
    train->add_option("--bucket-mb", p.bucket_mb);
    train->add_option("--scaling", p.scaling)->delimiter(',');
    train->add_option("--other", p.other);
    args.insert(args.begin(), "train");
    return test::parse_error(app, args);
}

// comm's launch counts, the doctor's seconds and compare's cost terms, declared as their
// subcommands declare them, are read in their entries of the flag table (no bound of their own
// in the commands; gemm's, CUDA builds only, in tests/gpu/test_gemm_bench.cpp).
TEST(OneNumberParser, SubcommandFlagsTakeTheirBoundFromTheFlagTable) {
    auto parse = [](const std::vector<std::string>& given) -> std::string {
        CLI::App app{"t"};
        CommOptions comm;
        add_comm_options(*app.add_subcommand("comm"), comm);
        DoctorOptions doctor;
        add_doctor_options(*app.add_subcommand("doctor"), doctor);
        ProjectOptions compare;
        add_compare_options(*app.add_subcommand("compare"), compare);
        return test::parse_error(app, given);
    };
    EXPECT_EQ(parse({"comm", "-n", "1000000", "-w", "0", "-c", "1000000"}), "");
    const std::pair<std::vector<std::string>, std::string> refused[] = {
        {{"comm", "-n", "0"}, "must be >= 1, got 0 (timed launches per size: more would run for days)"},
        {{"comm", "-n", "1000001"}, "must be <= 1000000, got 1000001 (timed launches per size"},
        {{"comm", "-w", "-1"}, "must be >= 0, got -1 (warm-up launches per size"},
        {{"comm", "-c", "1000001"}, "must be <= 1000000, got 1000001 (checked runs per measurement"},
        {{"doctor", "--deadline", "0"}, "must be in (0, 604800], got 0 (seconds: past a week"},
        {{"doctor", "--deadline", "1e10"}, "must be in (0, 604800], got 1e10"},
        {{"doctor", "--load-seconds", "-1"}, "must be in [0, 86400], got -1 (seconds of GEMMs under load"},
        {{"doctor", "--train-steps", "0"}, "must be >= 1, got 0"},
        {{"compare", "--years", "0"}, "must be in (0, 100], got 0 (years the node's power is paid for"},
        {{"compare", "--usd-per-kwh", "100.5"}, "must be in [0, 100], got 100.5 (dollars per kWh"},
    };
    for (const auto& [args, says] : refused) {
        const std::string e = parse(args);
        EXPECT_NE(e.find(says), std::string::npos) << args[1] << " " << args[2] << ": " << e;
    }
    EXPECT_EQ(integer_flag_range("train", "--iters").hi, INT_MAX);  // comm's entry is comm's alone
}

// A value a command reads out of a text of its own takes each part's bound from that part's
// entry of the flag table, and its refusal names the flag or variable, the value, the part and
// the entry's reason on one line.
std::string refusal(const std::function<void()>& read) {
    try {
        read();
    } catch (const UserError& e) {
        return e.what();
    }
    return "<accepted>";
}

TEST(OneNumberParser, EachPartOfAValueWrittenInPartsTakesItsBoundFromTheFlagTable) {
    for (const char* entry : {"stress --plant-bit-flip RANK", "stress --plant-bit-flip STEP",
                              "SCALEBENCH_TEST_DELAY_RANK RANK", "SCALEBENCH_TEST_COMM_DELAY RANK",
                              "SCALEBENCH_TEST_CUDA_FAULT RANK", "SCALEBENCH_TEST_CUDA_FAULT STEP"})
        EXPECT_STRNE(integer_entry(entry).why, "") << entry;
    for (const char* entry : {"stress --duration", "stress --interval", "SCALEBENCH_TEST_DELAY_RANK MS",
                              "SCALEBENCH_TEST_COMM_DELAY MS"})
        EXPECT_STRNE(real_entry(entry).why, "") << entry;

    // stress --plant-bit-flip RANK@STEP: each side at and past its entry's bounds.
    const IntRange rank = integer_entry("stress --plant-bit-flip RANK");
    const IntRange step = integer_entry("stress --plant-bit-flip STEP");
    const std::string last = fmt::format("{}@{}", rank.hi, step.hi);
    EXPECT_EQ(parse_planted_flip(last).rank, rank.hi);
    EXPECT_EQ(parse_planted_flip(last).step, step.hi);
    EXPECT_EQ(parse_planted_flip("007@010").step, 10);  // decimal, as every number typed
    for (const auto& [flip, part, value, range] :
         {std::tuple{fmt::format("{}@5", rank.hi + 1), "RANK", rank.hi + 1, rank},
          std::tuple{std::string("0@0"), "STEP", int64_t{0}, step},
          std::tuple{fmt::format("0@{}", step.hi + 1), "STEP", step.hi + 1, step}}) {
        const std::string text = flip;  // a lambda (C++17) captures no structured binding
        EXPECT_EQ(refusal([&] { parse_planted_flip(text); }),
                  fmt::format("--plant-bit-flip '{}': {}: {}", text, part, int_range_problem(value, range)));
    }
    EXPECT_EQ(refusal([] { parse_planted_flip("1@2.5"); }), "--plant-bit-flip '1@2.5': STEP: expected an integer, got '2.5'");
    EXPECT_EQ(refusal([] { parse_planted_flip("1-250"); }), "--plant-bit-flip '1-250': expected RANK@STEP, e.g. 1@250");

    // stress --duration and --interval: each number of a unit, and the whole, in the entry.
    const RealRange seconds = real_entry("stress --duration");
    EXPECT_DOUBLE_EQ(parse_duration("366d", "--duration"), seconds.hi);
    EXPECT_DOUBLE_EQ(parse_duration("1h0m", "--interval"), 3600);  // a unit's number may be 0
    EXPECT_EQ(refusal([] { parse_duration("400d", "--duration"); }),
              "--duration '400d': " + real_range_problem(400 * 86400.0, number_text(400 * 86400.0), seconds));
    EXPECT_EQ(refusal([] { parse_duration("0m", "--interval"); }),
              "--interval '0m': " + real_range_problem(0, number_text(0.0), real_entry("stress --interval")));
    EXPECT_EQ(refusal([] { parse_duration("99999999999999999999s", "--duration"); }),
              "--duration '99999999999999999999s': " +
                  real_range_problem(1e20, "99999999999999999999", {0, false, seconds.hi, false, seconds.why}));

    // The test hooks' RANK:NUMBER, each hook's parts in its own entries.
    for (const auto& [variable, part] : {std::pair{"SCALEBENCH_TEST_DELAY_RANK", "MS"},
                                         std::pair{"SCALEBENCH_TEST_COMM_DELAY", "MS"},
                                         std::pair{"SCALEBENCH_TEST_CUDA_FAULT", "STEP"}}) {
        const std::string v = variable, number_part = part;
        const IntRange hook_rank = integer_entry(v + " RANK");
        const std::string past_rank = fmt::format("{}:1", hook_rank.hi + 1);
        EXPECT_EQ(refusal([&] { parse_test_hook(v, number_part, past_rank.c_str()); }),
                  fmt::format("{}='{}': RANK: {}", v, past_rank, int_range_problem(hook_rank.hi + 1, hook_rank)));
        EXPECT_EQ(parse_test_hook(v, number_part, fmt::format("{}:1", hook_rank.hi).c_str()).rank, hook_rank.hi);
    }
    const RealRange ms = real_entry("SCALEBENCH_TEST_DELAY_RANK MS");
    EXPECT_DOUBLE_EQ(parse_test_hook("SCALEBENCH_TEST_DELAY_RANK", "MS", "0:60000").value, ms.hi);
    EXPECT_EQ(refusal([] { parse_test_hook("SCALEBENCH_TEST_COMM_DELAY", "MS", "0:60000.5"); }),
              "SCALEBENCH_TEST_COMM_DELAY='0:60000.5': MS: " +
                  real_range_problem(60000.5, "60000.5", real_entry("SCALEBENCH_TEST_COMM_DELAY MS")));
    // A fault step is a whole number (a fractional one would never fire) in its entry.
    EXPECT_EQ(refusal([] { parse_test_hook("SCALEBENCH_TEST_CUDA_FAULT", "STEP", "0:2.5"); }),
              "SCALEBENCH_TEST_CUDA_FAULT='0:2.5': STEP: expected an integer, got '2.5'");
    EXPECT_EQ(refusal([] { parse_test_hook("SCALEBENCH_TEST_CUDA_FAULT", "STEP", "0:-1"); }),
              "SCALEBENCH_TEST_CUDA_FAULT='0:-1': STEP: " +
                  int_range_problem(-1, integer_entry("SCALEBENCH_TEST_CUDA_FAULT STEP")));
}

TEST(OneNumberParser, FlagsReadAsYamlDoes) {
    Parsed p;
    ASSERT_EQ(parse_flags({"--batch-size", "064", "--steps", "010", "--scaling", "01,02,08", "--other", "-07"}, p), "");
    EXPECT_EQ(*p.batch, 64);
    EXPECT_EQ(*p.steps, 10);
    EXPECT_EQ(p.scaling, (std::vector<int>{1, 2, 8}));
    EXPECT_EQ(p.other, -7);
    const TrainConfig yaml = parse_config("batch_size: 064\nsteps: 010\n", "t.yaml");
    EXPECT_EQ(yaml.batch_size, *p.batch);
    EXPECT_EQ(yaml.steps, *p.steps);
}

TEST(OneNumberParser, AFlagPastItsTypeOrKeyGetsTheBoundNotCouldNotConvert) {
    Parsed p;
    std::string e = parse_flags({"--steps", "2147483648"}, p);
    EXPECT_NE(e.find("--steps"), std::string::npos) << e;
    EXPECT_NE(e.find("must be <= 1000000000, got 2147483648 (steps plus warmup must fit a 32-bit int)"), std::string::npos) << e;
    e = parse_flags({"--other", "2147483648"}, p);
    EXPECT_NE(e.find("must be <= 2147483647, got 2147483648"), std::string::npos) << e;
    e = parse_flags({"--bucket-mb", "nan"}, p);
    EXPECT_NE(e.find("expected a number, got 'nan'"), std::string::npos) << e;
    e = parse_flags({"--scaling", "1,0x2"}, p);
    EXPECT_NE(e.find("expected an integer, got '0x2'"), std::string::npos) << e;
    // YAML names the same bound and reason.
    try {
        parse_config("steps: 2147483648\n", "t.yaml");
        ADD_FAILURE() << "accepted";
    } catch (const UserError& err) {
        EXPECT_STREQ(err.what(),
                     "t.yaml:1:8: key 'steps': must be <= 1000000000, got 2147483648 (steps plus warmup must fit a 32-bit int)");
    }
}

TEST(OneNumberParser, ASecondsVariablePastItsBoundIsRefusedNamingTheVariable) {
    for (const char* text : {"1e10", "010x", "-5", "inf"}) {
        setenv("SCALEBENCH_COLLECTIVE_TIMEOUT_S", text, 1);
        set_collective_timeout_s(-1);  // read the variable again
        try {
            collective_timeout_s();
            ADD_FAILURE() << text << " accepted";
        } catch (const UserError& e) {
            EXPECT_EQ(std::string(e.what()).rfind(std::string("SCALEBENCH_COLLECTIVE_TIMEOUT_S='") + text + "'", 0), 0u)
                << e.what();
        }
    }
    setenv("SCALEBENCH_COLLECTIVE_TIMEOUT_S", "060", 1);
    set_collective_timeout_s(-1);
    EXPECT_EQ(collective_timeout_s(), 60);
    unsetenv("SCALEBENCH_COLLECTIVE_TIMEOUT_S");
    set_collective_timeout_s(-1);
}

std::string profile_error(const std::string& from, const std::string& to) {
    std::string text = read_text_file(std::string(SCALEBENCH_SOURCE_DIR) + "/configs/hardware/h100-sxm.yaml", "profile");
    const size_t at = text.find(from);
    if (at == std::string::npos) return "<fixture lacks " + from + ">";
    text.replace(at, from.size(), to);
    try {
        parse_hardware_profile(text, "p.yaml");
    } catch (const UserError& e) {
        return e.what();
    }
    return "<accepted>";
}

TEST(OneNumberParser, EachProfileNumberHasItsOwnRangeAndReason) {
    std::string e = profile_error("kernel_gap_us: {value: 1.0", "kernel_gap_us: {value: 1e9");
    EXPECT_NE(e.find("key 'gpu.kernel_gap_us.value': must be in [0, 1000], got 1e9 (the gap between two kernels"),
              std::string::npos) << e;
    const std::string text = read_text_file(std::string(SCALEBENCH_SOURCE_DIR) + "/configs/hardware/h100-sxm.yaml", "p");
    const size_t at = text.find("price_usd: {value: ");
    ASSERT_NE(at, std::string::npos);
    const size_t end = text.find(',', at);
    e = profile_error(text.substr(at, end - at), "price_usd: {value: 1e-6");
    EXPECT_NE(e.find("key 'gpu.price_usd.value': must be in [50, 1000000], got 1e-6 (a GPU costs $50 to $1M)"),
              std::string::npos) << e;
    e = profile_error("sm_count: {value: 132", "sm_count: {value: 13.5");
    EXPECT_NE(e.find("expected a whole number"), std::string::npos) << e;
}

}  // namespace
}  // namespace sb
