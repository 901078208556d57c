// What each GPU model should show, from its datasheet or whitepaper (each value with its
// source): NVLink links, the card's own PCIe generation and width, memory, default power
// limit, ECC as shipped, how it heals memory errors, NVLink SHARP, the stock driver's P2P.
// The doctor judges every GPU against its model's row; a model without a row is not guessed.
// Rates (GEMM, memory copy, links) come from the hardware profiles (bands.cpp).
#pragma once

#include <string>
#include <vector>

namespace sb::doctor {

struct ModelExpectation {
    std::string device_name;             // as CUDA and NVML name it
    std::vector<int> nvlink_links;       // the counts a healthy card shows (several: optional bridge)
    std::string nvlink_source;
    int pcie_gen = 0, pcie_width = 0;    // the card's own maximum
    std::string pcie_source;
    std::vector<double> memory_gb;       // datasheet sizes (a known memory mod besides)
    std::string memory_source;
    double power_default_w = 0;
    std::string power_source;
    bool ecc_on_by_default = false;
    std::string ecc_source;
    bool row_remapping = false;          // heals uncorrectable errors by row remapping (A100 and later), not page retirement
    bool nvls = false;                   // NVLink SHARP through NVSwitch: NCCL's NVLS reduces in the switch
    bool stock_p2p = true;               // the vendor's driver grants P2P between two such cards
    double bar1_max_gb = 0;              // the largest BAR1 the card's VBIOS offers; 0: at least its memory
    std::string bar1_source;
};

// The model's row by device name (case-sensitive as the driver reports it); nullptr when none.
const ModelExpectation* find_expectation(const std::string& device_name);

// Every row (docs and tests list them).
const std::vector<ModelExpectation>& model_expectations();

}  // namespace sb::doctor
