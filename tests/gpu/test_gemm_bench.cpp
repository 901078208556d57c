// `scalebench gemm`: the cases it runs (defaults, cross product, bad flags named), that its
// cuBLASLt product is the row-major C = A @ B it claims to time, and that a run writes
// records a reader can trust (positive times, TFLOP/s within the datasheet peak).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <unistd.h>

#include "base/errors.h"
#include "src/commands/gemm_bench.h"
#include "tests/cli_parse.h"
#include "src/system/gpu_info.h"
#include "src/system/gpu_peaks.h"
#include "src/core/results.h"

namespace sb {
namespace {

bool gpu_visible() {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define SKIP_WITHOUT_GPU() \
    if (!gpu_visible()) GTEST_SKIP() << "no CUDA device visible"

void expect_user_error_naming(const std::string& flag, const std::function<void()>& body) {
    try {
        body();
        ADD_FAILURE() << "expected a UserError naming " << flag;
    } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
}

// ---- cases (no GPU needed)

TEST(GemmCases, DefaultsAreHalfPrecisionAt8192AndFp32WithAndWithoutTf32At4096) {
    auto cases = gemm_cases(GemmOptions{});
    ASSERT_EQ(cases.size(), 4u);
    EXPECT_EQ(cases[0].dtype, "fp16");
    EXPECT_EQ(cases[1].dtype, "bf16");
    EXPECT_EQ(cases[2].dtype, "fp32");
    EXPECT_EQ(cases[3].dtype, "tf32");
    for (int i = 0; i < 2; ++i) EXPECT_EQ(cases[i].m, 8192);
    for (const auto& c : cases) {
        EXPECT_EQ(c.m, c.n);
        EXPECT_EQ(c.n, c.k);
    }
    EXPECT_EQ(cases[2].m, 4096);
    EXPECT_EQ(cases[3].m, 4096);
}

TEST(GemmCases, FlagsGiveTheCrossProductOfSizesAndDtypes) {
    GemmOptions o;
    o.sizes = {"256", "128x64x32"};
    o.dtypes = {"fp16", "tf32"};
    o.explicit_cases = true;
    auto cases = gemm_cases(o);
    ASSERT_EQ(cases.size(), 4u);
    EXPECT_EQ(cases[0].dtype, "fp16");
    EXPECT_EQ(cases[0].m, 256);
    EXPECT_EQ(cases[0].k, 256);
    EXPECT_EQ(cases[1].dtype, "fp16");
    EXPECT_EQ(cases[1].m, 128);
    EXPECT_EQ(cases[1].n, 64);
    EXPECT_EQ(cases[1].k, 32);
    EXPECT_EQ(cases[2].dtype, "tf32");
    EXPECT_EQ(cases[3].dtype, "tf32");
    EXPECT_EQ(cases[3].n, 64);
}

TEST(GemmCases, AMissingSideTakesItsDefault) {
    GemmOptions sizes_only;
    sizes_only.sizes = {"1024"};
    sizes_only.explicit_cases = true;
    EXPECT_EQ(gemm_cases(sizes_only).size(), 4u);  // all four dtypes
    GemmOptions dtype_only;
    dtype_only.dtypes = {"fp32"};
    dtype_only.explicit_cases = true;
    auto cases = gemm_cases(dtype_only);
    ASSERT_EQ(cases.size(), 1u);
    EXPECT_EQ(cases[0].m, 4096);
}

TEST(GemmCases, BadSizesAndDtypesNameTheFlag) {
    for (const char* bad : {"0", "abc", "8192x", "8192x8192", "1x2x3x4", "-5", "", "64x0x64", "2000000"})
        expect_user_error_naming("--size", [&] { parse_gemm_size(bad); });
    GemmOptions o;
    o.dtypes = {"fp8"};
    expect_user_error_naming("--dtype", [&] { gemm_cases(o); });
    GemmOptions bad_size;
    bad_size.sizes = {"8192x"};
    expect_user_error_naming("--size", [&] { run_gemm(bad_size, MPI_COMM_WORLD); });
    GemmOptions no_iters;
    no_iters.iters = 0;
    expect_user_error_naming("--iters", [&] { run_gemm(no_iters, MPI_COMM_WORLD); });
}

// --iters and --warmup take their bounds from the one flag table (src/core/flag_reading.cpp),
// on the command line and in options built in code alike; each side of --size its range there.
TEST(GemmCases, CountsAndSidesTakeTheirBoundsFromTheFlagTable) {
    auto parse = [](std::vector<std::string> args) {
        CLI::App app("scalebench");
        GemmOptions o;
        add_gemm_options(*app.add_subcommand("gemm"), o);
        args.insert(args.begin(), "gemm");
        return test::parse_error(app, args);
    };
    EXPECT_EQ(parse({"--iters", "1000000", "--warmup", "0"}), "");
    EXPECT_NE(parse({"--iters", "1000001"}).find("must be <= 1000000, got 1000001 (timed products per case"),
              std::string::npos);
    EXPECT_NE(parse({"--warmup", "1000001"}).find("must be <= 1000000, got 1000001 (untimed products per case"),
              std::string::npos);
    EXPECT_NE(parse({"--iters", "0"}).find("must be >= 1, got 0"), std::string::npos);
    GemmOptions in_code;
    in_code.warmup = 1000001;
    try {
        gemm_cases(in_code);
        ADD_FAILURE() << "accepted --warmup 1000001";
    } catch (const UserError& e) {
        EXPECT_STREQ(e.what(), "--warmup: must be <= 1000000, got 1000001 (untimed products per case: more would run for days)");
    }
    try {
        parse_gemm_size("2097152x8x8");
        ADD_FAILURE() << "accepted a side of 2^21";
    } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find("must be <= 1048576, got 2097152 (a GEMM side past 2^20"), std::string::npos)
            << e.what();
    }
}

TEST(GemmCases, ParsesShapes) {
    GemmCase c = parse_gemm_size("4096");
    EXPECT_EQ(c.m, 4096);
    EXPECT_EQ(c.n, 4096);
    EXPECT_EQ(c.k, 4096);
    c = parse_gemm_size("8x16X32");
    EXPECT_EQ(c.m, 8);
    EXPECT_EQ(c.n, 16);
    EXPECT_EQ(c.k, 32);
}

TEST(GemmCli, OptionsAreRepeatableCommaListsAndMarkTheCasesExplicit) {
    CLI::App app("scalebench");
    GemmOptions o;
    add_gemm_options(*app.add_subcommand("gemm", "GEMM throughput"), o);
    const char* argv[] = {"scalebench", "gemm", "--size", "1024,2048x1024x512", "--size", "64",
                          "--dtype", "bf16,tf32", "--iters", "3", "--iters", "7", "--warmup", "2"};
    app.parse(static_cast<int>(sizeof(argv) / sizeof(argv[0])), argv);
    EXPECT_EQ(o.sizes, (std::vector<std::string>{"1024", "2048x1024x512", "64"}));
    EXPECT_EQ(o.dtypes, (std::vector<std::string>{"bf16", "tf32"}));
    EXPECT_EQ(o.iters, 7);
    EXPECT_EQ(o.warmup, 2);
    EXPECT_TRUE(o.explicit_cases);
    EXPECT_EQ(o.out, "runs/gemm.jsonl");
    EXPECT_EQ(gemm_cases(o).size(), 6u);

    CLI::App plain("scalebench");
    GemmOptions d;
    add_gemm_options(*plain.add_subcommand("gemm", "GEMM throughput"), d);
    const char* argv2[] = {"scalebench", "gemm"};
    plain.parse(2, argv2);
    EXPECT_FALSE(d.explicit_cases);
    EXPECT_EQ(gemm_cases(d).size(), 4u);
}

// ---- the product (GPU)

// Quarter-integers in [-2, 2]: exact in bf16, fp16 and tf32, and every partial sum of the
// products is exact in fp32, so fp32/tf32 must match exactly and half types only lose
// the rounding of C to their own precision.
std::vector<float> exact_values(size_t count, unsigned seed) {
    std::vector<float> v(count);
    unsigned x = seed * 2654435761u + 12345u;
    for (auto& e : v) {
        x = x * 1664525u + 1013904223u;
        e = static_cast<float>(static_cast<int>((x >> 16) % 17) - 8) / 4.0f;
    }
    return v;
}

TEST(GemmProduct, IsRowMajorAtimesBInEveryDtype) {
    SKIP_WITHOUT_GPU();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    struct Shape {
        int64_t m, n, k;
    };
    for (Shape s : {Shape{96, 40, 72}, Shape{33, 17, 9}}) {
        for (const char* dtype : {"fp32", "tf32", "bf16", "fp16"}) {
            SCOPED_TRACE(::testing::Message() << dtype << " " << s.m << "x" << s.n << "x" << s.k);
            GemmCase c{s.m, s.n, s.k, dtype};
            auto a = exact_values(static_cast<size_t>(s.m * s.k), 1);
            auto b = exact_values(static_cast<size_t>(s.k * s.n), 2);
            std::vector<float> got = gemm_product(c, a, b);
            ASSERT_EQ(got.size(), static_cast<size_t>(s.m * s.n));
            const double rel = std::string(dtype) == "bf16" ? 1.0 / 256 : std::string(dtype) == "fp16" ? 1.0 / 1024 : 0;
            int bad = 0;
            for (int64_t i = 0; i < s.m; ++i)
                for (int64_t j = 0; j < s.n; ++j) {
                    double want = 0;
                    for (int64_t p = 0; p < s.k; ++p) want += double(a[i * s.k + p]) * double(b[p * s.n + j]);
                    double g = got[static_cast<size_t>(i * s.n + j)];
                    if (!(std::fabs(g - want) <= rel * std::fabs(want) + 1e-6) && bad++ < 5)
                        ADD_FAILURE() << "C[" << i << "][" << j << "] = " << g << ", want " << want;
                }
            EXPECT_EQ(bad, 0);
        }
    }
}

TEST(GemmTimingTest, TimesEveryProductAndRotatesBuffersThatFitInL2) {
    SKIP_WITHOUT_GPU();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    TelemetrySampler telemetry(0, 10);
    GemmTiming t = time_gemm(GemmCase{256, 256, 256, "fp16"}, 2, 5, &telemetry);
    ASSERT_EQ(t.times_ms.size(), 5u);
    for (double ms : t.times_ms) EXPECT_GT(ms, 0);
    EXPECT_LE(t.min_ms, t.median_ms);
    EXPECT_LE(t.median_ms, t.max_ms);
    EXPECT_GE(t.buffer_sets, 2);  // 256 KiB of operands is far below any L2 we run on
    EXPECT_EQ(t.workspace_bytes, size_t{32} << 20);
    ASSERT_TRUE(t.telemetry.is_object());
    if (t.telemetry["nvml"] == "ok") EXPECT_GE(t.telemetry["samples"].get<int>(), 2);  // first and last
    else EXPECT_TRUE(t.telemetry["nvml_error"].is_string());
}

// ---- a whole run (GPU, collective)

TEST(RunGemm, WritesOneValidRecordPerRankAndCase) {
    SKIP_WITHOUT_GPU();
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    GemmOptions o;
    o.sizes = {"512"};
    o.dtypes = {"bf16"};
    o.warmup = 1;
    o.iters = 3;
    o.explicit_cases = true;
    o.out = ::testing::TempDir() + "scalebench_gemm_test_" + std::to_string(::getpid()) + ".jsonl";
    if (rank == 0) std::remove(o.out.c_str());
    MPI_Barrier(MPI_COMM_WORLD);
    ASSERT_EQ(run_gemm(o, MPI_COMM_WORLD), 0);
    if (rank != 0) return;

    ReadResult read = read_records(o.out);
    EXPECT_TRUE(read.warnings.empty());
    ASSERT_EQ(read.records.size(), static_cast<size_t>(size));
    for (const auto& r : read.records) {
        EXPECT_EQ(r["schema_version"], kSchemaVersion);
        EXPECT_EQ(r["subcommand"], "gemm");
        EXPECT_EQ(r["m"], 512);
        EXPECT_EQ(r["n"], 512);
        EXPECT_EQ(r["k"], 512);
        EXPECT_EQ(r["dtype"], "bf16");
        EXPECT_EQ(r["iters"], 3);
        const double median = r["time_ms"]["median"].get<double>();
        EXPECT_GT(median, 0);
        EXPECT_LE(r["time_ms"]["min"].get<double>(), median);
        EXPECT_GE(r["time_ms"]["max"].get<double>(), median);
        const double tflops = r["tflops"].get<double>();
        EXPECT_NEAR(tflops, 2.0 * 512 * 512 * 512 / (median * 1e-3) / 1e12, 1e-9 * tflops);
        EXPECT_GT(tflops, 0);
        ASSERT_TRUE(r["gpu"].is_object());
        const std::string name = r["gpu"]["name"].get<std::string>();
        auto peak = find_gpu_peak(name);
        if (peak) {
            const double peak_tflops = r["peak_tflops"].get<double>();
            EXPECT_DOUBLE_EQ(peak_tflops, peak->bf16_tflops);
            EXPECT_LE(tflops, 1.2 * peak_tflops) << name;
            EXPECT_NEAR(r["fraction_of_peak"].get<double>(), tflops / peak_tflops, 1e-12);
        } else {
            EXPECT_TRUE(r["peak_tflops"].is_null()) << name;
            EXPECT_TRUE(r["fraction_of_peak"].is_null()) << name;
        }
        EXPECT_TRUE(r["environment"].is_object());
        ASSERT_TRUE(r["telemetry"].is_object());
        EXPECT_TRUE(r["telemetry"]["nvml"] == "ok" || r["telemetry"]["nvml"] == "unavailable");
    }
    std::remove(o.out.c_str());
}

}  // namespace
}  // namespace sb
