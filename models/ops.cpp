// Names and sizes of the backend-neutral enums declared in models/ops.h.
#include "models/ops.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "base/errors.h"

namespace sb {

size_t dtype_size(DType dtype) {
    switch (dtype) {
        case DType::f32: return 4;
        case DType::bf16: return 2;
        case DType::f16: return 2;
        case DType::i32: return 4;
    }
    throw_call_error("internal", "dtype_size", "unknown DType " + std::to_string(static_cast<int>(dtype)),
                     __FILE__, __LINE__);
}

const char* dtype_name(DType dtype) {
    switch (dtype) {
        case DType::f32: return "f32";
        case DType::bf16: return "bf16";
        case DType::f16: return "f16";
        case DType::i32: return "int32";
    }
    return "unknown";
}

// TF32 changes only how fp32 GEMMs multiply, not the storage type.
DType compute_dtype(Precision precision) {
    switch (precision) {
        case Precision::fp32: return DType::f32;
        case Precision::tf32: return DType::f32;
        case Precision::bf16: return DType::bf16;
        case Precision::fp16: return DType::f16;
    }
    throw_call_error("internal", "compute_dtype",
                     "unknown Precision " + std::to_string(static_cast<int>(precision)), __FILE__, __LINE__);
}

const char* precision_name(Precision precision) {
    switch (precision) {
        case Precision::fp32: return "fp32";
        case Precision::tf32: return "tf32";
        case Precision::bf16: return "bf16";
        case Precision::fp16: return "fp16";
    }
    return "unknown";
}

const char* activation_name(Activation act) {
    switch (act) {
        case Activation::none: return "none";
        case Activation::relu: return "relu";
        case Activation::gelu: return "gelu";
        case Activation::tanh: return "tanh";
        case Activation::gelu_erf: return "gelu_erf";
    }
    return "unknown";
}

bool gemm_fuses_activation(Activation act, DType dtype) {
    return act == Activation::gelu && (dtype == DType::bf16 || dtype == DType::f16);
}

bool gemm_fuses_bias_grad(DType dtype) { return dtype == DType::bf16 || dtype == DType::f16; }

void Ops::linear_activation_forward(const Tensor& x, const Tensor& w, const float* bias, Activation act,
                                    const Tensor& pre, const Tensor& out) {
    SB_REQUIRE(bias != nullptr, "linear_activation_forward: no bias");
    gemm(false, true, 1.0f, x, w, 0.0f, pre, bias);
    activation_forward(act, pre, out);
}

void Ops::linear_activation_backward(const Tensor& grad_out, const Tensor& w, Activation act, const Tensor& pre,
                                     const Tensor& grad_pre) {
    gemm(false, false, 1.0f, grad_out, w, 0.0f, grad_pre);
    activation_backward(act, pre, grad_pre, grad_pre);
}

void Ops::linear_weight_grad(const Tensor& grad_out, const Tensor& x, const Tensor& grad_w, float* grad_bias) {
    gemm(true, false, 1.0f, grad_out, x, 0.0f, grad_w);
    bias_grad(grad_out, grad_bias);
}

void Ops::residual_layernorm_forward(const Tensor& branch, const Tensor& residual, float p, uint64_t seed,
                                     const float* gamma, const float* beta, float eps, const Tensor& sum,
                                     const Tensor& out, float* mean, float* rstd) {
    dropout(branch, out, p, seed);  // out holds the dropped branch until the LayerNorm writes it
    add(out, residual, sum);
    layernorm_forward(sum, gamma, beta, eps, out, mean, rstd);
}

void Ops::residual_layernorm_backward(const Tensor& sum, const Tensor& grad_out, const Tensor& grad_out_residual,
                                      const Tensor& grad_sum_residual, const float* gamma, const float* mean,
                                      const float* rstd, float p, uint64_t seed, const Tensor& grad_sum,
                                      const Tensor& grad_branch, float* grad_gamma, float* grad_beta) {
    // grad_branch is the working buffer: no input is read after it is written but grad_out,
    // which may be grad_branch itself.
    Tensor g = grad_out;
    if (grad_out_residual.data) {
        add(grad_out, grad_out_residual, grad_branch);
        g = grad_branch;
    }
    layernorm_backward(sum, g, gamma, mean, rstd, grad_branch, grad_gamma, grad_beta);
    if (grad_sum_residual.data)
        add(grad_branch, grad_sum_residual, grad_sum);
    else
        cast(grad_branch, grad_sum);
    dropout(grad_sum, grad_branch, p, seed);
}

const char* conv_engine_name(ConvEngine engine) {
    switch (engine) {
        case ConvEngine::im2col: return "im2col";
        case ConvEngine::cudnn: return "cudnn";
    }
    return "unknown";
}

void Ops::count_alloc(void* ptr, size_t bytes) {
    if (!ptr) return;
    allocation_bytes_[ptr] = bytes;
    live_bytes_ += bytes;
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
}

void Ops::count_release(void* ptr) {
    auto it = allocation_bytes_.find(ptr);
    if (it == allocation_bytes_.end()) return;
    live_bytes_ -= it->second;
    allocation_bytes_.erase(it);
}

void Ops::missing_op(const char* op) const {
    throw std::logic_error(std::string("the ") + name() + " backend has no " + op);
}

}  // namespace sb
