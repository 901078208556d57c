// `scalebench comm` on one rank: nccl-tests' bus-bandwidth factors and count rounding,
// sizes with K/M/G suffixes and their errors, the flags' plan, the alpha-beta fit, the
// table read back as nccl-tests parsers read it, the host 16-bit conversions, and the
// check catching a planted wrong element.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <set>

#include "collectives/host_dtype.h"
#include "collectives/mpi_communicator.h"
#include "collectives/sweep.h"
#include "src/core/flag_reading.h"
#include "models/cpu/cpu_ops.h"
#include "src/system/backend.h"
#include "src/commands/comm_command.h"
#include "base/errors.h"

namespace sb {
namespace {

const Collective& by_name(const std::string& name) {
    const Collective* c = find_collective(name);
    EXPECT_NE(c, nullptr) << name;
    return *c;
}

TEST(CommSweep, BusBandwidthFactorsAreNcclTests) {
    for (int n : {1, 2, 3, 4, 8}) {
        const double ring = static_cast<double>(n - 1) / n;
        EXPECT_DOUBLE_EQ(by_name("all_reduce").bus_factor(n), 2.0 * ring) << n;
        EXPECT_DOUBLE_EQ(by_name("reduce_scatter").bus_factor(n), ring) << n;
        EXPECT_DOUBLE_EQ(by_name("all_gather").bus_factor(n), ring) << n;
        EXPECT_DOUBLE_EQ(by_name("alltoall").bus_factor(n), ring) << n;
        EXPECT_DOUBLE_EQ(by_name("broadcast").bus_factor(n), 1.0) << n;
        EXPECT_DOUBLE_EQ(by_name("reduce").bus_factor(n), 1.0) << n;
        EXPECT_DOUBLE_EQ(by_name("sendrecv").bus_factor(n), 1.0) << n;
    }
    EXPECT_DOUBLE_EQ(by_name("all_reduce").bus_factor(8), 1.75);
    EXPECT_EQ(all_collectives().size(), 7u);
    EXPECT_EQ(find_collective("allreduce"), nullptr);
}

TEST(CommSweep, PerRankCountsRoundDownToSixteenBytesAsNcclTests) {
    // 1000 floats over 3 ranks: 333 per rank, down to a multiple of 4 floats (16 bytes).
    CollectiveCounts rs = by_name("reduce_scatter").counts(1000, 4, 3);
    EXPECT_EQ(rs.param, 332u);
    EXPECT_EQ(rs.send, 996u);
    EXPECT_EQ(rs.recv, 332u);
    EXPECT_EQ(rs.recv_inplace_offset, 332u);
    CollectiveCounts ag = by_name("all_gather").counts(1000, 2, 3);  // half: multiples of 8
    EXPECT_EQ(ag.param, 328u);
    EXPECT_EQ(ag.recv, 984u);
    EXPECT_EQ(ag.send_inplace_offset, 328u);
    CollectiveCounts a2a = by_name("alltoall").counts(1000, 4, 4);
    EXPECT_EQ(a2a.param, 248u);
    EXPECT_EQ(a2a.send, 992u);
    EXPECT_EQ(a2a.recv, 992u);
    CollectiveCounts ar = by_name("all_reduce").counts(1001, 4, 3);  // whole buffer: no rounding
    EXPECT_EQ(ar.param, 1001u);
    EXPECT_EQ(ar.send, 1001u);
    EXPECT_EQ(by_name("reduce_scatter").counts(2, 4, 2).param, 0u);  // 8 bytes on 2 ranks: an empty call
}

TEST(CommSweep, SizesTakeSuffixesInPowersOf1024) {
    EXPECT_EQ(parse_size("8", "-b"), 8u);
    EXPECT_EQ(parse_size("128K", "-b"), 131072u);
    EXPECT_EQ(parse_size("2k", "-b"), 2048u);
    EXPECT_EQ(parse_size("32M", "-b"), 33554432u);
    EXPECT_EQ(parse_size("1G", "-e"), 1073741824u);
    EXPECT_EQ(parse_size("1.5M", "-e"), 1572864u);
    EXPECT_EQ(parse_size(" 0 ", "-b"), 0u);
    for (const char* bad : {"", "32X", "-1", "1MB", "M", "1 2", "0x10", "1T"}) {
        try {
            parse_size(bad, "-e");
            ADD_FAILURE() << "accepted '" << bad << "'";
        } catch (const UserError& e) {
            EXPECT_NE(std::string(e.what()).find("-e '"), std::string::npos) << e.what();
        }
    }
    EXPECT_THROW(parse_size("99999999G", "-e"), UserError);
}

TEST(CommSweep, SweepSizesStepByFactorOrBytes) {
    const std::vector<size_t> by_factor = sweep_sizes(8, 1 << 20, 1 << 20, 4);
    ASSERT_EQ(by_factor.size(), 9u);  // 8, 32, ..., 524288; 2M would pass -e
    EXPECT_EQ(by_factor.front(), 8u);
    EXPECT_EQ(by_factor.back(), 524288u);
    EXPECT_EQ(sweep_sizes(1 << 20, 4 << 20, 1 << 20, 1), (std::vector<size_t>{1 << 20, 2 << 20, 3 << 20, 4 << 20}));
    EXPECT_EQ(sweep_sizes(32 << 20, 32 << 20, 1 << 20, 1), (std::vector<size_t>{32 << 20}));  // the defaults
    EXPECT_EQ(sweep_sizes(8, 8, 0, 2), (std::vector<size_t>{8}));
    EXPECT_THROW(sweep_sizes(2 << 20, 1 << 20, 1 << 20, 1), UserError);  // min > max
    EXPECT_THROW(sweep_sizes(0, 1 << 20, 1, 2), UserError);              // 0 never grows
    EXPECT_THROW(sweep_sizes(0, 1 << 20, 0, 1), UserError);              // a zero step
    EXPECT_THROW(sweep_sizes(0, 1 << 30, 1, 1), UserError);              // too many sizes
    const std::vector<size_t> huge = sweep_sizes(1, ~size_t{0}, 1, 1 << 20);  // no overflow at the top
    EXPECT_LE(huge.size(), 4u);
}

CommOptions small_options() {
    CommOptions o;
    o.min_bytes = "8";
    o.max_bytes = "1M";
    o.step_factor = 4;
    return o;
}

std::string plan_error(const CommOptions& o, int world = 4) {
    try {
        plan_comm(o, world);
    } catch (const UserError& e) {
        return e.what();
    }
    return "";
}

TEST(CommCommand, PlanResolvesFlagsAsNcclTests) {
    CommOptions defaults;
    CommPlan p = plan_comm(defaults, 4);
    EXPECT_EQ(p.sweep.sizes, (std::vector<size_t>{32u << 20}));  // -b 32M -e 32M
    EXPECT_EQ(p.sweep.iters, 20);
    EXPECT_EQ(p.sweep.warmup_iters, 1);
    EXPECT_EQ(p.sweep.check_iters, 1);
    EXPECT_EQ(p.scaling, (std::vector<int>{4}));
    ASSERT_EQ(p.collectives.size(), 1u);
    EXPECT_STREQ(p.collectives[0]->name, "all_reduce");

    CommOptions o = small_options();
    o.op = "all";
    o.datatype = "all";
    o.redop = "all";
    o.inplace = "out";
    o.scaling = {2, 4};
    p = plan_comm(o, 4);
    EXPECT_EQ(p.collectives.size(), 7u);
    EXPECT_EQ(p.dtypes, (std::vector<DType>{DType::f32, DType::f16, DType::bf16}));
    EXPECT_EQ(p.redops.size(), 4u);
    EXPECT_TRUE(p.sweep.out_of_place);
    EXPECT_FALSE(p.sweep.in_place);
    EXPECT_EQ(p.sweep.sizes.size(), 9u);
}

TEST(CommCommand, BadFlagsAreUserErrorsNamingTheFlag) {
    auto with = [](auto change) {
        CommOptions o = small_options();
        change(o);
        return plan_error(o);
    };
    EXPECT_NE(with([](CommOptions& o) { o.op = "allreduce"; }).find("--op 'allreduce'"), std::string::npos);
    EXPECT_NE(with([](CommOptions& o) { o.step_bytes = "1M"; }).find("-i and -f"), std::string::npos);
    EXPECT_NE(with([](CommOptions& o) { o.step_factor = 1; }).find("-f 1"), std::string::npos);
    EXPECT_NE(with([](CommOptions& o) { o.min_bytes = "2M"; }).find("larger than -e"), std::string::npos);
    EXPECT_NE(with([](CommOptions& o) { o.max_bytes = "2"; o.min_bytes = "1"; }).find("smaller than one float"),
              std::string::npos);
    EXPECT_NE(with([](CommOptions& o) { o.datatype = "double"; }).find("-d 'double'"), std::string::npos);
    EXPECT_NE(with([](CommOptions& o) { o.redop = "prod"; }).find("--redop 'prod'"), std::string::npos);
    EXPECT_NE(with([](CommOptions& o) { o.scaling = {2, 8}; }).find("--scaling 8"), std::string::npos);
    EXPECT_NE(with([](CommOptions& o) { o.scaling = {0}; }).find("--scaling 0"), std::string::npos);
    EXPECT_NE(with([](CommOptions& o) { o.op = "broadcast"; o.root = 2; o.scaling = {2, 4}; }).find("-r 2"),
              std::string::npos);
    EXPECT_EQ(with([](CommOptions& o) { o.op = "all_reduce"; o.root = 7; }), "");  // no root: -r is not used
    EXPECT_NE(with([](CommOptions& o) { o.min_bytes = "1Q"; }).find("-b '1Q'"), std::string::npos);
    if (!cuda_built()) EXPECT_NE(with([](CommOptions& o) { o.backend = "nccl"; }).find("--backend nccl"), std::string::npos);
    // -n, -w and -c are read in the flag table's ranges: OneNumberParser.SubcommandFlagsTakeTheirBoundFromTheFlagTable.
    EXPECT_NE(with([](CommOptions& o) { o.max_bytes = "1048577G"; }).find("more than any machine holds"),
              std::string::npos);
}

// The buffers a rank's sweep allocates, as nccl-tests lays them out: a send and a receive buffer
// (in place, the receive buffer holds either), per collective, dtype and world size.
TEST(CommCommand, LargestBuffersAreTheSweepsSendAndReceiveBuffers) {
    CommOptions o;
    o.min_bytes = o.max_bytes = "1M";
    o.op = "all_reduce";
    CommPlan p = plan_comm(o, 4);
    EXPECT_EQ(largest_buffers(p).bytes, 2.0 * (1 << 20));  // 1 MiB to send, 1 MiB to receive
    EXPECT_EQ(largest_buffers(p).sweep, "all_reduce, float, world size 4");
    // all_gather on 4 ranks: each sends its quarter and receives the whole.
    o.op = "all_gather";
    EXPECT_EQ(largest_buffers(plan_comm(o, 4)).bytes, (1 << 18) + (1 << 20));
    // Of every collective, dtype and world size swept, the one that needs the most.
    o.op = "all";
    o.datatype = "all";
    o.scaling = {1, 2, 4};
    p = plan_comm(o, 4);
    EXPECT_EQ(largest_buffers(p).bytes, 2.0 * (1 << 20));
    EXPECT_EQ(comm_memory_problem(p, 2.0 * (1 << 20), "rank 0 on h", "test"), "");
    EXPECT_EQ(comm_memory_problem(p, 0, "rank 0 on h", "unknown"), "");  // unknown memory is no refusal
    EXPECT_EQ(comm_memory_problem(p, 1 << 20, "rank 3 on h", "host memory available"),
              "-e 1048576: the sweep's buffers need 2097152 bytes (0.00 GiB) per rank (all_reduce, float, world size 1: "
              "send and receive buffers), but rank 3 on h has 1048576 bytes (0.00 GiB, host memory available): use a "
              "smaller -e");
}

TEST(CommSweep, AlphaBetaFitRecoversLatencyAndBandwidth) {
    // 5 us + bytes at 10 GB/s (10^4 bytes per us).
    std::vector<double> bytes, us;
    for (double b = 8; b <= 1 << 28; b *= 4) {
        bytes.push_back(b);
        us.push_back(5.0 + b / 1e4);
    }
    AlphaBetaFit fit = fit_alpha_beta(bytes, us);
    ASSERT_TRUE(fit.valid);
    EXPECT_NEAR(fit.alpha_us, 5.0, 1e-9);
    EXPECT_NEAR(fit.beta_gbps, 10.0, 1e-9);
    EXPECT_NEAR(fit.r2, 1.0, 1e-12);
    EXPECT_EQ(fit.points, static_cast<int>(bytes.size()));

    // 10% noise on alternate sizes: the relative weighting keeps alpha from the small
    // sizes and beta from the large ones.
    for (size_t i = 0; i < us.size(); ++i) us[i] *= i % 2 ? 1.1 : 0.9;
    fit = fit_alpha_beta(bytes, us);
    ASSERT_TRUE(fit.valid);
    EXPECT_NEAR(fit.alpha_us, 5.0, 1.0);
    EXPECT_NEAR(fit.beta_gbps, 10.0, 1.5);
    EXPECT_GT(fit.r2, 0.9);

    EXPECT_FALSE(fit_alpha_beta({1024}, {3.0}).valid);                   // one size
    EXPECT_FALSE(fit_alpha_beta({1024, 4096}, {3.0, 2.0}).valid);        // time falls with size
    EXPECT_FALSE(fit_alpha_beta({1024, 1024, 1024}, {3, 3, 3}).valid);   // one distinct size
}

SweepResult sample_result() {
    SweepResult r;
    r.collective = &by_name("all_reduce");
    r.nranks = 4;
    r.dtype = DType::bf16;
    r.redop = ReduceOp::max;
    r.root = -1;
    for (size_t bytes : {size_t{0}, size_t{1024}, size_t{1} << 30}) {
        SweepRow row;
        row.bytes = bytes;
        row.count = bytes / 2;
        for (Measurement* m : {&row.out_of_place, &row.in_place}) {
            m->ran = true;
            m->checked = m == &row.out_of_place;
            m->time_us = 3.0 + static_cast<double>(bytes) / 1e5;
            m->algbw_gbps = static_cast<double>(bytes) / 1e3 / m->time_us;
            m->busbw_gbps = m->algbw_gbps * 1.5;
            m->wrong = bytes == 1024 ? 2 : 0;
        }
        r.rows.push_back(row);
    }
    r.avg_busbw_gbps = 123.456;
    r.wrong_measurements = 1;
    r.fit = fit_alpha_beta({1024, double(1u << 30)}, {3.01, 10740.0});
    return r;
}

TEST(CommSweep, TableHasNcclTestsColumnsAndClosingLines) {
    const std::string header = format_table_header();
    std::vector<std::string> lines;
    for (size_t start = 0, end; (end = header.find('\n', start)) != std::string::npos; start = end + 1)
        lines.push_back(header.substr(start, end - start));
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_NE(lines[0].find("out-of-place"), std::string::npos);
    EXPECT_NE(lines[0].find("in-place"), std::string::npos);
    std::istringstream names(lines[1]);
    std::vector<std::string> columns;
    for (std::string w; names >> w;) columns.push_back(w);
    EXPECT_EQ(columns, (std::vector<std::string>{"#", "size", "count", "type", "redop", "root", "time", "algbw",
                                                 "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"}));
    EXPECT_EQ(lines[1].substr(0, 14), "#       size  ");

    const SweepResult r = sample_result();
    const std::string row = format_row(r, r.rows[1]);
    EXPECT_EQ(row.substr(0, 12), "        1024");                         // %12 size
    EXPECT_NE(row.find("bfloat16     max      -1"), std::string::npos);  // type, redop, root
    EXPECT_NE(row.find("N/A"), std::string::npos);                        // in place unchecked here
    const std::string footer = format_footer(r);
    EXPECT_NE(footer.find("# Out of bounds values : 1 FAILED\n"), std::string::npos) << footer;
    EXPECT_NE(footer.find("# Avg bus bandwidth    : 123.456 \n"), std::string::npos) << footer;
    EXPECT_NE(footer.find("# Alpha-beta fit"), std::string::npos);
}

TEST(CommSweep, PrintedTableParsesBack) {
    const SweepResult r = sample_result();
    std::string text = "# some preamble\n#\n" + format_table_header();
    for (const SweepRow& row : r.rows) text += format_row(r, row);
    text += format_footer(r);
    const ParsedTable t = parse_nccl_tests_output(text);
    ASSERT_EQ(t.rows.size(), 3u);
    EXPECT_TRUE(t.has_avg_busbw);
    EXPECT_DOUBLE_EQ(t.avg_busbw_gbps, 123.456);
    EXPECT_TRUE(t.has_out_of_bounds);
    EXPECT_EQ(t.out_of_bounds, 1);
    for (size_t i = 0; i < r.rows.size(); ++i) {
        const ParsedRow& p = t.rows[i];
        EXPECT_EQ(p.bytes, r.rows[i].bytes);
        EXPECT_EQ(p.count, r.rows[i].count);
        EXPECT_EQ(p.type, "bfloat16");
        EXPECT_EQ(p.redop, "max");
        EXPECT_EQ(p.root, -1);
        const Measurement& m = r.rows[i].out_of_place;
        EXPECT_NEAR(p.out_of_place.time_us, m.time_us, 0.005 + 5e-3 * m.time_us);  // fewer decimals when wide
        EXPECT_NEAR(p.out_of_place.busbw_gbps, m.busbw_gbps, 0.005 + 5e-3 * m.busbw_gbps);
        EXPECT_EQ(p.out_of_place.wrong, m.wrong);
        EXPECT_EQ(p.in_place.wrong, -1);  // N/A
    }
}

TEST(CommSweep, ParsesNcclTestsStyleOutputWithNoise) {
    const std::string text =
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20\n"
        "host:123:123 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
        "           8             2     float     sum      -1    10.41    0.00    0.00      0    10.02    0.00    0.00      0\n"
        "   134217728      33554432     float     sum      -1   1234.5  108.72  190.26      0   1230.1  109.11  190.95      0\n"
        "# Out of bounds values : 0 OK\n"
        "# Avg bus bandwidth    : 95.3025 \n";
    const ParsedTable t = parse_nccl_tests_output(text);
    ASSERT_EQ(t.rows.size(), 2u);
    EXPECT_EQ(t.rows[1].bytes, 134217728u);
    EXPECT_DOUBLE_EQ(t.rows[1].in_place.busbw_gbps, 190.95);
    EXPECT_DOUBLE_EQ(t.avg_busbw_gbps, 95.3025);
    EXPECT_EQ(t.out_of_bounds, 0);
    EXPECT_THROW(parse_nccl_tests_output("8 2 float sum -1 x 0 0 0 1 0 0 0\n"), std::runtime_error);
}

TEST(HostDtype, HalfRoundTripsEveryValueAndRoundsMidpointsToEven) {
    for (uint32_t h = 0; h < 0x10000u; ++h) {
        const float f = half_to_float(static_cast<uint16_t>(h));
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f))));
            continue;
        }
        ASSERT_EQ(float_to_half(f), h) << std::hex << h;
        // Halfway to the next half up (same sign): rounds to the even one of the two.
        if ((h & 0x7FFFu) < 0x7BFFu) {
            const float next = half_to_float(static_cast<uint16_t>(h + 1));
            const float mid = static_cast<float>((static_cast<double>(f) + next) / 2);
            ASSERT_EQ(float_to_half(mid), (h & 1u) ? h + 1 : h) << std::hex << h;
        }
    }
    EXPECT_EQ(float_to_half(65504.0f), 0x7BFFu);
    EXPECT_EQ(float_to_half(65519.0f), 0x7BFFu);
    EXPECT_EQ(float_to_half(65520.0f), 0x7C00u);  // rounds up to inf
    EXPECT_EQ(float_to_half(1e10f), 0x7C00u);
    EXPECT_EQ(float_to_half(-1e10f), 0xFC00u);
    EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001u);  // smallest subnormal
    EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000u);  // halfway to 0: even
    EXPECT_EQ(float_to_half(std::ldexp(1.5f, -25)), 0x0001u);
    EXPECT_EQ(float_to_half(1.0f / 3.0f), 0x3555u);
}

TEST(HostDtype, Bfloat16RoundsToNearestEven) {
    for (uint32_t h = 0; h < 0x10000u; h += 7) {
        const float f = bf16_to_float(static_cast<uint16_t>(h));
        if (std::isnan(f)) continue;
        ASSERT_EQ(float_to_bf16(f), h);
    }
    EXPECT_EQ(float_to_bf16(1.0f), 0x3F80u);
    EXPECT_EQ(float_to_bf16(bits_float(0x3F808000u)), 0x3F80u);  // halfway, even stays
    EXPECT_EQ(float_to_bf16(bits_float(0x3F818000u)), 0x3F82u);  // halfway, odd rounds up
    EXPECT_EQ(float_to_bf16(bits_float(0x3F808001u)), 0x3F81u);
    EXPECT_EQ(float_to_bf16(bits_float(0x7F7FFFFFu)), 0x7F80u);  // max float rounds to inf
    EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

TEST(CommSweep, CheckInputsAreExactAndDistinct) {
    for (DType d : {DType::f32, DType::f16, DType::bf16})
        for (int n : {1, 2, 3, 8, 64}) {
            const CheckContext c = make_check_context(d, /*reduces=*/true, 0, n, 0, 0, ReduceOp::sum, false, 1);
            const double limit = d == DType::f32 ? 1 << 24 : d == DType::f16 ? 1 << 11 : 1 << 8;
            EXPECT_LE(static_cast<double>(c.value_mask + 1) * n, limit) << dtype_name(d) << " " << n;
            EXPECT_GE(static_cast<double>(c.value_mask + 1) * n * 2, limit) << dtype_name(d) << " " << n;
            std::set<double> seen;
            const size_t span = std::min<size_t>(c.value_mask + 1, 4096);
            for (size_t i = 0; i < span; ++i) {
                const double v = c.input(0, i);
                EXPECT_GE(v, 1.0);
                seen.insert(v);
            }
            if (c.value_mask + 1 <= 4096) EXPECT_EQ(seen.size(), span) << "inputs repeat within their span";
        }
}

// One rank: the whole path (fill, run, read back, compare) on host memory.
class OneRank : public ::testing::Test {
protected:
    CpuOps ops;
    MpiCommunicator comm{MPI_COMM_SELF};
    SweepOptions options(DType d = DType::f32) {
        SweepOptions o;
        o.sizes = {0, 64, 4096, 1 << 16};
        o.dtype = d;
        o.iters = 2;
        o.warmup_iters = 1;
        return o;
    }
};

TEST_F(OneRank, EveryCollectiveAndDtypeChecksClean) {
    for (const Collective* c : all_collectives())
        for (DType d : {DType::f32, DType::f16, DType::bf16}) {
            const SweepResult r = run_sweep(*c, options(d), ops, comm, MPI_COMM_SELF);
            ASSERT_EQ(r.rows.size(), 4u);
            EXPECT_EQ(r.wrong_measurements, 0) << c->name << " " << dtype_name(d);
            for (const SweepRow& row : r.rows) {
                EXPECT_TRUE(row.out_of_place.ran && row.in_place.ran);
                EXPECT_TRUE(row.out_of_place.checked);
                EXPECT_EQ(row.in_place.checked, c->checks_in_place);
                EXPECT_GT(row.out_of_place.time_us, 0);
            }
        }
}

TEST_F(OneRank, CheckCatchesAPlantedWrongElement) {
    SweepOptions o = options();
    o.tamper = [](Ops& ops, void* recv, size_t bytes) {
        if (bytes < sizeof(float)) return;
        const float bad = -7.0f;  // inputs and their reductions are positive
        ops.upload(static_cast<char*>(recv) + bytes - sizeof bad, &bad, sizeof bad);
    };
    const SweepResult r = run_sweep(all_reduce_collective(), o, ops, comm, MPI_COMM_SELF);
    EXPECT_EQ(r.rows[0].out_of_place.wrong, 0);  // nothing to plant in an empty buffer
    for (size_t i = 1; i < r.rows.size(); ++i) {
        EXPECT_EQ(r.rows[i].out_of_place.wrong, 1) << i;
        EXPECT_EQ(r.rows[i].in_place.wrong, 1) << i;
    }
    EXPECT_EQ(r.wrong_measurements, 6);
    EXPECT_NE(format_footer(r).find("Out of bounds values : 6 FAILED"), std::string::npos);

    // A stale result (the collective never ran on the checked inputs) shows too.
    o.tamper = [](Ops& ops, void* recv, size_t bytes) {
        std::vector<unsigned char> zeros(bytes, 0);
        ops.upload(recv, zeros.data(), bytes);
    };
    o.sizes = {4096};
    const SweepResult zeroed = run_sweep(all_gather_collective(), o, ops, comm, MPI_COMM_SELF);
    EXPECT_EQ(zeroed.rows[0].out_of_place.wrong, 1024);
}

TEST_F(OneRank, BuffersThatCannotBeAllocatedAreAUserError) {
    SweepOptions o = options();
    o.sizes = {size_t{1} << 49};  // 512 TiB: more than a process can address
    try {
        run_sweep(all_reduce_collective(), o, ops, comm, MPI_COMM_SELF);
        ADD_FAILURE() << "allocated 512 TiB";
    } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find("-e 562949953421312: all_reduce needs"), std::string::npos) << e.what();
    }
}

TEST_F(OneRank, PlacementsCanBeLeftOut) {
    SweepOptions o = options();
    o.in_place = false;
    o.check_iters = 0;
    const SweepResult r = run_sweep(reduce_scatter_collective(), o, ops, comm, MPI_COMM_SELF);
    for (const SweepRow& row : r.rows) {
        EXPECT_TRUE(row.out_of_place.ran);
        EXPECT_FALSE(row.out_of_place.checked);
        EXPECT_FALSE(row.in_place.ran);
    }
    const std::string line = format_row(r, r.rows.back());
    const ParsedTable t = parse_nccl_tests_output(line);
    ASSERT_EQ(t.rows.size(), 1u);
    EXPECT_TRUE(t.rows[0].out_of_place.ran);
    EXPECT_EQ(t.rows[0].out_of_place.wrong, -1);
    EXPECT_FALSE(t.rows[0].in_place.ran);
}

}  // namespace
}  // namespace sb
