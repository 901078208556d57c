// The transformer model (DESIGN: models/): one class for BERT (post-LN encoder with the
// masked-LM head) and GPT-2 (pre-LN decoder with the LM head), written once against Ops.
// Parameters sit in the flat buffers under Hugging Face's state_dict names
// (BertForMaskedLM, GPT2LMHeadModel), so a checkpoint maps one to one; the output
// projection is tied to the word embeddings, as in both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/ops.h"

namespace sb {

enum class TransformerArch { bert, gpt };
const char* transformer_arch_name(TransformerArch arch);

struct TransformerShape {
    TransformerArch arch = TransformerArch::bert;
    int layers = 12;
    int hidden = 768;
    int heads = 12;
    int ffn = 3072;
    int vocab = 30522;
    int seq_len = 128;          // tokens per sample
    int max_positions = 512;    // rows of the position table (HF max_position_embeddings / n_positions)
    int type_vocab = 2;         // BERT's token-type table (all inputs use type 0); unused by GPT
    float dropout = 0.1f;       // hidden dropout: embeddings, attention output, FFN output
    float attention_dropout = 0.1f;
    float layernorm_eps = 1e-12f;  // HF: BERT 1e-12, GPT-2 1e-5
    // The decoder computes logits over the vocabulary padded to a multiple of this (llm.c's
    // 50304, Megatron's make-vocab-size-divisible-by), so the logits' rows are 16-byte aligned
    // for cuBLASLt's fast kernels; the padded classes' logits are -inf: no probability, no
    // gradient. Parameters, gradients and FLOPs stay the true vocabulary's. 1: no padding.
    int vocab_multiple = 128;
    int padded_vocab() const { return (vocab + vocab_multiple - 1) / vocab_multiple * vocab_multiple; }
};

class Transformer final : public Model {
public:
    // Throws UserError on a shape that cannot be built (hidden % heads, seq_len > max_positions, ...).
    // dropout_seed keys every dropout mask together with the layer and site; the backend's
    // dropout generation, advanced once per forward_backward, makes each step's masks new.
    // labelled_per_sequence: how many positions of every sequence carry a label (the data's
    // labelled_positions(), models/token_data.h), what the loss's ops are told they read.
    Transformer(Ops& ops, const TransformerShape& shape, uint64_t dropout_seed, int labelled_per_sequence);

    std::string name() const override { return shape_.arch == TransformerArch::bert ? "bert" : "gpt2"; }
    const std::vector<ParamInfo>& params() const override { return params_; }
    // As Hugging Face's _init_weights: Linear and Embedding weights N(0, 0.02), biases 0,
    // LayerNorm gamma 1 beta 0; GPT-2's residual projections (c_proj) N(0, 0.02/sqrt(2 layers)).
    // Each parameter from its own stream keyed by (seed, parameter index).
    void init_params(float* host_params, uint64_t seed) const override;
    void bind(const FlatBuffers& buffers, int batch_rows) override;
    // inputs: batch_rows x seq_len int32 token ids; labels: batch_rows * seq_len int32,
    // negative where a position is not predicted, labelled_per_sequence of each sequence's
    // not. The loss is the mean over labelled positions.
    void forward_backward(const Tensor& inputs, const int32_t* labels, float* loss, float grad_scale,
                          GradientSink* sink) override;
    double flops_per_sample() const override;

    const TransformerShape& shape() const { return shape_; }
    // Which Hugging Face tensor a parameter is, and whether ours is its transpose
    // (GPT-2's Conv1D stores [in, out]; ours are [out, in] like nn.Linear).
    static bool stored_transposed_from_hf(const TransformerShape& shape, const ParamInfo& p);

private:
    struct LayerParams {
        int qkv_w = -1, qkv_b = -1, qkv_parts = 1;  // BERT: query/key/value (3 params each), GPT: c_attn
        int proj_w = -1, proj_b = -1;
        int ln_attn_w = -1, ln_attn_b = -1;  // BERT attention.output.LayerNorm; GPT ln_1
        int fc_w = -1, fc_b = -1, out_w = -1, out_b = -1;
        int ln_ffn_w = -1, ln_ffn_b = -1;    // BERT output.LayerNorm; GPT ln_2
    };
    struct LayerActs {
        DeviceBuffer qkv, attn, saved;
        DeviceBuffer sum_attn;   // residual sum after attention (BERT h1; GPT the stream between blocks)
        DeviceBuffer norm_attn;  // BERT LN(h1), the FFN's input; GPT ln_1(x), the attention's input
        DeviceBuffer ffn_side;   // BERT h2, the sum before the second LN; GPT ln_2(mid), the FFN's input
        DeviceBuffer ffn_pre, ffn_act;
        DeviceBuffer mean1, rstd1, mean2, rstd2;  // fp32 per row
    };

    int add_param(const std::string& name, int64_t rows, int64_t cols);
    Tensor weight(int index) const;                 // compute copy
    Tensor weight_rows(int index, int64_t rows) const;  // a run of consecutive params as one matrix
    Tensor qkv_weight(const LayerParams& lp) const;
    const float* qkv_bias(const LayerParams& lp) const;
    const float* master(int index) const { return buffers_.master(params_, index); }
    float* grad(int index) const { return buffers_.gradient(params_, index); }
    Tensor grad_matrix(int index, int64_t rows) const;
    Tensor act(const DeviceBuffer& b, int64_t cols) const { return b.tensor(dtype_, rows_, cols); }
    uint64_t dropout_seed(int layer, int site) const;
    void report(GradientSink* sink, int first, int count = 1) const;

    void forward_bert(const int32_t* ids);
    void forward_gpt(const int32_t* ids);
    void backward_bert(const int32_t* ids, const int32_t* labels, GradientSink* sink);
    void backward_gpt(const int32_t* ids, const int32_t* labels, GradientSink* sink);
    void position_backward(const Tensor& dres, GradientSink* sink);
    // The two sub-layers of layer l, shared by BERT (post-LN) and GPT-2 (pre-LN), which
    // differ only in where the LayerNorms and residual adds go around them. Forward:
    // out = sublayer(in), whose dropout, residual add and LayerNorm follow in one
    // Ops::residual_layernorm_forward. Backward: from dout, the gradient of that output (its
    // dropout applied by residual_layernorm_backward), report the sub-layer's parameter
    // gradients and return the gradient of `in` (in dtmp_, which dout may be).
    void attention_block_forward(int l, const Tensor& in, const Tensor& out);
    void ffn_block_forward(int l, const Tensor& in, const Tensor& out);
    Tensor attention_block_backward(int l, const Tensor& in, const Tensor& dout, GradientSink* sink);
    Tensor ffn_block_backward(int l, const Tensor& in, const Tensor& dout, GradientSink* sink);
    Activation ffn_activation() const;  // BERT's exact GELU, GPT-2's tanh approximation
    Ops::AttentionShape attention_shape() const;
    // GPT-2: the LayerNorm after layer l's FFN junction, ln_1 of layer l + 1 or ln_f at the
    // top: its parameters, output buffer and saved statistics.
    struct NextNorm {
        int gamma, beta;
        DeviceBuffer* out;
        float *mean, *rstd;
    };
    NextNorm next_norm(int l);
    // The vocabulary projection over padded_vocab() classes. Forward: logits_ = hn W^T + bias,
    // -inf in the padded columns. Backward from the loss's gradient in logits_: BERT's bias
    // gradient (over the labelled rows: the others are zero; reported), the decoder's share
    // of the word-embedding gradient (reported with the lookup's share at the end), dx = dlogits W.
    void decoder_forward(const Tensor& hn);
    void decoder_backward(const Tensor& hn, const int32_t* labels, const Tensor& dx, GradientSink* sink);
    int64_t labelled_rows() const { return static_cast<int64_t>(batch_) * labelled_per_sequence_; }

    Ops& ops_;
    TransformerShape shape_;
    uint64_t dropout_seed_;
    int labelled_per_sequence_;
    DType dtype_;
    std::vector<ParamInfo> params_;
    // Parameter indices.
    int word_ = -1, position_ = -1, token_type_ = -1, emb_ln_w_ = -1, emb_ln_b_ = -1;
    std::vector<LayerParams> layer_params_;
    int head_dense_w_ = -1, head_dense_b_ = -1, head_ln_w_ = -1, head_ln_b_ = -1, decoder_bias_ = -1;  // BERT
    int final_ln_w_ = -1, final_ln_b_ = -1;                                                            // GPT

    FlatBuffers buffers_;
    int batch_ = 0;
    int64_t rows_ = 0;  // batch * seq_len tokens
    DeviceBuffer position_ids_, zero_ids_;  // int32 per token
    DeviceBuffer emb_sum_, emb_mean_, emb_rstd_;
    std::vector<DeviceBuffer> resid_;  // layer inputs: resid_[l] feeds layer l, resid_[L] the head
    std::vector<LayerActs> acts_;
    DeviceBuffer head_pre_, head_act_, head_norm_, head_mean_, head_rstd_;
    DeviceBuffer logits_;  // rows x padded_vocab(); the loss overwrites it with its gradient
    // Only when padded_vocab() > vocab: the padded decoder (the word embedding's compute copy
    // with zero rows after it, refreshed each step), its bias (BERT's, zeros for GPT-2; -inf
    // in the padding) and the fp32 gradients of both, whose first vocab rows are ours.
    DeviceBuffer decoder_w_, decoder_b_, decoder_dw_, decoder_db_;
    DeviceBuffer dres_, dtmp_, dattn_, dqkv_, dffn_;
    DeviceBuffer qkv_grad_;  // BERT with landing gradients: q, k, v's weight and bias gradients
    DeviceBuffer qkv_weight_, qkv_bias_;  // BERT with gathered parameters: q, k, v side by side
};

}  // namespace sb
