// The backend-neutral operations every model is written against (DESIGN: models/).
// A model owns no kernels: it calls Ops, and Ops is implemented once per backend
// (models/cpu/cpu_ops.*, models/cuda/cuda_ops.*). All matrices are row-major 2-D.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

namespace sb {

// i32: token ids and labels (Dataset::inputs of the transformer); never a compute dtype.
enum class DType { f32, bf16, f16, i32 };
size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

// Compute precision of a run: which dtype activations and the working copy of the
// weights use, and whether fp32 GEMMs may use TF32 tensor cores. Master weights,
// gradients and optimizer state are always fp32.
enum class Precision { fp32, tf32, bf16, fp16 };
DType compute_dtype(Precision precision);
const char* precision_name(Precision precision);

// gelu: the tanh approximation (GPT-2, PyTorch approximate='tanh'); gelu_erf: the exact
// 0.5 x (1 + erf(x / sqrt 2)) (BERT, PyTorch's default).
enum class Activation { none, relu, gelu, tanh, gelu_erf };
const char* activation_name(Activation act);

// Which Linear epilogues the CUDA backend runs inside cuBLASLt's GEMM, for 16-bit inputs:
// GELU in its tanh form (cuBLASLt's GELU) after the bias, its derivative after the data
// gradient's GEMM, and the bias gradient beside the weight gradient's. The trace and the
// per-op timer count such a call as one GEMM, and any other as the ops it composes.
bool gemm_fuses_activation(Activation act, DType dtype);
bool gemm_fuses_bias_grad(DType dtype);

// A row-major matrix view of backend memory; a vector is a 1 x n tensor.
struct Tensor {
    void* data = nullptr;
    DType dtype = DType::f32;
    int64_t rows = 0;
    int64_t cols = 0;
    int64_t numel() const { return rows * cols; }
    size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
};

// How a model runs its convolutions other than 1x1 stride-1 ones (those are one GEMM either
// way): im2col + GEMM, or the conv_* ops on cuDNN. `auto` (config) is resolved before a model
// is built: cudnn where the backend has_cudnn(), else im2col.
enum class ConvEngine { im2col, cudnn };
const char* conv_engine_name(ConvEngine engine);

struct OptimizerConfig {
    enum class Kind { sgd, adamw } kind = Kind::adamw;
    float lr = 1e-3f;
    float momentum = 0.9f;      // SGD
    float weight_decay = 0.0f;  // SGD: L2 added to the gradient; AdamW: decoupled
    float beta1 = 0.9f;         // AdamW
    float beta2 = 0.999f;       // AdamW
    float eps = 1e-8f;          // AdamW
};

struct DeviceLimits;  // models/device_limits.h

class Ops {
protected:
    // A capability a backend lacks (graphs on the CPU) fails loudly by name.
    [[noreturn]] void missing_op(const char* op) const;
    // Each backend's alloc and release report here: the live and high-water bytes of backend
    // memory the program asked for (the measured side of the per-rank memory figure).
    void count_alloc(void* ptr, size_t bytes);
    void count_release(void* ptr);

private:
    std::unordered_map<void*, size_t> allocation_bytes_;
    size_t live_bytes_ = 0, peak_bytes_ = 0;

public:
    virtual ~Ops() = default;
    virtual std::string name() const = 0;  // "cpu" or "cuda"
    virtual Precision precision() const = 0;
    // What the GPU grants a kernel, which picks the variant of limit-dependent kernels (the
    // CUDA backend's, the trace's target's); nullptr where nothing depends on it (the CPU).
    virtual const DeviceLimits* device_limits() const { return nullptr; }

    // ---- memory (backend memory; host pointers only where the name says host)
    size_t live_bytes() const { return live_bytes_; }
    size_t peak_bytes() const { return peak_bytes_; }
    void reset_peak_bytes() { peak_bytes_ = live_bytes_; }
    virtual void* alloc(size_t bytes) = 0;
    virtual void release(void* ptr) = 0;
    virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
    virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
    virtual void fill(const Tensor& t, float value) = 0;
    // dst = src converted to dst.dtype; same numel.
    virtual void cast(const Tensor& src, const Tensor& dst) = 0;
    // models/checksum.h's checksum of `bytes` of backend memory, computed where it lives
    // (on the GPU at memory bandwidth: the replica check must not stall a soak run).
    virtual uint64_t checksum(const void* data, size_t bytes) = 0;

    // ---- dense algebra
    // C = alpha * op(A) @ op(B) + beta * C, then + bias[j] on every row when bias != nullptr.
    // op(X) = X^T when the flag is set. A and B share a dtype; C is that dtype or f32
    // (bf16/fp16 inputs accumulate in fp32). bias is fp32, length C.cols; a bf16/fp16 C may
    // add it rounded to C's dtype (CUDA does, as torch's Linear under autocast).
    virtual void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                      float beta, const Tensor& c, const float* bias = nullptr) = 0;

    // A Linear layer's GEMMs with the work around them (y = x w^T + bias; w is out x in).
    // The defaults compose gemm, activation_* and bias_grad (the CPU's, the reference); CUDA
    // runs the epilogues inside cuBLASLt's GEMM where gemm_fuses_*() says so.
    // pre = x w^T + bias (fp32, required), out = act(pre); pre is what the backward reads.
    virtual void linear_activation_forward(const Tensor& x, const Tensor& w, const float* bias, Activation act,
                                           const Tensor& pre, const Tensor& out);
    // grad_pre = (grad_out w) * act'(pre): through the activation below this Linear, so pre and
    // grad_pre have x's shape (the rows by w's in).
    virtual void linear_activation_backward(const Tensor& grad_out, const Tensor& w, Activation act,
                                            const Tensor& pre, const Tensor& grad_pre);
    // grad_w = grad_out^T x (fp32, overwritten) and grad_bias = grad_out's column sums (fp32, overwritten).
    virtual void linear_weight_grad(const Tensor& grad_out, const Tensor& x, const Tensor& grad_w,
                                    float* grad_bias);

    // ---- elementwise and reductions
    // out = act(pre), elementwise; out may alias pre (the ResNet's ReLU runs in place).
    virtual void activation_forward(Activation act, const Tensor& pre, const Tensor& out) = 0;
    // grad_pre = grad_out * act'(pre); grad_pre may alias grad_out.
    virtual void activation_backward(Activation act, const Tensor& pre, const Tensor& grad_out,
                                     const Tensor& grad_pre) = 0;
    // bias_grad[j] = sum_i grad[i, j] (fp32 output, overwritten).
    virtual void bias_grad(const Tensor& grad, float* bias_grad) = 0;
    // The same sum over the labelled rows of a loss's gradient: a row whose label is negative
    // is not read (softmax_cross_entropy wrote it zero), so the result is bias_grad's of grad
    // with those rows zeroed, bit for bit. labels: backend int32, one per row, as the loss's.
    virtual void labelled_bias_grad(const Tensor& grad, const int32_t* labels, int64_t labelled_rows,
                                    float* bias_grad) = 0;
    // Softmax cross-entropy averaged over the rows. Writes the mean loss (fp32, one
    // backend float) to *loss and grad_logits = (softmax - onehot) * grad_scale / rows.
    // A negative label marks a row that is not predicted (masked-LM positions left alone):
    // its logits are not read, its gradient row is zero, and rows / the mean count only the
    // labelled rows. A logit of -inf is a class excluded (probability and gradient zero): the
    // transformer's padded vocabulary.
    // labelled_rows (here and in labelled_bias_grad) is the number of labels >= 0, which the
    // caller knows from how it made the labels: the trace counts the bytes moved by it. The
    // CPU checks it against the labels; CUDA takes the caller's word (counting would cost a
    // pass and a sync).
    virtual void softmax_cross_entropy(const Tensor& logits, const int32_t* labels, int64_t labelled_rows,
                                       float* loss, const Tensor& grad_logits, float grad_scale) = 0;

    // ---- transformer layers (models/transformer.*). Activations are in the compute dtype;
    // gamma/beta/bias are fp32 views of the master parameters; gradients of parameters are
    // fp32 and overwritten unless the name says accumulate.
    // out = a + b (same shape and dtype; out may alias a or b).
    virtual void add(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
    // Row-wise LayerNorm over cols: out = (x - mean) * rstd * gamma + beta, rstd =
    // 1/sqrt(var + eps) (biased variance, as torch). mean and rstd (fp32, one per row) are
    // saved for the backward. out must not alias x.
    virtual void layernorm_forward(const Tensor& x, const float* gamma, const float* beta, float eps,
                                   const Tensor& out, float* mean, float* rstd) = 0;
    // grad_x = dLN/dx^T grad_out; grad_gamma/grad_beta are overwritten (fp32, length cols).
    // grad_x may alias grad_out.
    virtual void layernorm_backward(const Tensor& x, const Tensor& grad_out, const float* gamma,
                                    const float* mean, const float* rstd, const Tensor& grad_x, float* grad_gamma,
                                    float* grad_beta) = 0;
    // out[i, :] = table[ids[i], :] (out.rows ids, backend int32, each in [0, table.rows));
    // with accumulate, out[i, :] += table[ids[i], :]. table and out share a dtype.
    virtual void embedding_forward(const int32_t* ids, const Tensor& table, const Tensor& out,
                                   bool accumulate) = 0;
    // grad_table[ids[i], :] += grad_out[i, :] (fp32 accumulate, rows x cols of the table;
    // the caller zeroes or pre-fills it).
    virtual void embedding_backward(const int32_t* ids, const Tensor& grad_out, float* grad_table,
                                    int64_t table_rows) = 0;
    // Inverted dropout with a counter-based mask, the same on every backend: element i is
    // kept when dropout_keep(dropout_seed_at(seed, g), i, p) (models/dropout.h), g the
    // dropout generation, then scaled by 1/(1-p). The backward is the same call on the
    // gradient with the same seed in the same generation. out may alias in.
    virtual void dropout(const Tensor& in, const Tensor& out, float p, uint64_t seed) = 0;

    // The junction after a transformer sub-layer, fused where the backend can: sum = residual
    // + dropout(branch, p, seed) (dropout() over branch's elements), out = LayerNorm(sum) as
    // layernorm_forward (mean, rstd saved). sum may alias residual; out aliases nothing.
    // The default composes dropout, add and layernorm_forward (the CPU's, the reference).
    virtual void residual_layernorm_forward(const Tensor& branch, const Tensor& residual, float p, uint64_t seed,
                                            const float* gamma, const float* beta, float eps, const Tensor& sum,
                                            const Tensor& out, float* mean, float* rstd);
    // Its backward. grad_sum = LayerNorm^T(grad_out + grad_out_residual) + grad_sum_residual,
    // the two residual gradients optional (data nullptr: none): what reaches out (post-LN,
    // where out is the next residual) or sum (pre-LN) along the residual path. grad_branch =
    // dropout(grad_sum) with the forward's mask; grad_gamma/grad_beta overwritten. grad_out may
    // alias grad_branch or grad_sum; grad_sum may alias either residual gradient.
    virtual void residual_layernorm_backward(const Tensor& sum, const Tensor& grad_out,
                                             const Tensor& grad_out_residual, const Tensor& grad_sum_residual,
                                             const float* gamma, const float* mean, const float* rstd, float p,
                                             uint64_t seed, const Tensor& grad_sum, const Tensor& grad_branch,
                                             float* grad_gamma, float* grad_beta);

    // Multi-head scaled dot-product attention over a packed projection.
    // qkv: (batch*seq) x (3*heads*head_dim), each row [q | k | v], each of those
    // [head0 | head1 | ...] (the layout of one fused QKV Linear); out: (batch*seq) x
    // (heads*head_dim), heads concatenated as the output projection expects.
    // P = softmax(Q K^T / sqrt(head_dim) (+ causal mask)), dropout(P, dropout_p, seed)
    // as dropout() defines it (generation included) over the batch x heads x seq x seq
    // index, out = P V.
    // `saved` holds attention_saved_bytes() of backend memory that the forward fills and
    // the backward reads (what is in it is the backend's business).
    struct AttentionShape {
        int batch = 0, seq = 0, heads = 0, head_dim = 0;
        bool causal = false;
        float dropout_p = 0.0f;
    };
    virtual size_t attention_saved_bytes(const AttentionShape& shape) const = 0;
    virtual void attention_forward(const AttentionShape& shape, const Tensor& qkv, const Tensor& out, void* saved,
                                   uint64_t seed) = 0;
    // grad_qkv (same layout as qkv) from grad_out; qkv/out/saved as the forward left them.
    virtual void attention_backward(const AttentionShape& shape, const Tensor& qkv, const Tensor& out,
                                    const void* saved, const Tensor& grad_out, const Tensor& grad_qkv,
                                    uint64_t seed) = 0;
    // The shapes the CUDA backend runs as fused kernels that never write the seq x seq
    // arrays (saved: one fp32 log-sum-exp per row) instead of materialising P: bf16/fp16
    // with head_dim 64 or 128. TraceOps accounts attention by the same rule.
    static bool attention_fused(DType compute, int head_dim) {
        return (compute == DType::bf16 || compute == DType::f16) && (head_dim == 64 || head_dim == 128);
    }
    // The longest sequence whose fused backward is one block per (batch, head) computing five
    // seq x seq x head_dim products; longer ones run two kernels that recompute S and dP (seven).
    static constexpr int kAttentionOneBlockSeq = 128;

    // ---- convolutional layers (models/resnet.*). Images are NHWC: batch x height x width x
    // channels is the (batch*height*width) x channels matrix, so a 1x1 stride-1 convolution is
    // one GEMM and any other one either a GEMM over im2col's patches or one conv_* call (the
    // conv engines, ConvEngine below).
    // Square kernels; padding on every side; out_height = (height + 2 padding - kernel) / stride + 1.
    struct ConvShape {
        int batch = 0, height = 0, width = 0, channels = 0;  // of the input
        int kernel = 1, stride = 1, padding = 0;
        int out_height() const { return (height + 2 * padding - kernel) / stride + 1; }
        int out_width() const { return (width + 2 * padding - kernel) / stride + 1; }
        int64_t in_rows() const { return static_cast<int64_t>(batch) * height * width; }
        int64_t out_rows() const { return static_cast<int64_t>(batch) * out_height() * out_width(); }
        int64_t patch() const { return static_cast<int64_t>(kernel) * kernel * channels; }  // im2col's columns
        // Every size positive, padding under the kernel (no window all padding), an output pixel.
        bool valid() const {
            return batch > 0 && height > 0 && width > 0 && channels > 0 && kernel > 0 && stride > 0 && padding >= 0 &&
                   padding < kernel && out_height() > 0 && out_width() > 0;
        }
        std::string describe() const {  // "batch 2, 7x6x4, kernel 3 stride 2 padding 1"
            return "batch " + std::to_string(batch) + ", " + std::to_string(height) + "x" + std::to_string(width) +
                   "x" + std::to_string(channels) + ", kernel " + std::to_string(kernel) + " stride " +
                   std::to_string(stride) + " padding " + std::to_string(padding);
        }
    };
    // cols[(n, oy, ox), (ky, kx, c)] = x[n, oy*stride - padding + ky, ox*stride - padding + kx, c],
    // 0 where that falls in the padding. x: in_rows() x channels; cols: out_rows() x patch(),
    // same dtype. A weight of out_channels x patch() is PyTorch's [out, in, ky, kx] permuted to
    // [out, ky, kx, in] (channels_last), and conv(x) = cols @ weight^T.
    virtual void im2col(const ConvShape& shape, const Tensor& x, const Tensor& cols) = 0;
    // The adjoint of im2col: grad_x[n, y, x, c] = the sum of the entries of grad_cols that
    // im2col copied from x[n, y, x, c] (overwritten; fp32 accumulation).
    virtual void col2im(const ConvShape& shape, const Tensor& grad_cols, const Tensor& grad_x) = 0;
    // BatchNorm in training mode over the rows (all of batch x height x width, per channel):
    // out[i, c] = (x[i, c] - mean[c]) * rstd[c] * gamma[c] + beta[c], rstd = 1/sqrt(var + eps),
    // var biased (what torch normalises with). mean and rstd (fp32, one per column) are saved
    // for the backward. Running statistics for evaluation are not kept (no step reads them).
    // out must not alias x.
    virtual void batchnorm_forward(const Tensor& x, const float* gamma, const float* beta, float eps,
                                   const Tensor& out, float* mean, float* rstd) = 0;
    // grad_x from grad_out through the batch statistics; grad_gamma/grad_beta overwritten
    // (fp32, length cols). grad_x may alias grad_out.
    virtual void batchnorm_backward(const Tensor& x, const Tensor& grad_out, const float* gamma,
                                    const float* mean, const float* rstd, const Tensor& grad_x,
                                    float* grad_gamma, float* grad_beta) = 0;
    // Max over each kernel x kernel window (padding never wins; NaN never wins, as std::max;
    // a window of NaNs gives -inf). x: shape.in_rows() x channels, out: shape.out_rows() x
    // channels. argmax (backend memory of out.numel() bytes; 16-byte aligned for vectorised
    // access) gets, per output element, the window position ky * kernel + kx of the first
    // maximum in window order (ky, then kx): the choice torch's max_pool2d_with_indices records
    // as an input index (one byte, so kernel * kernel < 255); kNoMaxpoolArgmax where every
    // in-bounds value is NaN.
    static constexpr uint8_t kNoMaxpoolArgmax = 255;
    virtual void maxpool_forward(const ConvShape& shape, const Tensor& x, const Tensor& out, uint8_t* argmax) = 0;
    // grad_x[e] = the sum of grad_out over the windows whose recorded argmax is x[e]
    // (overwritten). argmax as the forward left it.
    virtual void maxpool_backward(const ConvShape& shape, const uint8_t* argmax, const Tensor& grad_out,
                                  const Tensor& grad_x) = 0;
    // Convolutions in one call each, as conv(x) = im2col(x) @ weight^T defines them, without the
    // patch matrix (cuDNN on CUDA where has_cudnn(); the CPU composes im2col and gemm: the
    // reference). x: in_rows() x channels, weight: out_channels x patch() ([out, ky, kx, in]),
    // out and grad_out: out_rows() x out_channels, one dtype (fp32 accumulation).
    virtual bool has_cudnn() const { return false; }
    virtual void conv_forward(const ConvShape& shape, const Tensor& x, const Tensor& weight, const Tensor& out) = 0;
    // grad_x = the input gradient + beta * grad_x (beta 0 overwrites, 1 accumulates).
    virtual void conv_backward_data(const ConvShape& shape, const Tensor& grad_out, const Tensor& weight, float beta,
                                    const Tensor& grad_x) = 0;
    // grad_weight (fp32, out_channels x patch(), overwritten) = grad_out^T @ im2col(x). A
    // 16-bit run rounds it to the compute dtype first where the backend computes it there
    // (cuDNN writes the filter gradient in the inputs' dtype, as torch's under autocast).
    virtual void conv_backward_filter(const ConvShape& shape, const Tensor& x, const Tensor& grad_out,
                                      const Tensor& grad_weight) = 0;
    // BatchNorm fused with what follows it in a bottleneck, one pass over the output:
    // out = relu(batchnorm(x) + residual), or relu(batchnorm(x)) when residual.data is null;
    // statistics and saved mean/rstd as batchnorm_forward. out must not alias x.
    virtual void batchnorm_relu_forward(const Tensor& x, const float* gamma, const float* beta, float eps,
                                        const Tensor& residual, const Tensor& out, float* mean, float* rstd) = 0;
    // The backward of batchnorm_relu_forward without a residual: batchnorm_backward of
    // grad_out * (batchnorm(x) > 0), the ReLU's mask recomputed from x (so beta is needed and
    // the output is not read). grad_x may alias grad_out.
    virtual void batchnorm_relu_backward(const Tensor& x, const Tensor& grad_out, const float* gamma,
                                         const float* beta, const float* mean, const float* rstd,
                                         const Tensor& grad_x, float* grad_gamma, float* grad_beta) = 0;
    // Global average pool: out[n, c] = the mean of x over image n's `pixels` rows.
    // x: (out.rows * pixels) x cols; out: batch x cols.
    virtual void avgpool_forward(int pixels, const Tensor& x, const Tensor& out) = 0;
    // grad_x[n * pixels + p, c] = grad_out[n, c] / pixels (overwritten).
    virtual void avgpool_backward(int pixels, const Tensor& grad_out, const Tensor& grad_x) = 0;

    // Advances the dropout generation by one, so every later dropout and attention mask is
    // a new draw. A model advances it once per step. On CUDA the count lives on the device
    // and the advance is a kernel, so a step replayed from a CUDA graph draws new masks too.
    virtual void advance_dropout_generation() = 0;

    // ---- optimizer over flat fp32 buffers of n elements. When weights_copy.data is set,
    // the updated parameters are also written to it in its dtype (the compute copy).
    virtual void sgd_step(float* params, const float* grads, float* momentum, size_t n,
                          const OptimizerConfig& cfg, const Tensor& weights_copy) = 0;
    virtual void adamw_step(float* params, const float* grads, float* m, float* v, size_t n,
                            const OptimizerConfig& cfg, int64_t step, const Tensor& weights_copy) = 0;
    // grads *= inv_scale; returns false when any element is inf or NaN (fp16 loss scaling).
    virtual bool unscale_and_check(float* grads, size_t n, float inv_scale) = 0;

    // ---- ordering and timing
    // Native stream handle the communicator synchronizes with (nullptr on the CPU).
    virtual void* stream() = 0;
    virtual void synchronize() = 0;
    // Timing markers in the order work was issued: steady clock on the CPU, events on the
    // compute stream on CUDA. elapsed_ms synchronizes as needed. The last two slots are
    // the per-op timer's when one wraps the backend (models/timed_ops.h).
    static constexpr int kMaxMarkers = 16;
    virtual void record_marker(int slot) = 0;
    virtual double elapsed_ms(int from_slot, int to_slot) = 0;
    // Device time without host launch gaps, as nvbench's blocking kernel: hold_stream()
    // makes the compute stream wait until release_stream(), so the work issued in between
    // runs back to back. Returns false where the backend has no such thing (the CPU).
    // Nothing issued in between may wait on the host.
    virtual bool hold_stream() { return false; }
    virtual void release_stream() {}

    // ---- graphs: work issued between begin_capture() and end_capture() on the compute
    // stream (and streams that joined it) is recorded instead of run and kept as a graph,
    // whose handle end_capture returns; replay(graph) runs all of it again in one launch.
    // Values the captured work took from the host are frozen at capture. Markers recorded
    // in a capture are timestamped at each replay. Only where has_graphs() (not the CPU).
    virtual bool has_graphs() const { return false; }
    virtual void begin_capture() { missing_op(__func__); }
    virtual int end_capture() { missing_op(__func__); }
    // Ends an open capture and drops what it recorded (after an error inside it); never throws.
    virtual void abandon_capture() {}
    virtual void replay(int /*graph*/) { missing_op(__func__); }
    virtual void release_graph(int /*graph*/) {}  // never throws (destructors call it)
};

// RAII owner of one backend allocation.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(Ops& ops, size_t bytes) : ops_(&ops), bytes_(bytes), ptr_(bytes ? ops.alloc(bytes) : nullptr) {}
    ~DeviceBuffer() { reset(); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        if (this != &o) {
            reset();
            ops_ = o.ops_; bytes_ = o.bytes_; ptr_ = o.ptr_;
            o.ptr_ = nullptr; o.bytes_ = 0;
        }
        return *this;
    }
    void reset() { if (ptr_) ops_->release(ptr_); ptr_ = nullptr; bytes_ = 0; }
    void* get() const { return ptr_; }
    template <class T> T* as() const { return static_cast<T*>(ptr_); }
    size_t bytes() const { return bytes_; }
    Tensor tensor(DType dtype, int64_t rows, int64_t cols) const { return Tensor{ptr_, dtype, rows, cols}; }

private:
    Ops* ops_ = nullptr;
    size_t bytes_ = 0;
    void* ptr_ = nullptr;
};

}  // namespace sb
