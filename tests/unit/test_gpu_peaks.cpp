// The datasheet-peak table: the names CUDA reports resolve to the right product and the
// numbers the fraction-of-peak columns divide by; unknown GPUs give no number at all.
#include <gtest/gtest.h>

#include "src/system/gpu_peaks.h"

namespace sb {
namespace {

GpuPeak peak_of(const std::string& name) {
    auto peak = find_gpu_peak(name);
    EXPECT_TRUE(peak.has_value()) << name;
    return peak.value_or(GpuPeak{});
}

TEST(GpuPeaks, EveryDeviceNameFromTheBriefResolves) {
    for (const char* name :
         {"NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB",
          "NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe", "NVIDIA GeForce RTX 4090",
          "NVIDIA GeForce RTX 3090", "NVIDIA L40S", "NVIDIA H100 PCIe", "NVIDIA RTX 6000 Ada Generation",
          "Tesla V100-SXM2-32GB"}) {
        auto peak = find_gpu_peak(name);
        ASSERT_TRUE(peak.has_value()) << name;
        EXPECT_FALSE(peak->name.empty()) << name;
        EXPECT_FALSE(peak->source.empty()) << name;
        EXPECT_GT(peak->fp32_tflops, 0) << name;
        EXPECT_GT(peak->fp16_tflops, 0) << name;
        EXPECT_GT(peak->mem_bw_gbps, 0) << name;
        EXPECT_GT(peak->mem_gb, 0) << name;
    }
}

TEST(GpuPeaks, H100AndH200SxmShareComputeAndDifferInMemory) {
    GpuPeak h100 = peak_of("NVIDIA H100 80GB HBM3");
    GpuPeak h200 = peak_of("NVIDIA H200");
    EXPECT_DOUBLE_EQ(h100.fp32_tflops, 67.0);
    EXPECT_DOUBLE_EQ(h100.tf32_tflops, 494.7);
    EXPECT_DOUBLE_EQ(h100.bf16_tflops, 989.4);
    EXPECT_DOUBLE_EQ(h100.fp16_tflops, 989.4);
    EXPECT_DOUBLE_EQ(h100.mem_bw_gbps, 3350);
    EXPECT_DOUBLE_EQ(h200.fp32_tflops, h100.fp32_tflops);
    EXPECT_DOUBLE_EQ(h200.tf32_tflops, h100.tf32_tflops);
    EXPECT_DOUBLE_EQ(h200.bf16_tflops, h100.bf16_tflops);
    EXPECT_DOUBLE_EQ(h200.fp16_tflops, h100.fp16_tflops);
    EXPECT_DOUBLE_EQ(h200.mem_bw_gbps, 4800);
    EXPECT_DOUBLE_EQ(h200.mem_gb, 141);
}

TEST(GpuPeaks, A100VariantsShareComputeAndDifferInBandwidth) {
    for (const char* name : {"NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE-40GB",
                             "NVIDIA A100 80GB PCIe"}) {
        GpuPeak p = peak_of(name);
        EXPECT_DOUBLE_EQ(p.fp32_tflops, 19.5) << name;
        EXPECT_DOUBLE_EQ(p.tf32_tflops, 156) << name;
        EXPECT_DOUBLE_EQ(p.bf16_tflops, 312) << name;
        EXPECT_DOUBLE_EQ(p.fp16_tflops, 312) << name;
    }
    EXPECT_DOUBLE_EQ(peak_of("NVIDIA A100-SXM4-40GB").mem_bw_gbps, 1555);
    EXPECT_DOUBLE_EQ(peak_of("NVIDIA A100-SXM4-80GB").mem_bw_gbps, 2039);
    EXPECT_DOUBLE_EQ(peak_of("NVIDIA A100-SXM4-40GB").mem_gb, 40);
    EXPECT_DOUBLE_EQ(peak_of("NVIDIA A100-SXM4-80GB").mem_gb, 80);
}

TEST(GpuPeaks, Rtx4090UsesTheFp32AccumulateTensorRate) {
    GpuPeak p = peak_of("NVIDIA GeForce RTX 4090");
    EXPECT_DOUBLE_EQ(p.fp32_tflops, 82.6);
    EXPECT_DOUBLE_EQ(p.fp16_tflops, 165.2);  // not 330.3, the FP16-accumulate rate
    EXPECT_DOUBLE_EQ(p.bf16_tflops, 165.2);
    EXPECT_DOUBLE_EQ(p.mem_gb, 24);
}

TEST(GpuPeaks, MatchIgnoresCaseAndSurroundingSpaceButNotOtherProducts) {
    EXPECT_TRUE(find_gpu_peak("  nvidia h200\n").has_value());
    // A near name is a different product with different peaks, never a fuzzy match.
    EXPECT_EQ(find_gpu_peak("NVIDIA H200 NVL")->name, "H200 NVL 141GB");
    EXPECT_EQ(find_gpu_peak("NVIDIA H200")->name, "H200 SXM 141GB");
    EXPECT_NE(find_gpu_peak("NVIDIA H100 PCIe")->bf16_tflops,
              find_gpu_peak("NVIDIA H100 80GB HBM3")->bf16_tflops);
}

TEST(GpuPeaks, UnknownGpuGivesNothing) {
    EXPECT_FALSE(find_gpu_peak("").has_value());
    EXPECT_FALSE(find_gpu_peak("NVIDIA GeForce GTX 1080").has_value());
    EXPECT_FALSE(find_gpu_peak("NVIDIA H200X").has_value());
    EXPECT_FALSE(find_gpu_peak("AMD Instinct MI300X").has_value());
}

TEST(GpuPeaks, PeakPerDtypeIsAbsentWhereTheGpuHasNoSuchMode) {
    GpuPeak v100 = peak_of("Tesla V100-SXM2-32GB");
    EXPECT_DOUBLE_EQ(*peak_tflops_for_dtype(v100, "fp16"), 125);
    EXPECT_DOUBLE_EQ(*peak_tflops_for_dtype(v100, "fp32"), 15.7);
    EXPECT_FALSE(peak_tflops_for_dtype(v100, "bf16").has_value());
    EXPECT_FALSE(peak_tflops_for_dtype(v100, "tf32").has_value());
    GpuPeak h200 = peak_of("NVIDIA H200");
    EXPECT_DOUBLE_EQ(*peak_tflops_for_dtype(h200, "tf32"), 494.7);
    EXPECT_DOUBLE_EQ(*peak_tflops_for_dtype(h200, "bf16"), 989.4);
    EXPECT_FALSE(peak_tflops_for_dtype(h200, "int8").has_value());
}

TEST(GpuPeaks, KnownNamesAreUniqueAndAllResolve) {
    auto names = known_gpu_names();
    EXPECT_GE(names.size(), 12u);
    for (size_t i = 0; i < names.size(); ++i) {
        EXPECT_TRUE(find_gpu_peak(names[i]).has_value()) << names[i];
        for (size_t j = i + 1; j < names.size(); ++j) EXPECT_NE(names[i], names[j]);
    }
}

}  // namespace
}  // namespace sb
