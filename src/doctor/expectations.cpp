// The per-model expectation table (see expectations.h). Each value cites its document.
#include "src/doctor/expectations.h"

namespace sb::doctor {

namespace {

const char* const kA100Paper = "NVIDIA A100 Tensor Core GPU Architecture whitepaper: twelve third-generation NVLink links per A100";
const char* const kA100Sheet = "NVIDIA A100 Tensor Core GPU datasheet: PCIe Gen4 x16";
const char* const kRemap =
    "NVIDIA GPU Memory Error Management (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt): A100 and later heal "
    "uncorrectable errors by row remapping, not page retirement";
const char* const kEcc = "NVIDIA A100/H100/H200 datasheets: ECC on HBM, on by default";
const char* const kHopperLinks = "NVIDIA H100 Tensor Core GPU Architecture whitepaper: eighteen fourth-generation NVLink links";

ModelExpectation datacenter(const char* name, std::vector<int> links, const char* link_source, int gen,
                            double memory, const char* memory_source, double power, const char* power_source,
                            bool nvls) {
    ModelExpectation e;
    e.device_name = name;
    e.nvlink_links = std::move(links);
    e.nvlink_source = link_source;
    e.pcie_gen = gen;
    e.pcie_width = 16;
    e.pcie_source = gen == 4 ? kA100Sheet : "NVIDIA H100/H200 datasheets: PCIe Gen5 x16";
    e.memory_gb = {memory};
    e.memory_source = memory_source;
    e.power_default_w = power;
    e.power_source = power_source;
    e.ecc_on_by_default = true;
    e.ecc_source = kEcc;
    e.row_remapping = true;
    e.nvls = nvls;
    return e;
}

std::vector<ModelExpectation> build() {
    std::vector<ModelExpectation> t;
    t.push_back(datacenter("NVIDIA A100-SXM4-40GB", {12}, kA100Paper, 4, 40, "NVIDIA A100 datasheet: 40GB HBM2", 400,
                           "NVIDIA A100 datasheet: SXM max TDP 400 W (the default limit)", false));
    t.push_back(datacenter("NVIDIA A100-SXM4-80GB", {12}, kA100Paper, 4, 80, "NVIDIA A100 datasheet: 80GB HBM2e", 400,
                           "NVIDIA A100 datasheet: SXM max TDP 400 W (the default limit)", false));
    const char* bridge = "NVIDIA A100 PCIe datasheet: none, or twelve links with the NVLink Bridge for 2 GPUs (600 GB/s)";
    t.push_back(datacenter("NVIDIA A100-PCIE-40GB", {0, 12}, bridge, 4, 40, "NVIDIA A100 datasheet: 40GB HBM2", 250,
                           "NVIDIA A100 40GB PCIe datasheet: max TDP 250 W", false));
    t.push_back(datacenter("NVIDIA A100 80GB PCIe", {0, 12}, bridge, 4, 80, "NVIDIA A100 datasheet: 80GB HBM2e", 300,
                           "NVIDIA A100 80GB PCIe datasheet: max TDP 300 W", false));
    t.push_back(datacenter("NVIDIA H100 80GB HBM3", {18}, kHopperLinks, 5, 80, "NVIDIA H100 datasheet: H100 SXM 80GB",
                           700, "NVIDIA H100 datasheet: H100 SXM max TDP up to 700 W", true));
    t.push_back(datacenter("NVIDIA H200", {18}, kHopperLinks, 5, 141, "NVIDIA H200 datasheet: 141GB HBM3e", 700,
                           "NVIDIA H200 datasheet: H200 SXM max TDP up to 700 W", true));
    ModelExpectation g;
    g.device_name = "NVIDIA GeForce RTX 4090";
    g.nvlink_links = {0};
    g.nvlink_source = "NVIDIA Ada GPU Architecture whitepaper: GeForce RTX 40 cards have no NVLink";
    g.pcie_gen = 4;
    g.pcie_width = 16;
    g.pcie_source = "NVIDIA GeForce RTX 4090 specifications: PCIe 4.0 x16";
    g.memory_gb = {24, 48};
    g.memory_source = "NVIDIA GeForce RTX 4090 specifications: 24 GB GDDR6X; 48 GB: the aftermarket memory mod "
                      "(tinygrad/open-gpu-kernel-modules#36)";
    g.power_default_w = 450;
    g.power_source = "NVIDIA GeForce RTX 4090 specifications: total graphics power 450 W";
    g.ecc_on_by_default = false;
    g.ecc_source = "GeForce cards ship with ECC off";
    g.stock_p2p = false;
    g.bar1_max_gb = 32;
    g.bar1_source = "the AD102 Resizable BAR capability offers at most 32 GB (lspci -vv: BAR 1 supported sizes; a 48 GB "
                    "card runs at 32 GB BAR1, tinygrad/open-gpu-kernel-modules#36)";
    t.push_back(g);
    return t;
}

}  // namespace

const std::vector<ModelExpectation>& model_expectations() {
    static const std::vector<ModelExpectation> table = build();
    return table;
}

const ModelExpectation* find_expectation(const std::string& device_name) {
    for (const ModelExpectation& e : model_expectations())
        if (e.device_name == device_name) return &e;
    return nullptr;
}

}  // namespace sb::doctor
