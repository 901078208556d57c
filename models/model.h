// What the runner needs of a model (DESIGN: models/): parameters laid out in one flat
// fp32 buffer (tensors are offsets into it, in forward order), deterministic host-side
// initialisation, and a forward+backward that reports each parameter's gradient as
// soon as it is final, so the bucketer can start all-reducing while backward goes on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "models/ops.h"

namespace sb {

struct ParamInfo {
    std::string name;  // e.g. "layer0.weight"
    size_t offset = 0; // in elements, into the flat buffers
    int64_t rows = 0;
    int64_t cols = 0;
    size_t count() const { return static_cast<size_t>(rows * cols); }
};

// Receives "the gradient of parameter i is final" during backward.
class GradientSink {
public:
    virtual ~GradientSink() = default;
    virtual void gradient_ready(int param_index) = 0;
};

// Where gradients land when no flat buffer holds them all (sharding: gradients, ZeRO-2): the
// slot of the parameter's bucket, which the bucket gives back once it is reduce-scattered. The
// model asks at every write, so a slot is taken as its bucket's first gradient is written.
class GradientLanding {
public:
    virtual ~GradientLanding() = default;
    virtual float* gradient(int param_index) = 0;
};

// Where parameters are read when no flat buffer holds them all (sharding: parameters, ZeRO-3): the
// gathered slot of the parameter's bucket. The model asks at every read, so a bucket is gathered
// as its first parameter is read, and again once its slot has been reused.
class ParameterHome {
public:
    virtual ~ParameterHome() = default;
    virtual const float* master(int param_index) = 0;  // fp32
    virtual void* weight(int param_index) = 0;         // in the compute dtype
};

// Backend views of the flat buffers a model computes with.
struct FlatBuffers {
    float* params = nullptr;  // fp32 master parameters (null when `home` is set)
    void* weights = nullptr;  // compute copy in compute_dtype (== params when fp32/tf32; null with `home`)
    float* grads = nullptr;   // fp32 gradients, same offsets (null when `landing` is set)
    GradientLanding* landing = nullptr;
    ParameterHome* home = nullptr;
    bool complete() const { return ((params && weights) || home) && (grads || landing); }
    // Parameter `index` of `info`: its fp32 master value, compute copy (elements of `element_bytes`)
    // and gradient, wherever they are.
    const float* master(const std::vector<ParamInfo>& info, int index) const {
        return home ? home->master(index) : params + info[static_cast<size_t>(index)].offset;
    }
    void* weight(const std::vector<ParamInfo>& info, int index, size_t element_bytes) const {
        return home ? home->weight(index)
                    : static_cast<char*>(weights) + info[static_cast<size_t>(index)].offset * element_bytes;
    }
    float* gradient(const std::vector<ParamInfo>& info, int index) const {
        return landing ? landing->gradient(index) : grads + info[static_cast<size_t>(index)].offset;
    }
};

class Model {
public:
    virtual ~Model() = default;
    virtual std::string name() const = 0;
    virtual const std::vector<ParamInfo>& params() const = 0;
    size_t num_params() const {
        const auto& p = params();
        return p.empty() ? 0 : p.back().offset + p.back().count();
    }
    // Identical on every rank for the same seed.
    virtual void init_params(float* host_params, uint64_t seed) const = 0;
    // Allocates activations for `batch_rows` rows and binds the flat buffers.
    virtual void bind(const FlatBuffers& buffers, int batch_rows) = 0;
    // inputs: batch_rows x input width in compute dtype; labels: backend int32.
    // Writes the mean loss to *loss (backend float); gradients are overwritten and
    // scaled by grad_scale (fp16 loss scaling; 1 otherwise).
    virtual void forward_backward(const Tensor& inputs, const int32_t* labels, float* loss,
                                  float grad_scale, GradientSink* sink) = 0;
    // Model FLOPs of one forward+backward per sample (for MFU).
    virtual double flops_per_sample() const = 0;
};

}  // namespace sb
