// CudaOps (models/cuda/cuda_ops.h): the stream, cuBLASLt GEMMs with a plan cache, memory,
// markers, and the argument checks in front of the kernels of kernels.cu.
//
// GEMM layout: ops.h matrices are row-major, cuBLASLt is column-major. A row-major r x c
// matrix is the column-major c x r matrix (its transpose) with ld = c, so row-major
// C = op(A) op(B) is computed as column-major C^T = op(B)^T op(A)^T: cuBLASLt's "A" is our
// B, its "B" is our A, the transpose flags carry over unchanged, and m = C.cols, n = C.rows.
// The fused bias (length m, one value per column-major row) is then one value per
// row-major column of C, as ops.h asks. Batched GEMMs (attention) are the same plans with
// a batch count and one stride per operand (cuBLASLt's strided batch).
#include "models/cuda/cuda_ops.h"
#include "models/cuda/stream_gate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "models/cuda/cuda_check.h"
#include "models/cuda/kernels.cuh"
#ifdef SCALEBENCH_HAVE_CUDNN
#include "models/cuda/cudnn_conv.h"
#endif

// The build's CUDA architectures (CMakeLists.txt sets it from CMAKE_CUDA_ARCHITECTURES).
#ifndef SCALEBENCH_CUDA_ARCHITECTURES
#define SCALEBENCH_CUDA_ARCHITECTURES "(not recorded)"
#endif

namespace sb {
namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLAS's recommendation for Hopper
// A GEMM's algorithm: the fastest of the heuristic's first kTuneCandidates, each timed
// kTuneRuns times (the least counts) on the plan's first call; another than the heuristic's
// first only when it is faster by more than kTuneMargin, so timing noise does not flip it.
constexpr int kTuneCandidates = 16;
constexpr int kTuneRuns = 3;
constexpr float kTuneMargin = 0.03f;

// Destructors and release() must not throw (a sticky error would turn unwinding into
// std::terminate and hide the first failure), so they report and go on.
void warn_cuda(cudaError_t rc, const char* call, const char* file, int line) {
    if (rc != cudaSuccess)
        std::fprintf(stderr, "%s:%d: warning: %s failed: %s: %s\n", file, line, call, cudaGetErrorName(rc),
                     cudaGetErrorString(rc));
}
#define SB_WARN_CUDA(call) warn_cuda((call), #call, __FILE__, __LINE__)

cudaDataType_t cuda_type(DType dtype) {
    switch (dtype) {
        case DType::f32: return CUDA_R_32F;
        case DType::bf16: return CUDA_R_16BF;
        case DType::f16: return CUDA_R_16F;
    }
    SB_REQUIRE(false, "unknown dtype");
}

// Largest power of two (up to 256) the address is a multiple of; what cuBLASLt's
// MIN_ALIGNMENT preferences expect (the default assumes 256, which an offset into a flat
// parameter buffer need not meet).
uint32_t alignment_of(const void* p) {
    auto addr = reinterpret_cast<uintptr_t>(p);
    uint32_t align = 1;
    while (align < 256 && addr % (align * 2) == 0) align *= 2;
    return align;
}

// Alignment every matrix of a strided batch keeps: the first's, limited by the stride.
uint32_t alignment_of(const void* p, int64_t stride_bytes) {
    uint32_t align = alignment_of(p);
    while (align > 1 && stride_bytes % align != 0) align /= 2;
    return align;
}

// What cuBLASLt does to the product before it stores it. bias: + bias (C's dtype, rounded);
// gelu_aux_bias: C = gelu(product + bias), the pre-activation stored to aux; dgelu: C =
// product * gelu'(aux); bgradb: + nothing, and the bias vector receives our A's column sums
// (fp32; cuBLASLt's B reduced over k). Only `bias` has an unfused path inside matmul(); the
// others, where cuBLASLt has no kernel, are composed by the caller (matmul_epilogue()).
enum class Epilogue { none, bias, gelu_aux_bias, dgelu, bgradb };

cublasLtEpilogue_t lt_epilogue(Epilogue e) {
    switch (e) {
        case Epilogue::none: return CUBLASLT_EPILOGUE_DEFAULT;
        case Epilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
        case Epilogue::gelu_aux_bias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
        case Epilogue::dgelu: return CUBLASLT_EPILOGUE_DGELU;
        case Epilogue::bgradb: return CUBLASLT_EPILOGUE_BGRADB;
    }
    SB_REQUIRE(false, "unknown epilogue");
}

struct GemmKey {
    int64_t m, n, k;  // column-major problem: m = C.cols, n = C.rows
    bool trans_a, trans_b;
    DType ab, c;
    Epilogue epilogue;
    uint32_t align_a, align_b, align_c, align_bias, align_aux;
    int64_t batch;                         // 1: a plain GEMM
    int64_t stride_a, stride_b, stride_c;  // elements between our A, B, C matrices of a batch
    bool operator<(const GemmKey& o) const {
        return std::tie(m, n, k, trans_a, trans_b, ab, c, epilogue, align_a, align_b, align_c, align_bias, align_aux,
                        batch, stride_a, stride_b, stride_c) <
               std::tie(o.m, o.n, o.k, o.trans_a, o.trans_b, o.ab, o.c, o.epilogue, o.align_a, o.align_b, o.align_c,
                        o.align_bias, o.align_aux, o.batch, o.stride_a, o.stride_b, o.stride_c);
    }
};

// The vectors and matrices an epilogue reads or writes, set on the descriptor at each call.
struct EpilogueData {
    const void* bias = nullptr;  // the bias, or where the bias gradient goes
    const void* aux = nullptr;   // the pre-activation (written by gelu_aux_bias, read by dgelu)
};

// Strided batch on a layout: `count` matrices `stride` elements apart.
void set_batch(cublasLtMatrixLayout_t layout, int64_t count, int64_t stride) {
    const int32_t n = static_cast<int32_t>(count);
    SB_CHECK_CUBLAS(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof(n)));
    SB_CHECK_CUBLAS(
        cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
}

// Descriptors and the algorithm for one GemmKey; "lt_a" is our B, "lt_b" our A.
struct GemmPlan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t lt_a = nullptr, lt_b = nullptr, lt_c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    std::vector<cublasLtMatmulAlgo_t> candidates;  // the heuristic's, best first; algo is one of them
    bool fused = false;  // the key's epilogue runs in cuBLASLt; a bias otherwise: gemm, then kernels::gemm_bias_epilogue
    // Unfused bias on a bf16/f16 C: the product goes to fp32 scratch and the epilogue
    // kernel rounds once (rounding C, then adding the bias, would round twice).
    bool via_f32 = false;
    size_t c_elems = 0;
    bool verified = false;  // has run once without error

    void destroy() {
        if (desc) cublasLtMatmulDescDestroy(desc);
        if (lt_a) cublasLtMatrixLayoutDestroy(lt_a);
        if (lt_b) cublasLtMatrixLayoutDestroy(lt_b);
        if (lt_c) cublasLtMatrixLayoutDestroy(lt_c);
        desc = nullptr;
        lt_a = lt_b = lt_c = nullptr;
    }
};

// cuBLASLt statuses that mean "this configuration has no kernel", which a fused epilogue
// answers by falling back to the plain GEMM and kernels.
bool unsupported(cublasStatus_t s) { return s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE; }

}  // namespace

struct CudaOps::Impl {
    Precision precision = Precision::fp32;
    int device = 0;
    DeviceLimits device_limits;  // the GPU's own, as read
    std::map<std::string, std::string> kernel_variants;
    kernels::Context ctx;
    cublasLtHandle_t lt = nullptr;
    void* workspace = nullptr;
    cudaEvent_t events[Ops::kMaxMarkers] = {};
    std::map<GemmKey, GemmPlan> plans;
    void* scratch = nullptr;  // bias_grad partials, per-row losses, fp32 GEMM products; only grows
    size_t scratch_bytes = 0;
    int* flag_device = nullptr;  // unscale_and_check's non-finite flag
    int* flag_host = nullptr;    // pinned
    uint64_t* checksum_device = nullptr;  // checksum's sum
    uint64_t* checksum_host = nullptr;    // pinned
    std::unique_ptr<StreamGate> gate;  // created on first hold_stream()
    std::map<int, cudaGraphExec_t> graphs;  // by handle
    std::vector<void*> retired_scratch;     // outgrown scratch buffers graphs may still use
    int next_graph = 0;
    bool capturing = false;
#ifdef SCALEBENCH_HAVE_CUDNN
    std::unique_ptr<CudnnConvolutions> cudnn;  // created by the first convolution
    CudnnConvolutions& convolutions() {
        if (!cudnn) cudnn = std::make_unique<CudnnConvolutions>(ctx.stream, precision);
        return *cudnn;
    }
#endif

    ~Impl() {
        if (ctx.stream) SB_WARN_CUDA(cudaStreamSynchronize(ctx.stream));
#ifdef SCALEBENCH_HAVE_CUDNN
        cudnn.reset();
#endif
        for (auto& kv : plans) kv.second.destroy();
        for (auto& kv : graphs) SB_WARN_CUDA(cudaGraphExecDestroy(kv.second));
        if (lt) cublasLtDestroy(lt);
        for (cudaEvent_t e : events)
            if (e) SB_WARN_CUDA(cudaEventDestroy(e));
        if (workspace) SB_WARN_CUDA(cudaFree(workspace));
        if (scratch) SB_WARN_CUDA(cudaFree(scratch));
        for (void* old : retired_scratch) SB_WARN_CUDA(cudaFree(old));
        if (flag_device) SB_WARN_CUDA(cudaFree(flag_device));
        if (checksum_device) SB_WARN_CUDA(cudaFree(checksum_device));
        if (checksum_host) SB_WARN_CUDA(cudaFreeHost(checksum_host));
        if (ctx.dropout_generation) SB_WARN_CUDA(cudaFree(ctx.dropout_generation));
        if (flag_host) SB_WARN_CUDA(cudaFreeHost(flag_host));
        if (ctx.stream) SB_WARN_CUDA(cudaStreamDestroy(ctx.stream));
    }

    // kernels::bias_grad with its partials in the scratch.
    void column_sums(const Tensor& grad, const int32_t* labels, float* out) {
        const int64_t chunks = kernels::bias_grad_chunks(ctx, grad.rows, grad.cols);
        float* partials = nullptr;
        if (chunks > 1)
            partials = static_cast<float*>(scratch_space(static_cast<size_t>(chunks * grad.cols) * sizeof(float)));
        kernels::bias_grad(ctx, grad.dtype, grad.data, labels, grad.rows, grad.cols, out, partials);
    }

    void* scratch_space(size_t bytes) {
        if (bytes > scratch_bytes) {
            // Work already queued may still read the old buffer; and a captured graph keeps
            // its address for every replay, so while graphs exist it is kept, not freed
            // (another trainer on this backend may grow the scratch after one captured).
            SB_CHECK_CUDA(cudaStreamSynchronize(ctx.stream));
            if (scratch && !graphs.empty()) retired_scratch.push_back(scratch);
            else if (scratch) SB_CHECK_CUDA(cudaFree(scratch));
            scratch = nullptr;
            scratch_bytes = 0;
            size_t grown = std::max(bytes, size_t{1} << 20);
            SB_CHECK_CUDA(cudaMalloc(&scratch, grown));
            scratch_bytes = grown;
        }
        return scratch;
    }

    // Builds descriptors and asks the heuristic once; with an epilogue it first tries it fused
    // and, when cuBLASLt has nothing for it, plans the plain GEMM instead.
    GemmPlan make_plan(const GemmKey& key, const EpilogueData& data, bool allow_fused) {
        GemmPlan plan;
        try {
            const bool tf32 = key.ab == DType::f32 && precision == Precision::tf32;
            SB_CHECK_CUBLAS(cublasLtMatmulDescCreate(
                &plan.desc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
            const cublasOperation_t op_lt_a = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
            const cublasOperation_t op_lt_b = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
            SB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_lt_a,
                                                           sizeof(op_lt_a)));
            SB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_lt_b,
                                                           sizeof(op_lt_b)));
            plan.fused = key.epilogue != Epilogue::none && allow_fused;
            plan.via_f32 = key.epilogue == Epilogue::bias && !plan.fused && key.c != DType::f32;
            plan.c_elems = static_cast<size_t>(key.m * key.n);
            const DType c_type = plan.via_f32 ? DType::f32 : key.c;
            const uint32_t align_c = plan.via_f32 ? 256u : key.align_c;  // scratch is cudaMalloc'd
            if (plan.fused) {
                const cublasLtEpilogue_t epilogue = lt_epilogue(key.epilogue);
                SB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                               &epilogue, sizeof(epilogue)));
                if (data.bias) {
                    // matmul() rounds a bias to C's dtype; the bias gradient is fp32 (as C is then).
                    const cudaDataType_t bias_type =
                        key.epilogue == Epilogue::bgradb ? CUDA_R_32F : cuda_type(key.c);
                    SB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                                   &bias_type, sizeof(bias_type)));
                }
                if (data.aux) {  // C's dtype and layout
                    const int64_t ld = key.m;
                    SB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                                   &ld, sizeof(ld)));
                }
                set_epilogue_pointers(plan, data);  // the heuristic reads them for their alignment
            }
            // Stored (pre-op) shapes, column-major: row-major r x c is c x r with ld = c.
            // lt_a = our B: op(lt_a) is m x k.  lt_b = our A: op(lt_b) is k x n.
            const int64_t a_rows = key.trans_b ? key.k : key.m, a_cols = key.trans_b ? key.m : key.k;
            const int64_t b_rows = key.trans_a ? key.n : key.k, b_cols = key.trans_a ? key.k : key.n;
            SB_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&plan.lt_a, cuda_type(key.ab), static_cast<uint64_t>(a_rows),
                                                       static_cast<uint64_t>(a_cols), a_rows));
            SB_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&plan.lt_b, cuda_type(key.ab), static_cast<uint64_t>(b_rows),
                                                       static_cast<uint64_t>(b_cols), b_rows));
            SB_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&plan.lt_c, cuda_type(c_type), static_cast<uint64_t>(key.m),
                                                       static_cast<uint64_t>(key.n), key.m));
            if (key.batch > 1) {
                set_batch(plan.lt_a, key.batch, key.stride_b);
                set_batch(plan.lt_b, key.batch, key.stride_a);
                set_batch(plan.lt_c, key.batch, key.stride_c);
            }

            cublasLtMatmulPreference_t pref = nullptr;
            SB_CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
            cublasLtMatmulHeuristicResult_t results[kTuneCandidates] = {};
            int returned = 0;
            cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
            try {
                const uint64_t ws = kWorkspaceBytes;
                SB_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                     &ws, sizeof(ws)));
                const uint32_t align[4] = {key.align_a, key.align_b, align_c, align_c};
                const cublasLtMatmulPreferenceAttributes_t attr[4] = {
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
                for (int i = 0; i < 4; ++i)
                    SB_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, attr[i], &align[i], sizeof(align[i])));
                status = cublasLtMatmulAlgoGetHeuristic(lt, plan.desc, plan.lt_a, plan.lt_b, plan.lt_c, plan.lt_c,
                                                        pref, kTuneCandidates, results, &returned);
            } catch (...) {
                cublasLtMatmulPreferenceDestroy(pref);
                throw;
            }
            cublasLtMatmulPreferenceDestroy(pref);
            if (status == CUBLAS_STATUS_SUCCESS)
                for (int i = 0; i < returned; ++i)
                    if (results[i].state == CUBLAS_STATUS_SUCCESS) plan.candidates.push_back(results[i].algo);
            const bool found = !plan.candidates.empty();
            if (!found && plan.fused && (unsupported(status) || status == CUBLAS_STATUS_SUCCESS)) {
                (void)cudaGetLastError();  // cuBLASLt's refusal can leave a runtime error behind (seen on H100)
                plan.destroy();
                return make_plan(key, data, false);
            }
            SB_CHECK_CUBLAS(status);
            if (!found)
                throw_call_error("cuBLAS", "cublasLtMatmulAlgoGetHeuristic",
                                 "no algorithm for m=" + std::to_string(key.m) + " n=" + std::to_string(key.n) +
                                     " k=" + std::to_string(key.k) + " (" + dtype_name(key.ab) + " -> " +
                                     dtype_name(key.c) + ")",
                                 __FILE__, __LINE__);
            plan.algo = plan.candidates.front();
        } catch (...) {
            plan.destroy();
            throw;
        }
        return plan;
    }

    // The problem op(A) op(B) into C, checked, as a plan key (epilogue and its alignments
    // left for the caller); `batch` matrices, the next stride_* elements further.
    GemmKey gemm_key(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, const Tensor& c, int64_t batch,
                     int64_t stride_a, int64_t stride_b, int64_t stride_c) const {
        const int64_t rows = trans_a ? a.cols : a.rows;  // M
        const int64_t inner = trans_a ? a.rows : a.cols;  // K
        const int64_t inner_b = trans_b ? b.cols : b.rows;
        const int64_t cols = trans_b ? b.rows : b.cols;  // N
        SB_REQUIRE(inner == inner_b, "gemm: op(A) is " + std::to_string(rows) + "x" + std::to_string(inner) +
                                         " but op(B) is " + std::to_string(inner_b) + "x" + std::to_string(cols));
        SB_REQUIRE(c.rows == rows && c.cols == cols, "gemm: C is " + std::to_string(c.rows) + "x" +
                                                         std::to_string(c.cols) + ", expected " + std::to_string(rows) +
                                                         "x" + std::to_string(cols));
        SB_REQUIRE(rows > 0 && cols > 0 && inner > 0, "gemm: empty matrix");
        SB_REQUIRE(a.dtype == b.dtype, "gemm: A and B must share a dtype");
        SB_REQUIRE(c.dtype == a.dtype || c.dtype == DType::f32, "gemm: C must be A's dtype or f32");
        SB_REQUIRE(a.data && b.data && c.data, "gemm: tensor without data");
        SB_REQUIRE(batch >= 1, "gemm: batch must be >= 1");
        const int64_t es = static_cast<int64_t>(dtype_size(a.dtype)), ec = static_cast<int64_t>(dtype_size(c.dtype));
        return GemmKey{cols, rows, inner, trans_a, trans_b, a.dtype, c.dtype, Epilogue::none,
                       alignment_of(b.data, stride_b * es), alignment_of(a.data, stride_a * es),
                       alignment_of(c.data, stride_c * ec), 0u, 0u,
                       batch, batch > 1 ? stride_a : 0, batch > 1 ? stride_b : 0, batch > 1 ? stride_c : 0};
    }

    // A Linear epilogue cuBLASLt has no kernel for: nothing is run, the caller composes it.
    static bool caller_composes(const GemmKey& key, const GemmPlan& plan) {
        return key.epilogue != Epilogue::none && key.epilogue != Epilogue::bias && !plan.fused;
    }

    // Runs the key's plan (made on first use). A fused plan the heuristic offered that will
    // not run on its first call is planned again without its epilogue and run so.
    GemmPlan& run(const GemmKey& key, const EpilogueData& data, float alpha, const void* a, const void* b,
                  float beta, void* c) {
        auto it = plans.find(key);
        const bool first_call = it == plans.end();
        if (first_call) it = plans.emplace(key, make_plan(key, data, true)).first;
        GemmPlan& plan = it->second;
        if (caller_composes(key, plan)) return plan;
        if (first_call) choose_algorithm(key, plan, data, alpha, a, b, beta, c);
        cublasStatus_t status = run_plan(plan, data, alpha, a, b, beta, c);
        if (status != CUBLAS_STATUS_SUCCESS && plan.fused && !plan.verified && unsupported(status)) {
            (void)cudaGetLastError();  // cuBLASLt's refusal can leave a runtime error behind (seen on H100)
            plan.destroy();
            try {
                plan = make_plan(key, data, false);
            } catch (...) {
                plans.erase(it);
                throw;
            }
            if (caller_composes(key, plan)) return plan;
            status = run_plan(plan, data, alpha, a, b, beta, c);
        }
        if (status != CUBLAS_STATUS_SUCCESS)
            throw_call_error("cuBLAS", "cublasLtMatmul", cublasGetStatusString(status), __FILE__, __LINE__);
        plan.verified = true;
        return plan;
    }

    // The plan's algorithm (see kTuneCandidates): the one this process chose for the same
    // problem before, so every CudaOps of a process computes it with the same bits; else the
    // candidates timed on this call's operands. The heuristic's first choice stays when there
    // is nothing to time, when C is also an input (beta != 0: timing would change it) and
    // while the stream is being captured (nothing may run).
    void choose_algorithm(const GemmKey& key, GemmPlan& plan, const EpilogueData& data, float alpha, const void* a,
                          const void* b, float beta, void* c) {
        struct Chosen {
            GemmKey key;
            int device;
            Precision precision;
            bool fused;
            bool operator<(const Chosen& o) const {
                return std::tie(key, device, precision, fused) < std::tie(o.key, o.device, o.precision, o.fused);
            }
        };
        static std::mutex mutex;
        static std::map<Chosen, cublasLtMatmulAlgo_t> chosen;
        const Chosen problem{key, device, precision, plan.fused};
        std::lock_guard<std::mutex> lock(mutex);
        if (auto it = chosen.find(problem); it != chosen.end()) {
            plan.algo = it->second;
            return;
        }
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        SB_CHECK_CUDA(cudaStreamIsCapturing(ctx.stream, &capture));
        if (plan.candidates.size() < 2 || beta != 0.0f || capture != cudaStreamCaptureStatusNone) return;
        cudaEvent_t start = nullptr, stop = nullptr;
        SB_CHECK_CUDA(cudaEventCreate(&start));
        SB_CHECK_CUDA(cudaEventCreate(&stop));
        // The least of kTuneRuns timed runs after one untimed; infinite when it will not run.
        auto time = [&](const cublasLtMatmulAlgo_t& algo) {
            plan.algo = algo;
            float least = INFINITY;
            if (run_plan(plan, data, alpha, a, b, beta, c) != CUBLAS_STATUS_SUCCESS) {
                (void)cudaGetLastError();
                return least;
            }
            for (int i = 0; i < kTuneRuns; ++i) {
                float ms = 0.0f;
                SB_CHECK_CUDA(cudaEventRecord(start, ctx.stream));
                const cublasStatus_t status = run_plan(plan, data, alpha, a, b, beta, c);
                SB_CHECK_CUDA(cudaEventRecord(stop, ctx.stream));
                SB_CHECK_CUDA(cudaEventSynchronize(stop));
                SB_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
                if (status != CUBLAS_STATUS_SUCCESS) return static_cast<float>(INFINITY);
                least = std::min(least, ms);
            }
            return least;
        };
        try {
            const float first_ms = time(plan.candidates.front());
            cublasLtMatmulAlgo_t best = plan.candidates.front();
            float best_ms = first_ms;
            for (size_t i = 1; i < plan.candidates.size(); ++i) {
                const float ms = time(plan.candidates[i]);
                if (ms < best_ms) {
                    best = plan.candidates[i];
                    best_ms = ms;
                }
            }
            plan.algo = best_ms < (1.0f - kTuneMargin) * first_ms ? best : plan.candidates.front();
        } catch (...) {
            cudaEventDestroy(start);
            cudaEventDestroy(stop);
            throw;
        }
        SB_WARN_CUDA(cudaEventDestroy(start));
        SB_WARN_CUDA(cudaEventDestroy(stop));
        chosen.emplace(problem, plan.algo);
    }

    // C = alpha op(A) op(B) + beta C (+ bias) for `batch` matrices; A, B, C describe the
    // first of each, the next starts stride_* elements further (batch 1: plain GEMM).
    void matmul(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
                const Tensor& c, const float* bias, int64_t batch, int64_t stride_a, int64_t stride_b,
                int64_t stride_c) {
        SB_REQUIRE(batch == 1 || !bias, "gemm: a batched GEMM takes no bias");
        GemmKey key = gemm_key(trans_a, trans_b, a, b, c, batch, stride_a, stride_b, stride_c);
        EpilogueData data;
        if (bias) {
            key.epilogue = Epilogue::bias;
            data.bias = rounded_bias(bias, c);
            key.align_bias = alignment_of(data.bias);
        }
        const GemmPlan& plan = run(key, data, alpha, a.data, b.data, beta, c.data);
        if (bias && !plan.fused) {
            if (plan.via_f32)
                kernels::gemm_bias_epilogue(ctx, c.dtype, c.data, static_cast<const float*>(scratch),
                                            c.rows, c.cols, beta, bias);
            else  // f32 C already holds alpha op(A) op(B) + beta C
                kernels::gemm_bias_epilogue(ctx, DType::f32, c.data, static_cast<const float*>(c.data), c.rows,
                                            c.cols, 0.0f, bias);
        }
    }

    // C = op(A) op(B) with a Linear's epilogue (gelu_aux_bias, dgelu, bgradb) inside cuBLASLt's
    // GEMM; false, with nothing run, where cuBLASLt has no kernel for it (the plan remembers).
    bool matmul_epilogue(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, const Tensor& c,
                         Epilogue epilogue, const float* bias, const void* aux) {
        GemmKey key = gemm_key(trans_a, trans_b, a, b, c, 1, 0, 0, 0);
        key.epilogue = epilogue;
        EpilogueData data;
        data.bias = epilogue == Epilogue::gelu_aux_bias ? rounded_bias(bias, c) : bias;
        data.aux = aux;
        key.align_bias = data.bias ? alignment_of(data.bias) : 0u;
        key.align_aux = aux ? alignment_of(aux) : 0u;
        return run(key, data, 1.0f, a.data, b.data, 0.0f, c.data).fused;
    }

    // cuBLASLt fuses a bias of C's own dtype into a bf16/f16 GEMM but not an fp32 one: every
    // such plan ran unfused (the product through fp32 scratch, then an epilogue kernel), 2-3x
    // the GEMM's time at BERT's shapes. So the fused path adds the bias rounded to C's dtype,
    // as torch's Linear does under autocast; the unfused fallback keeps the fp32 bias.
    const void* rounded_bias(const float* bias, const Tensor& c) {
        if (!bias || c.dtype == DType::f32) return bias;
        void* rounded = scratch_space(static_cast<size_t>(c.cols) * dtype_size(c.dtype));
        kernels::cast(ctx, bias, DType::f32, rounded, c.dtype, static_cast<size_t>(c.cols));
        return rounded;
    }

    void set_epilogue_pointers(const GemmPlan& plan, const EpilogueData& data) {
        if (data.bias)
            SB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &data.bias,
                                                           sizeof(data.bias)));
        if (data.aux)
            SB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                           &data.aux, sizeof(data.aux)));
    }

    cublasStatus_t run_plan(const GemmPlan& plan, const EpilogueData& data, float alpha, const void* a,
                            const void* b, float beta, void* c) {
        if (plan.fused) set_epilogue_pointers(plan, data);
        void* out = c;
        if (plan.via_f32) {
            out = scratch_space(plan.c_elems * sizeof(float));
            beta = 0.0f;  // the epilogue kernel applies beta to C
        }
        // Swapped operands: cuBLASLt's A is our B.
        return cublasLtMatmul(lt, plan.desc, &alpha, b, plan.lt_a, a, plan.lt_b, &beta, out, plan.lt_c, out,
                              plan.lt_c, &plan.algo, workspace, kWorkspaceBytes, ctx.stream);
    }
};

namespace {

int attribute(cudaDeviceAttr what, int device) {
    int value = 0;
    SB_CHECK_CUDA(cudaDeviceGetAttribute(&value, what, device));
    return value;
}

}  // namespace

DeviceLimits read_device_limits(int device) {
    DeviceLimits l;
    l.major = attribute(cudaDevAttrComputeCapabilityMajor, device);
    l.minor = attribute(cudaDevAttrComputeCapabilityMinor, device);
    l.arch = "sm_" + std::to_string(l.major * 10 + l.minor);
    l.smem_per_block_optin = attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    l.smem_per_sm = attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
    l.smem_reserved_per_block = attribute(cudaDevAttrReservedSharedMemoryPerBlock, device);
    l.regs_per_sm = attribute(cudaDevAttrMaxRegistersPerMultiprocessor, device);
    l.max_regs_per_thread = 255;  // every architecture since sm_35; the runtime has no attribute for it
    l.max_threads_per_sm = attribute(cudaDevAttrMaxThreadsPerMultiProcessor, device);
    l.max_blocks_per_sm = attribute(cudaDevAttrMaxBlocksPerMultiprocessor, device);
    l.sm_count = attribute(cudaDevAttrMultiProcessorCount, device);
    l.l2_bytes = attribute(cudaDevAttrL2CacheSize, device);
    l.source = "device";
    return l;
}

CudaOps::CudaOps(Precision precision, int device) : impl_(std::make_unique<Impl>()) {
    impl_->precision = precision;
    impl_->device = device;
    SB_CHECK_CUDA(cudaSetDevice(device));
    impl_->device_limits = read_device_limits(device);
    impl_->ctx.sm_count = impl_->device_limits.sm_count;
    // A GPU this build has no code for is refused here, not by the first launch.
    if (kernels::kernel_image_status() != cudaSuccess) {
        cudaDeviceProp prop{};
        SB_CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
        throw UserError("GPU " + std::to_string(device) + " (" + prop.name + ") has compute capability " +
                        std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                        ", but this scalebench has code for CUDA architectures " SCALEBENCH_CUDA_ARCHITECTURES
                        " only: rebuild with -DCMAKE_CUDA_ARCHITECTURES=" +
                        std::to_string(prop.major * 10 + prop.minor) + " (launch/build.sh passes it on)");
    }
    const char* emulate = std::getenv(kDeviceLimitsVariable);
    set_device_limits(effective_limits(impl_->device_limits, emulate ? emulate : ""));
    SB_CHECK_CUDA(cudaStreamCreateWithFlags(&impl_->ctx.stream, cudaStreamNonBlocking));
    SB_CHECK_CUBLAS(cublasLtCreate(&impl_->lt));
    SB_CHECK_CUDA(cudaMalloc(&impl_->workspace, kWorkspaceBytes));
    for (cudaEvent_t& e : impl_->events) SB_CHECK_CUDA(cudaEventCreate(&e));
    SB_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&impl_->flag_device), sizeof(int)));
    SB_CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&impl_->flag_host), sizeof(int)));
    SB_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&impl_->checksum_device), sizeof(uint64_t)));
    SB_CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&impl_->checksum_host), sizeof(uint64_t)));
    SB_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&impl_->ctx.dropout_generation), sizeof(uint64_t)));
    SB_CHECK_CUDA(cudaMemset(impl_->ctx.dropout_generation, 0, sizeof(uint64_t)));
}

CudaOps::~CudaOps() = default;

int visible_gpu_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // clear it, so the next checked call does not see it
        return 0;
    }
    return count;
}

void CudaOps::set_device_limits(const DeviceLimits& limits) {
    impl_->ctx.limits = limits;
    impl_->ctx.variants = &impl_->kernel_variants;
    impl_->kernel_variants.clear();
    // The emulated SM's shared memory as a carveout of the device's (percent, rounded up, so the
    // driver's next configuration holds at least as much); none for the device's own limits.
    const DeviceLimits& own = impl_->device_limits;
    impl_->ctx.carveout_percent =
        limits.source == "device" || own.smem_per_sm <= 0
            ? -1
            : static_cast<int>(std::min<int64_t>(100, (limits.smem_per_sm * 100 + own.smem_per_sm - 1) / own.smem_per_sm));
}
const DeviceLimits& CudaOps::hardware_limits() const { return impl_->device_limits; }
const DeviceLimits* CudaOps::device_limits() const { return &impl_->ctx.limits; }
std::map<std::string, std::string> CudaOps::kernel_variants() const { return impl_->kernel_variants; }

cudaStream_t CudaOps::cuda_stream() const { return impl_->ctx.stream; }
int CudaOps::device() const { return impl_->device; }
size_t CudaOps::matmul_plan_count() const { return impl_->plans.size(); }
size_t CudaOps::matmul_unfused_epilogue_plan_count() const {
    size_t count = 0;
    for (const auto& kv : impl_->plans) count += kv.first.epilogue != Epilogue::none && !kv.second.fused;
    return count;
}
Precision CudaOps::precision() const { return impl_->precision; }

// ---- memory

void* CudaOps::alloc(size_t bytes) {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    SB_CHECK_CUDA(cudaMalloc(&p, bytes));
    count_alloc(p, bytes);
    return p;
}

void CudaOps::release(void* ptr) {
    count_release(ptr);
    if (ptr) SB_WARN_CUDA(cudaFree(ptr));
}

void CudaOps::upload(void* dst, const void* host_src, size_t bytes) {
    if (bytes == 0) return;
    SB_CHECK_CUDA(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, impl_->ctx.stream));
    SB_CHECK_CUDA(cudaStreamSynchronize(impl_->ctx.stream));  // the caller may reuse host_src at once
}

void CudaOps::download(void* host_dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    SB_CHECK_CUDA(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, impl_->ctx.stream));
    SB_CHECK_CUDA(cudaStreamSynchronize(impl_->ctx.stream));
}

void CudaOps::fill(const Tensor& t, float value) {
    SB_REQUIRE(t.numel() >= 0 && (t.data || t.numel() == 0), "fill: tensor without data");
    kernels::fill(impl_->ctx, t.data, t.dtype, static_cast<size_t>(t.numel()), value);
}

void CudaOps::cast(const Tensor& src, const Tensor& dst) {
    SB_REQUIRE(src.numel() == dst.numel(), "cast: source and destination sizes differ");
    kernels::cast(impl_->ctx, src.data, src.dtype, dst.data, dst.dtype, static_cast<size_t>(src.numel()));
}

uint64_t CudaOps::checksum(const void* data, size_t bytes) {
    SB_REQUIRE(data || bytes == 0, "checksum: buffer without data");
    SB_CHECK_CUDA(cudaMemsetAsync(impl_->checksum_device, 0, sizeof(uint64_t), impl_->ctx.stream));
    kernels::checksum(impl_->ctx, data, bytes, impl_->checksum_device);
    SB_CHECK_CUDA(cudaMemcpyAsync(impl_->checksum_host, impl_->checksum_device, sizeof(uint64_t),
                                  cudaMemcpyDeviceToHost, impl_->ctx.stream));
    SB_CHECK_CUDA(cudaStreamSynchronize(impl_->ctx.stream));
    return *impl_->checksum_host;
}

// ---- GEMM

void CudaOps::gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
                   const Tensor& c, const float* bias) {
    impl_->matmul(trans_a, trans_b, alpha, a, b, beta, c, bias, 1, 0, 0, 0);
}

// ---- elementwise and reductions

void CudaOps::linear_activation_forward(const Tensor& x, const Tensor& w, const float* bias, Activation act,
                                        const Tensor& pre, const Tensor& out) {
    SB_REQUIRE(pre.rows == out.rows && pre.cols == out.cols && pre.dtype == out.dtype,
               "linear_activation_forward: pre and out differ in shape or dtype");
    SB_REQUIRE(bias != nullptr, "linear_activation_forward: no bias");  // GELU_AUX_BIAS reads one
    if (gemm_fuses_activation(act, x.dtype) &&
        impl_->matmul_epilogue(false, true, x, w, out, Epilogue::gelu_aux_bias, bias, pre.data))
        return;
    Ops::linear_activation_forward(x, w, bias, act, pre, out);
}

void CudaOps::linear_activation_backward(const Tensor& grad_out, const Tensor& w, Activation act, const Tensor& pre,
                                         const Tensor& grad_pre) {
    SB_REQUIRE(pre.rows == grad_pre.rows && pre.cols == grad_pre.cols && pre.dtype == grad_pre.dtype,
               "linear_activation_backward: pre and grad_pre differ in shape or dtype");
    if (gemm_fuses_activation(act, grad_out.dtype) &&
        impl_->matmul_epilogue(false, false, grad_out, w, grad_pre, Epilogue::dgelu, nullptr, pre.data))
        return;
    Ops::linear_activation_backward(grad_out, w, act, pre, grad_pre);
}

void CudaOps::linear_weight_grad(const Tensor& grad_out, const Tensor& x, const Tensor& grad_w, float* grad_bias) {
    SB_REQUIRE(grad_bias != nullptr, "linear_weight_grad: no bias gradient");
    if (gemm_fuses_bias_grad(grad_out.dtype) &&
        impl_->matmul_epilogue(true, false, grad_out, x, grad_w, Epilogue::bgradb, grad_bias, nullptr))
        return;
    Ops::linear_weight_grad(grad_out, x, grad_w, grad_bias);
}

void CudaOps::activation_forward(Activation act, const Tensor& pre, const Tensor& out) {
    SB_REQUIRE(pre.numel() == out.numel() && pre.dtype == out.dtype, "activation_forward: shapes/dtypes differ");
    kernels::activation_forward(impl_->ctx, act, pre.dtype, pre.data, out.data, static_cast<size_t>(pre.numel()));
}

void CudaOps::activation_backward(Activation act, const Tensor& pre, const Tensor& grad_out,
                                  const Tensor& grad_pre) {
    SB_REQUIRE(pre.numel() == grad_out.numel() && pre.numel() == grad_pre.numel(),
               "activation_backward: sizes differ");
    SB_REQUIRE(pre.dtype == grad_out.dtype && pre.dtype == grad_pre.dtype, "activation_backward: dtypes differ");
    kernels::activation_backward(impl_->ctx, act, pre.dtype, pre.data, grad_out.data, grad_pre.data,
                                 static_cast<size_t>(pre.numel()));
}

void CudaOps::bias_grad(const Tensor& grad, float* bias_grad) {
    SB_REQUIRE(bias_grad != nullptr, "bias_grad: no output");
    impl_->column_sums(grad, nullptr, bias_grad);
}

// labelled_rows is the caller's word (ops.h): the kernel reads each row's label itself.
void CudaOps::labelled_bias_grad(const Tensor& grad, const int32_t* labels, int64_t, float* bias_grad) {
    SB_REQUIRE(bias_grad != nullptr, "labelled_bias_grad: no output");
    SB_REQUIRE(grad.rows == 0 || labels != nullptr, "labelled_bias_grad: no labels");
    impl_->column_sums(grad, labels, bias_grad);
}

// labelled_rows is the caller's word (ops.h): the kernels count the labels themselves.
void CudaOps::softmax_cross_entropy(const Tensor& logits, const int32_t* labels, int64_t, float* loss,
                                    const Tensor& grad_logits, float grad_scale) {
    SB_REQUIRE(logits.rows == grad_logits.rows && logits.cols == grad_logits.cols,
               "softmax_cross_entropy: logits and gradient shapes differ");
    SB_REQUIRE(logits.rows > 0 && logits.cols > 0, "softmax_cross_entropy: empty logits");
    SB_REQUIRE(labels && loss && logits.data && grad_logits.data, "softmax_cross_entropy: missing buffer");
    // One float per row and the labelled-row count after them.
    auto* row_loss =
        static_cast<float*>(impl_->scratch_space(static_cast<size_t>(logits.rows + 1) * sizeof(float)));
    kernels::softmax_cross_entropy(impl_->ctx, logits.dtype, logits.data, labels, logits.rows, logits.cols,
                                   grad_logits.dtype, grad_logits.data, grad_scale, row_loss, loss);
}

// ---- transformer layers

void CudaOps::add(const Tensor& a, const Tensor& b, const Tensor& out) {
    SB_REQUIRE(a.numel() == b.numel() && a.numel() == out.numel(), "add: sizes differ");
    SB_REQUIRE(a.dtype == b.dtype && a.dtype == out.dtype, "add: dtypes differ");
    kernels::add(impl_->ctx, a.dtype, a.data, b.data, out.data, static_cast<size_t>(a.numel()));
}

void CudaOps::layernorm_forward(const Tensor& x, const float* gamma, const float* beta, float eps, const Tensor& out,
                                float* mean, float* rstd) {
    SB_REQUIRE(x.rows == out.rows && x.cols == out.cols && x.dtype == out.dtype,
               "layernorm_forward: x and out differ in shape or dtype");
    SB_REQUIRE(x.data != out.data || x.numel() == 0, "layernorm_forward: out must not alias x");
    SB_REQUIRE(gamma && beta && mean && rstd, "layernorm_forward: missing buffer");
    kernels::layernorm_forward(impl_->ctx, x.dtype, x.data, gamma, beta, eps, x.rows, x.cols, out.data, mean, rstd);
}

void CudaOps::layernorm_backward(const Tensor& x, const Tensor& grad_out, const float* gamma, const float* mean,
                                 const float* rstd, const Tensor& grad_x, float* grad_gamma, float* grad_beta) {
    SB_REQUIRE(x.rows == grad_out.rows && x.cols == grad_out.cols && x.rows == grad_x.rows &&
                   x.cols == grad_x.cols,
               "layernorm_backward: shapes differ");
    SB_REQUIRE(x.dtype == grad_out.dtype && x.dtype == grad_x.dtype, "layernorm_backward: dtypes differ");
    SB_REQUIRE(gamma && mean && rstd && grad_gamma && grad_beta, "layernorm_backward: missing buffer");
    const int64_t partial_floats = kernels::layernorm_partials_floats(impl_->ctx, x.rows, x.cols);
    float* partials = partial_floats > 0 ? static_cast<float*>(impl_->scratch_space(
                                               static_cast<size_t>(partial_floats) * sizeof(float)))
                                         : nullptr;
    kernels::layernorm_backward(impl_->ctx, x.dtype, x.data, grad_out.data, gamma, mean, rstd, x.rows, x.cols,
                                grad_x.data, grad_gamma, grad_beta, partials);
}

void CudaOps::embedding_forward(const int32_t* ids, const Tensor& table, const Tensor& out, bool accumulate) {
    SB_REQUIRE(table.dtype == out.dtype && table.cols == out.cols, "embedding_forward: table and out differ");
    SB_REQUIRE(ids || out.rows == 0, "embedding_forward: no ids");
    kernels::embedding_forward(impl_->ctx, out.dtype, ids, table.data, table.rows, out.rows, out.cols, out.data,
                               accumulate);
}

void CudaOps::embedding_backward(const int32_t* ids, const Tensor& grad_out, float* grad_table, int64_t table_rows) {
    SB_REQUIRE(grad_table && (ids || grad_out.rows == 0), "embedding_backward: missing buffer");
    kernels::embedding_backward(impl_->ctx, grad_out.dtype, ids, grad_out.data, grad_out.rows, grad_out.cols,
                                grad_table, table_rows);
}

void CudaOps::advance_dropout_generation() { kernels::increment(impl_->ctx, impl_->ctx.dropout_generation); }

void CudaOps::dropout(const Tensor& in, const Tensor& out, float p, uint64_t seed) {
    SB_REQUIRE(in.numel() == out.numel() && in.dtype == out.dtype, "dropout: in and out differ");
    kernels::dropout(impl_->ctx, in.dtype, in.data, out.data, static_cast<size_t>(in.numel()), p, seed);
}

namespace {
bool same_shape_and_dtype(const Tensor& a, const Tensor& b) {
    return a.rows == b.rows && a.cols == b.cols && a.dtype == b.dtype;
}
}  // namespace

void CudaOps::residual_layernorm_forward(const Tensor& branch, const Tensor& residual, float p, uint64_t seed,
                                         const float* gamma, const float* beta, float eps, const Tensor& sum,
                                         const Tensor& out, float* mean, float* rstd) {
    SB_REQUIRE(same_shape_and_dtype(branch, residual) && same_shape_and_dtype(branch, sum) &&
                   same_shape_and_dtype(branch, out),
               "residual_layernorm_forward: branch, residual, sum and out differ in shape or dtype");
    SB_REQUIRE(out.data != sum.data && out.data != residual.data && out.data != branch.data,
               "residual_layernorm_forward: out must not alias an input or sum");
    SB_REQUIRE(gamma && beta && mean && rstd, "residual_layernorm_forward: missing buffer");
    kernels::residual_layernorm_forward(impl_->ctx, branch.dtype, branch.data, residual.data, p, seed, gamma, beta,
                                        eps, branch.rows, branch.cols, sum.data, out.data, mean, rstd);
}

void CudaOps::residual_layernorm_backward(const Tensor& sum, const Tensor& grad_out, const Tensor& grad_out_residual,
                                          const Tensor& grad_sum_residual, const float* gamma, const float* mean,
                                          const float* rstd, float p, uint64_t seed, const Tensor& grad_sum,
                                          const Tensor& grad_branch, float* grad_gamma, float* grad_beta) {
    for (const Tensor* t : {&grad_out, &grad_out_residual, &grad_sum_residual, &grad_sum, &grad_branch})
        SB_REQUIRE(!t->data || same_shape_and_dtype(sum, *t),
                   "residual_layernorm_backward: a gradient differs from sum in shape or dtype");
    SB_REQUIRE(grad_out.data && grad_sum.data && grad_branch.data, "residual_layernorm_backward: missing gradient");
    SB_REQUIRE(grad_branch.data != grad_sum.data && grad_branch.data != grad_out_residual.data &&
                   grad_branch.data != grad_sum_residual.data,
               "residual_layernorm_backward: grad_branch must not alias grad_sum or a residual gradient");
    SB_REQUIRE(gamma && mean && rstd && grad_gamma && grad_beta, "residual_layernorm_backward: missing buffer");
    const int64_t partial_floats = kernels::layernorm_partials_floats(impl_->ctx, sum.rows, sum.cols);
    float* partials = partial_floats > 0 ? static_cast<float*>(impl_->scratch_space(
                                               static_cast<size_t>(partial_floats) * sizeof(float)))
                                         : nullptr;
    kernels::residual_layernorm_backward(impl_->ctx, sum.dtype, sum.data, grad_out.data, grad_out_residual.data,
                                         grad_sum_residual.data, gamma, mean, rstd, sum.rows, sum.cols, p, seed,
                                         grad_sum.data, grad_branch.data, grad_gamma, grad_beta, partials);
}

// ---- attention: bf16/fp16 with head_dim 64 or 128 run the fused kernels of
// attention_kernels.cu (Ops::attention_fused). Other shapes and fp32 (the reference):
// permute the packed QKV rows into batch x heads x seq x head_dim arrays,
// scores = Q K^T / sqrt(d) by one strided-batched GEMM (batch*heads matrices of seq x
// seq), the fused mask/softmax/dropout row kernel, O = P V by another, and a permute back
// to heads-concatenated rows. `saved` keeps Q, K, V, P and (with dropout) the dropped P
// for the backward, all in the compute dtype.

namespace {

size_t round256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Byte offsets into `saved` (forward) or the scratch (backward), 256-byte aligned.
struct AttentionLayout {
    int64_t head_elems = 0, prob_elems = 0;  // one B*H*S*D array, one B*H*S*S array
    size_t q = 0, k = 0, v = 0, p = 0, pdrop = 0, total = 0;
};

AttentionLayout attention_layout(const Ops::AttentionShape& s, DType dtype) {
    AttentionLayout l;
    const int64_t bh = int64_t{s.batch} * s.heads;
    l.head_elems = bh * s.seq * s.head_dim;
    l.prob_elems = bh * s.seq * s.seq;
    const size_t es = dtype_size(dtype);
    const size_t head_bytes = round256(static_cast<size_t>(l.head_elems) * es);
    const size_t prob_bytes = round256(static_cast<size_t>(l.prob_elems) * es);
    l.q = 0;
    l.k = head_bytes;
    l.v = 2 * head_bytes;
    l.p = 3 * head_bytes;
    l.pdrop = l.p + prob_bytes;
    l.total = l.pdrop + (s.dropout_p > 0.0f ? prob_bytes : 0);
    return l;
}

void check_attention(const Ops::AttentionShape& s, DType compute, const Tensor& qkv, const Tensor& out) {
    SB_REQUIRE(s.batch > 0 && s.seq > 0 && s.heads > 0 && s.head_dim > 0, "attention: empty shape");
    SB_REQUIRE(s.dropout_p >= 0.0f && s.dropout_p < 1.0f, "attention: dropout must be in [0, 1)");
    const int64_t rows = int64_t{s.batch} * s.seq, width = int64_t{s.heads} * s.head_dim;
    SB_REQUIRE(qkv.rows == rows && qkv.cols == 3 * width,
               "attention: qkv is " + std::to_string(qkv.rows) + "x" + std::to_string(qkv.cols) + ", expected " +
                   std::to_string(rows) + "x" + std::to_string(3 * width));
    SB_REQUIRE(out.rows == rows && out.cols == width, "attention: out is " + std::to_string(out.rows) + "x" +
                                                          std::to_string(out.cols) + ", expected " +
                                                          std::to_string(rows) + "x" + std::to_string(width));
    SB_REQUIRE(qkv.dtype == compute && out.dtype == compute,
               std::string("attention: tensors must be in the compute dtype ") + dtype_name(compute));
    SB_REQUIRE(qkv.data && out.data, "attention: tensor without data");
}

// The fused path saves one fp32 log-sum-exp per (batch, head, query) and needs as many
// floats of scratch (rowsum(dO * O)) in the backward.
size_t fused_lse_bytes(const Ops::AttentionShape& s) {
    return static_cast<size_t>(s.batch) * s.heads * s.seq * sizeof(float);
}

// The fused kernels move 16-byte vectors of every operand.
void check_fused_alignment(std::initializer_list<const void*> ptrs) {
    for (const void* p : ptrs)
        SB_REQUIRE(reinterpret_cast<uintptr_t>(p) % 16 == 0, "attention: fused kernels need 16-byte aligned tensors");
}

Tensor at(void* base, size_t offset, DType dtype, int64_t rows, int64_t cols) {
    return Tensor{static_cast<char*>(base) + offset, dtype, rows, cols};
}

}  // namespace

size_t CudaOps::attention_saved_bytes(const AttentionShape& shape) const {
    const DType dt = compute_dtype(impl_->precision);
    if (attention_fused(dt, shape.head_dim)) return fused_lse_bytes(shape);
    return attention_layout(shape, dt).total;
}

void CudaOps::attention_forward(const AttentionShape& shape, const Tensor& qkv, const Tensor& out, void* saved,
                                uint64_t seed) {
    const DType dt = compute_dtype(impl_->precision);
    check_attention(shape, dt, qkv, out);
    SB_REQUIRE(saved, "attention_forward: no saved buffer");
    if (attention_fused(dt, shape.head_dim)) {
        check_fused_alignment({qkv.data, out.data});
        kernels::fused_attention_forward(impl_->ctx, dt, shape, qkv.data, out.data, static_cast<float*>(saved), seed);
        return;
    }
    const AttentionLayout l = attention_layout(shape, dt);
    const int B = shape.batch, S = shape.seq, H = shape.heads, D = shape.head_dim;
    const int64_t bh = int64_t{B} * H, sd = int64_t{S} * D, ss = int64_t{S} * S;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const bool drop = shape.dropout_p > 0.0f;
    char* base = static_cast<char*>(saved);
    void* heads[3] = {base + l.q, base + l.k, base + l.v};
    kernels::attention_permute(impl_->ctx, dt, qkv.data, heads, 3, B, S, H, D, true);
    const Tensor q = at(saved, l.q, dt, S, D), k = at(saved, l.k, dt, S, D), v = at(saved, l.v, dt, S, D);
    const Tensor p = at(saved, l.p, dt, S, S), pdrop = at(saved, l.pdrop, dt, S, S);
    impl_->matmul(false, true, scale, q, k, 0.0f, p, nullptr, bh, sd, sd, ss);
    kernels::attention_softmax_forward(impl_->ctx, dt, p.data, drop ? pdrop.data : nullptr, bh * S, S, shape.causal,
                                       shape.dropout_p, seed);
    void* ctx_heads = impl_->scratch_space(static_cast<size_t>(l.head_elems) * dtype_size(dt));
    impl_->matmul(false, false, 1.0f, drop ? pdrop : p, v, 0.0f, Tensor{ctx_heads, dt, S, D}, nullptr, bh, ss, sd,
                  sd);
    kernels::attention_permute(impl_->ctx, dt, out.data, &ctx_heads, 1, B, S, H, D, false);
}

// dO to heads; dP' = dO V^T (fp32, see attention_softmax_backward) and dV = P'^T dO (P'
// the dropped P); dS from the fused softmax/dropout backward; dQ = dS K / sqrt(d) and
// dK = dS^T Q / sqrt(d); dQ, dK, dV permuted back into the packed layout of grad_qkv.
void CudaOps::attention_backward(const AttentionShape& shape, const Tensor& qkv, const Tensor& out,
                                 const void* saved, const Tensor& grad_out, const Tensor& grad_qkv, uint64_t seed) {
    const DType dt = compute_dtype(impl_->precision);
    check_attention(shape, dt, qkv, out);
    check_attention(shape, dt, grad_qkv, grad_out);
    SB_REQUIRE(saved, "attention_backward: no saved buffer");
    if (attention_fused(dt, shape.head_dim)) {
        check_fused_alignment({qkv.data, out.data, grad_out.data, grad_qkv.data});
        float* dsum = static_cast<float*>(impl_->scratch_space(fused_lse_bytes(shape)));
        kernels::fused_attention_backward(impl_->ctx, dt, shape, qkv.data, out.data, static_cast<const float*>(saved),
                                          grad_out.data, grad_qkv.data, dsum, seed);
        return;
    }
    const AttentionLayout l = attention_layout(shape, dt);
    const int B = shape.batch, S = shape.seq, H = shape.heads, D = shape.head_dim;
    const int64_t bh = int64_t{B} * H, sd = int64_t{S} * D, ss = int64_t{S} * S;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const bool drop = shape.dropout_p > 0.0f;
    void* sv = const_cast<void*>(saved);  // read only
    const Tensor q = at(sv, l.q, dt, S, D), k = at(sv, l.k, dt, S, D), v = at(sv, l.v, dt, S, D);
    const Tensor p = at(sv, l.p, dt, S, S), pdrop = drop ? at(sv, l.pdrop, dt, S, S) : p;

    // Scratch: dO, dQ, dK, dV (head arrays), dS and the fp32 dP' (probability arrays; dP'
    // shares dS's array in fp32), same layout rules.
    const size_t head_bytes = round256(static_cast<size_t>(l.head_elems) * dtype_size(dt));
    const size_t prob_bytes = round256(static_cast<size_t>(l.prob_elems) * dtype_size(dt));
    const size_t dp_bytes = dt == DType::f32 ? 0 : round256(static_cast<size_t>(l.prob_elems) * sizeof(float));
    void* scratch = impl_->scratch_space(4 * head_bytes + prob_bytes + dp_bytes);
    const Tensor d_o = at(scratch, 0, dt, S, D), dq = at(scratch, head_bytes, dt, S, D);
    const Tensor dk = at(scratch, 2 * head_bytes, dt, S, D), dv = at(scratch, 3 * head_bytes, dt, S, D);
    const Tensor ds = at(scratch, 4 * head_bytes, dt, S, S);
    const Tensor dp = dt == DType::f32 ? ds : at(scratch, 4 * head_bytes + prob_bytes, DType::f32, S, S);

    void* d_o_heads = d_o.data;
    kernels::attention_permute(impl_->ctx, dt, grad_out.data, &d_o_heads, 1, B, S, H, D, true);
    impl_->matmul(false, true, 1.0f, d_o, v, 0.0f, dp, nullptr, bh, sd, sd, ss);
    impl_->matmul(true, false, 1.0f, pdrop, d_o, 0.0f, dv, nullptr, bh, ss, sd, sd);
    kernels::attention_softmax_backward(impl_->ctx, dt, p.data, static_cast<const float*>(dp.data), ds.data, bh * S,
                                        S, shape.dropout_p, seed);
    impl_->matmul(false, false, scale, ds, k, 0.0f, dq, nullptr, bh, ss, sd, sd);
    impl_->matmul(true, false, scale, ds, q, 0.0f, dk, nullptr, bh, ss, sd, sd);
    void* grads[3] = {dq.data, dk.data, dv.data};
    kernels::attention_permute(impl_->ctx, dt, grad_qkv.data, grads, 3, B, S, H, D, false);
}

// ---- convolutional layers: argument checks, then the kernels of conv_kernels.cu.

namespace {

std::string dims(int64_t rows, int64_t cols) { return std::to_string(rows) + "x" + std::to_string(cols); }

void check_conv_shape(const Ops::ConvShape& s, const char* op) {
    SB_REQUIRE(s.valid(), std::string(op) + ": bad shape: " + s.describe());
}

void check_matrix(const Tensor& t, int64_t rows, int64_t cols, const char* op, const char* what) {
    SB_REQUIRE(t.rows == rows && t.cols == cols,
               std::string(op) + ": " + what + " is " + dims(t.rows, t.cols) + ", expected " + dims(rows, cols));
    SB_REQUIRE(t.data || t.numel() == 0, std::string(op) + ": " + what + " has no data");
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
    SB_REQUIRE(a.dtype == b.dtype, std::string(op) + ": dtypes differ (" + dtype_name(a.dtype) + " vs " +
                                       dtype_name(b.dtype) + ")");
}

}  // namespace

void CudaOps::im2col(const ConvShape& shape, const Tensor& x, const Tensor& cols) {
    check_conv_shape(shape, "im2col");
    check_matrix(x, shape.in_rows(), shape.channels, "im2col", "x");
    check_matrix(cols, shape.out_rows(), shape.patch(), "im2col", "cols");
    check_same_dtype(x, cols, "im2col");
    kernels::im2col(impl_->ctx, x.dtype, shape, x.data, cols.data);
}

void CudaOps::col2im(const ConvShape& shape, const Tensor& grad_cols, const Tensor& grad_x) {
    check_conv_shape(shape, "col2im");
    check_matrix(grad_cols, shape.out_rows(), shape.patch(), "col2im", "grad_cols");
    check_matrix(grad_x, shape.in_rows(), shape.channels, "col2im", "grad_x");
    check_same_dtype(grad_cols, grad_x, "col2im");
    kernels::col2im(impl_->ctx, grad_x.dtype, shape, grad_cols.data, grad_x.data);
}

// ---- convolutions on cuDNN (models/cuda/cudnn_conv.*), where this build has it.

#ifdef SCALEBENCH_HAVE_CUDNN
namespace {
void check_conv(const Ops::ConvShape& s, const Tensor& x, const Tensor& weight, const Tensor& out, const char* op,
                const char* x_name, const char* out_name) {
    check_conv_shape(s, op);
    check_matrix(x, s.in_rows(), s.channels, op, x_name);
    SB_REQUIRE(weight.cols == s.patch() && weight.rows > 0 && weight.data,
               std::string(op) + ": weight is " + dims(weight.rows, weight.cols) + ", expected out_channels x " +
                   std::to_string(s.patch()));
    check_matrix(out, s.out_rows(), weight.rows, op, out_name);
    check_same_dtype(x, weight, op);
    check_same_dtype(x, out, op);
}
}  // namespace

bool CudaOps::has_cudnn() const { return true; }
size_t CudaOps::conv_plan_count() const { return impl_->cudnn ? impl_->cudnn->plan_count() : 0; }
std::string CudaOps::describe_conv_plans() const { return impl_->cudnn ? impl_->cudnn->describe_plans() : ""; }

void CudaOps::conv_forward(const ConvShape& shape, const Tensor& x, const Tensor& weight, const Tensor& out) {
    check_conv(shape, x, weight, out, "conv_forward", "x", "out");
    impl_->convolutions().forward(shape, static_cast<int>(weight.rows), x.dtype, x.data, weight.data, out.data);
}

void CudaOps::conv_backward_data(const ConvShape& shape, const Tensor& grad_out, const Tensor& weight, float beta,
                                 const Tensor& grad_x) {
    check_conv(shape, grad_x, weight, grad_out, "conv_backward_data", "grad_x", "grad_out");
    SB_REQUIRE(grad_x.data != grad_out.data, "conv_backward_data: grad_x must not alias grad_out");
    impl_->convolutions().backward_data(shape, static_cast<int>(weight.rows), grad_x.dtype, grad_out.data,
                                        weight.data, beta, grad_x.data);
}

// cuDNN writes the filter gradient in the inputs' dtype: a 16-bit one goes through scratch
// and is widened into the fp32 gradient.
void CudaOps::conv_backward_filter(const ConvShape& shape, const Tensor& x, const Tensor& grad_out,
                                   const Tensor& grad_weight) {
    SB_REQUIRE(grad_weight.dtype == DType::f32, "conv_backward_filter: grad_weight must be f32");
    const Tensor typed{grad_weight.data, x.dtype, grad_weight.rows, grad_weight.cols};
    check_conv(shape, x, typed, grad_out, "conv_backward_filter", "x", "grad_out");
    const size_t n = static_cast<size_t>(grad_weight.numel());
    void* dw = x.dtype == DType::f32 ? grad_weight.data : impl_->scratch_space(n * dtype_size(x.dtype));
    impl_->convolutions().backward_filter(shape, static_cast<int>(grad_weight.rows), x.dtype, x.data, grad_out.data,
                                          dw);
    if (dw != grad_weight.data) kernels::cast(impl_->ctx, dw, x.dtype, grad_weight.data, DType::f32, n);
}
#else
bool CudaOps::has_cudnn() const { return false; }
size_t CudaOps::conv_plan_count() const { return 0; }
std::string CudaOps::describe_conv_plans() const { return ""; }
void CudaOps::conv_forward(const ConvShape&, const Tensor&, const Tensor&, const Tensor&) { missing_op("cuDNN"); }
void CudaOps::conv_backward_data(const ConvShape&, const Tensor&, const Tensor&, float, const Tensor&) {
    missing_op("cuDNN");
}
void CudaOps::conv_backward_filter(const ConvShape&, const Tensor&, const Tensor&, const Tensor&) {
    missing_op("cuDNN");
}
#endif

void CudaOps::batchnorm_relu_forward(const Tensor& x, const float* gamma, const float* beta, float eps,
                                     const Tensor& residual, const Tensor& out, float* mean, float* rstd) {
    SB_REQUIRE(x.rows > 0 && x.cols > 0, "batchnorm_relu_forward: no rows to take statistics over");
    check_matrix(out, x.rows, x.cols, "batchnorm_relu_forward", "out");
    check_same_dtype(x, out, "batchnorm_relu_forward");
    if (residual.data) {
        check_matrix(residual, x.rows, x.cols, "batchnorm_relu_forward", "residual");
        check_same_dtype(x, residual, "batchnorm_relu_forward");
    }
    SB_REQUIRE(x.data && x.data != out.data, "batchnorm_relu_forward: out must not alias x");
    SB_REQUIRE(gamma && beta && mean && rstd, "batchnorm_relu_forward: missing buffer");
    auto* scratch = static_cast<float*>(
        impl_->scratch_space(kernels::batchnorm_scratch_floats(impl_->ctx, x.rows, x.cols) * sizeof(float)));
    kernels::batchnorm_forward(impl_->ctx, x.dtype, x.data, gamma, beta, eps, x.rows, x.cols, out.data, mean, rstd,
                               scratch, true, residual.data);
}

void CudaOps::batchnorm_relu_backward(const Tensor& x, const Tensor& grad_out, const float* gamma, const float* beta,
                                      const float* mean, const float* rstd, const Tensor& grad_x, float* grad_gamma,
                                      float* grad_beta) {
    SB_REQUIRE(x.rows > 0 && x.cols > 0 && x.data, "batchnorm_relu_backward: empty x");
    check_matrix(grad_out, x.rows, x.cols, "batchnorm_relu_backward", "grad_out");
    check_matrix(grad_x, x.rows, x.cols, "batchnorm_relu_backward", "grad_x");
    check_same_dtype(x, grad_out, "batchnorm_relu_backward");
    check_same_dtype(x, grad_x, "batchnorm_relu_backward");
    SB_REQUIRE(gamma && beta && mean && rstd && grad_gamma && grad_beta, "batchnorm_relu_backward: missing buffer");
    auto* scratch = static_cast<float*>(
        impl_->scratch_space(kernels::batchnorm_scratch_floats(impl_->ctx, x.rows, x.cols) * sizeof(float)));
    kernels::batchnorm_backward(impl_->ctx, x.dtype, x.data, grad_out.data, gamma, mean, rstd, x.rows, x.cols,
                                grad_x.data, grad_gamma, grad_beta, scratch, beta);
}

void CudaOps::batchnorm_forward(const Tensor& x, const float* gamma, const float* beta, float eps, const Tensor& out,
                                float* mean, float* rstd) {
    SB_REQUIRE(x.rows > 0 && x.cols > 0, "batchnorm_forward: no rows to take statistics over");
    check_matrix(out, x.rows, x.cols, "batchnorm_forward", "out");
    check_same_dtype(x, out, "batchnorm_forward");
    SB_REQUIRE(x.data && x.data != out.data, "batchnorm_forward: out must not alias x");
    SB_REQUIRE(gamma && beta && mean && rstd, "batchnorm_forward: missing buffer");
    auto* scratch = static_cast<float*>(
        impl_->scratch_space(kernels::batchnorm_scratch_floats(impl_->ctx, x.rows, x.cols) * sizeof(float)));
    kernels::batchnorm_forward(impl_->ctx, x.dtype, x.data, gamma, beta, eps, x.rows, x.cols, out.data, mean, rstd,
                               scratch);
}

void CudaOps::batchnorm_backward(const Tensor& x, const Tensor& grad_out, const float* gamma, const float* mean,
                                 const float* rstd, const Tensor& grad_x, float* grad_gamma, float* grad_beta) {
    SB_REQUIRE(x.rows > 0 && x.cols > 0 && x.data, "batchnorm_backward: empty x");
    check_matrix(grad_out, x.rows, x.cols, "batchnorm_backward", "grad_out");
    check_matrix(grad_x, x.rows, x.cols, "batchnorm_backward", "grad_x");
    check_same_dtype(x, grad_out, "batchnorm_backward");
    check_same_dtype(x, grad_x, "batchnorm_backward");
    SB_REQUIRE(gamma && mean && rstd && grad_gamma && grad_beta, "batchnorm_backward: missing buffer");
    auto* scratch = static_cast<float*>(
        impl_->scratch_space(kernels::batchnorm_scratch_floats(impl_->ctx, x.rows, x.cols) * sizeof(float)));
    kernels::batchnorm_backward(impl_->ctx, x.dtype, x.data, grad_out.data, gamma, mean, rstd, x.rows, x.cols,
                                grad_x.data, grad_gamma, grad_beta, scratch);
}

void CudaOps::maxpool_forward(const ConvShape& shape, const Tensor& x, const Tensor& out, uint8_t* argmax) {
    check_conv_shape(shape, "maxpool_forward");
    check_matrix(x, shape.in_rows(), shape.channels, "maxpool_forward", "x");
    check_matrix(out, shape.out_rows(), shape.channels, "maxpool_forward", "out");
    check_same_dtype(x, out, "maxpool_forward");
    SB_REQUIRE(argmax != nullptr, "maxpool_forward: argmax is null");
    kernels::maxpool_forward(impl_->ctx, x.dtype, shape, x.data, out.data, argmax);
}

void CudaOps::maxpool_backward(const ConvShape& shape, const uint8_t* argmax, const Tensor& grad_out,
                               const Tensor& grad_x) {
    check_conv_shape(shape, "maxpool_backward");
    check_matrix(grad_x, shape.in_rows(), shape.channels, "maxpool_backward", "grad_x");
    check_matrix(grad_out, shape.out_rows(), shape.channels, "maxpool_backward", "grad_out");
    check_same_dtype(grad_out, grad_x, "maxpool_backward");
    SB_REQUIRE(argmax != nullptr, "maxpool_backward: argmax is null");
    SB_REQUIRE(grad_x.data != grad_out.data, "maxpool_backward: grad_x must not alias grad_out");
    kernels::maxpool_backward(impl_->ctx, grad_out.dtype, shape, argmax, grad_out.data, grad_x.data);
}

void CudaOps::avgpool_forward(int pixels, const Tensor& x, const Tensor& out) {
    SB_REQUIRE(pixels > 0, "avgpool_forward: pixels must be positive");
    SB_REQUIRE(out.data || out.numel() == 0, "avgpool_forward: out has no data");
    check_matrix(x, out.rows * pixels, out.cols, "avgpool_forward", "x");
    check_same_dtype(x, out, "avgpool_forward");
    kernels::avgpool_forward(impl_->ctx, x.dtype, x.data, out.rows, pixels, out.cols, out.data);
}

void CudaOps::avgpool_backward(int pixels, const Tensor& grad_out, const Tensor& grad_x) {
    SB_REQUIRE(pixels > 0, "avgpool_backward: pixels must be positive");
    SB_REQUIRE(grad_out.data || grad_out.numel() == 0, "avgpool_backward: grad_out has no data");
    check_matrix(grad_x, grad_out.rows * pixels, grad_out.cols, "avgpool_backward", "grad_x");
    check_same_dtype(grad_out, grad_x, "avgpool_backward");
    kernels::avgpool_backward(impl_->ctx, grad_out.dtype, grad_out.data, grad_out.rows, pixels, grad_out.cols,
                              grad_x.data);
}

// ---- optimizer

namespace {
// The compute copy to write, or null when there is none or it is the fp32 params themselves.
void* copy_target(const Tensor& weights_copy, const float* params, size_t n) {
    if (!weights_copy.data) return nullptr;
    SB_REQUIRE(static_cast<size_t>(weights_copy.numel()) == n, "optimizer: weights_copy size differs from n");
    if (weights_copy.data == params) {
        SB_REQUIRE(weights_copy.dtype == DType::f32, "optimizer: weights_copy aliases params but is not f32");
        return nullptr;
    }
    return weights_copy.data;
}
}  // namespace

void CudaOps::sgd_step(float* params, const float* grads, float* momentum, size_t n, const OptimizerConfig& cfg,
                       const Tensor& weights_copy) {
    // As the CPU backend: momentum 0 is plain SGD and leaves the buffer alone.
    SB_REQUIRE(cfg.momentum == 0.0f || momentum != nullptr, "sgd_step: momentum != 0 needs a momentum buffer");
    void* copy = copy_target(weights_copy, params, n);
    kernels::sgd_step(impl_->ctx, params, grads, cfg.momentum != 0.0f ? momentum : nullptr, n, cfg.lr, cfg.momentum,
                      cfg.weight_decay, copy, weights_copy.dtype);
}

void CudaOps::adamw_step(float* params, const float* grads, float* m, float* v, size_t n,
                         const OptimizerConfig& cfg, int64_t step, const Tensor& weights_copy) {
    SB_REQUIRE(step >= 1, "adamw_step: step counts from 1");
    void* copy = copy_target(weights_copy, params, n);
    const double bc1 = 1.0 - std::pow(static_cast<double>(cfg.beta1), static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(static_cast<double>(cfg.beta2), static_cast<double>(step));
    const float step_size = static_cast<float>(cfg.lr / bc1);
    const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    kernels::adamw_step(impl_->ctx, params, grads, m, v, n, cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay,
                        step_size, inv_sqrt_bc2, copy, weights_copy.dtype);
}

bool CudaOps::unscale_and_check(float* grads, size_t n, float inv_scale) {
    SB_CHECK_CUDA(cudaMemsetAsync(impl_->flag_device, 0, sizeof(int), impl_->ctx.stream));
    kernels::unscale_and_check(impl_->ctx, grads, n, inv_scale, impl_->flag_device);
    SB_CHECK_CUDA(cudaMemcpyAsync(impl_->flag_host, impl_->flag_device, sizeof(int), cudaMemcpyDeviceToHost,
                                  impl_->ctx.stream));
    SB_CHECK_CUDA(cudaStreamSynchronize(impl_->ctx.stream));
    return *impl_->flag_host == 0;
}

// ---- ordering and timing

void* CudaOps::stream() { return static_cast<void*>(impl_->ctx.stream); }

void CudaOps::synchronize() { SB_CHECK_CUDA(cudaStreamSynchronize(impl_->ctx.stream)); }

void CudaOps::record_marker(int slot) {
    SB_REQUIRE(slot >= 0 && slot < kMaxMarkers, "record_marker: slot out of range");
    // In a capture a plain record is only an ordering edge; an external record becomes a
    // node that timestamps the event at every replay.
    SB_CHECK_CUDA(cudaEventRecordWithFlags(impl_->events[slot], impl_->ctx.stream,
                                           impl_->capturing ? cudaEventRecordExternal : cudaEventRecordDefault));
}

// Thread-local mode: the watchdog thread may go on querying events while we capture.
void CudaOps::begin_capture() {
    SB_REQUIRE(!impl_->capturing, "begin_capture: a capture is already open");
    SB_CHECK_CUDA(cudaStreamBeginCapture(impl_->ctx.stream, cudaStreamCaptureModeThreadLocal));
    impl_->capturing = true;
}

void CudaOps::abandon_capture() {
    if (!impl_->capturing) return;
    impl_->capturing = false;
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(impl_->ctx.stream, &graph) == cudaSuccess && graph) SB_WARN_CUDA(cudaGraphDestroy(graph));
    (void)cudaGetLastError();  // the error that ended the capture is the one being reported
}

int CudaOps::end_capture() {
    SB_REQUIRE(impl_->capturing, "end_capture without begin_capture");
    impl_->capturing = false;
    cudaGraph_t graph = nullptr;
    SB_CHECK_CUDA(cudaStreamEndCapture(impl_->ctx.stream, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t rc = cudaGraphInstantiate(&exec, graph, 0);
    SB_WARN_CUDA(cudaGraphDestroy(graph));
    SB_CHECK_CUDA(rc);
    const int handle = impl_->next_graph++;
    impl_->graphs.emplace(handle, exec);
    return handle;
}

void CudaOps::replay(int graph) {
    auto it = impl_->graphs.find(graph);
    SB_REQUIRE(it != impl_->graphs.end(), "replay: no such graph");
    SB_CHECK_CUDA(cudaGraphLaunch(it->second, impl_->ctx.stream));
}

// Called from destructors: warns instead of throwing. A launch still in flight completes
// (CUDA frees an executable graph destroyed mid-flight when it finishes).
void CudaOps::release_graph(int graph) {
    auto it = impl_->graphs.find(graph);
    if (it == impl_->graphs.end()) return;
    SB_WARN_CUDA(cudaGraphExecDestroy(it->second));
    impl_->graphs.erase(it);
}

bool CudaOps::hold_stream() {
    if (!impl_->gate) impl_->gate = std::make_unique<StreamGate>();
    impl_->gate->hold(impl_->ctx.stream);
    return true;
}

void CudaOps::release_stream() {
    if (impl_->gate) impl_->gate->release();
}

double CudaOps::elapsed_ms(int from_slot, int to_slot) {
    SB_REQUIRE(from_slot >= 0 && from_slot < kMaxMarkers && to_slot >= 0 && to_slot < kMaxMarkers,
               "elapsed_ms: slot out of range");
    SB_CHECK_CUDA(cudaEventSynchronize(impl_->events[to_slot]));
    float ms = 0.0f;
    SB_CHECK_CUDA(cudaEventElapsedTime(&ms, impl_->events[from_slot], impl_->events[to_slot]));
    return static_cast<double>(ms);
}

}  // namespace sb
