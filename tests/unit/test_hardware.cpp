// Hardware profiles: every shipped profile loads, its peaks are the gpu_peaks table's (one
// table of truth), every number has a source; bad profiles fail like bad configs, at
// FILE:LINE:COLUMN with the key and the reason.
#include <gtest/gtest.h>

#include <filesystem>

#include "base/errors.h"
#include "src/system/gpu_peaks.h"
#include "src/projection/hardware.h"
#include "src/projection/projection.h"
#include "src/core/yaml_fields.h"

namespace sb {
namespace {

const std::string kDir = std::string(SCALEBENCH_SOURCE_DIR) + "/configs/hardware";

std::string profile_error(const std::string& yaml) {
    try {
        parse_hardware_profile(yaml, "hw.yaml");
    } catch (const UserError& e) {
        return e.what();
    }
    return "<parsed without error>";
}

const char* kGood = R"(name: test
description: "a test node"
gpu:
  device_name: "NVIDIA GeForce RTX 4090"
  sm_count: {value: 128, source: "whitepaper"}
  tdp_w: {value: 450, source: "spec"}
  price_usd: {value: 1800, source: "msrp"}
  gemm: [{precision: fp32, m: 4096, n: 4096, k: 4096, tflops: 53, source: "x"}, {precision: tf32, m: 4096, n: 4096, k: 4096, tflops: 84, source: "x"}, {precision: bf16, m: 4096, n: 4096, k: 4096, tflops: 150, source: "x"}, {precision: fp16, m: 4096, n: 4096, k: 4096, tflops: 160, source: "x"}]
  copy_gbps: {value: 900, source: "x"}
  kernel_gap_us: {value: 1, source: "x"}
node:
  gpus_per_node: {value: 4, source: "x"}
  link: pcie_p2p
  pcie_gen: {value: 4, source: "x"}
  pcie_lanes: {value: 16, source: "x"}
  pcie_topology: root_complex
  host_mem_bw_gbps: {value: 100, source: "x"}
  link_efficiency: {value: 0.8, source: "x"}
  link_latency_us: {value: 5, source: "x"}
  comm_sms: {value: 2, source: "x"}
)";

TEST(HardwareProfiles, EveryShippedProfileLoadsWithTheTablesPeaks) {
    const std::vector<std::string> required = {"a100-sxm4-40gb", "a100-sxm4-80gb", "a100-pcie-40gb", "a100-pcie-80gb",
                                               "rtx4090-24gb-pcie4", "rtx4090-24gb-pcie4-p2p", "rtx4090-48gb-pcie4",
                                               "rtx4090-48gb-pcie4-p2p", "h100-sxm", "h200-sxm"};
    for (const auto& name : required) EXPECT_TRUE(std::filesystem::exists(kDir + "/" + name + ".yaml")) << name;
    int count = 0;
    for (const auto& entry : std::filesystem::directory_iterator(kDir)) {
        const HardwareProfile hw = load_hardware_profile(entry.path().string());
        ++count;
        EXPECT_EQ(hw.name + ".yaml", entry.path().filename().string());
        const auto table = find_gpu_peak(hw.device_name);
        ASSERT_TRUE(table) << hw.device_name;
        EXPECT_EQ(hw.peak.bf16_tflops, table->bf16_tflops);
        EXPECT_EQ(hw.peak.tf32_tflops, table->tf32_tflops);
        EXPECT_EQ(hw.peak.fp32_tflops, table->fp32_tflops);
        EXPECT_EQ(hw.peak.mem_bw_gbps, table->mem_bw_gbps);
        for (const Sourced* s : {&hw.sm_count, &hw.tdp_w, &hw.price_usd, &hw.copy_gbps, &hw.kernel_gap_us, &hw.comm_sms, &hw.gpus_per_node, &hw.pcie_gen, &hw.pcie_lanes,
                                 &hw.host_mem_bw_gbps, &hw.link_efficiency, &hw.link_latency_us, &hw.memory_gb})
            EXPECT_FALSE(s->source.empty()) << hw.name;
        for (const PublishedGemm& g : hw.gemm) EXPECT_FALSE(g.source.empty()) << hw.name;
        if (hw.link == LinkClass::host_staged) {
            // The numbers whose sources disagree carry both ends, each with its source.
            EXPECT_TRUE(hw.staged_overlap.is_range()) << hw.name;
            EXPECT_TRUE(hw.link_efficiency.is_range()) << hw.name;
        }
        EXPECT_TRUE(hw.has_network()) << hw.name;
    }
    EXPECT_EQ(count, static_cast<int>(required.size()));
}

TEST(HardwareProfiles, DatasheetPeaksTheIssueNames) {
    // The dense rates with fp32 accumulate (Ada whitepaper: GeForce runs fp32-accumulate at
    // half the fp16-accumulate rate).
    const HardwareProfile a100 = load_hardware_profile(kDir + "/a100-sxm4-40gb.yaml");
    EXPECT_EQ(a100.peak.bf16_tflops, 312.0);
    EXPECT_EQ(a100.peak.tf32_tflops, 156.0);
    EXPECT_EQ(a100.peak.fp32_tflops, 19.5);
    const HardwareProfile rtx = load_hardware_profile(kDir + "/rtx4090-48gb-pcie4.yaml");
    EXPECT_EQ(rtx.peak.bf16_tflops, 165.2);
    EXPECT_EQ(rtx.peak.tf32_tflops, 82.6);
    EXPECT_EQ(rtx.peak.fp32_tflops, 82.6);
    EXPECT_EQ(rtx.memory_gb.value, 48.0);  // the mod: its own memory, the 4090's rates
    EXPECT_EQ(load_hardware_profile(kDir + "/rtx4090-24gb-pcie4.yaml").memory_gb.value, 24.0);
    EXPECT_EQ(load_hardware_profile(kDir + "/rtx4090-24gb-pcie4.yaml").link, LinkClass::host_staged);
    EXPECT_EQ(load_hardware_profile(kDir + "/rtx4090-24gb-pcie4-p2p.yaml").link, LinkClass::pcie_p2p);
    const HardwareProfile h200 = load_hardware_profile(kDir + "/h200-sxm.yaml");
    EXPECT_EQ(h200.peak.bf16_tflops, 989.4);
    EXPECT_EQ(h200.peak.tf32_tflops, 494.7);
}

TEST(HardwareProfiles, AGoodProfileParses) { EXPECT_EQ(profile_error(kGood), "<parsed without error>"); }

std::string with(const std::string& from, const std::string& to) {
    std::string s = kGood;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
}

TEST(HardwareProfiles, BadProfilesFailAtFileLineColumn) {
    EXPECT_EQ(profile_error(with("  tdp_w: {value: 450, source: \"spec\"}\n", "")),
              "hw.yaml:4:3: key 'gpu.tdp_w': missing");  // at the start of the gpu map
    EXPECT_EQ(profile_error(with("{value: 450, source: \"spec\"}", "{value: -450, source: \"spec\"}")),
              "hw.yaml:6:18: key 'gpu.tdp_w.value': must be > 0, got -450");
    EXPECT_EQ(profile_error(with("tflops: 160,", "tflops: -160,")),
              "hw.yaml:8:277: key 'gpu.gemm[3].tflops': must be > 0, got -160");
    EXPECT_EQ(profile_error(with(", {precision: fp16, m: 4096, n: 4096, k: 4096, tflops: 160, source: \"x\"}", "")),
              "hw.yaml:8:3: key 'gpu.gemm': no fp16 rate (every precision needs one)");
    EXPECT_EQ(profile_error(with("copy_gbps: {value: 900,", "copy_gbps: {value: 1900,")),
              "hw.yaml:4:3: key 'gpu.copy_gbps': 1900 GB/s is above the memory bandwidth 1008 of NVIDIA GeForce RTX 4090");
    // A range needs both ends, each with its source, around the central value.
    EXPECT_EQ(profile_error(with("link_efficiency: {value: 0.8, source: \"x\"}",
                                 "link_efficiency: {value: 0.8, source: \"x\", lo: 0.5, lo_source: \"y\"}")),
              "hw.yaml:18:20: key 'node.link_efficiency': a range needs lo, lo_source, hi and hi_source (a source for each end)");
    EXPECT_EQ(profile_error(with("link_efficiency: {value: 0.8, source: \"x\"}",
                                 "link_efficiency: {value: 0.8, source: \"x\", lo: 0.9, lo_source: \"y\", hi: 1, hi_source: \"z\"}")),
              "hw.yaml:18:46: key 'node.link_efficiency.lo': 0.9 is above the central value 0.8");
    EXPECT_EQ(profile_error(with("link: pcie_p2p", "link: host_staged")),
              "hw.yaml:12:3: key 'node.staged_overlap': missing (a host_staged node needs it)");
    EXPECT_EQ(profile_error(with("{value: 450, source: \"spec\"}", "{value: 450}")),
              "hw.yaml:6:10: key 'gpu.tdp_w.source': missing (every number names where it comes from)");
    EXPECT_EQ(profile_error(with("  tdp_w:", "  tdp_W:")), "hw.yaml:6:3: key 'gpu.tdp_W': unknown key; did you mean 'gpu.tdp_w'?");
    EXPECT_EQ(profile_error(with("link: pcie_p2p", "link: pcie")),
              "hw.yaml:13:9: key 'node.link': unknown value 'pcie'; valid values: nvlink, pcie_p2p, host_staged");
    EXPECT_EQ(profile_error(with("pcie_gen: {value: 4,", "pcie_gen: {value: 6,")),
              "hw.yaml:14:21: key 'node.pcie_gen.value': must be <= 5, got 6");
    EXPECT_EQ(profile_error(with("\"NVIDIA GeForce RTX 4090\"", "\"RTX 9090\"")).substr(0, 77),
              "hw.yaml:4:16: key 'gpu.device_name': unknown value 'RTX 9090'; valid values: ");
    EXPECT_EQ(profile_error(with("link: pcie_p2p", "link: nvlink")),
              "hw.yaml:12:3: key 'node.link_gbps': missing (an nvlink node needs its NVLink bandwidth)");
    EXPECT_EQ(profile_error(with("link: pcie_p2p", "link: pcie_p2p\n  sockets: {value: 2, source: \"s\"}")),
              "hw.yaml:12:3: key 'node.inter_socket_gbps': missing (2 sockets: the link between them, GB/s per direction)");
    EXPECT_EQ(profile_error(with("link: pcie_p2p", "link: pcie_p2p\n  caveats: [{text: \"t\"}]")),
              "hw.yaml:14:13: key 'node.caveats[0].source': missing");
    EXPECT_EQ(profile_error("name: [\n"), "hw.yaml:2:1: YAML syntax error: end of sequence flow not found");
    EXPECT_EQ(profile_error(std::string(kGood) + "colour: red\n").substr(0, 40), "hw.yaml:21:1: key 'colour': unknown key;");
}

TEST(HardwareProfiles, CaveatsSocketsAndTheStepSpreadParse) {
    const HardwareProfile hw = parse_hardware_profile(
        with("link: pcie_p2p", "link: pcie_p2p\n  sockets: {value: 2, source: \"s\"}\n  inter_socket_gbps: {value: 20, source: \"x\"}\n"
                               "  caveats: [{text: \"needs a module\", source: \"its README\"}]\n"
                               "  step_jitter_pct: {value: 1.5, source: \"mine\"}"),
        "hw.yaml");
    EXPECT_EQ(hw.sockets.value, 2);
    EXPECT_EQ(hw.inter_socket_gbps.value, 20);
    ASSERT_EQ(hw.caveats.size(), 1u);
    EXPECT_EQ(hw.caveats[0].text, "needs a module");
    EXPECT_EQ(hw.caveats[0].source, "its README");
    // A number the file gives replaces the default whole: no default range left behind.
    EXPECT_EQ(hw.step_jitter_pct.value, 1.5);
    EXPECT_FALSE(hw.step_jitter_pct.is_range());
    // Not given: the H200-measured default, a range.
    EXPECT_TRUE(hw.bucket_launch_us.is_range());
    EXPECT_EQ(to_json(hw)["node"]["caveats"][0]["source"], "its README");
    EXPECT_FALSE(hw.reported_failing());
    // A caveat whose source reports the setup failing says so; the flag is a boolean.
    const HardwareProfile failing = parse_hardware_profile(
        with("link: pcie_p2p", "link: pcie_p2p\n  caveats: [{text: \"fails\", source: \"a report\", reported_failing: true}]"),
        "hw.yaml");
    EXPECT_TRUE(failing.reported_failing());
    EXPECT_EQ(to_json(failing)["node"]["caveats"][0]["reported_failing"], true);
    EXPECT_NE(profile_error(with("link: pcie_p2p",
                                 "link: pcie_p2p\n  caveats: [{text: \"t\", source: \"s\", reported_failing: maybe}]"))
                  .find("node.caveats[0].reported_failing"),
              std::string::npos);
}

TEST(HardwareProfiles, P2pDisabledStagesThroughHostMemoryWithTheStagedTransportsNumbers) {
    const HardwareProfile a100 = load_hardware_profile(kDir + "/a100-sxm4-80gb.yaml");
    const HardwareProfile staged = load_hardware_profile(kDir + "/rtx4090-24gb-pcie4.yaml");
    const HardwareProfile off = with_p2p_disabled(a100, staged);
    EXPECT_EQ(off.link, LinkClass::host_staged);
    EXPECT_EQ(off.link_efficiency.value, staged.link_efficiency.value);
    EXPECT_EQ(off.staged_overlap.hi, staged.staged_overlap.hi);
    EXPECT_EQ(off.device_name, a100.device_name);                    // the GPU stays
    EXPECT_EQ(off.host_mem_bw_gbps.value, a100.host_mem_bw_gbps.value);  // and the host
    // Staged through host memory, its all-reduce is far slower than over NVLink.
    EXPECT_LT(CostModel(off).ring_busbw_gbps(8), 0.2 * CostModel(a100).ring_busbw_gbps(8));
    // Only a host_staged profile has a staged transport to take.
    EXPECT_THROW(with_p2p_disabled(a100, a100), UserError);
}

TEST(HardwareProfiles, NamesAndPaths) {
    EXPECT_EQ(hardware_profile_path("h200-sxm", "configs/hardware"), "configs/hardware/h200-sxm.yaml");
    EXPECT_EQ(hardware_profile_path("my/h.yaml", "configs/hardware"), "my/h.yaml");
    EXPECT_EQ(hardware_profile_path("h.yaml", "configs/hardware"), "h.yaml");
    try {
        load_hardware_profile("/nonexistent/x.yaml");
        FAIL();
    } catch (const UserError& e) {
        EXPECT_STREQ(e.what(), "/nonexistent/x.yaml: cannot read hardware profile: No such file or directory");
    }
}

TEST(HostSections, AShippedHostReplacesTheProfilesHostKeys) {
    const std::string hosts = std::string(SCALEBENCH_SOURCE_DIR) + "/configs/hosts";
    int count = 0;
    for (const auto& entry : std::filesystem::directory_iterator(hosts)) {
        HardwareProfile hw = load_hardware_profile(kDir + "/rtx4090-24gb-pcie4.yaml");
        const std::string path = entry.path().string();
        apply_host_section(hw, read_text_file(path, "host section"), path);
        EXPECT_EQ(hw.host + ".yaml", entry.path().filename().string());
        EXPECT_FALSE(hw.host_mem_bw_gbps.source.empty());
        ++count;
    }
    EXPECT_GE(count, 3);
    HardwareProfile hw = load_hardware_profile(kDir + "/rtx4090-24gb-pcie4.yaml");
    apply_host_section(hw, read_text_file(hosts + "/threadripper-pro-1s-ddr4-3200.yaml", "host"), "tr.yaml");
    EXPECT_EQ(hw.host_mem_bw_gbps.value, 204.8);
}

TEST(HostSections, BadHostsFailAtFileLineColumn) {
    auto error = [](const std::string& yaml) {
        HardwareProfile hw = load_hardware_profile(kDir + "/rtx4090-24gb-pcie4.yaml");
        try {
            apply_host_section(hw, yaml, "host.yaml");
        } catch (const UserError& e) {
            return std::string(e.what());
        }
        return std::string("<parsed without error>");
    };
    const std::string good = "name: h\ndescription: d\nsockets: {value: 1, source: s}\npcie_topology: switch\n"
                             "host_mem_bw_gbps: {value: 100, source: s}\n";
    EXPECT_EQ(error(good), "<parsed without error>");
    EXPECT_EQ(error("name: h\ndescription: d\nsockets: {value: 1, source: s}\npcie_topology: switch\n"),
              "host.yaml:1:1: key 'host_mem_bw_gbps': missing");
    EXPECT_EQ(error(good + "numa: 4\n").substr(0, 38), "host.yaml:6:1: key 'numa': unknown key");
    EXPECT_EQ(error("name: h\ndescription: d\nsockets: {value: 0, source: s}\npcie_topology: switch\n"
                    "host_mem_bw_gbps: {value: 100, source: s}\n"),
              "host.yaml:3:18: key 'sockets.value': must be >= 1, got 0");
    EXPECT_EQ(error("name: h\ndescription: d\nsockets: {value: 2, source: s}\npcie_topology: switch\n"
                    "host_mem_bw_gbps: {value: 100, source: s}\n"),
              "host.yaml:1:1: key 'inter_socket_gbps': missing (2 sockets: the link between them, GB/s per direction)");
}

}  // namespace
}  // namespace sb
