// Hardware profile loading (src/projection/hardware.h). Every sourced number is written
// `key: {value: V, source: "where it comes from"}`; both parts are required, ranges are
// checked, unknown and missing keys are errors at FILE:LINE:COL, through the config
// reader's own rules (src/core/yaml_fields.h).
#include "src/projection/hardware.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "src/core/errors.h"
#include "src/core/yaml_fields.h"

namespace sb {

const char* link_class_name(LinkClass link) {
    switch (link) {
        case LinkClass::nvlink: return "nvlink";
        case LinkClass::pcie_p2p: return "pcie_p2p";
        case LinkClass::host_staged: return "host_staged";
    }
    return "unknown";
}

double pcie_gbps(int gen, int lanes) {
    // GT/s per lane and line coding: gen 3 8 GT/s 128b/130b, gen 4 16, gen 5 32 (PCI-SIG).
    SB_REQUIRE(gen >= 3 && gen <= 5, fmt::format("PCIe generation {}", gen));
    const double gts = gen == 3 ? 8.0 : gen == 4 ? 16.0 : 32.0;
    return gts * lanes / 8.0 * 128.0 / 130.0;
}

namespace {

// One sourced number of a section: its key, where it goes, its range, whether required.
struct Field {
    const char* key;
    Sourced* target;
    double lo;
    bool lo_open;
    double hi;  // <= lo: unbounded
    bool required;
    bool integer;
};

class ProfileReader {
public:
    explicit ProfileReader(const std::string& source) : fields_(source) {}

    void read(const YAML::Node& root, HardwareProfile& hw) {
        if (!root.IsMap()) fields_.fail_at(root.Mark(), "the hardware profile must be a map of keys");
        std::set<std::string> seen;
        fields_.for_each_key(root, "", {"name", "description", "gpu", "node", "network"},
                             [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                                 seen.insert(key);
                                 if (key == "name") hw.name = fields_.non_empty_text(v, k, key);
                                 else if (key == "description") hw.description = fields_.non_empty_text(v, k, key);
                                 else if (key == "gpu") read_gpu(v, k, hw);
                                 else if (key == "node") read_node(v, k, hw);
                                 else if (key == "network") read_network(v, k, hw);
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

    void read_sourced(const YAML::Node& value, const YAML::Node& key_node, const std::string& path, const Field& f) {
        fields_.expect_map(value, key_node, path);
        bool has_value = false, has_source = false;
        fields_.for_each_key(value, path, {"value", "source"}, [&](const std::string& key, const YAML::Node& k,
                                                                   const YAML::Node& v) {
            if (key == "value") {
                has_value = true;
                f.target->value = f.integer ? static_cast<double>(fields_.integer(v, k, path + ".value",
                                                                                  static_cast<int64_t>(f.lo), static_cast<int64_t>(f.hi)))
                                            : fields_.real(v, k, path + ".value", f.lo, f.lo_open, f.hi);
            } else {
                has_source = true;
                f.target->source = fields_.non_empty_text(v, k, path + ".source");
            }
        });
        if (!has_value) fields_.fail_at(value.Mark(), fmt::format("key '{}.value': missing", path));
        if (!has_source) fields_.fail_at(value.Mark(), fmt::format("key '{}.source': missing (every number names where it comes from)", path));
    }

    void read_gpu(const YAML::Node& value, const YAML::Node& key_node, HardwareProfile& hw) {
        const std::vector<Field> fields = {
            {"memory_gb", &hw.memory_gb, 0, true, 0, false, false},
            {"sm_count", &hw.sm_count, 1, false, 1024, true, true},
            {"tdp_w", &hw.tdp_w, 0, true, 0, true, false},
            {"price_usd", &hw.price_usd, 0, true, 0, true, false},
            {"gemm_efficiency", &hw.gemm_efficiency, 0, true, 1, true, false},
            {"memory_efficiency", &hw.memory_efficiency, 0, true, 1, true, false},
            {"kernel_gap_us", &hw.kernel_gap_us, 0, false, 0, true, false},
        };
        read_section(value, key_node, "gpu", fields, {"device_name"},
                     [&](const std::string&, const YAML::Node& k, const YAML::Node& v) {
                         const std::vector<std::string> names = known_gpu_names();
                         hw.device_name = fields_.choice(v, k, "gpu.device_name", names);
                         hw.peak = *find_gpu_peak(hw.device_name);
                     },
                     {"device_name"});
        if (hw.memory_gb.source.empty()) hw.memory_gb = {hw.peak.mem_gb, hw.peak.source};
        hw.peak.mem_gb = hw.memory_gb.value;
    }

    void read_node(const YAML::Node& value, const YAML::Node& key_node, HardwareProfile& hw) {
        const std::vector<Field> fields = {
            {"gpus_per_node", &hw.gpus_per_node, 1, false, 64, true, true},
            {"link_gbps", &hw.link_gbps, 0, true, 0, false, false},
            {"pcie_gen", &hw.pcie_gen, 3, false, 5, true, true},
            {"pcie_lanes", &hw.pcie_lanes, 1, false, 16, true, true},
            {"host_mem_bw_gbps", &hw.host_mem_bw_gbps, 0, true, 0, true, false},
            {"link_efficiency", &hw.link_efficiency, 0, true, 1, true, false},
            {"link_latency_us", &hw.link_latency_us, 0, false, 0, true, false},
        };
        YAML::Node link_node;
        read_section(value, key_node, "node", fields, {"link", "pcie_topology"},
                     [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                         if (key == "link") {
                             link_node = v;
                             const std::string link = fields_.choice(v, k, "node.link", {"nvlink", "pcie_p2p", "host_staged"});
                             hw.link = link == "nvlink" ? LinkClass::nvlink
                                       : link == "pcie_p2p" ? LinkClass::pcie_p2p : LinkClass::host_staged;
                         } else {
                             hw.pcie_topology = fields_.choice(v, k, "node.pcie_topology", {"root_complex", "switch"});
                         }
                     },
                     {"link", "pcie_topology"});
        if (hw.link == LinkClass::nvlink && hw.link_gbps.source.empty())
            fields_.fail_at(value.Mark(), "key 'node.link_gbps': missing (an nvlink node needs its NVLink bandwidth)");
    }

    void read_network(const YAML::Node& value, const YAML::Node& key_node, HardwareProfile& hw) {
        const std::vector<Field> fields = {
            {"nic_gbps", &hw.nic_gbps, 0, true, 0, true, false},
            {"nics_per_node", &hw.nics_per_node, 1, false, 64, true, true},
            {"efficiency", &hw.network_efficiency, 0, true, 1, true, false},
            {"latency_us", &hw.network_latency_us, 0, false, 0, true, false},
        };
        read_section(value, key_node, "network", fields, {"kind"},
                     [&](const std::string&, const YAML::Node& k, const YAML::Node& v) {
                         hw.network_kind = fields_.choice(v, k, "network.kind",
                                                          {"infiniband_hdr", "infiniband_ndr", "ethernet_100g",
                                                           "ethernet_200g", "ethernet_400g"});
                     },
                     {"kind"});
    }

    YamlFields fields_;
};

}  // namespace

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
    auto sourced = [](const Sourced& s) { return nlohmann::json{{"value", s.value}, {"source", s.source}}; };
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
          {"gemm_efficiency", sourced(hw.gemm_efficiency)},
          {"memory_efficiency", sourced(hw.memory_efficiency)},
          {"kernel_gap_us", sourced(hw.kernel_gap_us)}}},
        {"node",
         {{"gpus_per_node", sourced(hw.gpus_per_node)},
          {"link", link_class_name(hw.link)},
          {"link_gbps", sourced(hw.link_gbps)},
          {"pcie_gen", sourced(hw.pcie_gen)},
          {"pcie_lanes", sourced(hw.pcie_lanes)},
          {"pcie_topology", hw.pcie_topology},
          {"host_mem_bw_gbps", sourced(hw.host_mem_bw_gbps)},
          {"link_efficiency", sourced(hw.link_efficiency)},
          {"link_latency_us", sourced(hw.link_latency_us)}}},
    };
    if (hw.has_network())
        j["network"] = {{"kind", hw.network_kind},
                        {"nic_gbps", sourced(hw.nic_gbps)},
                        {"nics_per_node", sourced(hw.nics_per_node)},
                        {"efficiency", sourced(hw.network_efficiency)},
                        {"latency_us", sourced(hw.network_latency_us)}};
    return j;
}

}  // namespace sb
