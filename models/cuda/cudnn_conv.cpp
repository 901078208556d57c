// CudnnConvolutions (see cudnn_conv.h): descriptors and algorithm per shape, cached; the
// three convolution calls of cuDNN's v9 legacy API.
#include "models/cuda/cudnn_conv.h"

#include <cudnn.h>
#include <fmt/format.h>

#include <map>
#include <string>
#include <tuple>

#include "models/cuda/cuda_check.h"
#include "base/errors.h"

namespace sb {
namespace {

#define SB_CHECK_CUDNN(call)                                                                              \
    do {                                                                                                  \
        cudnnStatus_t sb_cudnn_rc_ = (call);                                                              \
        if (sb_cudnn_rc_ != CUDNN_STATUS_SUCCESS)                                                         \
            ::sb::throw_call_error("cuDNN", #call, cudnnGetErrorString(sb_cudnn_rc_), __FILE__, __LINE__); \
    } while (0)

enum class Direction { forward, backward_data, backward_filter };

const char* direction_name(Direction d) {
    switch (d) {
        case Direction::forward: return "forward";
        case Direction::backward_data: return "backward_data";
        case Direction::backward_filter: return "backward_filter";
    }
    return "?";
}

cudnnDataType_t cudnn_type(DType dtype) {
    switch (dtype) {
        case DType::f32: return CUDNN_DATA_FLOAT;
        case DType::bf16: return CUDNN_DATA_BFLOAT16;
        case DType::f16: return CUDNN_DATA_HALF;
        default: break;
    }
    SB_REQUIRE(false, std::string("cudnn: no convolution in ") + dtype_name(dtype));
}

struct PlanKey {
    Direction direction;
    int batch, height, width, channels, kernel, stride, padding, out_channels;
    DType dtype;
    bool operator<(const PlanKey& o) const {
        return std::tie(direction, batch, height, width, channels, kernel, stride, padding, out_channels, dtype) <
               std::tie(o.direction, o.batch, o.height, o.width, o.channels, o.kernel, o.stride, o.padding,
                        o.out_channels, o.dtype);
    }
};

struct Plan {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr;
    cudnnFilterDescriptor_t w = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;
    int algo = 0;  // the direction's cudnnConvolution*Algo_t
    size_t workspace = 0;
    float ms = -1.0f;  // cudnnFind's time; -1 when the heuristic chose
    void destroy() {
        if (x) cudnnDestroyTensorDescriptor(x);
        if (y) cudnnDestroyTensorDescriptor(y);
        if (w) cudnnDestroyFilterDescriptor(w);
        if (conv) cudnnDestroyConvolutionDescriptor(conv);
        x = y = nullptr;
        w = nullptr;
        conv = nullptr;
    }
};

// The first (fastest, for Find; best, for Get) result that ran, is deterministic, fits the
// workspace and keeps fp32 off the tensor cores when the run is strict fp32.
template <class Perf>
const Perf* pick(const Perf* perf, int count, bool strict_fp32) {
    for (int i = 0; i < count; ++i) {
        const Perf& p = perf[i];
        if (p.status != CUDNN_STATUS_SUCCESS || p.determinism != CUDNN_DETERMINISTIC ||
            p.memory > CudnnConvolutions::kWorkspaceBytes)
            continue;
        if (strict_fp32 && (p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
            continue;
        return &p;
    }
    return nullptr;
}

}  // namespace

struct CudnnConvolutions::Impl {
    cudnnHandle_t handle = nullptr;
    cudaStream_t stream = nullptr;
    Precision precision = Precision::fp32;
    void* workspace = nullptr;
    std::map<PlanKey, Plan> plans;

    ~Impl() {
        for (auto& kv : plans) kv.second.destroy();
        if (handle) cudnnDestroy(handle);
        if (workspace) cudaFree(workspace);
    }

    cudnnMathType_t math_type() const {
        switch (precision) {
            case Precision::fp32: return CUDNN_FMA_MATH;     // no TF32
            case Precision::tf32: return CUDNN_DEFAULT_MATH;  // TF32 tensor cores allowed
            default: return CUDNN_TENSOR_OP_MATH;
        }
    }

    Plan& plan(Direction direction, const Ops::ConvShape& s, int out_channels, DType dtype) {
        const PlanKey key{direction, s.batch, s.height, s.width, s.channels, s.kernel, s.stride, s.padding,
                          out_channels, dtype};
        auto it = plans.find(key);
        if (it != plans.end()) return it->second;
        Plan p;
        try {
            const cudnnDataType_t t = cudnn_type(dtype);
            SB_CHECK_CUDNN(cudnnCreateTensorDescriptor(&p.x));
            SB_CHECK_CUDNN(cudnnCreateTensorDescriptor(&p.y));
            SB_CHECK_CUDNN(cudnnCreateFilterDescriptor(&p.w));
            SB_CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&p.conv));
            SB_CHECK_CUDNN(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NHWC, t, s.batch, s.channels, s.height, s.width));
            SB_CHECK_CUDNN(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NHWC, t, s.batch, out_channels, s.out_height(),
                                                      s.out_width()));
            SB_CHECK_CUDNN(cudnnSetFilter4dDescriptor(p.w, t, CUDNN_TENSOR_NHWC, out_channels, s.channels, s.kernel,
                                                      s.kernel));
            SB_CHECK_CUDNN(cudnnSetConvolution2dDescriptor(p.conv, s.padding, s.padding, s.stride, s.stride, 1, 1,
                                                           CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
            SB_CHECK_CUDNN(cudnnSetConvolutionMathType(p.conv, math_type()));
            choose_algorithm(direction, p, s, out_channels, dtype);
        } catch (...) {
            p.destroy();
            throw;
        }
        return plans.emplace(key, p).first->second;
    }

    // Find (measures every algorithm; runs work, so not while the stream is being captured)
    // or, in a capture, the heuristic's ranking.
    void choose_algorithm(Direction direction, Plan& p, const Ops::ConvShape& s, int out_channels, DType dtype) {
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        SB_CHECK_CUDA(cudaStreamIsCapturing(stream, &capture));
        const bool measure = capture == cudaStreamCaptureStatusNone;
        const bool strict = precision == Precision::fp32;
        constexpr int kMax = 16;
        int count = 0;
        auto take = [&](const auto* best) {
            if (!best)
                throw_call_error("cuDNN", "cudnnFind/GetConvolution*Algorithm",
                                 fmt::format("no deterministic {} algorithm within {} MiB for {} -> {} channels ({})",
                                             direction_name(direction), kWorkspaceBytes >> 20, s.describe(),
                                             out_channels, dtype_name(dtype)),
                                 __FILE__, __LINE__);
            // The math type the algorithm was measured with (as torch does); strict fp32 stays FMA.
            SB_CHECK_CUDNN(cudnnSetConvolutionMathType(p.conv, strict ? CUDNN_FMA_MATH : best->mathType));
            p.algo = static_cast<int>(best->algo);
            p.workspace = best->memory;
            p.ms = measure ? best->time : -1.0f;
        };
        if (direction == Direction::forward) {
            cudnnConvolutionFwdAlgoPerf_t perf[kMax];
            if (measure)
                SB_CHECK_CUDNN(cudnnFindConvolutionForwardAlgorithm(handle, p.x, p.w, p.conv, p.y, kMax, &count, perf));
            else
                SB_CHECK_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(handle, p.x, p.w, p.conv, p.y, kMax, &count, perf));
            take(pick(perf, count, strict));
        } else if (direction == Direction::backward_data) {
            cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
            if (measure)
                SB_CHECK_CUDNN(
                    cudnnFindConvolutionBackwardDataAlgorithm(handle, p.w, p.y, p.conv, p.x, kMax, &count, perf));
            else
                SB_CHECK_CUDNN(
                    cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, p.w, p.y, p.conv, p.x, kMax, &count, perf));
            take(pick(perf, count, strict));
        } else {
            cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
            if (measure)
                SB_CHECK_CUDNN(
                    cudnnFindConvolutionBackwardFilterAlgorithm(handle, p.x, p.y, p.conv, p.w, kMax, &count, perf));
            else
                SB_CHECK_CUDNN(
                    cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, p.x, p.y, p.conv, p.w, kMax, &count, perf));
            take(pick(perf, count, strict));
        }
    }
};

CudnnConvolutions::CudnnConvolutions(cudaStream_t stream, Precision precision) : impl_(std::make_unique<Impl>()) {
    impl_->stream = stream;
    impl_->precision = precision;
    SB_CHECK_CUDNN(cudnnCreate(&impl_->handle));
    SB_CHECK_CUDNN(cudnnSetStream(impl_->handle, stream));
    SB_CHECK_CUDA(cudaMalloc(&impl_->workspace, kWorkspaceBytes));
}

CudnnConvolutions::~CudnnConvolutions() = default;

size_t CudnnConvolutions::plan_count() const { return impl_->plans.size(); }

std::string CudnnConvolutions::describe_plans() const {
    std::string out;
    for (const auto& [k, p] : impl_->plans)
        out += fmt::format("{} batch {} {}x{}x{} k{}/{} p{} -> {} {}: algo {} ({}, {} MiB)\n", direction_name(k.direction),
                           k.batch, k.height, k.width, k.channels, k.kernel, k.stride, k.padding, k.out_channels,
                           dtype_name(k.dtype), p.algo,
                           p.ms >= 0 ? fmt::format("find {:.3f} ms", p.ms) : std::string("heuristic"),
                           p.workspace >> 20);
    return out;
}

void CudnnConvolutions::forward(const Ops::ConvShape& s, int out_channels, DType dtype, const void* x, const void* w,
                                void* y) {
    const Plan& p = impl_->plan(Direction::forward, s, out_channels, dtype);
    const float alpha = 1.0f, beta = 0.0f;
    SB_CHECK_CUDNN(cudnnConvolutionForward(impl_->handle, &alpha, p.x, x, p.w, w, p.conv,
                                           static_cast<cudnnConvolutionFwdAlgo_t>(p.algo), impl_->workspace,
                                           p.workspace, &beta, p.y, y));
}

void CudnnConvolutions::backward_data(const Ops::ConvShape& s, int out_channels, DType dtype, const void* dy,
                                      const void* w, float beta, void* dx) {
    const Plan& p = impl_->plan(Direction::backward_data, s, out_channels, dtype);
    const float alpha = 1.0f;
    SB_CHECK_CUDNN(cudnnConvolutionBackwardData(impl_->handle, &alpha, p.w, w, p.y, dy, p.conv,
                                                static_cast<cudnnConvolutionBwdDataAlgo_t>(p.algo), impl_->workspace,
                                                p.workspace, &beta, p.x, dx));
}

void CudnnConvolutions::backward_filter(const Ops::ConvShape& s, int out_channels, DType dtype, const void* x,
                                        const void* dy, void* dw) {
    const Plan& p = impl_->plan(Direction::backward_filter, s, out_channels, dtype);
    const float alpha = 1.0f, beta = 0.0f;
    SB_CHECK_CUDNN(cudnnConvolutionBackwardFilter(impl_->handle, &alpha, p.x, x, p.y, dy, p.conv,
                                                  static_cast<cudnnConvolutionBwdFilterAlgo_t>(p.algo),
                                                  impl_->workspace, p.workspace, &beta, p.w, dw));
}

}  // namespace sb
