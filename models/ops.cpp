// Names and sizes of the backend-neutral enums declared in models/ops.h.
#include "models/ops.h"

#include <stdexcept>
#include <string>

#include "src/core/errors.h"

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

const char* conv_engine_name(ConvEngine engine) {
    switch (engine) {
        case ConvEngine::im2col: return "im2col";
        case ConvEngine::cudnn: return "cudnn";
    }
    return "unknown";
}

void Ops::missing_op(const char* op) const {
    throw std::logic_error(std::string("the ") + name() + " backend has no " + op);
}

}  // namespace sb
