// TraceOps (see trace_ops.h): FLOPs and bytes of each op, as the CPU and CUDA backends do
// the work. Bytes count every operand read once and every result written once (GEMM with
// beta != 0 reads C too); that is the traffic a roofline bounds the op's time with.
#include "models/trace_ops.h"

#include <fmt/format.h>

#include "base/errors.h"

namespace sb {

namespace {
double fp32_bytes(double elements) { return elements * 4.0; }
// The flat fp32 buffers the optimizer works on, as a 1 x n tensor.
Tensor flat(size_t n) { return Tensor{nullptr, DType::f32, 1, static_cast<int64_t>(n)}; }
// `rows` whole rows of t: what an op that skips the unlabelled rows reads of it.
double labelled_bytes(const Tensor& t, int64_t rows) {
    return static_cast<double>(rows) * static_cast<double>(t.cols) * static_cast<double>(dtype_size(t.dtype));
}
}  // namespace

std::string op_shape_key(const TracedOp& op) {
    return fmt::format("{}|{}|{}|{}|{}x{}x{}x{}|{}{}", op.kind, op.variant, dtype_name(op.dtype), op.tensor_core, op.m,
                       op.n, op.k, op.batch, op.trans_a, op.trans_b);
}

std::string op_key(const TracedOp& op) {
    return fmt::format("{}|{:.17g}|{:.17g}", op_shape_key(op), op.flops, op.bytes);
}

std::string op_label(const TracedOp& op) {
    std::string label = op.kind + " " + std::to_string(op.m) + "x" + std::to_string(op.n);
    if (op.tensor_core) label += "x" + std::to_string(op.k);
    if (op.batch != 1) label += " x" + std::to_string(op.batch);
    if (op.kind == "gemm") label += std::string(" ") + (op.trans_a ? "T" : "N") + (op.trans_b ? "T" : "N");
    if (!op.variant.empty()) label += " " + op.variant;
    return label;
}

TracedOp& TraceOps::record(const char* kind, DType dtype, double bytes) {
    TracedOp op;
    op.kind = kind;
    op.dtype = dtype;
    op.bytes = bytes;
    ops_.push_back(op);
    return ops_.back();
}

TracedOp& TraceOps::record(const char* kind, const Tensor& main, double bytes) {
    TracedOp& op = record(kind, main.dtype, bytes);
    op.m = main.rows;
    op.n = main.cols;
    return op;
}

bool TraceOps::has_cudnn() const { return true; }

void* TraceOps::alloc(size_t bytes) {
    // Distinct, aligned and never dereferenced: pointer arithmetic on it stays in range.
    void* ptr = reinterpret_cast<void*>(next_address_);
    allocated_ += static_cast<double>(bytes);
    next_address_ += (bytes + 255) / 256 * 256 + 256;
    return ptr;
}

void TraceOps::fill(const Tensor& t, float) { record("fill", t, static_cast<double>(t.bytes())); }

void TraceOps::cast(const Tensor& src, const Tensor& dst) {
    SB_REQUIRE(src.numel() == dst.numel(), "trace cast: numel differs");
    record("cast", src, static_cast<double>(src.bytes() + dst.bytes()));
}

// Not part of a training step, so nothing to project; a caller reaching it is a bug.
uint64_t TraceOps::checksum(const void*, size_t) { missing_op(__func__); }

TracedOp& TraceOps::record_gemm(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, const Tensor& c,
                                double extra_bytes, std::string variant) {
    const int64_t m = trans_a ? a.cols : a.rows;
    const int64_t k = trans_a ? a.rows : a.cols;
    const int64_t kb = trans_b ? b.cols : b.rows;
    const int64_t n = trans_b ? b.rows : b.cols;
    SB_REQUIRE(k == kb && c.rows == m && c.cols == n,
               fmt::format("trace gemm: {}x{} @ {}x{} into {}x{}", m, k, kb, n, c.rows, c.cols));
    TracedOp& op = record("gemm", a.dtype, static_cast<double>(a.bytes() + b.bytes() + c.bytes()) + extra_bytes);
    op.tensor_core = true;
    op.m = m;
    op.n = n;
    op.k = k;
    op.trans_a = trans_a;
    op.trans_b = trans_b;
    op.variant = std::move(variant);
    op.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    return op;
}

void TraceOps::gemm(bool trans_a, bool trans_b, float, const Tensor& a, const Tensor& b, float beta,
                    const Tensor& c, const float* bias) {
    const double bias_bytes = bias ? fp32_bytes(static_cast<double>(c.cols)) : 0.0;
    // The epilogue: + bias, + beta C.
    record_gemm(trans_a, trans_b, a, b, c, bias_bytes + (beta != 0.0f ? static_cast<double>(c.bytes()) : 0.0),
                std::string(bias ? "bias" : "") + (bias && beta != 0.0f ? "+" : "") +
                    (beta != 0.0f ? "accumulate" : ""));
}

void TraceOps::linear_activation_forward(const Tensor& x, const Tensor& w, const float* bias, Activation act,
                                         const Tensor& pre, const Tensor& out) {
    if (!gemm_fuses_activation(act, x.dtype)) return Ops::linear_activation_forward(x, w, bias, act, pre, out);
    // The GEMM writes pre beside out.
    record_gemm(false, true, x, w, out, static_cast<double>(pre.bytes()) + fp32_bytes(static_cast<double>(out.cols)),
                std::string("bias+") + activation_name(act));
}

void TraceOps::linear_activation_backward(const Tensor& grad_out, const Tensor& w, Activation act, const Tensor& pre,
                                          const Tensor& grad_pre) {
    if (!gemm_fuses_activation(act, grad_out.dtype))
        return Ops::linear_activation_backward(grad_out, w, act, pre, grad_pre);
    record_gemm(false, false, grad_out, w, grad_pre, static_cast<double>(pre.bytes()),
                std::string("d") + activation_name(act));
}

void TraceOps::linear_weight_grad(const Tensor& grad_out, const Tensor& x, const Tensor& grad_w, float* grad_bias) {
    if (!gemm_fuses_bias_grad(grad_out.dtype)) return Ops::linear_weight_grad(grad_out, x, grad_w, grad_bias);
    record_gemm(true, false, grad_out, x, grad_w, fp32_bytes(static_cast<double>(grad_w.rows)), "bias_grad");
}

void TraceOps::activation_forward(Activation act, const Tensor& pre, const Tensor& out) {
    record("activation_forward", pre, static_cast<double>(pre.bytes() + out.bytes())).variant = activation_name(act);
}

void TraceOps::activation_backward(Activation act, const Tensor& pre, const Tensor& grad_out, const Tensor& grad_pre) {
    record("activation_backward", pre, static_cast<double>(pre.bytes() + grad_out.bytes() + grad_pre.bytes())).variant =
        activation_name(act);
}

void TraceOps::bias_grad(const Tensor& grad, float*) {
    record("bias_grad", grad, static_cast<double>(grad.bytes()) + fp32_bytes(static_cast<double>(grad.cols)));
}

void TraceOps::labelled_bias_grad(const Tensor& grad, const int32_t*, int64_t labelled_rows, float*) {
    // Every label, the labelled rows of grad, the sums written.
    SB_REQUIRE(labelled_rows >= 0 && labelled_rows <= grad.rows,
               fmt::format("trace labelled_bias_grad: {} labelled of {} rows", labelled_rows, grad.rows));
    record("labelled_bias_grad", grad,
           4.0 * static_cast<double>(grad.rows) + labelled_bytes(grad, labelled_rows) +
               fp32_bytes(static_cast<double>(grad.cols)));
}

void TraceOps::softmax_cross_entropy(const Tensor& logits, const int32_t*, int64_t labelled_rows, float*,
                                     const Tensor& grad_logits, float) {
    // Every label, the labelled rows' logits (an ignored row's are not read), every gradient row written.
    SB_REQUIRE(labelled_rows >= 0 && labelled_rows <= logits.rows,
               fmt::format("trace softmax_cross_entropy: {} labelled of {} rows", labelled_rows, logits.rows));
    record("softmax_cross_entropy", logits,
           4.0 * static_cast<double>(logits.rows) + labelled_bytes(logits, labelled_rows) +
               static_cast<double>(grad_logits.bytes()));
}

void TraceOps::add(const Tensor& a, const Tensor& b, const Tensor& out) {
    record("add", a, static_cast<double>(a.bytes() + b.bytes() + out.bytes()));
}

void TraceOps::layernorm_forward(const Tensor& x, const float*, const float*, float, const Tensor& out, float*,
                                 float*) {
    // x in, out, gamma and beta, mean and rstd per row.
    record("layernorm_forward", x,
           static_cast<double>(x.bytes() + out.bytes()) + fp32_bytes(2.0 * x.cols + 2.0 * x.rows));
}

void TraceOps::layernorm_backward(const Tensor& x, const Tensor& grad_out, const float*, const float*, const float*,
                                  const Tensor& grad_x, float*, float*) {
    record("layernorm_backward", x,
           static_cast<double>(x.bytes() + grad_out.bytes() + grad_x.bytes()) +
               fp32_bytes(3.0 * x.cols + 2.0 * x.rows));
}

void TraceOps::residual_layernorm_forward(const Tensor& branch, const Tensor& residual, float p, uint64_t,
                                          const float*, const float*, float, const Tensor& sum, const Tensor& out,
                                          float*, float*) {
    // branch and residual in, sum and out written, gamma and beta, mean and rstd per row.
    record("residual_layernorm_forward", branch,
           static_cast<double>(branch.bytes() + residual.bytes() + sum.bytes() + out.bytes()) +
               fp32_bytes(2.0 * branch.cols + 2.0 * branch.rows))
        .variant = p > 0.0f ? "dropout" : "";
}

void TraceOps::residual_layernorm_backward(const Tensor& sum, const Tensor& grad_out, const Tensor& grad_out_residual,
                                           const Tensor& grad_sum_residual, const float*, const float*, const float*,
                                           float p, uint64_t, const Tensor& grad_sum, const Tensor& grad_branch,
                                           float*, float*) {
    // sum, grad_out and the residual gradients given in; grad_sum and grad_branch written;
    // gamma in, its and beta's gradients out, mean and rstd per row.
    const double residuals = static_cast<double>((grad_out_residual.data ? grad_out_residual.bytes() : 0) +
                                                 (grad_sum_residual.data ? grad_sum_residual.bytes() : 0));
    TracedOp& op = record("residual_layernorm_backward", sum,
                          static_cast<double>(sum.bytes() + grad_out.bytes() + grad_sum.bytes() + grad_branch.bytes()) +
                              residuals + fp32_bytes(3.0 * sum.cols + 2.0 * sum.rows));
    op.variant = std::string(grad_out_residual.data ? "out_residual" : grad_sum_residual.data ? "sum_residual" : "") +
                 (p > 0.0f ? (grad_out_residual.data || grad_sum_residual.data ? "+dropout" : "dropout") : "");
}

void TraceOps::embedding_forward(const int32_t*, const Tensor&, const Tensor& out, bool accumulate) {
    // The gathered rows, the ids, out written (and read when accumulating).
    record("embedding_forward", out,
           static_cast<double>(out.bytes() * (accumulate ? 3 : 2)) + 4.0 * static_cast<double>(out.rows))
        .variant = accumulate ? "accumulate" : "";
}

void TraceOps::embedding_backward(const int32_t*, const Tensor& grad_out, float*, int64_t) {
    // grad_out read, each touched table row read-modified-written in fp32.
    record("embedding_backward", grad_out,
           static_cast<double>(grad_out.bytes()) + fp32_bytes(2.0 * static_cast<double>(grad_out.numel())) +
               4.0 * static_cast<double>(grad_out.rows));
}

void TraceOps::dropout(const Tensor& in, const Tensor& out, float, uint64_t) {
    record("dropout", in, static_cast<double>(in.bytes() + out.bytes()));
}

const DeviceLimits& TraceOps::default_trace_limits() {
    static const DeviceLimits sm90 = *architecture_limits("sm_90");
    return sm90;
}

size_t TraceOps::attention_saved_bytes(const AttentionShape& s) const {
    const DType dtype = compute_dtype(precision_);
    const size_t rows = static_cast<size_t>(s.batch) * s.heads * s.seq;
    // Fused: one fp32 log-sum-exp per row. Unfused: the probabilities P, batch x heads x seq x seq.
    return attention_fused(dtype, s.head_dim) ? rows * sizeof(float) : rows * s.seq * dtype_size(dtype);
}

namespace {
// The fraction of the seq x seq products the fused kernels compute: all of it, or under a
// causal mask the 64 x 64 tiles on and below the diagonal (attention_kernels.cu's tiles).
double fused_tile_fraction(const Ops::AttentionShape& s) {
    if (!s.causal) return 1.0;
    const int64_t tiles = (s.seq + 63) / 64;
    return static_cast<double>(tiles * (tiles + 1) / 2) / static_cast<double>(tiles * tiles);
}

// The products the one-block backward (seq <= Ops::kAttentionOneBlockSeq) computes: S^T, dP^T,
// dV and dK over warp w's 16 keys and the 32-query chunks from the one holding query 16w on
// (under a causal mask; all of them without), dQ over the queries 16i..16i+15 and the 16-key
// tiles 0..i (attention_kernels.cu's attention_backward_short_kernel).
double one_block_backward_products(const Ops::AttentionShape& s) {
    if (!s.causal) return 5.0;
    const int64_t keys = (s.seq + 15) / 16, chunks = (s.seq + 31) / 32;
    int64_t pairs = 0;
    for (int64_t w = 0; w < keys; ++w) pairs += chunks - 16 * w / 32;
    return 4.0 * static_cast<double>(pairs) / static_cast<double>(keys * chunks) +
           static_cast<double>(keys * (keys + 1) / 2) / static_cast<double>(keys * keys);
}
}  // namespace

// Attention as `products` batched (seq x seq x head_dim) GEMMs, one per batch x head, of
// which `fraction` is computed.
TracedOp& TraceOps::record_attention(const char* kind, const AttentionShape& s, DType dtype, double bytes,
                                     double products) {
    TracedOp& op = record(kind, dtype, bytes);
    op.variant = std::string(s.causal ? "causal" : "bidirectional") + (s.dropout_p > 0.0f ? "+dropout" : "") +
                 (attention_fused(dtype, s.head_dim) ? "+fused" : "");
    op.tensor_core = true;
    op.m = s.seq;
    op.n = s.seq;
    op.k = s.head_dim;
    op.batch = static_cast<int64_t>(s.batch) * s.heads;
    op.flops = products * 2.0 * static_cast<double>(op.batch) * s.seq * s.seq * s.head_dim;
    return op;
}

void TraceOps::attention_forward(const AttentionShape& s, const Tensor& qkv, const Tensor& out, void*, uint64_t) {
    const double saved = static_cast<double>(attention_saved_bytes(s));
    const double io = static_cast<double>(qkv.bytes() + out.bytes());
    if (attention_fused(qkv.dtype, s.head_dim)) {
        // Q K^T and P V over the tiles computed; Q, K, V read, O and the LSE written once.
        record_attention("attention_forward", s, qkv.dtype, io + saved, 2.0 * fused_tile_fraction(s));
        return;
    }
    // Q K^T and P V; softmax and dropout pass over P. Causal masking is applied to
    // full-size products.
    record_attention("attention_forward", s, qkv.dtype, io + 3.0 * saved, 2);
}

void TraceOps::attention_backward(const AttentionShape& s, const Tensor& qkv, const Tensor& out, const void*,
                                  const Tensor& grad_out, const Tensor& grad_qkv, uint64_t) {
    const double saved = static_cast<double>(attention_saved_bytes(s));
    const bool fused = attention_fused(qkv.dtype, s.head_dim);
    const std::string variant = fused ? attention_plan::backward_variant(limits_, qkv.dtype, s) : "";
    if (variant == attention_plan::kOneBlock) {
        // One kernel reads Q, K, V, O, dO and the LSE once and writes dQ, dK, dV once.
        const double io = static_cast<double>(qkv.bytes() + out.bytes() + grad_out.bytes() + grad_qkv.bytes());
        record_attention("attention_backward", s, qkv.dtype, io + saved, one_block_backward_products(s));
        return;
    }
    if (fused) {
        // rowsum(dO * O) reads O and dO and writes one float a row; the dQ kernel recomputes
        // S and dP and does dS K (3 products), the dK/dV kernel recomputes S^T and dP^T and
        // does P^T dO and dS^T Q (4). Each reads its QKV part and dO, the LSE and the row sums.
        const double io = static_cast<double>(qkv.bytes() + out.bytes() + 2 * grad_out.bytes() + grad_qkv.bytes());
        TracedOp& op =
            record_attention("attention_backward", s, qkv.dtype, io + 4.0 * saved, 7.0 * fused_tile_fraction(s));
        // A short sequence on the tiled kernels: a key of its own, so a profile costs this variant.
        if (s.seq <= kAttentionOneBlockSeq) op.variant += std::string("+") + attention_plan::kTiled;
        return;
    }
    // dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: four products of the forward's size.
    record_attention("attention_backward", s, qkv.dtype,
                     static_cast<double>(qkv.bytes() + out.bytes() + grad_out.bytes() + grad_qkv.bytes()) + 3.0 * saved,
                     4);
}

namespace {
// "3x3/2 pad 1": what, besides the shape, picks the work of a windowed op.
std::string window_variant(const Ops::ConvShape& s) {
    return fmt::format("{}x{}/{} pad {}", s.kernel, s.kernel, s.stride, s.padding);
}
}  // namespace

void TraceOps::im2col(const ConvShape& s, const Tensor& x, const Tensor& cols) {
    // Each input element is read once (its kernel^2 / stride^2 reuses hit the cache), every patch written.
    record("im2col", cols, static_cast<double>(x.bytes() + cols.bytes())).variant = window_variant(s);
}

void TraceOps::col2im(const ConvShape& s, const Tensor& grad_cols, const Tensor& grad_x) {
    record("col2im", grad_cols, static_cast<double>(grad_cols.bytes() + grad_x.bytes())).variant = window_variant(s);
}

TracedOp& TraceOps::record_conv(const char* kind, const ConvShape& s, int64_t out_channels, DType dtype,
                                double bytes) {
    TracedOp& op = record(kind, dtype, bytes);
    op.variant = window_variant(s);
    op.tensor_core = true;
    op.m = s.out_rows();
    op.n = out_channels;
    op.k = s.patch();
    op.flops = 2.0 * static_cast<double>(op.m) * static_cast<double>(op.n) * static_cast<double>(op.k);
    return op;
}

void TraceOps::conv_forward(const ConvShape& s, const Tensor& x, const Tensor& weight, const Tensor& out) {
    record_conv("conv_forward", s, weight.rows, x.dtype, static_cast<double>(x.bytes() + weight.bytes() + out.bytes()));
}

void TraceOps::conv_backward_data(const ConvShape& s, const Tensor& grad_out, const Tensor& weight, float beta,
                                  const Tensor& grad_x) {
    TracedOp& op = record_conv("conv_backward_data", s, weight.rows, grad_out.dtype,
                               static_cast<double>(grad_out.bytes() + weight.bytes() +
                                                   grad_x.bytes() * (beta != 0.0f ? 2 : 1)));
    if (beta != 0.0f) op.variant += " accumulate";
}

void TraceOps::conv_backward_filter(const ConvShape& s, const Tensor& x, const Tensor& grad_out,
                                    const Tensor& grad_weight) {
    record_conv("conv_backward_filter", s, grad_weight.rows, x.dtype,
                static_cast<double>(x.bytes() + grad_out.bytes() + grad_weight.bytes()));
}

// BatchNorm's CUDA kernels (models/cuda/conv_kernels.cu) make two passes over the batch: the
// statistics (forward) or the gradient sums (backward), then the elementwise pass. Each pass reads
// x (and, backward, grad_out) again.
void TraceOps::batchnorm_relu_forward(const Tensor& x, const float*, const float*, float, const Tensor& residual,
                                      const Tensor& out, float*, float*) {
    const double residual_bytes = residual.data ? static_cast<double>(residual.bytes()) : 0.0;
    record("batchnorm_relu_forward", x,
           static_cast<double>(2 * x.bytes() + out.bytes()) + residual_bytes + fp32_bytes(4.0 * x.cols))
        .variant = residual.data ? "residual" : "";
}

void TraceOps::batchnorm_relu_backward(const Tensor& x, const Tensor& grad_out, const float*, const float*,
                                       const float*, const float*, const Tensor& grad_x, float*, float*) {
    record("batchnorm_relu_backward", x,
           static_cast<double>(2 * (x.bytes() + grad_out.bytes()) + grad_x.bytes()) + fp32_bytes(6.0 * x.cols));
}

void TraceOps::batchnorm_forward(const Tensor& x, const float*, const float*, float, const Tensor& out, float*,
                                 float*) {
    // x twice, out, gamma and beta, mean and rstd per column.
    record("batchnorm_forward", x, static_cast<double>(2 * x.bytes() + out.bytes()) + fp32_bytes(4.0 * x.cols));
}

void TraceOps::batchnorm_backward(const Tensor& x, const Tensor& grad_out, const float*, const float*, const float*,
                                  const Tensor& grad_x, float*, float*) {
    record("batchnorm_backward", x,
           static_cast<double>(2 * (x.bytes() + grad_out.bytes()) + grad_x.bytes()) + fp32_bytes(5.0 * x.cols));
}

void TraceOps::maxpool_forward(const ConvShape& s, const Tensor& x, const Tensor& out, uint8_t*) {
    // x in, out and one argmax byte per output element.
    record("maxpool_forward", x, static_cast<double>(x.bytes() + out.bytes() + out.numel())).variant =
        window_variant(s);
}

void TraceOps::maxpool_backward(const ConvShape& s, const uint8_t*, const Tensor& grad_out, const Tensor& grad_x) {
    // The argmax bytes and grad_out in, grad_x out.
    record("maxpool_backward", grad_x, static_cast<double>(grad_out.numel() + grad_out.bytes() + grad_x.bytes()))
        .variant = window_variant(s);
}

void TraceOps::avgpool_forward(int, const Tensor& x, const Tensor& out) {
    record("avgpool_forward", x, static_cast<double>(x.bytes() + out.bytes()));
}

void TraceOps::avgpool_backward(int, const Tensor& grad_out, const Tensor& grad_x) {
    record("avgpool_backward", grad_x, static_cast<double>(grad_out.bytes() + grad_x.bytes()));
}

void TraceOps::sgd_step(float*, const float*, float*, size_t n, const OptimizerConfig&, const Tensor& weights_copy) {
    // params and momentum read and written, grads read, the compute copy written.
    record("sgd_step", flat(n), fp32_bytes(5.0 * static_cast<double>(n)) + static_cast<double>(weights_copy.bytes()));
}

void TraceOps::adamw_step(float*, const float*, float*, float*, size_t n, const OptimizerConfig&, int64_t,
                          const Tensor& weights_copy) {
    // params, m, v read and written, grads read, the compute copy written.
    record("adamw_step", flat(n), fp32_bytes(7.0 * static_cast<double>(n)) + static_cast<double>(weights_copy.bytes()));
}

bool TraceOps::unscale_and_check(float*, size_t n, float) {
    record("unscale_and_check", flat(n), fp32_bytes(2.0 * static_cast<double>(n)));
    return true;
}

void TraceGradientSink::gradient_ready(int param_index) {
    SB_REQUIRE(param_index >= 0 && static_cast<size_t>(param_index) < ready_after_.size(),
               fmt::format("gradient_ready({}) out of range", param_index));
    SB_REQUIRE(ready_after_[static_cast<size_t>(param_index)] < 0,
               fmt::format("gradient {} reported twice", param_index));
    ready_after_[static_cast<size_t>(param_index)] = static_cast<int64_t>(ops_.position());
    order_.push_back(param_index);
}

}  // namespace sb
