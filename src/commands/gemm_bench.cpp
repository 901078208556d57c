// `scalebench gemm` (see gemm_bench.h): case parsing, the cuBLASLt product, its timing,
// and the per-rank run that gathers records to rank 0.
#include "src/commands/gemm_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <stdexcept>
#include <thread>

#include <CLI/CLI.hpp>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "models/cuda/cuda_check.h"
#include "models/cuda/stream_gate.h"
#include "src/system/environment.h"
#include "base/errors.h"
#include "base/numbers.h"
#include "src/core/files.h"
#include "src/core/flag_reading.h"
#include "src/system/gpu_info.h"
#include "src/system/gpu_peaks.h"
#include "src/core/results.h"
#include "src/system/backend.h"

namespace sb {

// ---------------------------------------------------------------- options and cases

void add_gemm_options(CLI::App& sub, GemmOptions& opts) {
    auto mark_explicit = [&opts](const std::string&) { opts.explicit_cases = true; };
    sub.add_option("--size", opts.sizes, "GEMM shape MxNxK or N (cube); repeatable, comma lists")
        ->delimiter(',')
        ->each(mark_explicit);
    sub.add_option("--dtype", opts.dtypes, "fp16, bf16, fp32, tf32 (comma list)")
        ->delimiter(',')
        ->each(mark_explicit);
    // As in `train`, a scalar flag given twice takes its last value.
    sub.add_option("--warmup", opts.warmup, "untimed products before timing")
        ->capture_default_str()
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    sub.add_option("--iters", opts.iters, "timed products per case")
        ->capture_default_str()
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    sub.add_option("--out", opts.out, "JSONL file the records are appended to")
        ->capture_default_str()
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

GemmCase parse_gemm_size(const std::string& text) {
    static const std::regex shape(R"(^\s*([0-9]+)(?:[xX]([0-9]+)[xX]([0-9]+))?\s*$)");
    std::smatch match;
    auto bad = [&text](const std::string& why) {
        return UserError(fmt::format("--size '{}': {} (expected MxNxK or N, e.g. 8192x8192x8192 or 4096)", text, why));
    };
    if (!std::regex_match(text, match, shape)) throw bad("not a GEMM shape");
    auto dim = [&](const std::string& digits) {
        int64_t value = 0;
        const std::string problem = parse_integer(digits, kGemmSideRange, value);
        if (!problem.empty()) throw bad("a dimension " + problem);
        return value;
    };
    GemmCase c;
    c.m = dim(match[1].str());
    c.n = match[2].matched ? dim(match[2].str()) : c.m;
    c.k = match[3].matched ? dim(match[3].str()) : c.m;
    return c;
}

namespace {

const std::vector<std::string> kDtypes = {"fp16", "bf16", "fp32", "tf32"};

int64_t default_size(const std::string& dtype) { return dtype == "fp32" || dtype == "tf32" ? 4096 : 8192; }

}  // namespace

std::vector<GemmCase> gemm_cases(const GemmOptions& opts) {
    // The command line checked these (src/core/flag_reading.cpp); options built in code are
    // held to the same table.
    for (const auto& [flag, value] : {std::pair{"--iters", opts.iters}, std::pair{"--warmup", opts.warmup}})
        if (const std::string problem = int_range_problem(value, integer_flag_range("gemm", flag)); !problem.empty())
            throw UserError(fmt::format("{}: {}", flag, problem));
    for (const auto& d : opts.dtypes)
        if (std::find(kDtypes.begin(), kDtypes.end(), d) == kDtypes.end())
            throw UserError(fmt::format("--dtype '{}': expected one of fp16, bf16, fp32, tf32", d));
    std::vector<GemmCase> shapes;
    for (const auto& s : opts.sizes) shapes.push_back(parse_gemm_size(s));
    if (opts.explicit_cases && shapes.empty() && opts.dtypes.empty())
        throw UserError("--size/--dtype: given without a value");

    const std::vector<std::string>& dtypes = opts.dtypes.empty() ? kDtypes : opts.dtypes;
    std::vector<GemmCase> cases;
    for (const auto& dtype : dtypes) {
        if (shapes.empty()) {
            int64_t n = default_size(dtype);
            cases.push_back({n, n, n, dtype});
            continue;
        }
        for (GemmCase shape : shapes) {
            shape.dtype = dtype;
            cases.push_back(shape);
        }
    }
    return cases;
}

// ---------------------------------------------------------------- the cuBLASLt product

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // 32 MiB, as the brief and torch's default
constexpr size_t kAlign = 256;                        // cuBLASLt's assumed operand alignment

struct DtypeSpec {
    cudaDataType_t data;
    cublasComputeType_t compute;
    size_t bytes;
};

DtypeSpec spec_of(const std::string& dtype) {
    if (dtype == "fp16") return {CUDA_R_16F, CUBLAS_COMPUTE_32F, 2};
    if (dtype == "bf16") return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2};
    if (dtype == "fp32") return {CUDA_R_32F, CUBLAS_COMPUTE_32F, 4};
    if (dtype == "tf32") return {CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 4};
    throw UserError(fmt::format("--dtype '{}': expected one of fp16, bf16, fp32, tf32", dtype));
}

size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

class DeviceMemory {
public:
    explicit DeviceMemory(size_t bytes) { SB_CHECK_CUDA(cudaMalloc(&ptr_, bytes)); }
    ~DeviceMemory() { cudaFree(ptr_); }
    DeviceMemory(const DeviceMemory&) = delete;
    DeviceMemory& operator=(const DeviceMemory&) = delete;
    char* get() const { return static_cast<char*>(ptr_); }

private:
    void* ptr_ = nullptr;
};

class Stream {
public:
    Stream() { SB_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
    ~Stream() { cudaStreamDestroy(stream_); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    cudaStream_t get() const { return stream_; }

private:
    cudaStream_t stream_ = nullptr;
};

class LtHandle {
public:
    LtHandle() { SB_CHECK_CUBLAS(cublasLtCreate(&handle_)); }
    ~LtHandle() { cublasLtDestroy(handle_); }
    LtHandle(const LtHandle&) = delete;
    LtHandle& operator=(const LtHandle&) = delete;
    cublasLtHandle_t get() const { return handle_; }

private:
    cublasLtHandle_t handle_ = nullptr;
};

// Row-major C = A @ B as cuBLASLt's column-major C^T = B^T A^T, the way torch.mm calls
// cuBLAS: the column-major "A" is our B (n x k, ld n), "B" is our A (k x m, ld k), and
// C is n x m with ld n. No transposes, alpha 1, beta 0, C written in the input dtype.
class LtMatmul {
public:
    LtMatmul(cublasLtHandle_t handle, const GemmCase& c) : handle_(handle) {
        try {
            setup(c);
        } catch (...) {
            release();  // no destructor runs for a constructor that throws
            throw;
        }
    }
    ~LtMatmul() { release(); }
    LtMatmul(const LtMatmul&) = delete;
    LtMatmul& operator=(const LtMatmul&) = delete;

    void run(const void* a, const void* b, void* c, void* workspace, cudaStream_t stream) const {
        const float alpha = 1.0f, beta = 0.0f;
        SB_CHECK_CUBLAS(cublasLtMatmul(handle_, desc_, &alpha, b, layout_b_t_, a, layout_a_t_, &beta, c, layout_c_t_,
                                       c, layout_c_t_, &algo_, workspace, kWorkspaceBytes, stream));
    }

private:
    void setup(const GemmCase& c) {
        DtypeSpec spec = spec_of(c.dtype);
        const auto m = static_cast<uint64_t>(c.m), n = static_cast<uint64_t>(c.n), k = static_cast<uint64_t>(c.k);
        SB_CHECK_CUBLAS(cublasLtMatmulDescCreate(&desc_, spec.compute, CUDA_R_32F));
        cublasOperation_t no_transpose = CUBLAS_OP_N;
        SB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &no_transpose,
                                                       sizeof(no_transpose)));
        SB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &no_transpose,
                                                       sizeof(no_transpose)));
        SB_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&layout_b_t_, spec.data, n, k, static_cast<int64_t>(n)));
        SB_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&layout_a_t_, spec.data, k, m, static_cast<int64_t>(k)));
        SB_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&layout_c_t_, spec.data, n, m, static_cast<int64_t>(n)));

        cublasLtMatmulPreference_t preference = nullptr;
        SB_CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&preference));
        uint64_t workspace = kWorkspaceBytes;
        cublasStatus_t rc = cublasLtMatmulPreferenceSetAttribute(
            preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
        // The top heuristic result, as torch.mm gets from cuBLAS: we measure what a
        // framework would see, not the best of an autotuning search.
        cublasLtMatmulHeuristicResult_t result{};
        int returned = 0;
        if (rc == CUBLAS_STATUS_SUCCESS)
            rc = cublasLtMatmulAlgoGetHeuristic(handle_, desc_, layout_b_t_, layout_a_t_, layout_c_t_, layout_c_t_,
                                                preference, 1, &result, &returned);
        cublasLtMatmulPreferenceDestroy(preference);
        if (rc != CUBLAS_STATUS_SUCCESS && rc != CUBLAS_STATUS_NOT_SUPPORTED)
            ::sb::throw_call_error("cuBLAS", "cublasLtMatmulAlgoGetHeuristic", cublasGetStatusString(rc), __FILE__,
                                   __LINE__);
        if (rc == CUBLAS_STATUS_NOT_SUPPORTED || returned < 1 || result.state != CUBLAS_STATUS_SUCCESS)
            throw std::runtime_error(fmt::format("cuBLASLt offers no algorithm for {} {}x{}x{} on this GPU", c.dtype,
                                                 c.m, c.n, c.k));
        algo_ = result.algo;
    }

    void release() {
        if (layout_c_t_) cublasLtMatrixLayoutDestroy(layout_c_t_);
        if (layout_a_t_) cublasLtMatrixLayoutDestroy(layout_a_t_);
        if (layout_b_t_) cublasLtMatrixLayoutDestroy(layout_b_t_);
        if (desc_) cublasLtMatmulDescDestroy(desc_);
        layout_c_t_ = layout_a_t_ = layout_b_t_ = nullptr;
        desc_ = nullptr;
    }

    cublasLtHandle_t handle_;
    cublasLtMatmulDesc_t desc_ = nullptr;
    cublasLtMatrixLayout_t layout_b_t_ = nullptr, layout_a_t_ = nullptr, layout_c_t_ = nullptr;
    cublasLtMatmulAlgo_t algo_{};
};

// ---- host data: floats converted to the dtype's bytes, and back

void parallel_for(size_t n, const std::function<void(size_t, size_t)>& body) {
    const ProcessInfo& p = process_info();
    unsigned threads = std::max(1u, std::thread::hardware_concurrency() / static_cast<unsigned>(std::max(1, p.local_size)));
    threads = std::min<unsigned>({threads, 16u, static_cast<unsigned>(n / (1u << 20)) + 1u});
    std::vector<std::thread> pool;
    const size_t chunk = (n + threads - 1) / threads;
    for (unsigned t = 0; t < threads; ++t) {
        size_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
        if (t + 1 == threads) {
            body(begin, end);
        } else {
            pool.emplace_back(body, begin, end);
        }
    }
    for (auto& th : pool) th.join();
}

// Writes element i of `out` (the dtype's bytes) from value(i).
template <class Value>
void encode(const std::string& dtype, size_t count, const Value& value, char* out) {
    if (dtype == "fp16") {
        auto* dst = reinterpret_cast<__half*>(out);
        parallel_for(count, [&](size_t b, size_t e) {
            for (size_t i = b; i < e; ++i) dst[i] = __float2half_rn(value(i));
        });
    } else if (dtype == "bf16") {
        auto* dst = reinterpret_cast<__nv_bfloat16*>(out);
        parallel_for(count, [&](size_t b, size_t e) {
            for (size_t i = b; i < e; ++i) dst[i] = __float2bfloat16_rn(value(i));
        });
    } else {
        auto* dst = reinterpret_cast<float*>(out);
        parallel_for(count, [&](size_t b, size_t e) {
            for (size_t i = b; i < e; ++i) dst[i] = value(i);
        });
    }
}

std::vector<float> decode(const std::string& dtype, size_t count, const char* in) {
    std::vector<float> out(count);
    for (size_t i = 0; i < count; ++i) {
        if (dtype == "fp16") out[i] = __half2float(reinterpret_cast<const __half*>(in)[i]);
        else if (dtype == "bf16") out[i] = __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(in)[i]);
        else out[i] = reinterpret_cast<const float*>(in)[i];
    }
    return out;
}

// Uniform in [-1, 1) from a hash of (seed, index): reproducible, never all zeros.
float hash_uniform(uint64_t seed, uint64_t index) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + index + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// Uploads `count` random elements of dtype to dst.
void fill_random(const std::string& dtype, size_t count, uint64_t seed, char* dst) {
    std::vector<char> host(count * spec_of(dtype).bytes);
    encode(dtype, count, [seed](size_t i) { return hash_uniform(seed, i); }, host.data());
    SB_CHECK_CUDA(cudaMemcpy(dst, host.data(), host.size(), cudaMemcpyHostToDevice));
}

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t h = v.size() / 2;
    return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

}  // namespace

GemmTiming time_gemm(const GemmCase& c, int warmup, int iters, TelemetrySampler* telemetry) {
    SB_REQUIRE(iters >= 1 && warmup >= 0, "time_gemm: iters >= 1 and warmup >= 0");
    const DtypeSpec spec = spec_of(c.dtype);
    int device = 0, l2_bytes = 0;
    SB_CHECK_CUDA(cudaGetDevice(&device));
    SB_CHECK_CUDA(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));

    const size_t a_bytes = aligned(static_cast<size_t>(c.m * c.k) * spec.bytes);
    const size_t b_bytes = aligned(static_cast<size_t>(c.k * c.n) * spec.bytes);
    const size_t c_bytes = aligned(static_cast<size_t>(c.m * c.n) * spec.bytes);
    const size_t set_bytes = a_bytes + b_bytes;
    // Enough A/B sets that one pass over them is three L2s, so each product reads its
    // operands from HBM as it would in a model step; one set once A+B alone is that big.
    size_t sets = std::max<size_t>(1, (3 * static_cast<size_t>(l2_bytes) + set_bytes - 1) / set_bytes);
    sets = std::min<size_t>(sets, 4096);

    size_t free_bytes = 0, total_bytes = 0;
    SB_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t need_one = set_bytes + c_bytes + kWorkspaceBytes;
    if (need_one > free_bytes * 9 / 10)
        throw UserError(fmt::format("--size {}x{}x{} {}: needs {:.1f} GiB, device {} has {:.1f} GiB free", c.m, c.n,
                                    c.k, c.dtype, need_one / 1073741824.0, device, free_bytes / 1073741824.0));
    const size_t room = free_bytes / 2 > c_bytes + kWorkspaceBytes ? free_bytes / 2 - c_bytes - kWorkspaceBytes : 0;
    sets = std::min(sets, std::max<size_t>(1, room / set_bytes));  // rotation never takes over half the free memory

    DeviceMemory operands(sets * set_bytes), out(c_bytes), workspace(kWorkspaceBytes);
    fill_random(c.dtype, static_cast<size_t>(c.m * c.k), 1, operands.get());
    fill_random(c.dtype, static_cast<size_t>(c.k * c.n), 2, operands.get() + a_bytes);
    for (size_t s = 1; s < sets; ++s)
        SB_CHECK_CUDA(cudaMemcpy(operands.get() + s * set_bytes, operands.get(), set_bytes, cudaMemcpyDeviceToDevice));
    SB_CHECK_CUDA(cudaMemset(out.get(), 0, c_bytes));

    LtHandle handle;
    Stream stream;
    LtMatmul matmul(handle.get(), c);
    auto product = [&](size_t i) {
        const char* set = operands.get() + (i % sets) * set_bytes;
        matmul.run(set, set + a_bytes, out.get(), workspace.get(), stream.get());
    };
    std::vector<cudaEvent_t> events(2 * static_cast<size_t>(iters), nullptr);
    struct EventsGuard {
        std::vector<cudaEvent_t>& e;
        ~EventsGuard() {
            for (auto ev : e)
                if (ev) cudaEventDestroy(ev);
        }
    } guard{events};
    for (auto& ev : events) SB_CHECK_CUDA(cudaEventCreate(&ev));

    if (telemetry) telemetry->start();
    for (int i = 0; i < warmup; ++i) product(static_cast<size_t>(i));
    SB_CHECK_CUDA(cudaStreamSynchronize(stream.get()));
    // The stream is held until every timed product is queued, so the events time the GPU's
    // work and not the host's launch rate (a small GEMM runs faster than it launches).
    StreamGate gate;
    gate.hold(stream.get());
    for (int i = 0; i < iters; ++i) {
        SB_CHECK_CUDA(cudaEventRecord(events[2 * i], stream.get()));
        product(static_cast<size_t>(warmup + i));
        SB_CHECK_CUDA(cudaEventRecord(events[2 * i + 1], stream.get()));
    }
    gate.release();
    SB_CHECK_CUDA(cudaStreamSynchronize(stream.get()));

    GemmTiming t;
    if (telemetry) t.telemetry = telemetry->stop();
    t.buffer_sets = static_cast<int>(sets);
    t.workspace_bytes = kWorkspaceBytes;
    for (int i = 0; i < iters; ++i) {
        float ms = 0;
        SB_CHECK_CUDA(cudaEventElapsedTime(&ms, events[2 * i], events[2 * i + 1]));
        t.times_ms.push_back(ms);
    }
    t.median_ms = median_of(t.times_ms);
    t.min_ms = *std::min_element(t.times_ms.begin(), t.times_ms.end());
    t.max_ms = *std::max_element(t.times_ms.begin(), t.times_ms.end());
    return t;
}

std::vector<float> gemm_product(const GemmCase& c, const std::vector<float>& a, const std::vector<float>& b) {
    const DtypeSpec spec = spec_of(c.dtype);
    const auto a_count = static_cast<size_t>(c.m * c.k), b_count = static_cast<size_t>(c.k * c.n),
               c_count = static_cast<size_t>(c.m * c.n);
    SB_REQUIRE(a.size() == a_count && b.size() == b_count, "gemm_product: a is m x k and b is k x n");
    std::vector<char> host_a(a_count * spec.bytes), host_b(b_count * spec.bytes), host_c(c_count * spec.bytes);
    encode(c.dtype, a_count, [&a](size_t i) { return a[i]; }, host_a.data());
    encode(c.dtype, b_count, [&b](size_t i) { return b[i]; }, host_b.data());

    DeviceMemory dev_a(aligned(host_a.size())), dev_b(aligned(host_b.size())), dev_c(aligned(host_c.size())),
        workspace(kWorkspaceBytes);
    SB_CHECK_CUDA(cudaMemcpy(dev_a.get(), host_a.data(), host_a.size(), cudaMemcpyHostToDevice));
    SB_CHECK_CUDA(cudaMemcpy(dev_b.get(), host_b.data(), host_b.size(), cudaMemcpyHostToDevice));
    SB_CHECK_CUDA(cudaMemset(dev_c.get(), 0xFF, host_c.size()));  // NaN everywhere: unwritten shows
    LtHandle handle;
    Stream stream;
    LtMatmul matmul(handle.get(), c);
    matmul.run(dev_a.get(), dev_b.get(), dev_c.get(), workspace.get(), stream.get());
    SB_CHECK_CUDA(cudaStreamSynchronize(stream.get()));
    SB_CHECK_CUDA(cudaMemcpy(host_c.data(), dev_c.get(), host_c.size(), cudaMemcpyDeviceToHost));
    return decode(c.dtype, c_count, host_c.data());
}

// ---------------------------------------------------------------- the run

namespace {

// Gathers one string per rank at rank 0 (empty elsewhere).
std::vector<std::string> gather_strings(const std::string& mine, MPI_Comm world) {
    int rank = 0, size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(world, &rank));
    SB_CHECK_MPI(MPI_Comm_size(world, &size));
    int length = static_cast<int>(mine.size());
    std::vector<int> lengths(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
    SB_CHECK_MPI(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, world));
    int total = 0;
    for (int r = 0; r < size; ++r) {
        offsets[static_cast<size_t>(r)] = total;
        total += lengths[static_cast<size_t>(r)];
    }
    std::vector<char> all(rank == 0 ? static_cast<size_t>(std::max(total, 1)) : 1);
    SB_CHECK_MPI(MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0,
                             world));
    std::vector<std::string> out;
    if (rank == 0)
        for (int r = 0; r < size; ++r)
            out.emplace_back(all.data() + offsets[static_cast<size_t>(r)], static_cast<size_t>(lengths[static_cast<size_t>(r)]));
    return out;
}

std::string broadcast_string(std::string text, MPI_Comm world) {
    int length = static_cast<int>(text.size());
    SB_CHECK_MPI(MPI_Bcast(&length, 1, MPI_INT, 0, world));
    text.resize(static_cast<size_t>(length));
    if (length > 0) SB_CHECK_MPI(MPI_Bcast(&text[0], length, MPI_CHAR, 0, world));
    return text;
}

// This rank's records (without the environment, which rank 0 adds).
nlohmann::json benchmark_this_rank(const std::vector<GemmCase>& cases, const GemmOptions& opts) {
    const ProcessInfo& p = process_info();
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess || count == 0)
        throw UserError(fmt::format("gemm: rank {} on {} sees no CUDA device ({})", p.world_rank, p.host,
                                    rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices"));
    const int device = p.local_rank;
    if (device >= count)
        throw UserError(fmt::format("gemm: rank {} on {} is local rank {} but only {} GPU(s) are visible; run at most "
                                    "one rank per GPU",
                                    p.world_rank, p.host, device, count));
    SB_CHECK_CUDA(cudaSetDevice(device));
    const nlohmann::json gpu = gpu_environment(device);
    const std::optional<GpuPeak> peak = find_gpu_peak(gpu["name"].get<std::string>());

    nlohmann::json records = nlohmann::json::array();
    for (const GemmCase& c : cases) {
        TelemetrySampler telemetry(device, 20);
        GemmTiming t = time_gemm(c, opts.warmup, opts.iters, &telemetry);
        const double flops = 2.0 * static_cast<double>(c.m) * static_cast<double>(c.n) * static_cast<double>(c.k);
        const double tflops = flops / (t.median_ms * 1e-3) / 1e12;
        const double peak_tflops = peak ? peak_tflops_for_dtype(*peak, c.dtype).value_or(0.0) : 0.0;  // 0: unknown

        nlohmann::json r;
        r["schema_version"] = kSchemaVersion;
        r["subcommand"] = "gemm";
        r["rank"] = p.world_rank;
        r["host"] = p.host;
        r["device"] = device;
        r["m"] = c.m;
        r["n"] = c.n;
        r["k"] = c.k;
        r["dtype"] = c.dtype;
        r["accumulate"] = "fp32";
        r["layout"] = "row-major C = A @ B, C in the input dtype";
        r["algorithm"] = "cublasLt heuristic top-1";
        r["warmup"] = opts.warmup;
        r["iters"] = opts.iters;
        r["buffer_sets"] = t.buffer_sets;
        r["workspace_bytes"] = t.workspace_bytes;
        r["default_cases"] = !opts.explicit_cases && opts.sizes.empty() && opts.dtypes.empty();
        r["time_ms"] = {{"median", t.median_ms}, {"min", t.min_ms}, {"max", t.max_ms}};
        r["flops"] = flops;
        r["tflops"] = tflops;
        r["peak_tflops"] = peak_tflops > 0 ? nlohmann::json(peak_tflops) : nlohmann::json(nullptr);
        r["fraction_of_peak"] = peak_tflops > 0 ? nlohmann::json(tflops / peak_tflops) : nlohmann::json(nullptr);
        r["peak_source"] = peak ? nlohmann::json(peak->source) : nlohmann::json(nullptr);
        r["telemetry"] = t.telemetry;
        r["gpu"] = gpu;
        records.push_back(r);
    }
    return records;
}

// Rank 0: prints the table, appends every rank's records with the environment, and
// returns the first failure (an internal one before a user error), coded as in run_gemm.
std::string report_and_write(const std::vector<std::string>& gathered, const nlohmann::json& environment,
                             const std::string& out) {
    fmt::print("{:>4}  {:<16} {:<24} {:<5} {:>6} {:>6} {:>6} {:>10} {:>9} {:>7}\n", "rank", "host", "gpu", "dtype", "M",
               "N", "K", "median_ms", "TFLOP/s", "%peak");
    std::string failure;
    size_t written = 0;
    for (size_t r = 0; r < gathered.size(); ++r) {
        nlohmann::json from = parse_json(gathered[r]);
        for (nlohmann::json& record : from["records"]) {
            record["environment"] = environment;
            append_record(out, record);
            ++written;
            const nlohmann::json& f = record["fraction_of_peak"];
            fmt::print("{:>4}  {:<16} {:<24} {:<5} {:>6} {:>6} {:>6} {:>10.4f} {:>9.1f} {:>7}\n", r,
                       record["host"].get<std::string>(), record["gpu"]["name"].get<std::string>(),
                       record["dtype"].get<std::string>(), record["m"].get<int64_t>(), record["n"].get<int64_t>(),
                       record["k"].get<int64_t>(), record["time_ms"]["median"].get<double>(),
                       record["tflops"].get<double>(),
                       f.is_null() ? std::string("n/a") : fmt::format("{:.1f}", 100.0 * f.get<double>()));
        }
        if (!from["error"].is_null()) {
            const std::string why = from["error"].get<std::string>();
            const bool user = from["user_error"].get<bool>();
            if (gathered.size() > 1) fmt::print(stderr, "gemm: rank {} failed: {}\n", r, why);
            if (failure.empty() || (failure[0] == 'U' && !user)) failure = (user ? "U" : "I") + why;
        }
    }
    fmt::print("gemm: {} record(s) appended to {}\n", written, out);
    return failure;
}

}  // namespace

int run_gemm(const GemmOptions& opts, MPI_Comm world) {
    int rank = 0, size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(world, &rank));
    SB_CHECK_MPI(MPI_Comm_size(world, &size));
    // Checked before any work, the output by rank 0 (which writes it), agreed by every rank.
    std::vector<GemmCase> cases;
    std::string error;
    try {
        cases = gemm_cases(opts);
        if (rank == 0) error = results_file_problem(opts.out, "--out");
    } catch (const UserError& e) {
        error = e.what();
    }
    agree_on_errors(world, error);
    const nlohmann::json environment = collect_environment(world);  // collective
    if (rank == 0) {
        fmt::print("gemm: {} case(s) on each of {} rank(s), {} warm-up + {} timed products each\n", cases.size(), size,
                   opts.warmup, opts.iters);
        flush_stdout();
    }

    // A failing rank must not leave the others in the gather: failures travel as results.
    nlohmann::json mine = {{"records", nlohmann::json::array()}, {"error", nullptr}, {"user_error", false}};
    try {
        mine["records"] = benchmark_this_rank(cases, opts);
    } catch (const UserError& e) {
        mine["error"] = e.what();
        mine["user_error"] = true;
    } catch (const std::exception& e) {
        mine["error"] = e.what();
    }
    const std::vector<std::string> gathered = gather_strings(json_text(mine), world);

    std::string failure;  // "U<why>" user error, "I<why>" internal failure, "" none: rank 0 decides
    if (rank == 0) {
        try {
            failure = report_and_write(gathered, environment, opts.out);
            flush_stdout();
        } catch (const UserError& e) {
            failure = std::string("U") + e.what();
        } catch (const std::exception& e) {
            failure = std::string("I") + e.what();
        }
    }
    failure = broadcast_string(failure, world);
    if (!failure.empty()) {
        if (failure[0] == 'U') throw AgreedError(failure.substr(1));  // every rank has the message
        throw std::runtime_error(failure.substr(1));
    }
    return 0;
}

}  // namespace sb
