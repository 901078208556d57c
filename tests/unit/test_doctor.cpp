// The doctor's parts the corpus (test_doctor_corpus.cpp) does not reach on their own: the
// tier verdicts and exit code with unjudged checks, a machine without GPUs, the collective
// sweep's stopping rule (on synthetic busbw curves, no timing), the host buffers' CPU placement,
// the parsers the live reader relies on, and the snapshot's JSON and the table, report and JSON
// forms.
#include <gtest/gtest.h>

#include <fstream>

#include <functional>

#include <fmt/format.h>

#include "base/errors.h"
#include "src/doctor/checks.h"
#include "src/doctor/expectations.h"
#include "src/doctor/live_reader.h"
#include "src/doctor/output.h"
#include "src/doctor/snapshot.h"
#include "src/doctor/sources.h"
#include "src/doctor/sweep_sizes.h"

namespace sb::doctor {
namespace {

const std::string kSource = SCALEBENCH_SOURCE_DIR;

SystemSnapshot fixture(const std::string& name) { return load_snapshot(kSource + "/tests/fixtures/doctor/" + name + ".json"); }

ExpectedBands bands_for(const SystemSnapshot& s) {
    static const std::vector<HardwareProfile> profiles = load_profiles(kSource + "/configs/hardware");
    static const std::vector<PublishedBusbw> published =
        load_published_busbw(kSource + "/results/published/nccl_allreduce.yaml");
    return expected_bands(s, profiles, published);
}

std::vector<Check> checks_of(const SystemSnapshot& s) { return run_checks(s, bands_for(s)); }

const Check& named(const std::vector<Check>& checks, const std::string& name) {
    for (const Check& c : checks)
        if (c.name == name) return c;
    throw std::runtime_error("no check named " + name);
}

std::string verdicts(const std::vector<Check>& checks) {
    std::string out;
    for (Tier t : kTiers) out += fmt::format("{}={} ", tier_name(t), verdict_name(tier_verdict(checks, t)));
    return out;
}

TEST(DoctorVerdicts, ExitCodeHasItsOwnCannotJudgeBit) {
    auto c = [](Tier t, Verdict v) {
        Check k;
        k.tier = t;
        k.verdict = v;
        return k;
    };
    EXPECT_EQ(exit_code({c(Tier::topology, Verdict::pass), c(Tier::training, Verdict::warn)}), 0);
    EXPECT_EQ(exit_code({c(Tier::configuration, Verdict::fail)}), 32 + 2);
    EXPECT_EQ(exit_code({c(Tier::transfer, Verdict::unjudged)}), 32 + kCannotJudgeBit);
    // A failing tier with an unjudged row: both said.
    EXPECT_EQ(exit_code({c(Tier::collective, Verdict::fail), c(Tier::collective, Verdict::unjudged)}),
              32 + 8 + kCannotJudgeBit);
    EXPECT_EQ(tier_verdict({c(Tier::topology, Verdict::warn), c(Tier::topology, Verdict::unjudged)}, Tier::topology),
              Verdict::unjudged);
}

TEST(DoctorVerdicts, AMachineWithoutGpusSkipsTheGpuTiersWithTheirReason) {
    SystemSnapshot s;
    s.gpu_unavailable = "this build has no CUDA (SCALEBENCH_CUDA=OFF)";
    s.transfer_skipped = s.collective_skipped = s.training_skipped = "left out";
    const auto checks = checks_of(s);
    EXPECT_EQ(verdicts(checks), "topology=skipped configuration=skipped transfer=skipped collective=skipped "
                                "training=skipped ");
    EXPECT_EQ(exit_code(checks), 0);
    for (const Check& c : checks)
        if (c.verdict != Verdict::pass) EXPECT_FALSE(c.cause.empty()) << c.name;
    EXPECT_NE(named(checks, "BAR1 against memory").cause.find("SCALEBENCH_CUDA=OFF"), std::string::npos);
}

TEST(DoctorVerdicts, GpusSysfsShowsWithoutCudaAreUnjudgedNotPassed) {
    SystemSnapshot s = fixture("corpus/stock-4090-1socket");
    s.gpu_unavailable = "this build has no CUDA (SCALEBENCH_CUDA=OFF): the GPU readings need it";
    for (GpuReading& g : s.gpus) g.name = "NVIDIA PCI device 0x2684";
    s.copies.clear();
    s.collectives.clear();
    s.transfer_skipped = s.collective_skipped = s.gpu_unavailable;
    const auto checks = checks_of(s);
    EXPECT_EQ(named(checks, "each GPU against its model's datasheet").verdict, Verdict::unjudged);
    EXPECT_EQ(named(checks, "host to device (pinned)").verdict, Verdict::unjudged);
    EXPECT_EQ(exit_code(checks) & kCannotJudgeBit, kCannotJudgeBit);
}

TEST(DoctorVerdicts, OneH200NamesItsProfileAndWhyNoLinkIsJudged) {
    const SystemSnapshot s = fixture("corpus/h200-vm");
    const ExpectedBands b = bands_for(s);
    EXPECT_EQ(b.profile, "h200-sxm");
    EXPECT_NE(b.link.find("one GPU per host"), std::string::npos);
    EXPECT_NE(format_table(run_checks(s, b), b, s).find("bands from profile h200-sxm (NVIDIA H200; link one GPU"),
              std::string::npos);
}

TEST(DoctorVerdicts, EveryExpectationNamesItsSources) {
    for (const ModelExpectation& e : model_expectations()) {
        EXPECT_FALSE(e.nvlink_source.empty()) << e.device_name;
        EXPECT_FALSE(e.pcie_source.empty()) << e.device_name;
        EXPECT_FALSE(e.memory_source.empty()) << e.device_name;
        EXPECT_FALSE(e.power_source.empty()) << e.device_name;
        EXPECT_FALSE(e.ecc_source.empty()) << e.device_name;
        EXPECT_GT(e.power_default_w, 0);
    }
}

// ---- the collective sweep's sizes

constexpr size_t kMiB = size_t{1} << 20;

// busbw rising towards `peak`, at half of it at `half` bytes: the shape of an nccl-tests curve.
std::function<double(size_t)> saturating(double peak, size_t half) {
    return [=](size_t bytes) { return peak * double(bytes) / double(bytes + half); };
}

std::vector<size_t> mib(std::initializer_list<size_t> sizes) {
    std::vector<size_t> out;
    for (size_t s : sizes) out.push_back(s * kMiB);
    return out;
}

TEST(DoctorSweep, DoublesFromOneMibUntilBusbwReachesTheBand) {
    SweepLimits l;
    l.target_gbps = 150;
    l.max_bytes = size_t{1} << 30;
    l.memory_bytes = size_t{16} << 30;
    l.align = 4 * 8;
    // 200 GB/s at the top, half of it at 8 MiB: 150 is passed at 32 MiB (160), not at 16 (133).
    const SweepResult r = run_sweep(saturating(200, 8 * kMiB), l);
    EXPECT_EQ(r.sizes, mib({1, 2, 4, 8, 16, 32}));
    EXPECT_EQ(r.stop, kStopBandReached);
    EXPECT_NEAR(r.busbw.back(), 160, 1e-9);
}

TEST(DoctorSweep, StopsWhereBusbwLevelsOffBelowTheBandOrWithoutOne) {
    SweepLimits l;
    l.target_gbps = 150;
    l.max_bytes = size_t{1} << 30;
    l.memory_bytes = size_t{16} << 30;
    // 60 GB/s at the top, half at 1 MiB: 64 MiB (59.1) gains 4.6% over 16 MiB (56.5), 32 MiB gained 9%.
    const SweepResult r = run_sweep(saturating(60, kMiB), l);
    EXPECT_EQ(r.sizes, mib({1, 2, 4, 8, 16, 32, 64}));
    EXPECT_EQ(r.stop, kStopLevel);
    l.target_gbps = 0;  // no band (ranks sharing a GPU, the control): the same curve, the same stop
    EXPECT_EQ(run_sweep(saturating(60, kMiB), l).sizes, r.sizes);
    // Level: under 5% over two doublings; fewer than three sizes cannot tell.
    l.target_gbps = 0;
    EXPECT_EQ(sweep_step({10, 10.2}, 2 * kMiB, l).stop, "");
    EXPECT_EQ(sweep_step({10, 10.2}, 2 * kMiB, l).next_bytes, 4 * kMiB);
    EXPECT_EQ(sweep_step({10, 10.2, 10.49}, 4 * kMiB, l).stop, kStopLevel);  // 4.9%
    EXPECT_EQ(sweep_step({10, 10.2, 10.51}, 4 * kMiB, l).stop, "");          // 5.1%: still rising
    EXPECT_EQ(sweep_step({10, 12, 10.4}, 4 * kMiB, l).stop, kStopLevel);    // a drop
    l.target_gbps = 10;
    EXPECT_EQ(sweep_step({10}, kMiB, l).stop, kStopBandReached);
}

TEST(DoctorSweep, StopsAtMaxBytesOrFreeMemoryWhileStillRising) {
    SweepLimits l;
    l.target_gbps = 150;
    l.max_bytes = 64 * kMiB;
    l.memory_bytes = size_t{16} << 30;
    const auto slow_rise = saturating(200, 512 * kMiB);
    SweepResult r = run_sweep(slow_rise, l);
    EXPECT_EQ(r.sizes, mib({1, 2, 4, 8, 16, 32, 64}));
    EXPECT_EQ(r.stop, kStopMaxBytes);
    // Free memory below --max-bytes: the last size is the memory's share, not a doubling.
    l.max_bytes = size_t{1} << 30;
    l.memory_bytes = 48 * kMiB;
    r = run_sweep(slow_rise, l);
    EXPECT_EQ(r.sizes, mib({1, 2, 4, 8, 16, 32, 48}));
    EXPECT_EQ(r.stop, kStopMemory);
    // --max-bytes below 1 MiB: one size.
    l.max_bytes = 4096;
    r = run_sweep(slow_rise, l);
    EXPECT_EQ(r.sizes, std::vector<size_t>{4096});
    EXPECT_EQ(r.stop, kStopMaxBytes);
    // Sizes are whole floats per rank: three ranks, 12-byte steps, up to a 5 MiB cap.
    l.max_bytes = 5 * kMiB;
    l.memory_bytes = size_t{16} << 30;
    l.align = 4 * 3;
    r = run_sweep(saturating(100, 64 * kMiB), l);
    ASSERT_EQ(r.sizes.size(), 4u);  // 1, 2, 4 MiB and the 5 MiB cap, each rounded down to 12 bytes
    for (size_t s : r.sizes) EXPECT_EQ(s % 12, 0u) << s;
    EXPECT_EQ(r.sizes.front(), kMiB / 12 * 12);
    EXPECT_EQ(r.sizes.back(), 5 * kMiB / 12 * 12);
}

// The host buffers of each GPU are allocated and first touched on that GPU's CPUs (its NUMA node).
TEST(DoctorLive, HostBuffersAreTouchedOnTheGpusOwnCpus) {
    const std::string before = bound_cpus();
    const std::vector<int> mine = parse_cpu_list(before);
    ASSERT_FALSE(mine.empty()) << before;
    const std::string last = std::to_string(mine.back());
    std::string inside;
    on_cpus(last, [&] { inside = bound_cpus(); });
    EXPECT_EQ(inside, last);
    EXPECT_EQ(bound_cpus(), before);  // restored
    on_cpus("", [&] { inside = bound_cpus(); });  // not read (a VM's sysfs): left where it was
    EXPECT_EQ(inside, before);
}

// ---- parsers and forms

TEST(DoctorParsers, NcclTransportsFromItsInfoLog) {
    const std::string log =
        "host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n"
        "host:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
        "host:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct\n"
        "host:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0\n"
        "host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA\n"
        "host:1:1 [0] NCCL INFO Connected all rings\n"
        "host:1:1 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>\n"
        "host:1:1 [0] NCCL INFO NVLS comm 0x55d1 headRank 0 nHeads 8 buffSize 1048576\n";
    EXPECT_EQ(parse_nccl_transports(log),
              (std::vector<std::string>{"P2P/IPC", "P2P/CUMEM", "SHM", "NET/Socket", "NET/IB", "NVLS"}));
}

TEST(DoctorParsers, XidsOfOneGpuFromTheKernelLog) {
    const std::string log =
        "[ 12.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
        "[ 13.0] NVRM: Xid (PCI:0000:3B:00): 48, pid=1234, An uncorrectable double bit error\n"
        "[ 14.0] NVRM: Xid (PCI:0000:5e:00): 13, pid=99, Graphics Exception\n"
        "[ 15.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
        "[ 16.0] usb 1-1: new device (PCI:0000:3b:00): 1\n";
    std::string codes;
    EXPECT_EQ(parse_xids(log, "0000:3b:00.0", &codes), 3);
    EXPECT_EQ(codes, "79, 48");
    EXPECT_EQ(parse_xids(log, "0000:af:00.0", &codes), 0);
    EXPECT_EQ(codes, "");
}

TEST(DoctorParsers, CpuLists) {
    EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
    EXPECT_TRUE(parse_cpu_list("x").empty());
    EXPECT_TRUE(parse_cpu_list("3-1").empty());
}

TEST(DoctorParsers, AcsRedirectFromConfigSpace) {
    std::vector<unsigned char> config(4096, 0);
    EXPECT_EQ(acs_redirect(std::vector<unsigned char>(64, 0)), -1);  // not root: 64 bytes only
    // AER at 0x100 pointing to ACS at 0x148.
    config[0x100] = 0x01;
    config[0x102] = 0x81;  // version 1, and the low 4 bits of next (0x148 << 20)
    config[0x103] = 0x14;
    config[0x148] = 0x0d;
    config[0x14a] = 0x01;
    EXPECT_EQ(acs_redirect(config), 0);
    config[0x148 + 6] = 0x1d;  // SV, RR, CR, UF
    EXPECT_EQ(acs_redirect(config), 1);
}

TEST(DoctorForms, SnapshotRoundTripsThroughJson) {
    const SystemSnapshot s = fixture("slot-x8");
    const nlohmann::json j = s;
    const SystemSnapshot back = j.get<SystemSnapshot>();
    EXPECT_EQ(nlohmann::json(back), j);
    EXPECT_EQ(back.gpus[1].pcie_max.width, 8);
}

TEST(DoctorForms, BadSnapshotNamesFileAndKey) {
    const std::string dir = ::testing::TempDir();
    const std::string path = dir + "/bad-snapshot.json";
    FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("{\"gpus\": \"none\"}", f);
    std::fclose(f);
    try {
        load_snapshot(path);
        FAIL() << "loaded";
    } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("key 'gpus'"), std::string::npos);
    }
}

// The published figures are read as every YAML input: each number by the one number parser in
// its range, an error at FILE:LINE:COL naming the key; never yaml-cpp's own conversions (which
// take 0x8, .nan and -1e300).
TEST(DoctorForms, PublishedFiguresAreReadByTheOneNumberParserWithRanges) {
    const std::string path = ::testing::TempDir() + "/published.yaml";
    auto refusal = [&](const std::string& entry) {
        std::ofstream(path) << "entries:\n  - profile: h100-sxm\n    source: s\n    nodes: 1\n" << entry;
        try {
            load_published_busbw(path);
        } catch (const UserError& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    const std::string good = "    bytes: 1073741824\n    busbw_gbps: 300\n";
    EXPECT_EQ(refusal("    gpus_per_node: 8\n" + good), "accepted");
    for (const auto& [entry, key] :
         {std::pair{"    gpus_per_node: 0x8\n" + good, "entries.gpus_per_node"},
          std::pair{"    gpus_per_node: 0\n" + good, "entries.gpus_per_node"},
          std::pair{std::string("    gpus_per_node: 8\n    bytes: 1073741824\n    busbw_gbps: .nan\n"), "entries.busbw_gbps"},
          std::pair{std::string("    gpus_per_node: 8\n    bytes: 1073741824\n    busbw_gbps: -1e300\n"), "entries.busbw_gbps"},
          std::pair{std::string("    gpus_per_node: 8\n    bytes: -1\n    busbw_gbps: 300\n"), "entries.bytes"},
          std::pair{"    gpus_per_node: 8\n    busbw: 300\n" + good, "entries.busbw"}}) {
        const std::string said = refusal(entry);
        EXPECT_EQ(said.rfind(path + ":", 0), 0u) << said;  // FILE:LINE:COL
        EXPECT_NE(said.find("key '" + std::string(key) + "'"), std::string::npos) << entry << " -> " << said;
    }
    EXPECT_NE(refusal("    bytes: 1073741824\n    busbw_gbps: 300\n").find("key 'entries.gpus_per_node': missing"),
              std::string::npos);
}

TEST(DoctorForms, TableReportAndJsonCarryTheSameVerdicts) {
    const SystemSnapshot s = fixture("slot-x8");
    const auto checks = checks_of(s);
    const std::string table = format_table(checks, bands_for(s), s);
    const std::string md = format_markdown(checks, bands_for(s), s);
    const nlohmann::json j = checks_json(checks, bands_for(s), s);
    EXPECT_NE(table.find("configuration fail"), std::string::npos);
    EXPECT_NE(table.find("exit code 34"), std::string::npos);
    EXPECT_NE(md.find("| configuration | fail | PCIe generation and width: slot and under load |"), std::string::npos);
    EXPECT_EQ(j["tiers"]["configuration"], "fail");
    EXPECT_EQ(j["exit_code"], 34);
    EXPECT_EQ(j["checks"].size(), checks.size());
}

}  // namespace
}  // namespace sb::doctor
