// The datasheet-peak table (see gpu_peaks.h). Every entry names its source; dense rates
// are the datasheets' "with sparsity" figures halved where only those are printed.
#include "src/system/gpu_peaks.h"

#include <algorithm>
#include <cctype>

namespace sb {
namespace {

struct Entry {
    std::vector<const char*> device_names;  // cudaDeviceProp::name spellings
    GpuPeak peak;
};

const std::vector<Entry>& table() {
    static const std::vector<Entry> entries = {
        {{"NVIDIA H200"},
         {"H200 SXM 141GB", 67.0, 494.7, 989.4, 989.4, 4800, 141,
          "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM: 4.8 TB/s, 141 GB; compute as H100 SXM); "
          "dense rates from the NVIDIA H100 Tensor Core GPU Architecture whitepaper, H100 SXM5 column"}},
        {{"NVIDIA H200 NVL"},
         {"H200 NVL 141GB", 60.0, 417.5, 835.5, 835.5, 4800, 141,
          "NVIDIA H200 Tensor Core GPU datasheet, H200 NVL column (TF32 835, BF16/FP16 1671 with "
          "sparsity, halved for dense)"}},
        {{"NVIDIA H100 80GB HBM3"},
         {"H100 SXM5 80GB", 67.0, 494.7, 989.4, 989.4, 3350, 80,
          "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: 3.35 TB/s, 80 GB) and H100 Tensor Core GPU "
          "Architecture whitepaper (dense FP16/BF16 with FP32 accumulate 989.4, TF32 494.7)"}},
        {{"NVIDIA H100 PCIe"},
         {"H100 PCIe 80GB", 51.0, 378.0, 756.0, 756.0, 2000, 80,
          "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column (FP32 51, TF32 756 and BF16/FP16 1513 "
          "with sparsity, halved for dense; 2 TB/s)"}},
        {{"NVIDIA H100 NVL"},
         {"H100 NVL 94GB", 60.0, 417.5, 835.5, 835.5, 3900, 94,
          "NVIDIA H100 Tensor Core GPU datasheet, H100 NVL column (TF32 835, BF16/FP16 1671 with "
          "sparsity, halved for dense; 3.9 TB/s)"}},
        {{"NVIDIA A100-SXM4-40GB"},
         {"A100 SXM4 40GB", 19.5, 156.0, 312.0, 312.0, 1555, 40,
          "NVIDIA A100 Tensor Core GPU datasheet (FP32 19.5, TF32 156, BF16/FP16 312 dense; 40GB SXM "
          "1555 GB/s)"}},
        {{"NVIDIA A100-SXM4-80GB"},
         {"A100 SXM4 80GB", 19.5, 156.0, 312.0, 312.0, 2039, 80,
          "NVIDIA A100 Tensor Core GPU datasheet (FP32 19.5, TF32 156, BF16/FP16 312 dense; 80GB SXM "
          "2039 GB/s)"}},
        {{"NVIDIA A100-PCIE-40GB"},
         {"A100 PCIe 40GB", 19.5, 156.0, 312.0, 312.0, 1555, 40,
          "NVIDIA A100 Tensor Core GPU datasheet (FP32 19.5, TF32 156, BF16/FP16 312 dense; 40GB PCIe "
          "1555 GB/s)"}},
        {{"NVIDIA A100 80GB PCIe"},
         {"A100 PCIe 80GB", 19.5, 156.0, 312.0, 312.0, 1935, 80,
          "NVIDIA A100 Tensor Core GPU datasheet (FP32 19.5, TF32 156, BF16/FP16 312 dense; 80GB PCIe "
          "1935 GB/s)"}},
        {{"NVIDIA GeForce RTX 4090"},
         {"GeForce RTX 4090", 82.6, 82.6, 165.2, 165.2, 1008, 24,
          "NVIDIA Ada GPU Architecture whitepaper, Appendix A (RTX 4090: FP32 82.6; TF32 82.6; FP16 and "
          "BF16 with FP32 accumulate 165.2 dense; 330.3 is FP16 accumulate); 1008 GB/s"}},
        {{"NVIDIA GeForce RTX 3090"},
         {"GeForce RTX 3090", 35.6, 35.6, 71.0, 71.0, 936, 24,
          "NVIDIA Ampere GA102 GPU Architecture whitepaper (RTX 3090: FP32 35.6; TF32 35.6; FP16 and BF16 "
          "with FP32 accumulate 71 dense; 142 is FP16 accumulate); 936 GB/s"}},
        {{"NVIDIA L40S"},
         {"L40S 48GB", 91.6, 183.0, 362.05, 362.05, 864, 48,
          "NVIDIA L40S datasheet (FP32 91.6; TF32 183, BF16/FP16 362.05 dense; 864 GB/s)"}},
        {{"NVIDIA L40"},
         {"L40 48GB", 90.5, 90.5, 181.05, 181.05, 864, 48,
          "NVIDIA L40 datasheet (FP32 90.5; TF32 90.5, BF16/FP16 181.05 dense; 864 GB/s)"}},
        {{"NVIDIA RTX 6000 Ada Generation"},
         {"RTX 6000 Ada 48GB", 91.1, 182.1, 364.2, 364.2, 960, 48,
          "NVIDIA Ada GPU Architecture whitepaper, Appendix A (RTX 6000 Ada: FP32 91.1; TF32 182.1; "
          "FP16/BF16 with FP32 accumulate 364.2 dense) and RTX 6000 Ada datasheet (960 GB/s)"}},
        {{"Tesla V100-SXM2-32GB"},
         {"V100 SXM2 32GB", 15.7, 0.0, 125.0, 0.0, 900, 32,
          "NVIDIA Tesla V100 datasheet, SXM2 column (FP32 15.7; tensor 125 FP16 mixed precision; no TF32 "
          "or BF16; 900 GB/s)"}},
        {{"Tesla V100-SXM2-16GB"},
         {"V100 SXM2 16GB", 15.7, 0.0, 125.0, 0.0, 900, 16,
          "NVIDIA Tesla V100 datasheet, SXM2 column (FP32 15.7; tensor 125 FP16 mixed precision; no TF32 "
          "or BF16; 900 GB/s)"}},
        {{"Tesla V100-PCIE-32GB"},
         {"V100 PCIe 32GB", 14.0, 0.0, 112.0, 0.0, 900, 32,
          "NVIDIA Tesla V100 datasheet, PCIe column (FP32 14; tensor 112 FP16 mixed precision; no TF32 "
          "or BF16; 900 GB/s)"}},
        {{"Tesla V100-PCIE-16GB"},
         {"V100 PCIe 16GB", 14.0, 0.0, 112.0, 0.0, 900, 16,
          "NVIDIA Tesla V100 datasheet, PCIe column (FP32 14; tensor 112 FP16 mixed precision; no TF32 "
          "or BF16; 900 GB/s)"}},
    };
    return entries;
}

std::string normalized(const std::string& s) {
    size_t begin = 0, end = s.size();
    while (begin < end && std::isspace(static_cast<unsigned char>(s[begin]))) ++begin;
    while (end > begin && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
    std::string out = s.substr(begin, end - begin);
    std::transform(out.begin(), out.end(), out.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

}  // namespace

std::optional<GpuPeak> find_gpu_peak(const std::string& device_name) {
    const std::string wanted = normalized(device_name);
    for (const auto& entry : table())
        for (const char* name : entry.device_names)
            if (normalized(name) == wanted) return entry.peak;
    return std::nullopt;
}

std::string gpu_architecture(const GpuPeak& peak) {
    static const std::vector<std::pair<const char*, const char*>> families = {
        {"H200", "sm_90"},     {"H100", "sm_90"}, {"A100", "sm_80"},         {"RTX 4090", "sm_89"},
        {"RTX 3090", "sm_86"}, {"L40", "sm_89"},  {"RTX 6000 Ada", "sm_89"}, {"V100", "sm_70"},
    };
    for (const auto& [family, arch] : families)
        if (peak.name.find(family) != std::string::npos) return arch;
    return "";
}

std::optional<double> peak_tflops_for_dtype(const GpuPeak& peak, const std::string& dtype) {
    double value = 0;
    if (dtype == "fp32") value = peak.fp32_tflops;
    else if (dtype == "tf32") value = peak.tf32_tflops;
    else if (dtype == "fp16") value = peak.fp16_tflops;
    else if (dtype == "bf16") value = peak.bf16_tflops;
    if (value <= 0) return std::nullopt;
    return value;
}

std::vector<std::string> known_gpu_names() {
    std::vector<std::string> names;
    for (const auto& entry : table())
        for (const char* name : entry.device_names) names.emplace_back(name);
    return names;
}

}  // namespace sb
