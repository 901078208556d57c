// The doctor's verdicts, decided from recorded snapshots (tests/fixtures/doctor/*.json)
// against the shipped hardware profiles and published figures: each fixture's tier verdicts
// and exit code, and every verdict (pass, warn, fail, skipped) of every tier, with the
// cause and fix a warn or fail must carry. Plus the parsers the live reader relies on.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "base/errors.h"
#include "src/doctor/checks.h"
#include "src/doctor/output.h"
#include "src/doctor/snapshot.h"
#include "src/doctor/sources.h"

namespace sb::doctor {
namespace {

const std::string kSource = SCALEBENCH_SOURCE_DIR;

SystemSnapshot fixture(const std::string& name) {
    return load_snapshot(kSource + "/tests/fixtures/doctor/" + name + ".json");
}

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

// Every warn or fail says why and what to do; every skip says why.
void expect_explained(const std::vector<Check>& checks) {
    for (const Check& c : checks) {
        if (c.verdict == Verdict::pass) continue;
        EXPECT_FALSE(c.cause.empty()) << c.name << " is " << verdict_name(c.verdict) << " without a cause";
        if (c.verdict != Verdict::skipped) EXPECT_FALSE(c.fix.empty()) << c.name << " has no fix";
    }
}

TEST(DoctorFixtures, StockRtx4090NoP2pIsHostStaged) {
    const SystemSnapshot s = fixture("stock-4090");
    const auto checks = checks_of(s);
    EXPECT_EQ(bands_for(s).profile, "rtx4090-24gb-pcie4");
    EXPECT_EQ(verdicts(checks),
              "topology=warn configuration=pass transfer=pass collective=pass training=warn ");
    EXPECT_EQ(exit_code(checks), 0);  // a warn does not fail
    EXPECT_NE(named(checks, "P2P access between GPUs").cause.find("SHM"), std::string::npos);
    EXPECT_EQ(named(checks, "peer copy (cudaMemcpyPeer)").verdict, Verdict::skipped);
    EXPECT_NE(named(checks, "peer copy (cudaMemcpyPeer)").cause.find("not granted"), std::string::npos);
    EXPECT_NE(named(checks, "transport NCCL chose").figures.find("SHM on 8 connections"), std::string::npos);
    EXPECT_NE(named(checks, "short training run at 1 and N ranks").cause.find("communication is exposed"),
              std::string::npos);
    expect_explained(checks);
}

TEST(DoctorFixtures, Patched48GbRtx4090WithSmallBar1Fails) {
    const SystemSnapshot s = fixture("patched-4090-48gb");
    const auto checks = checks_of(s);
    EXPECT_EQ(bands_for(s).profile, "rtx4090-48gb-pcie4-p2p");
    EXPECT_EQ(verdicts(checks),
              "topology=pass configuration=fail transfer=fail collective=fail training=skipped ");
    EXPECT_EQ(exit_code(checks), 32 + 2 + 4 + 8);
    const Check& bar1 = named(checks, "BAR1 against memory");
    EXPECT_EQ(bar1.verdict, Verdict::fail);
    EXPECT_NE(bar1.cause.find("BAR1 (32 GiB) is smaller than its memory (48 GiB)"), std::string::npos);
    EXPECT_NE(named(checks, "peer copy (cudaMemcpyPeer)").cause.find("wrong data"), std::string::npos);
    EXPECT_NE(named(checks, "all-reduce, checked and timed").cause.find("deadline"), std::string::npos);
    EXPECT_EQ(named(checks, "control with NCCL_P2P_DISABLE=1").verdict, Verdict::pass);
    expect_explained(checks);
}

TEST(DoctorFixtures, HgxA100PassesEveryTier) {
    const SystemSnapshot s = fixture("hgx-a100");
    const auto checks = checks_of(s);
    const ExpectedBands b = bands_for(s);
    EXPECT_EQ(b.profile, "a100-sxm4-80gb");
    EXPECT_DOUBLE_EQ(b.busbw.ceiling, 300);
    EXPECT_DOUBLE_EQ(b.busbw.lo, kBusbwAllowance * 0.667 * 300);  // the profile's low link efficiency
    ASSERT_FALSE(b.published.empty());  // the nccl-tests#149 row stands beside the measurement
    EXPECT_EQ(verdicts(checks), "topology=pass configuration=pass transfer=pass collective=pass training=pass ");
    EXPECT_EQ(exit_code(checks), 0);
    EXPECT_NE(named(checks, "all-reduce, checked and timed").band.find("nccl-tests/issues/149"), std::string::npos);
    EXPECT_NE(named(checks, "clocks and clock-event reasons under load").figures.find("sw_power_cap"),
              std::string::npos);
    EXPECT_NE(named(checks, "NVLink links up").figures.find("GPU7 12"), std::string::npos);
}

TEST(DoctorFixtures, Gen3x8LinkUnderLoadFailsConfigurationAndReadsLow) {
    const SystemSnapshot s = fixture("gen3-x8");
    const auto checks = checks_of(s);
    EXPECT_EQ(verdicts(checks),
              "topology=pass configuration=fail transfer=warn collective=warn training=pass ");
    EXPECT_EQ(exit_code(checks), 32 + 2);
    const Check& pcie = named(checks, "PCIe generation and width under load");
    EXPECT_NE(pcie.cause.find("GPU1's link trained down to Gen3 x8 under load (Gen4 x16 possible)"), std::string::npos);
    EXPECT_EQ(named(checks, "clocks and clock-event reasons under load").verdict, Verdict::warn);
    const Check& h2d = named(checks, "host to device (pinned)");
    EXPECT_NE(h2d.figures.find("slowest host->GPU1"), std::string::npos);
    EXPECT_NE(h2d.cause.find("host->GPU1 reads low (6.6 GB/s"), std::string::npos);
    EXPECT_EQ(h2d.cause.find("GPU0 reads low"), std::string::npos);
    EXPECT_EQ(named(checks, "all-reduce, checked and timed").verdict, Verdict::warn);
    expect_explained(checks);
}

TEST(DoctorFixtures, PowerCapAt60PercentFailsAndOneGpuSkipsPairs) {
    const SystemSnapshot s = fixture("power-capped-60pct");
    const auto checks = checks_of(s);
    EXPECT_EQ(verdicts(checks),
              "topology=pass configuration=fail transfer=pass collective=skipped training=pass ");
    EXPECT_EQ(exit_code(checks), 32 + 2);
    EXPECT_NE(named(checks, "power limit against the default").cause.find("capped at 60%"), std::string::npos);
    for (const char* n : {"P2P access between GPUs", "what lies between each pair", "ACS on the bridges between GPUs",
                          "peer copy (cudaMemcpyPeer)", "host-staged copy between GPUs"}) {
        EXPECT_EQ(named(checks, n).verdict, Verdict::skipped) << n;
        EXPECT_NE(named(checks, n).cause.find("one GPU"), std::string::npos) << n;
    }
    expect_explained(checks);
}

TEST(DoctorFixtures, P2pAllReduceReturningWrongDataFailsTheCollectiveTier) {
    const SystemSnapshot s = fixture("p2p-wrong-data");
    const auto checks = checks_of(s);
    EXPECT_EQ(verdicts(checks),
              "topology=pass configuration=pass transfer=pass collective=fail training=skipped ");
    EXPECT_EQ(exit_code(checks), 32 + 8);
    const Check& ar = named(checks, "all-reduce, checked and timed");
    EXPECT_NE(ar.cause.find("wrong elements over P2P"), std::string::npos);
    EXPECT_NE(ar.fix.find("NCCL_P2P_DISABLE=1"), std::string::npos);
    expect_explained(checks);
}

// ---- the verdicts the fixtures do not reach, each from a fixture changed in one reading

TEST(DoctorVerdicts, TopologyFailsOnAnNvlinkDown) {
    SystemSnapshot s = fixture("hgx-a100");
    s.gpus[5].nvlink_active = 10;
    const auto checks = checks_of(s);
    EXPECT_EQ(tier_verdict(checks, Tier::topology), Verdict::fail);
    EXPECT_NE(named(checks, "NVLink links up").cause.find("GPU5 has 10 NVLink links up where its peers have 12"),
              std::string::npos);
    EXPECT_EQ(exit_code(checks), 32 + 1);
}

TEST(DoctorVerdicts, TopologyWarnsOnABindingAcrossSockets) {
    SystemSnapshot s = fixture("hgx-a100");
    s.ranks[6].bound_cpus = "0-63";
    const auto checks = checks_of(s);
    EXPECT_EQ(named(checks, "rank binding against each GPU's CPUs").verdict, Verdict::warn);
    EXPECT_NE(named(checks, "rank binding against each GPU's CPUs").fix.find("--bind-to numa"), std::string::npos);
}

TEST(DoctorVerdicts, EveryTierSkipsWithItsReasonWithoutAGpu) {
    SystemSnapshot s;
    s.gpu_unavailable = "this build has no CUDA (SCALEBENCH_CUDA=OFF)";
    s.transfer_skipped = s.collective_skipped = s.training_skipped = "left out";
    const auto checks = checks_of(s);
    EXPECT_EQ(verdicts(checks), "topology=skipped configuration=skipped transfer=skipped collective=skipped "
                                "training=skipped ");
    EXPECT_EQ(exit_code(checks), 0);
    for (const Check& c : checks) EXPECT_FALSE(c.cause.empty()) << c.name;
    EXPECT_NE(named(checks, "BAR1 against memory").cause.find("SCALEBENCH_CUDA=OFF"), std::string::npos);
}

TEST(DoctorVerdicts, GpusSeenThroughSysfsAloneSkipTheRestWithTheBuildsReason) {
    SystemSnapshot s = fixture("stock-4090");
    s.gpu_unavailable = "this build has no CUDA (SCALEBENCH_CUDA=OFF): the GPU readings need it";
    for (GpuReading& g : s.gpus) {
        g.power_limit_w = g.power_default_w = g.sm_clock_load_mhz = 0;
        g.pcie_load = {};
        g.nvlink_active = -1;
    }
    for (PairReading& p : s.pairs) p.cuda_p2p = -1;
    s.versions = {};
    const auto checks = checks_of(s);
    EXPECT_EQ(named(checks, "GPUs, PCIe address, NUMA node").verdict, Verdict::pass);
    EXPECT_EQ(named(checks, "what lies between each pair").verdict, Verdict::pass);
    for (const char* n : {"NVLink links up", "P2P access between GPUs", "PCIe generation and width under load",
                          "power limit against the default", "clocks and clock-event reasons under load"}) {
        EXPECT_EQ(named(checks, n).verdict, Verdict::skipped) << n;
        EXPECT_NE(named(checks, n).cause.find("SCALEBENCH_CUDA=OFF"), std::string::npos) << n;
    }
}

TEST(DoctorVerdicts, ConfigurationWarnsOnAPowerLimitSlightlyLow) {
    SystemSnapshot s = fixture("hgx-a100");
    s.gpus[2].power_limit_w = 360;  // 90%
    const auto checks = checks_of(s);
    EXPECT_EQ(tier_verdict(checks, Tier::configuration), Verdict::warn);
    EXPECT_EQ(exit_code(checks), 0);
}

TEST(DoctorVerdicts, ConfigurationFailsOnAcsWithP2pAndUncorrectedEcc) {
    SystemSnapshot s = fixture("hgx-a100");
    s.pairs[0].acs_redirect_bridges = {"0000:05:00.0"};
    s.gpus[3].ecc_uncorrected = 2;
    const auto checks = checks_of(s);
    EXPECT_EQ(named(checks, "ACS on the bridges between GPUs").verdict, Verdict::fail);
    EXPECT_EQ(named(checks, "ECC mode and uncorrected errors").verdict, Verdict::fail);
    s.pairs[0].acs_read = 0;
    EXPECT_EQ(named(checks_of(s), "ACS on the bridges between GPUs").verdict, Verdict::skipped);
}

TEST(DoctorVerdicts, IommuTranslationWithP2pWarns) {
    SystemSnapshot s = fixture("p2p-wrong-data");
    s.gpus[0].iommu = "DMA-FQ";
    EXPECT_EQ(named(checks_of(s), "IOMMU mode").verdict, Verdict::warn);
}

TEST(DoctorVerdicts, TransferAboveTheLinkIsAMeasurementError) {
    SystemSnapshot s = fixture("hgx-a100");
    for (CopyReading& c : s.copies)
        if (c.kind == "h2d" && c.dst == 4) c.gbps = 40;  // Gen4 x16 carries 31.5
    const auto checks = checks_of(s);
    EXPECT_EQ(tier_verdict(checks, Tier::transfer), Verdict::fail);
    EXPECT_NE(named(checks, "host to device (pinned)").cause.find("above what the link carries"), std::string::npos);
    EXPECT_EQ(exit_code(checks), 32 + 4);
}

TEST(DoctorVerdicts, CollectiveFailsWhenP2pIsSlowerThanTheControl) {
    SystemSnapshot s = fixture("gen3-x8");
    s.collectives[1].rows.back().busbw_gbps = 7.5;
    const auto checks = checks_of(s);
    EXPECT_EQ(named(checks, "control with NCCL_P2P_DISABLE=1").verdict, Verdict::fail);
    EXPECT_NE(named(checks, "control with NCCL_P2P_DISABLE=1").cause.find("slower than going through host memory"),
              std::string::npos);
}

TEST(DoctorVerdicts, CollectiveWarnsWhenNcclIgnoresGrantedP2p) {
    SystemSnapshot s = fixture("hgx-a100");
    s.collectives[0].transports = std::vector<std::string>(16, "SHM");
    EXPECT_EQ(named(checks_of(s), "transport NCCL chose").verdict, Verdict::warn);
}

TEST(DoctorVerdicts, CollectiveAboveTheLinkFails) {
    SystemSnapshot s = fixture("hgx-a100");
    s.collectives[0].rows.back().busbw_gbps = 410;
    EXPECT_EQ(named(checks_of(s), "all-reduce, checked and timed").verdict, Verdict::fail);
}

TEST(DoctorVerdicts, SharedGpuRanksNameNetAndHaveNoHardwareBand) {
    SystemSnapshot s = fixture("power-capped-60pct");
    s.shared_gpu = true;
    s.world_size = 2;
    s.collective_skipped.clear();
    CollectiveRun run;
    run.label = "as_is";
    run.nranks = 2;
    run.transports = {"NET/Socket", "NET/Socket", "NET/Socket", "NET/Socket"};
    run.rows = {{1 << 30, 2.0e5, 5.4, 0}};
    s.collectives = {run};
    const auto checks = checks_of(s);
    EXPECT_EQ(named(checks, "all-reduce, checked and timed").verdict, Verdict::pass);
    EXPECT_NE(named(checks, "all-reduce, checked and timed").band.find("not a hardware figure"), std::string::npos);
    EXPECT_NE(named(checks, "transport NCCL chose").figures.find("NET/Socket on 4 connections"), std::string::npos);
    EXPECT_EQ(named(checks, "control with NCCL_P2P_DISABLE=1").verdict, Verdict::skipped);
    s.collectives[0].transports = {"SHM"};
    EXPECT_EQ(named(checks_of(s), "transport NCCL chose").verdict, Verdict::warn);
}

TEST(DoctorVerdicts, TrainingOnCpuRanksHasNoEfficiencyBand) {
    SystemSnapshot s = fixture("stock-4090");  // efficiency 55%: a warn on its GPUs
    for (RankReading& r : s.ranks) r.device = -1;
    const Check c = named(checks_of(s), "short training run at 1 and N ranks");
    EXPECT_EQ(c.verdict, Verdict::pass);
    EXPECT_NE(c.band.find("CPU ranks"), std::string::npos);
}

TEST(DoctorVerdicts, TrainingFailsWhenItsChecksFail) {
    SystemSnapshot s = fixture("hgx-a100");
    s.training.checks_passed = false;
    const auto checks = checks_of(s);
    EXPECT_EQ(tier_verdict(checks, Tier::training), Verdict::fail);
    EXPECT_EQ(exit_code(checks), 32 + 16);
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
        "host:1:1 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>\n";
    EXPECT_EQ(parse_nccl_transports(log),
              (std::vector<std::string>{"P2P/IPC", "P2P/CUMEM", "SHM", "NET/Socket", "NET/IB"}));
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
    const SystemSnapshot s = fixture("gen3-x8");
    const nlohmann::json j = s;
    const SystemSnapshot back = j.get<SystemSnapshot>();
    EXPECT_EQ(nlohmann::json(back), j);
    EXPECT_EQ(back.gpus[1].pcie_load.width, 8);
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

TEST(DoctorForms, TableReportAndJsonCarryTheSameVerdicts) {
    const SystemSnapshot s = fixture("gen3-x8");
    const auto checks = checks_of(s);
    const std::string table = format_table(checks, bands_for(s), s);
    const std::string md = format_markdown(checks, bands_for(s), s);
    const nlohmann::json j = checks_json(checks, bands_for(s), s);
    EXPECT_NE(table.find("configuration fail"), std::string::npos);
    EXPECT_NE(table.find("exit code 34"), std::string::npos);
    EXPECT_NE(md.find("| configuration | fail | PCIe generation and width under load |"), std::string::npos);
    EXPECT_EQ(j["tiers"]["configuration"], "fail");
    EXPECT_EQ(j["exit_code"], 34);
    EXPECT_EQ(j["checks"].size(), checks.size());
}

}  // namespace
}  // namespace sb::doctor
