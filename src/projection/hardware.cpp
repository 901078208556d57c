// Hardware profile loading (src/projection/hardware.h). Every sourced number is written
// `key: {value: V, source: "where it comes from"}`; both parts are required, ranges are
// checked, unknown and missing keys are errors at FILE:LINE:COL, through the config
// reader's own rules (src/core/yaml_fields.h).
#include "src/projection/hardware.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/errors.h"
#include "src/core/yaml_fields.h"
#include "src/projection/profile_ranges.h"

namespace sb {

const char* link_class_name(LinkClass link) {
    switch (link) {
        case LinkClass::nvlink: return "nvlink";
        case LinkClass::pcie_p2p: return "pcie_p2p";
        case LinkClass::host_staged: return "host_staged";
    }
    return "unknown";
}

HardwareProfile with_p2p_disabled(const HardwareProfile& hw, const HardwareProfile& staged) {
    if (staged.link != LinkClass::host_staged)
        throw UserError(fmt::format("{}: not a host_staged profile: no staged transport to take", staged.source));
    if (staged.pcie_gen.value != hw.pcie_gen.value || staged.pcie_lanes.value != hw.pcie_lanes.value)
        throw UserError(fmt::format("{}: PCIe {} x{} where {} has {} x{}: its staged copies say nothing of this link",
                                    staged.source, staged.pcie_gen.value, staged.pcie_lanes.value, hw.name,
                                    hw.pcie_gen.value, hw.pcie_lanes.value));
    HardwareProfile out = hw;
    out.link = LinkClass::host_staged;
    out.link_efficiency = staged.link_efficiency;
    out.link_latency_us = staged.link_latency_us;
    out.comm_sms = staged.comm_sms;
    out.staged_overlap = staged.staged_overlap;
    out.staged_host_gbps = staged.staged_host_gbps;
    out.description = hw.description + ", run with NCCL_P2P_DISABLE=1 (staged transport of " + staged.name + ")";
    return out;
}

bool HardwareProfile::reported_failing() const {
    return std::any_of(caveats.begin(), caveats.end(), [](const Caveat& c) { return c.reported_failing; });
}

double pcie_gbps(int gen, int lanes) {
    // GT/s per lane and line coding: gen 3 8 GT/s 128b/130b, gen 4 16, gen 5 32 (PCI-SIG).
    SB_REQUIRE(gen >= 3 && gen <= 5, fmt::format("PCIe generation {}", gen));
    const double gts = gen == 3 ? 8.0 : gen == 4 ? 16.0 : 32.0;
    return gts * lanes / 8.0 * 128.0 / 130.0;
}

namespace {

// One sourced number of a section: its key, where it goes, whether required; its range is
// the key's row of profile_ranges.cpp.
struct Field {
    const char* key;
    Sourced* target;
    bool required;
    bool integer;
};

class ProfileReader {
public:
    explicit ProfileReader(const std::string& source) : fields_(source) {}

    void read(const YAML::Node& root, HardwareProfile& hw) {
        if (!root.IsMap()) fields_.fail_at(root.Mark(), "the hardware profile must be a map of keys");
        std::set<std::string> seen;
        fields_.for_each_key(root, "", {"name", "description", "gpu", "node", "network", "production"},
                             [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                                 seen.insert(key);
                                 if (key == "name") hw.name = fields_.non_empty_text(v, k, key);
                                 else if (key == "description") hw.description = fields_.non_empty_text(v, k, key);
                                 else if (key == "gpu") read_gpu(v, k, hw);
                                 else if (key == "node") read_node(v, k, hw);
                                 else if (key == "network") read_network(v, k, hw);
                                 else if (key == "production") read_production(v, k, hw);
                             });
        for (const char* key : {"name", "description", "gpu", "node"})
            if (!seen.count(key)) fields_.fail_at(root.Mark(), fmt::format("key '{}': missing", key));
    }

private:
    // Reads a section whose keys are `fields` (sourced numbers) plus `others` (handled by `other`).
    void read_section(const YAML::Node& value, const YAML::Node& key_node, const std::string& section,
                      const std::vector<Field>& fields, const std::vector<std::string>& others,
                      const std::function<void(const std::string&, const YAML::Node&, const YAML::Node&)>& other,
                      const std::vector<std::string>& required_others) {
        fields_.expect_map(value, key_node, section);
        std::vector<std::string> known = others;
        for (const Field& f : fields) known.push_back(f.key);
        std::set<std::string> seen;
        fields_.for_each_key(value, section, known, [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
            seen.insert(key);
            const std::string path = section + "." + key;
            for (const Field& f : fields)
                if (key == f.key) return read_sourced(v, k, path, f);
            other(key, k, v);
        });
        for (const Field& f : fields)
            if (f.required && !seen.count(f.key))
                fields_.fail_at(value.Mark(), fmt::format("key '{}.{}': missing", section, f.key));
        for (const auto& key : required_others)
            if (!seen.count(key)) fields_.fail_at(value.Mark(), fmt::format("key '{}.{}': missing", section, key));
    }

    // `{value: V, source: S}`, or a range `{value: V, source: S, lo: L, lo_source: S1, hi: H, hi_source: S2}`
    // with L <= V <= H, both ends or neither.
    void read_sourced(const YAML::Node& value, const YAML::Node& key_node, const std::string& path, const Field& f) {
        fields_.expect_map(value, key_node, path);
        *f.target = Sourced{};  // the file's number replaces a default whole, its range included
        std::set<std::string> seen;
        YAML::Node lo_node, hi_node;
        auto number = [&](const YAML::Node& v, const YAML::Node& k, const std::string& key) {
            const double x = fields_.real(v, k, key, profile_range(f.key));
            if (f.integer && x != static_cast<double>(static_cast<int64_t>(x)))
                fields_.fail(v, k, key, fmt::format("expected a whole number, got {}", v.Scalar()));
            return x;
        };
        fields_.for_each_key(value, path, {"value", "source", "lo", "lo_source", "hi", "hi_source"},
                             [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                                 seen.insert(key);
                                 const std::string where = path + "." + key;
                                 if (key == "value") f.target->value = number(v, k, where);
                                 else if (key == "lo") f.target->lo = number(v, lo_node = k, where);
                                 else if (key == "hi") f.target->hi = number(v, hi_node = k, where);
                                 else if (key == "source") f.target->source = fields_.non_empty_text(v, k, where);
                                 else if (key == "lo_source") f.target->lo_source = fields_.non_empty_text(v, k, where);
                                 else f.target->hi_source = fields_.non_empty_text(v, k, where);
                             });
        if (!seen.count("value")) fields_.fail_at(value.Mark(), fmt::format("key '{}.value': missing", path));
        if (!seen.count("source"))
            fields_.fail_at(value.Mark(), fmt::format("key '{}.source': missing (every number names where it comes from)", path));
        const int range_keys = static_cast<int>(seen.count("lo") + seen.count("lo_source") + seen.count("hi") + seen.count("hi_source"));
        if (range_keys == 0) return;
        if (range_keys != 4)
            fields_.fail_at(value.Mark(), fmt::format("key '{}': a range needs lo, lo_source, hi and hi_source (a source for each end)", path));
        if (f.target->lo > f.target->value)
            fields_.fail_at(lo_node.Mark(), fmt::format("key '{}.lo': {} is above the central value {}", path, f.target->lo, f.target->value));
        if (f.target->hi < f.target->value)
            fields_.fail_at(hi_node.Mark(), fmt::format("key '{}.hi': {} is below the central value {}", path, f.target->hi, f.target->value));
    }

    // gpu.gemm: a list of `{precision, m, n, k, tflops, source}`, at least one per precision.
    void read_gemm_list(const YAML::Node& value, const YAML::Node& key_node, HardwareProfile& hw) {
        if (!value.IsSequence() || value.size() == 0)
            fields_.fail(value, key_node, "gpu.gemm", "a list of published GEMM rates ({precision, m, n, k, tflops, source})");
        for (size_t i = 0; i < value.size(); ++i) {
            const YAML::Node& item = value[i];
            const std::string path = fmt::format("gpu.gemm[{}]", i);
            fields_.expect_map(item, key_node, path);
            PublishedGemm g;
            std::set<std::string> seen;
            fields_.for_each_key(item, path, {"precision", "m", "n", "k", "tflops", "source"},
                                 [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                                     seen.insert(key);
                                     const std::string where = path + "." + key;
                                     if (key == "precision")
                                         g.precision = parse_precision(fields_.choice(v, k, where, names_of(precision_choices())));
                                     else if (key == "m") g.m = fields_.integer(v, k, where, 1, 1 << 20);
                                     else if (key == "n") g.n = fields_.integer(v, k, where, 1, 1 << 20);
                                     else if (key == "k") g.k = fields_.integer(v, k, where, 1, 1 << 20);
                                     else if (key == "tflops") g.tflops = fields_.real(v, k, where, profile_range("tflops"));
                                     else g.source = fields_.non_empty_text(v, k, where);
                                 });
            for (const char* key : {"precision", "m", "n", "k", "tflops", "source"})
                if (!seen.count(key)) fields_.fail_at(item.Mark(), fmt::format("key '{}.{}': missing", path, key));
            hw.gemm.push_back(g);
        }
    }

    void read_gpu(const YAML::Node& value, const YAML::Node& key_node, HardwareProfile& hw) {
        const std::vector<Field> fields = {
            {"memory_gb", &hw.memory_gb, false, false},
            {"sm_count", &hw.sm_count, true, true},
            {"tdp_w", &hw.tdp_w, true, false},
            {"price_usd", &hw.price_usd, true, false},
            {"copy_gbps", &hw.copy_gbps, true, false},
            {"l2_mb", &hw.l2_mb, false, false},
            {"l2_copy_gbps", &hw.l2_copy_gbps, false, false},
            {"kernel_gap_us", &hw.kernel_gap_us, true, false},
            {"clock_factor", &hw.clock_factor, false, false},
            {"compute_error_pct", &hw.compute_error_pct, false, false},
        };
        YAML::Node gemm_key;
        read_section(value, key_node, "gpu", fields, {"device_name", "gemm"},
                     [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                         if (key == "gemm") {
                             gemm_key = k;
                             return read_gemm_list(v, k, hw);
                         }
                         const std::vector<std::string> names = known_gpu_names();
                         hw.device_name = fields_.choice(v, k, "gpu.device_name", names);
                         hw.peak = *find_gpu_peak(hw.device_name);
                     },
                     {"device_name", "gemm"});
        if (hw.memory_gb.source.empty()) hw.memory_gb = {hw.peak.mem_gb, hw.peak.source, 0, 0, "", ""};
        hw.peak.mem_gb = hw.memory_gb.value;
        for (Precision p : {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16})
            if (std::none_of(hw.gemm.begin(), hw.gemm.end(), [&](const PublishedGemm& g) { return g.precision == p; }))
                fields_.fail_at(gemm_key.Mark(), fmt::format("key 'gpu.gemm': no {} rate (every precision needs one)", precision_name(p)));
        if (hw.l2_copy_gbps.source.empty() != hw.l2_mb.source.empty())
            fields_.fail_at(value.Mark(), "keys 'gpu.l2_mb' and 'gpu.l2_copy_gbps': give both (an L2 term) or neither");
        if (hw.copy_gbps.value > hw.peak.mem_bw_gbps * 1.05)
            fields_.fail_at(value.Mark(), fmt::format("key 'gpu.copy_gbps': {} GB/s is above the memory bandwidth {} of {}",
                                                      hw.copy_gbps.value, hw.peak.mem_bw_gbps, hw.device_name));
    }

    void read_node(const YAML::Node& value, const YAML::Node& key_node, HardwareProfile& hw) {
        const std::vector<Field> fields = {
            {"gpus_per_node", &hw.gpus_per_node, true, true},
            {"link_gbps", &hw.link_gbps, false, false},
            {"pcie_gen", &hw.pcie_gen, true, true},
            {"pcie_lanes", &hw.pcie_lanes, true, true},
            {"host_mem_bw_gbps", &hw.host_mem_bw_gbps, true, false},
            {"link_efficiency", &hw.link_efficiency, true, false},
            {"link_latency_us", &hw.link_latency_us, true, false},
            {"nvls_busbw_gbps", &hw.nvls_busbw_gbps, false, false},
            {"comm_sms", &hw.comm_sms, true, true},
            {"staged_overlap", &hw.staged_overlap, false, false},
            {"staged_host_gbps", &hw.staged_host_gbps, false, false},
            {"sockets", &hw.sockets, false, true},
            {"inter_socket_gbps", &hw.inter_socket_gbps, false, false},
            {"gpus_per_switch", &hw.gpus_per_switch, false, true},
            {"step_jitter_pct", &hw.step_jitter_pct, false, false},
            {"bucket_launch_us", &hw.bucket_launch_us, false, false},
            {"framework_step_ms", &hw.framework_step_ms, false, false},
            {"input_images_per_s", &hw.input_images_per_s, false, false},
            {"server_usd", &hw.server_usd, false, false},
            {"host_power_w", &hw.host_power_w, false, false},
        };
        YAML::Node link_node;
        read_section(value, key_node, "node", fields, {"link", "pcie_topology", "patched_driver", "caveats"},
                     [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                         if (key == "caveats") {
                             read_caveats(v, k, hw);
                         } else if (key == "patched_driver") {
                             hw.patched_driver = fields_.boolean(v, k, "node.patched_driver");
                         } else if (key == "link") {
                             link_node = v;
                             const std::string link = fields_.choice(v, k, "node.link", {"nvlink", "pcie_p2p", "host_staged"});
                             hw.link = link == "nvlink" ? LinkClass::nvlink
                                       : link == "pcie_p2p" ? LinkClass::pcie_p2p : LinkClass::host_staged;
                         } else {
                             hw.pcie_topology = fields_.choice(v, k, "node.pcie_topology", {"root_complex", "switch"});
                         }
                     },
                     {"link", "pcie_topology"});
        if (hw.link == LinkClass::host_staged && hw.staged_overlap.source.empty())
            fields_.fail_at(value.Mark(), "key 'node.staged_overlap': missing (a host_staged node needs it)");
        if (hw.link == LinkClass::nvlink && hw.link_gbps.source.empty())
            fields_.fail_at(value.Mark(), "key 'node.link_gbps': missing (an nvlink node needs its NVLink bandwidth)");
        check_sockets(value, hw, "node.");
    }

    // Two sockets or more: the link between them bounds a ring that spans them.
    void check_sockets(const YAML::Node& value, const HardwareProfile& hw, const std::string& prefix) {
        if (hw.sockets.value > 1 && hw.inter_socket_gbps.source.empty())
            fields_.fail_at(value.Mark(), fmt::format("key '{}inter_socket_gbps': missing ({} sockets: the link between "
                                                      "them, GB/s per direction)",
                                                      prefix, hw.sockets.value));
    }

    // node.caveats: a list of `{text, source}`, with `reported_failing: true` where the source
    // reports the setup failing.
    void read_caveats(const YAML::Node& value, const YAML::Node& key_node, HardwareProfile& hw) {
        if (!value.IsSequence() || value.size() == 0)
            fields_.fail(value, key_node, "node.caveats", "a list of caveats ({text, source})");
        for (size_t i = 0; i < value.size(); ++i) {
            const YAML::Node& item = value[i];
            const std::string path = fmt::format("node.caveats[{}]", i);
            fields_.expect_map(item, key_node, path);
            Caveat c;
            fields_.for_each_key(item, path, {"text", "source", "reported_failing"},
                                 [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                                     if (key == "reported_failing")
                                         c.reported_failing = fields_.boolean(v, k, path + "." + key);
                                     else
                                         (key == "text" ? c.text : c.source) = fields_.non_empty_text(v, k, path + "." + key);
                                 });
            for (const auto& [key, got] : {std::pair{"text", &c.text}, std::pair{"source", &c.source}})
                if (got->empty()) fields_.fail_at(item.Mark(), fmt::format("key '{}.{}': missing", path, key));
            hw.caveats.push_back(std::move(c));
        }
    }

    void read_network(const YAML::Node& value, const YAML::Node& key_node, HardwareProfile& hw) {
        const std::vector<Field> fields = {
            {"nic_gbps", &hw.nic_gbps, true, false},
            {"nics_per_node", &hw.nics_per_node, true, true},
            {"efficiency", &hw.network_efficiency, true, false},
            {"latency_us", &hw.network_latency_us, true, false},
        };
        read_section(value, key_node, "network", fields, {"kind"},
                     [&](const std::string&, const YAML::Node& k, const YAML::Node& v) {
                         hw.network_kind = fields_.choice(v, k, "network.kind",
                                                          {"infiniband_hdr", "infiniband_ndr", "ethernet_100g",
                                                           "ethernet_200g", "ethernet_400g"});
                     },
                     {"kind"});
    }

    // production: `{value, source}` facts, each a choice; all three required.
    void read_production(const YAML::Node& value, const YAML::Node& key_node, HardwareProfile& hw) {
        fields_.expect_map(value, key_node, "production");
        struct Fact {
            const char* key;
            SourcedText* target;
            std::vector<std::string> choices;
        };
        const std::vector<Fact> facts = {{"ecc", &hw.ecc, {"yes", "optional", "no"}},
                                         {"datacenter_use", &hw.datacenter_use, {"yes", "no"}},
                                         {"cooling", &hw.cooling, {"passive", "blower", "open-air"}}};
        std::set<std::string> seen;
        fields_.for_each_key(value, "production", {"ecc", "datacenter_use", "cooling"},
                             [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                                 seen.insert(key);
                                 const std::string path = "production." + key;
                                 for (const Fact& f : facts) {
                                     if (key != f.key) continue;
                                     fields_.expect_map(v, k, path);
                                     std::set<std::string> parts;
                                     fields_.for_each_key(v, path, {"value", "source"},
                                                          [&](const std::string& part, const YAML::Node& pk, const YAML::Node& pv) {
                                                              parts.insert(part);
                                                              if (part == "value") f.target->value = fields_.choice(pv, pk, path + ".value", f.choices);
                                                              else f.target->source = fields_.non_empty_text(pv, pk, path + ".source");
                                                          });
                                     for (const char* part : {"value", "source"})
                                         if (!parts.count(part))
                                             fields_.fail_at(v.Mark(), fmt::format("key '{}.{}': missing", path, part));
                                 }
                             });
        for (const Fact& f : facts)
            if (!seen.count(f.key)) fields_.fail_at(value.Mark(), fmt::format("key 'production.{}': missing", f.key));
    }

public:
    // A host section: `name`, `description`, `sockets`, `pcie_topology`, `host_mem_bw_gbps`, and
    // `inter_socket_gbps` (two sockets or more), `gpus_per_switch` (optional).
    void read_host(const YAML::Node& root, HardwareProfile& hw) {
        if (!root.IsMap()) fields_.fail_at(root.Mark(), "the host section must be a map of keys");
        hw.inter_socket_gbps = {};
        hw.gpus_per_switch = HardwareProfile{}.gpus_per_switch;
        const std::vector<Field> fields = {
            {"sockets", &hw.sockets, true, true},
            {"host_mem_bw_gbps", &hw.host_mem_bw_gbps, true, false},
            {"inter_socket_gbps", &hw.inter_socket_gbps, false, false},
            {"gpus_per_switch", &hw.gpus_per_switch, false, true},
        };
        std::set<std::string> seen;
        const std::vector<std::string> required = {"name", "description", "pcie_topology", "sockets", "host_mem_bw_gbps"};
        std::vector<std::string> known = {"name", "description", "pcie_topology"};
        for (const Field& f : fields) known.push_back(f.key);
        fields_.for_each_key(root, "", known, [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
            seen.insert(key);
            for (const Field& f : fields)
                if (key == f.key) return read_sourced(v, k, key, f);
            if (key == "name") hw.host = fields_.non_empty_text(v, k, key);
            else if (key == "description") fields_.non_empty_text(v, k, key);
            else hw.pcie_topology = fields_.choice(v, k, key, {"root_complex", "switch"});
        });
        for (const std::string& key : required)
            if (!seen.count(key)) fields_.fail_at(root.Mark(), fmt::format("key '{}': missing", key));
        check_sockets(root, hw, "");
    }

private:
    YamlFields fields_;
};

}  // namespace

void apply_host_section(HardwareProfile& hw, const std::string& yaml_text, const std::string& source) {
    ProfileReader(source).read_host(load_yaml_document(yaml_text, source, "host section"), hw);
}

std::vector<std::pair<std::string, Sourced*>> sourced_numbers(HardwareProfile& hw) {
    return {{"gpu.memory_gb", &hw.memory_gb},
            {"gpu.sm_count", &hw.sm_count},
            {"gpu.tdp_w", &hw.tdp_w},
            {"gpu.price_usd", &hw.price_usd},
            {"gpu.copy_gbps", &hw.copy_gbps},
            {"gpu.l2_mb", &hw.l2_mb},
            {"gpu.l2_copy_gbps", &hw.l2_copy_gbps},
            {"gpu.kernel_gap_us", &hw.kernel_gap_us},
            {"gpu.clock_factor", &hw.clock_factor},
            {"gpu.compute_error_pct", &hw.compute_error_pct},
            {"node.gpus_per_node", &hw.gpus_per_node},
            {"node.link_gbps", &hw.link_gbps},
            {"node.pcie_gen", &hw.pcie_gen},
            {"node.pcie_lanes", &hw.pcie_lanes},
            {"node.host_mem_bw_gbps", &hw.host_mem_bw_gbps},
            {"node.link_efficiency", &hw.link_efficiency},
            {"node.link_latency_us", &hw.link_latency_us},
            {"node.nvls_busbw_gbps", &hw.nvls_busbw_gbps},
            {"node.comm_sms", &hw.comm_sms},
            {"node.staged_overlap", &hw.staged_overlap},
            {"node.staged_host_gbps", &hw.staged_host_gbps},
            {"node.sockets", &hw.sockets},
            {"node.inter_socket_gbps", &hw.inter_socket_gbps},
            {"node.gpus_per_switch", &hw.gpus_per_switch},
            {"node.step_jitter_pct", &hw.step_jitter_pct},
            {"node.bucket_launch_us", &hw.bucket_launch_us},
            {"node.framework_step_ms", &hw.framework_step_ms},
            {"node.input_images_per_s", &hw.input_images_per_s},
            {"network.nic_gbps", &hw.nic_gbps},
            {"network.nics_per_node", &hw.nics_per_node},
            {"network.efficiency", &hw.network_efficiency},
            {"network.latency_us", &hw.network_latency_us}};
}

std::vector<std::string> ranged_keys(const HardwareProfile& hw) {
    HardwareProfile copy = hw;
    std::vector<std::string> keys;
    for (const auto& [key, number] : sourced_numbers(copy))
        if (number->is_range()) keys.push_back(key);
    return keys;
}

HardwareProfile at_range_end(const HardwareProfile& hw, const std::string& key, bool high) {
    HardwareProfile out = hw;
    for (auto& [k, number] : sourced_numbers(out))
        if (k == key) {
            SB_REQUIRE(number->is_range(), key + " is not a range");
            number->value = high ? number->hi : number->lo;
            return out;
        }
    SB_REQUIRE(false, "no profile number " + key);
    return out;
}

void check_ranged_count(const HardwareProfile& hw) {
    const std::vector<std::string> keys = ranged_keys(hw);
    if (keys.size() > kMaxRangedNumbers)
        throw UserError(fmt::format("{}: {} ranged numbers ({}); a band projects every corner of them (2^{}), and a "
                                    "profile may have at most {} ({} corners): give the others one value",
                                    hw.source, keys.size(), fmt::join(keys, ", "), keys.size(), kMaxRangedNumbers,
                                    size_t{1} << kMaxRangedNumbers));
}

std::vector<HardwareProfile> range_corners(const HardwareProfile& hw) {
    check_ranged_count(hw);
    const std::vector<std::string> keys = ranged_keys(hw);
    std::vector<HardwareProfile> corners;
    for (size_t corner = 0; corner < (size_t{1} << keys.size()); ++corner) {
        HardwareProfile p = hw;
        for (size_t i = 0; i < keys.size(); ++i) p = at_range_end(p, keys[i], (corner >> i) & 1);
        corners.push_back(std::move(p));
    }
    return corners;
}

HardwareProfile parse_hardware_profile(const std::string& yaml_text, const std::string& source) {
    HardwareProfile hw;
    hw.source = source;
    ProfileReader(source).read(load_yaml_document(yaml_text, source, "hardware profile"), hw);
    return hw;
}

HardwareProfile load_hardware_profile(const std::string& path) {
    return parse_hardware_profile(read_text_file(path, "hardware profile"), path);
}

std::string hardware_profile_path(const std::string& name_or_path, const std::string& profile_dir) {
    const bool is_path = name_or_path.find('/') != std::string::npos ||
                         (name_or_path.size() > 5 && name_or_path.substr(name_or_path.size() - 5) == ".yaml");
    return is_path ? name_or_path : profile_dir + "/" + name_or_path + ".yaml";
}

nlohmann::json to_json(const HardwareProfile& hw) {
    auto sourced = [](const Sourced& s) {
        nlohmann::json j = {{"value", s.value}, {"source", s.source}};
        if (s.is_range()) j.update({{"lo", s.lo}, {"lo_source", s.lo_source}, {"hi", s.hi}, {"hi_source", s.hi_source}});
        return j;
    };
    nlohmann::json gemm = nlohmann::json::array();
    for (const PublishedGemm& g : hw.gemm)
        gemm.push_back({{"precision", precision_name(g.precision)}, {"m", g.m}, {"n", g.n}, {"k", g.k}, {"tflops", g.tflops},
                        {"source", g.source}});
    nlohmann::json j = {
        {"source", hw.source},
        {"name", hw.name},
        {"gpu",
         {{"device_name", hw.device_name},
          {"peak_tflops", {{"fp32", hw.peak.fp32_tflops}, {"tf32", hw.peak.tf32_tflops}, {"fp16", hw.peak.fp16_tflops},
                           {"bf16", hw.peak.bf16_tflops}}},
          {"mem_bw_gbps", hw.peak.mem_bw_gbps},
          {"peak_source", hw.peak.source},
          {"memory_gb", sourced(hw.memory_gb)},
          {"sm_count", sourced(hw.sm_count)},
          {"tdp_w", sourced(hw.tdp_w)},
          {"price_usd", sourced(hw.price_usd)},
          {"gemm", gemm},
          {"copy_gbps", sourced(hw.copy_gbps)},
          {"l2_mb", sourced(hw.l2_mb)},
          {"l2_copy_gbps", sourced(hw.l2_copy_gbps)},
          {"kernel_gap_us", sourced(hw.kernel_gap_us)},
          {"compute_error_pct", sourced(hw.compute_error_pct)}}},
        {"node",
         {{"gpus_per_node", sourced(hw.gpus_per_node)},
          {"link", link_class_name(hw.link)},
          {"link_gbps", sourced(hw.link_gbps)},
          {"pcie_gen", sourced(hw.pcie_gen)},
          {"pcie_lanes", sourced(hw.pcie_lanes)},
          {"pcie_topology", hw.pcie_topology},
          {"host", hw.host},
          {"patched_driver", hw.patched_driver},
          {"host_mem_bw_gbps", sourced(hw.host_mem_bw_gbps)},
          {"link_efficiency", sourced(hw.link_efficiency)},
          {"link_latency_us", sourced(hw.link_latency_us)},
          {"comm_sms", sourced(hw.comm_sms)},
          {"staged_overlap", sourced(hw.staged_overlap)},
          {"sockets", sourced(hw.sockets)},
          {"gpus_per_switch", sourced(hw.gpus_per_switch)},
          {"step_jitter_pct", sourced(hw.step_jitter_pct)},
          {"bucket_launch_us", sourced(hw.bucket_launch_us)},
          {"framework_step_ms", sourced(hw.framework_step_ms)}}},
    };
    if (!hw.inter_socket_gbps.source.empty()) j["node"]["inter_socket_gbps"] = sourced(hw.inter_socket_gbps);
    if (!hw.input_images_per_s.source.empty()) j["node"]["input_images_per_s"] = sourced(hw.input_images_per_s);
    if (!hw.nvls_busbw_gbps.source.empty()) j["node"]["nvls_busbw_gbps"] = sourced(hw.nvls_busbw_gbps);
    if (!hw.staged_host_gbps.source.empty()) j["node"]["staged_host_gbps"] = sourced(hw.staged_host_gbps);
    if (!hw.caveats.empty()) {
        j["node"]["caveats"] = nlohmann::json::array();
        for (const Caveat& c : hw.caveats)
            j["node"]["caveats"].push_back({{"text", c.text}, {"source", c.source}, {"reported_failing", c.reported_failing}});
    }
    if (!hw.server_usd.source.empty()) j["node"]["server_usd"] = sourced(hw.server_usd);
    if (!hw.host_power_w.source.empty()) j["node"]["host_power_w"] = sourced(hw.host_power_w);
    if (hw.has_production())
        j["production"] = {{"ecc", {{"value", hw.ecc.value}, {"source", hw.ecc.source}}},
                           {"datacenter_use", {{"value", hw.datacenter_use.value}, {"source", hw.datacenter_use.source}}},
                           {"cooling", {{"value", hw.cooling.value}, {"source", hw.cooling.source}}}};
    if (hw.has_network())
        j["network"] = {{"kind", hw.network_kind},
                        {"nic_gbps", sourced(hw.nic_gbps)},
                        {"nics_per_node", sourced(hw.nics_per_node)},
                        {"efficiency", sourced(hw.network_efficiency)},
                        {"latency_us", sourced(hw.network_latency_us)}};
    return j;
}

std::string busbw_provenance(const HardwareProfile& hw) {
    if (hw.link != LinkClass::host_staged) return "";
    return "the host-staged busbw is a fitted figure, not validated: its staged copy rate (node.link_efficiency) is "
           "one published two-GPU copy test's and fits published two-GPU training speed-ups; no published "
           "all_reduce_perf busbw of a host-staged (no-P2P) node of this GPU was found to check it (docs/projection.md)";
}

}  // namespace sb
