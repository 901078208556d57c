// Datasheet peak rates of the GPUs scalebench knows, looked up by the name CUDA reports
// (cudaDeviceProp::name). `scalebench gemm` divides measured TFLOP/s by these to give a
// fraction of peak; projection profiles cite the same numbers. Pure data: built in every
// build, CPU-only too.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace sb {

struct GpuPeak {
    std::string name;  // product name, e.g. "H100 SXM5 80GB"
    // Dense (not sparse) tensor-core rates with fp32 accumulate; fp32 is the CUDA-core
    // rate. 0 means the GPU has no such mode (V100: no tf32, no bf16).
    double fp32_tflops = 0;
    double tf32_tflops = 0;
    double fp16_tflops = 0;
    double bf16_tflops = 0;
    double mem_bw_gbps = 0;  // GB/s, 10^9 bytes
    double mem_gb = 0;       // as the datasheet states it
    std::string source;      // the document the numbers come from
};

// The compute capability of a GPU of the table as an architecture ("sm_89"), by its product
// name (GpuPeak::name), as NVIDIA's CUDA GPUs list (developer.nvidia.com/cuda-gpus) gives it;
// "" when unknown. The projection traces a profile's GPU with that architecture's limits.
std::string gpu_architecture(const GpuPeak& peak);

// Exact match on the device name as cudaDeviceProp spells it (case and surrounding
// whitespace ignored); nullopt for GPUs not in the table, rather than a guess.
std::optional<GpuPeak> find_gpu_peak(const std::string& device_name);

// The peak for one of scalebench's GEMM dtype names ("fp32", "tf32", "fp16", "bf16");
// nullopt when the dtype is unknown or the GPU has no such mode.
std::optional<double> peak_tflops_for_dtype(const GpuPeak& peak, const std::string& dtype);

// Every device name the table matches (for tests and `--help` texts).
std::vector<std::string> known_gpu_names();

}  // namespace sb
