// The transformer: Hugging Face parameter layout and init, forward and backward on Ops,
// gradients reported in reverse as they become final (the tied word embedding last:
// the decoder writes its first part, the embedding lookup adds the rest at the end).
#include "models/transformer.h"

#include <cmath>
#include <string>

#include "models/rng.h"
#include "base/errors.h"

namespace sb {
namespace {

// Dropout sites inside a layer (the embeddings use layer index `layers`).
enum Site : int { kAttentionProbs = 0, kAttentionOut = 1, kFfnOut = 2, kEmbedding = 3 };

void require_shape(bool ok, const std::string& what) {
    if (!ok) throw UserError("transformer: " + what);
}

}  // namespace

const char* transformer_arch_name(TransformerArch arch) { return arch == TransformerArch::bert ? "bert" : "gpt"; }

Transformer::Transformer(Ops& ops, const TransformerShape& shape, uint64_t dropout_seed, int labelled_per_sequence)
    : ops_(ops),
      shape_(shape),
      dropout_seed_(dropout_seed),
      labelled_per_sequence_(labelled_per_sequence),
      dtype_(compute_dtype(ops.precision())) {
    const TransformerShape& s = shape;
    require_shape(s.layers > 0 && s.hidden > 0 && s.heads > 0 && s.ffn > 0 && s.seq_len > 0,
                  "layers, hidden, heads, ffn and seq_len must be positive");
    require_shape(s.hidden % s.heads == 0, "hidden " + std::to_string(s.hidden) + " is not divisible by heads " +
                                               std::to_string(s.heads));
    require_shape(s.vocab >= 2, "vocab must be at least 2");
    require_shape(s.vocab_multiple >= 1, "vocab_multiple must be positive");
    require_shape(s.seq_len <= s.max_positions, "seq_len " + std::to_string(s.seq_len) + " exceeds max_positions " +
                                                    std::to_string(s.max_positions));
    require_shape(s.arch == TransformerArch::gpt || s.type_vocab >= 1, "type_vocab must be positive");
    SB_REQUIRE(labelled_per_sequence >= 0 && labelled_per_sequence <= s.seq_len,
               "transformer: " + std::to_string(labelled_per_sequence) + " labelled positions of " +
                   std::to_string(s.seq_len));
    require_shape(s.dropout >= 0.0f && s.dropout < 1.0f && s.attention_dropout >= 0.0f && s.attention_dropout < 1.0f,
                  "dropout probabilities must be in [0, 1)");
    const int64_t H = s.hidden, F = s.ffn, V = s.vocab;
    layer_params_.resize(static_cast<size_t>(s.layers));
    if (s.arch == TransformerArch::bert) {
        word_ = add_param("bert.embeddings.word_embeddings.weight", V, H);
        position_ = add_param("bert.embeddings.position_embeddings.weight", s.max_positions, H);
        token_type_ = add_param("bert.embeddings.token_type_embeddings.weight", s.type_vocab, H);
        emb_ln_w_ = add_param("bert.embeddings.LayerNorm.weight", 1, H);
        emb_ln_b_ = add_param("bert.embeddings.LayerNorm.bias", 1, H);
        for (int l = 0; l < s.layers; ++l) {
            const std::string p = "bert.encoder.layer." + std::to_string(l) + ".";
            LayerParams& lp = layer_params_[static_cast<size_t>(l)];
            // q, k, v weights back to back (then their biases) so one [3H, H] GEMM projects all three.
            lp.qkv_parts = 3;
            lp.qkv_w = add_param(p + "attention.self.query.weight", H, H);
            add_param(p + "attention.self.key.weight", H, H);
            add_param(p + "attention.self.value.weight", H, H);
            lp.qkv_b = add_param(p + "attention.self.query.bias", 1, H);
            add_param(p + "attention.self.key.bias", 1, H);
            add_param(p + "attention.self.value.bias", 1, H);
            lp.proj_w = add_param(p + "attention.output.dense.weight", H, H);
            lp.proj_b = add_param(p + "attention.output.dense.bias", 1, H);
            lp.ln_attn_w = add_param(p + "attention.output.LayerNorm.weight", 1, H);
            lp.ln_attn_b = add_param(p + "attention.output.LayerNorm.bias", 1, H);
            lp.fc_w = add_param(p + "intermediate.dense.weight", F, H);
            lp.fc_b = add_param(p + "intermediate.dense.bias", 1, F);
            lp.out_w = add_param(p + "output.dense.weight", H, F);
            lp.out_b = add_param(p + "output.dense.bias", 1, H);
            lp.ln_ffn_w = add_param(p + "output.LayerNorm.weight", 1, H);
            lp.ln_ffn_b = add_param(p + "output.LayerNorm.bias", 1, H);
        }
        head_dense_w_ = add_param("cls.predictions.transform.dense.weight", H, H);
        head_dense_b_ = add_param("cls.predictions.transform.dense.bias", 1, H);
        head_ln_w_ = add_param("cls.predictions.transform.LayerNorm.weight", 1, H);
        head_ln_b_ = add_param("cls.predictions.transform.LayerNorm.bias", 1, H);
        // cls.predictions.decoder.weight is the word embedding (tied); its bias is this one.
        decoder_bias_ = add_param("cls.predictions.bias", 1, V);
    } else {
        word_ = add_param("transformer.wte.weight", V, H);
        position_ = add_param("transformer.wpe.weight", s.max_positions, H);
        for (int l = 0; l < s.layers; ++l) {
            const std::string p = "transformer.h." + std::to_string(l) + ".";
            LayerParams& lp = layer_params_[static_cast<size_t>(l)];
            // Conv1D weights are stored here as [out, in], the transpose of HF's (see export).
            lp.ln_attn_w = add_param(p + "ln_1.weight", 1, H);
            lp.ln_attn_b = add_param(p + "ln_1.bias", 1, H);
            lp.qkv_w = add_param(p + "attn.c_attn.weight", 3 * H, H);
            lp.qkv_b = add_param(p + "attn.c_attn.bias", 1, 3 * H);
            lp.proj_w = add_param(p + "attn.c_proj.weight", H, H);
            lp.proj_b = add_param(p + "attn.c_proj.bias", 1, H);
            lp.ln_ffn_w = add_param(p + "ln_2.weight", 1, H);
            lp.ln_ffn_b = add_param(p + "ln_2.bias", 1, H);
            lp.fc_w = add_param(p + "mlp.c_fc.weight", F, H);
            lp.fc_b = add_param(p + "mlp.c_fc.bias", 1, F);
            lp.out_w = add_param(p + "mlp.c_proj.weight", H, F);
            lp.out_b = add_param(p + "mlp.c_proj.bias", 1, H);
        }
        final_ln_w_ = add_param("transformer.ln_f.weight", 1, H);
        final_ln_b_ = add_param("transformer.ln_f.bias", 1, H);
    }
}

int Transformer::add_param(const std::string& name, int64_t rows, int64_t cols) {
    const size_t offset = params_.empty() ? 0 : params_.back().offset + params_.back().count();
    params_.push_back(ParamInfo{name, offset, rows, cols});
    return static_cast<int>(params_.size()) - 1;
}

bool Transformer::stored_transposed_from_hf(const TransformerShape& shape, const ParamInfo& p) {
    if (shape.arch != TransformerArch::gpt || p.rows == 1) return false;
    const auto ends_with = [&](const std::string& suffix) {
        return p.name.size() >= suffix.size() && p.name.compare(p.name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    return ends_with("c_attn.weight") || ends_with("c_proj.weight") || ends_with("c_fc.weight");
}

void Transformer::init_params(float* host_params, uint64_t seed) const {
    const double residual_std = 0.02 / std::sqrt(2.0 * shape_.layers);
    for (size_t p = 0; p < params_.size(); ++p) {
        const ParamInfo& info = params_[p];
        float* dst = host_params + info.offset;
        const std::string& n = info.name;
        const bool is_ln = n.find("LayerNorm") != std::string::npos || n.find(".ln_") != std::string::npos;
        if (is_ln) {
            const bool gamma = n.compare(n.size() - 7, 7, ".weight") == 0;
            std::fill_n(dst, info.count(), gamma ? 1.0f : 0.0f);
        } else if (info.rows == 1) {  // every bias
            std::fill_n(dst, info.count(), 0.0f);
        } else {
            const bool residual_proj = shape_.arch == TransformerArch::gpt && n.find("c_proj.weight") != std::string::npos;
            const double std_dev = residual_proj ? residual_std : 0.02;
            PortableRng rng(mix_seed(seed, p));
            for (size_t i = 0; i < info.count(); ++i) dst[i] = static_cast<float>(std_dev * rng.normal());
        }
    }
}

void Transformer::bind(const FlatBuffers& buffers, int batch_rows) {
    SB_REQUIRE(buffers.complete(), "transformer bind: every flat buffer must be set");
    SB_REQUIRE(batch_rows > 0, "transformer bind: batch_rows must be positive; got " + std::to_string(batch_rows));
    buffers_ = buffers;
    batch_ = batch_rows;
    rows_ = static_cast<int64_t>(batch_rows) * shape_.seq_len;
    const size_t T = static_cast<size_t>(rows_), H = shape_.hidden, F = shape_.ffn, V = shape_.vocab;
    const size_t es = dtype_size(dtype_);
    const bool bert = shape_.arch == TransformerArch::bert;

    std::vector<int32_t> host_ids(T);
    for (size_t i = 0; i < T; ++i) host_ids[i] = static_cast<int32_t>(i % static_cast<size_t>(shape_.seq_len));
    position_ids_ = DeviceBuffer(ops_, T * sizeof(int32_t));
    ops_.upload(position_ids_.get(), host_ids.data(), T * sizeof(int32_t));
    if (bert) {
        std::fill(host_ids.begin(), host_ids.end(), 0);  // every token has type 0
        zero_ids_ = DeviceBuffer(ops_, T * sizeof(int32_t));
        ops_.upload(zero_ids_.get(), host_ids.data(), T * sizeof(int32_t));
        emb_sum_ = DeviceBuffer(ops_, T * H * es);
        emb_mean_ = DeviceBuffer(ops_, T * sizeof(float));
        emb_rstd_ = DeviceBuffer(ops_, T * sizeof(float));
    }
    resid_.clear();
    for (int l = 0; l <= shape_.layers; ++l) resid_.emplace_back(ops_, T * H * es);
    acts_.clear();
    acts_.resize(static_cast<size_t>(shape_.layers));
    const size_t saved = ops_.attention_saved_bytes(attention_shape());
    for (LayerActs& a : acts_) {
        a.qkv = DeviceBuffer(ops_, T * 3 * H * es);
        a.attn = DeviceBuffer(ops_, T * H * es);
        a.saved = DeviceBuffer(ops_, saved);
        a.sum_attn = DeviceBuffer(ops_, T * H * es);
        a.norm_attn = DeviceBuffer(ops_, T * H * es);
        a.ffn_side = DeviceBuffer(ops_, T * H * es);
        a.ffn_pre = DeviceBuffer(ops_, T * F * es);
        a.ffn_act = DeviceBuffer(ops_, T * F * es);
        a.mean1 = DeviceBuffer(ops_, T * sizeof(float));
        a.rstd1 = DeviceBuffer(ops_, T * sizeof(float));
        a.mean2 = DeviceBuffer(ops_, T * sizeof(float));
        a.rstd2 = DeviceBuffer(ops_, T * sizeof(float));
    }
    if (bert) {
        head_pre_ = DeviceBuffer(ops_, T * H * es);
        head_act_ = DeviceBuffer(ops_, T * H * es);
    }
    head_norm_ = DeviceBuffer(ops_, T * H * es);
    head_mean_ = DeviceBuffer(ops_, T * sizeof(float));
    head_rstd_ = DeviceBuffer(ops_, T * sizeof(float));
    const size_t Vp = static_cast<size_t>(shape_.padded_vocab());
    logits_ = DeviceBuffer(ops_, T * Vp * es);
    if (Vp > V) {
        decoder_w_ = DeviceBuffer(ops_, Vp * H * es);
        ops_.fill(decoder_w_.tensor(dtype_, static_cast<int64_t>(Vp), shape_.hidden), 0.0f);
        decoder_b_ = DeviceBuffer(ops_, Vp * sizeof(float));
        ops_.fill(decoder_b_.tensor(DType::f32, 1, static_cast<int64_t>(V)), 0.0f);
        ops_.fill(Tensor{decoder_b_.as<float>() + V, DType::f32, 1, static_cast<int64_t>(Vp - V)}, -INFINITY);
        decoder_dw_ = DeviceBuffer(ops_, Vp * H * sizeof(float));
        if (bert) decoder_db_ = DeviceBuffer(ops_, Vp * sizeof(float));
    }
    dres_ = DeviceBuffer(ops_, T * H * es);
    dtmp_ = DeviceBuffer(ops_, T * H * es);
    dattn_ = DeviceBuffer(ops_, T * H * es);
    dqkv_ = DeviceBuffer(ops_, T * 3 * H * es);
    dffn_ = DeviceBuffer(ops_, T * F * es);
    // BERT's query, key and value are three parameters one GEMM writes; landing in slots, they
    // may lie in different buckets' slots (FlatBuffers::landing).
    if (buffers.landing && bert) qkv_grad_ = DeviceBuffer(ops_, (3 * H * H + 3 * H) * sizeof(float));
    if (buffers.home && bert) {  // and read from different buckets' slots
        qkv_weight_ = DeviceBuffer(ops_, 3 * H * H * es);
        qkv_bias_ = DeviceBuffer(ops_, 3 * H * sizeof(float));
    }
    ops_.synchronize();  // the host id vector goes away on return
}

Tensor Transformer::weight(int index) const { return weight_rows(index, params_[index].rows); }

Tensor Transformer::weight_rows(int index, int64_t rows) const {
    const ParamInfo& p = params_[static_cast<size_t>(index)];
    return Tensor{buffers_.weight(params_, index, dtype_size(dtype_)), dtype_, rows, p.cols};
}

// BERT's query, key and value side by side, as one (3H x H) weight and a 3H bias: where they lie
// back to back in the flat buffers, the first's; gathered bucket by bucket (FlatBuffers::home)
// they may lie in different buckets' slots, so each is copied into a stand-in first.
Tensor Transformer::qkv_weight(const LayerParams& lp) const {
    const int64_t H = shape_.hidden;
    if (!qkv_weight_.get()) return weight_rows(lp.qkv_w, 3 * H);
    const Tensor all = qkv_weight_.tensor(dtype_, 3 * H, H);
    for (int part = 0; part < lp.qkv_parts; ++part)
        ops_.cast(weight(lp.qkv_w + part),
                  Tensor{static_cast<char*>(all.data) + part * H * H * dtype_size(dtype_), dtype_, H, H});
    return all;
}

const float* Transformer::qkv_bias(const LayerParams& lp) const {
    const int64_t H = shape_.hidden;
    if (!qkv_weight_.get()) return master(lp.qkv_b);
    for (int part = 0; part < lp.qkv_parts; ++part)
        ops_.cast(Tensor{const_cast<float*>(master(lp.qkv_b + part)), DType::f32, 1, H},
                  Tensor{qkv_bias_.as<float>() + part * H, DType::f32, 1, H});
    return qkv_bias_.as<float>();
}

Tensor Transformer::grad_matrix(int index, int64_t rows) const {
    return Tensor{grad(index), DType::f32, rows, params_[static_cast<size_t>(index)].cols};
}

uint64_t Transformer::dropout_seed(int layer, int site) const {
    return mix_seed(dropout_seed_, static_cast<uint64_t>(layer) * 8 + site);
}

void Transformer::report(GradientSink* sink, int first, int count) const {
    if (!sink) return;
    for (int i = 0; i < count; ++i) sink->gradient_ready(first + i);
}

Ops::AttentionShape Transformer::attention_shape() const {
    Ops::AttentionShape a;
    a.batch = batch_;
    a.seq = shape_.seq_len;
    a.heads = shape_.heads;
    a.head_dim = shape_.hidden / shape_.heads;
    a.causal = shape_.arch == TransformerArch::gpt;
    a.dropout_p = shape_.attention_dropout;
    return a;
}

void Transformer::forward_backward(const Tensor& inputs, const int32_t* labels, float* loss, float grad_scale,
                                   GradientSink* sink) {
    SB_REQUIRE(batch_ > 0, "transformer forward_backward before bind");
    SB_REQUIRE(inputs.rows == batch_ && inputs.cols == shape_.seq_len && inputs.dtype == DType::i32,
               "transformer inputs must be " + std::to_string(batch_) + "x" + std::to_string(shape_.seq_len) +
                   " int32 token ids; got " + std::to_string(inputs.rows) + "x" + std::to_string(inputs.cols) + " " +
                   dtype_name(inputs.dtype));
    const auto* ids = static_cast<const int32_t*>(inputs.data);
    ops_.advance_dropout_generation();  // new masks every step (on CUDA also in a replayed graph)
    const Tensor logits = act(logits_, shape_.padded_vocab());
    if (shape_.arch == TransformerArch::bert) {
        forward_bert(ids);
        ops_.softmax_cross_entropy(logits, labels, labelled_rows(), loss, logits, grad_scale);
        backward_bert(ids, labels, sink);
    } else {
        forward_gpt(ids);
        ops_.softmax_cross_entropy(logits, labels, labelled_rows(), loss, logits, grad_scale);
        backward_gpt(ids, labels, sink);
    }
}

// ---- BERT: post-LN. x' = LN(x + drop(Attn(x) Wo)); x'' = LN(x' + drop(gelu(x' W1) W2)).

void Transformer::forward_bert(const int32_t* ids) {
    const int64_t H = shape_.hidden;
    const float eps = shape_.layernorm_eps, p = shape_.dropout;
    const int L = shape_.layers;

    const Tensor emb = act(emb_sum_, H);
    ops_.embedding_forward(ids, weight(word_), emb, false);
    ops_.embedding_forward(position_ids_.as<int32_t>(), weight(position_), emb, true);
    ops_.embedding_forward(zero_ids_.as<int32_t>(), weight(token_type_), emb, true);
    const Tensor x0 = act(resid_[0], H);
    ops_.layernorm_forward(emb, master(emb_ln_w_), master(emb_ln_b_), eps, x0, emb_mean_.as<float>(),
                           emb_rstd_.as<float>());
    ops_.dropout(x0, x0, p, dropout_seed(L, kEmbedding));

    const Tensor tmp = act(dtmp_, H);  // the sub-layers' outputs (free during the forward)
    for (int l = 0; l < L; ++l) {
        const LayerParams& lp = layer_params_[static_cast<size_t>(l)];
        LayerActs& a = acts_[static_cast<size_t>(l)];
        const Tensor x = act(resid_[l], H), h1 = act(a.sum_attn, H), x1 = act(a.norm_attn, H);
        attention_block_forward(l, x, tmp);
        ops_.residual_layernorm_forward(tmp, x, p, dropout_seed(l, kAttentionOut), master(lp.ln_attn_w),
                                        master(lp.ln_attn_b), eps, h1, x1, a.mean1.as<float>(), a.rstd1.as<float>());
        const Tensor h2 = act(a.ffn_side, H);
        ffn_block_forward(l, x1, tmp);
        ops_.residual_layernorm_forward(tmp, x1, p, dropout_seed(l, kFfnOut), master(lp.ln_ffn_w),
                                        master(lp.ln_ffn_b), eps, h2, act(resid_[l + 1], H), a.mean2.as<float>(),
                                        a.rstd2.as<float>());
    }

    // MLM head: LN(gelu(x Wt + bt)) Wword^T + bias.
    const Tensor hp = act(head_pre_, H), ha = act(head_act_, H), hn = act(head_norm_, H);
    ops_.linear_activation_forward(act(resid_[L], H), weight(head_dense_w_), master(head_dense_b_),
                                   Activation::gelu_erf, hp, ha);
    ops_.layernorm_forward(ha, master(head_ln_w_), master(head_ln_b_), eps, hn, head_mean_.as<float>(),
                           head_rstd_.as<float>());
    decoder_forward(hn);
}

void Transformer::backward_bert(const int32_t* ids, const int32_t* labels, GradientSink* sink) {
    const int64_t H = shape_.hidden;
    const float p = shape_.dropout;
    const int L = shape_.layers;
    const Tensor dres = act(dres_, H), dtmp = act(dtmp_, H);

    decoder_backward(act(head_norm_, H), labels, dtmp, sink);
    ops_.layernorm_backward(act(head_act_, H), dtmp, master(head_ln_w_), head_mean_.as<float>(),
                            head_rstd_.as<float>(), dtmp, grad(head_ln_w_), grad(head_ln_b_));
    report(sink, head_ln_w_, 2);
    ops_.activation_backward(Activation::gelu_erf, act(head_pre_, H), dtmp, dtmp);
    ops_.linear_weight_grad(dtmp, act(resid_[L], H), grad_matrix(head_dense_w_, H), grad(head_dense_b_));
    report(sink, head_dense_w_, 2);
    ops_.gemm(false, false, 1.0f, dtmp, weight(head_dense_w_), 0.0f, dres);

    // The gradient of a layer's output is dtmp (through the next layer's attention branch) +
    // dres (its residual path); the top layer's is dres alone, from the head.
    const Tensor none{};
    for (int l = L - 1; l >= 0; --l) {
        const LayerParams& lp = layer_params_[static_cast<size_t>(l)];
        LayerActs& a = acts_[static_cast<size_t>(l)];
        // Second LN and the FFN's dropout: dres = d h2 (also the residual's), dtmp = d FFN out.
        const bool top = l == L - 1;
        ops_.residual_layernorm_backward(act(a.ffn_side, H), top ? dres : dtmp, top ? none : dres, none,
                                         master(lp.ln_ffn_w), a.mean2.as<float>(), a.rstd2.as<float>(), p,
                                         dropout_seed(l, kFfnOut), dres, dtmp, grad(lp.ln_ffn_w), grad(lp.ln_ffn_b));
        report(sink, lp.ln_ffn_w, 2);
        ffn_block_backward(l, act(a.norm_attn, H), dtmp, sink);
        // First LN, its input's gradient the FFN's (dtmp) + the residual's (dres).
        ops_.residual_layernorm_backward(act(a.sum_attn, H), dtmp, dres, none, master(lp.ln_attn_w),
                                         a.mean1.as<float>(), a.rstd1.as<float>(), p, dropout_seed(l, kAttentionOut),
                                         dres, dtmp, grad(lp.ln_attn_w), grad(lp.ln_attn_b));
        report(sink, lp.ln_attn_w, 2);
        attention_block_backward(l, act(resid_[l], H), dtmp, sink);
    }
    ops_.add(dtmp, dres, dres);

    // Embeddings: dropout, LN, then the three tables (the tied word embedding last).
    ops_.dropout(dres, dres, p, dropout_seed(L, kEmbedding));
    ops_.layernorm_backward(act(emb_sum_, H), dres, master(emb_ln_w_), emb_mean_.as<float>(), emb_rstd_.as<float>(),
                            dres, grad(emb_ln_w_), grad(emb_ln_b_));
    report(sink, emb_ln_w_, 2);
    // Every token has type 0: the table's row 0 takes the column sums of every row.
    ops_.fill(grad_matrix(token_type_, shape_.type_vocab), 0.0f);
    ops_.bias_grad(dres, grad(token_type_));
    report(sink, token_type_);
    position_backward(dres, sink);
    ops_.embedding_backward(ids, dres, grad(word_), shape_.vocab);
    report(sink, word_);
}

// ---- GPT-2: pre-LN. x += drop(Attn(LN1(x)) Wo); x += drop(gelu(LN2(x) W1) W2); LN_f at the end.

void Transformer::forward_gpt(const int32_t* ids) {
    const int64_t H = shape_.hidden;
    const float eps = shape_.layernorm_eps, p = shape_.dropout;
    const int L = shape_.layers;

    const Tensor x0 = act(resid_[0], H);
    ops_.embedding_forward(ids, weight(word_), x0, false);
    ops_.embedding_forward(position_ids_.as<int32_t>(), weight(position_), x0, true);
    ops_.dropout(x0, x0, p, dropout_seed(L, kEmbedding));

    // Each junction writes the residual stream and the next LayerNorm's output: after the
    // attention mid and ln_2(mid), after the FFN x_{l+1} and ln_1 of layer l+1 (ln_f at the top).
    const Tensor tmp = act(dtmp_, H);
    {
        const LayerParams& lp = layer_params_[0];
        LayerActs& a = acts_[0];
        ops_.layernorm_forward(x0, master(lp.ln_attn_w), master(lp.ln_attn_b), eps, act(a.norm_attn, H),
                               a.mean1.as<float>(), a.rstd1.as<float>());
    }
    for (int l = 0; l < L; ++l) {
        const LayerParams& lp = layer_params_[static_cast<size_t>(l)];
        LayerActs& a = acts_[static_cast<size_t>(l)];
        const Tensor x = act(resid_[l], H), n1 = act(a.norm_attn, H);
        attention_block_forward(l, n1, tmp);
        const Tensor mid = act(a.sum_attn, H), n2 = act(a.ffn_side, H);
        ops_.residual_layernorm_forward(tmp, x, p, dropout_seed(l, kAttentionOut), master(lp.ln_ffn_w),
                                        master(lp.ln_ffn_b), eps, mid, n2, a.mean2.as<float>(), a.rstd2.as<float>());
        ffn_block_forward(l, n2, tmp);
        const NextNorm next = next_norm(l);
        ops_.residual_layernorm_forward(tmp, mid, p, dropout_seed(l, kFfnOut), master(next.gamma), master(next.beta),
                                        eps, act(resid_[l + 1], H), act(*next.out, H), next.mean, next.rstd);
    }
    decoder_forward(act(head_norm_, H));  // tied, no bias
}

Transformer::NextNorm Transformer::next_norm(int l) {
    if (l + 1 == shape_.layers)
        return {final_ln_w_, final_ln_b_, &head_norm_, head_mean_.as<float>(), head_rstd_.as<float>()};
    const LayerParams& lp = layer_params_[static_cast<size_t>(l + 1)];
    LayerActs& a = acts_[static_cast<size_t>(l + 1)];
    return {lp.ln_attn_w, lp.ln_attn_b, &a.norm_attn, a.mean1.as<float>(), a.rstd1.as<float>()};
}

void Transformer::backward_gpt(const int32_t* ids, const int32_t* labels, GradientSink* sink) {
    const int64_t H = shape_.hidden;
    const float p = shape_.dropout;
    const int L = shape_.layers;
    const Tensor dres = act(dres_, H);

    // dtmp: the gradient of the next LayerNorm's output (ln_f's from the decoder, then ln_1's
    // of the layer above); dres: the residual stream's gradient (none above the top layer).
    const Tensor dtmp = act(dtmp_, H), none{};
    decoder_backward(act(head_norm_, H), labels, dtmp, sink);
    for (int l = L - 1; l >= 0; --l) {
        const LayerParams& lp = layer_params_[static_cast<size_t>(l)];
        LayerActs& a = acts_[static_cast<size_t>(l)];
        const NextNorm next = next_norm(l);
        // x_{l+1} = mid + drop(FFN(ln_2(mid))): dres = d x_{l+1}, dtmp = d FFN out.
        ops_.residual_layernorm_backward(act(resid_[l + 1], H), dtmp, none, l == L - 1 ? none : dres,
                                         master(next.gamma), next.mean, next.rstd, p, dropout_seed(l, kFfnOut), dres,
                                         dtmp, grad(next.gamma), grad(next.beta));
        report(sink, next.gamma, 2);
        ffn_block_backward(l, act(a.ffn_side, H), dtmp, sink);
        // mid = x + drop(Attn(ln_1(x))): dres = d mid, dtmp = d attention out.
        ops_.residual_layernorm_backward(act(a.sum_attn, H), dtmp, none, dres, master(lp.ln_ffn_w),
                                         a.mean2.as<float>(), a.rstd2.as<float>(), p, dropout_seed(l, kAttentionOut),
                                         dres, dtmp, grad(lp.ln_ffn_w), grad(lp.ln_ffn_b));
        report(sink, lp.ln_ffn_w, 2);
        attention_block_backward(l, act(a.norm_attn, H), dtmp, sink);
    }
    const LayerParams& lp0 = layer_params_[0];
    ops_.layernorm_backward(act(resid_[0], H), dtmp, master(lp0.ln_attn_w), acts_[0].mean1.as<float>(),
                            acts_[0].rstd1.as<float>(), dtmp, grad(lp0.ln_attn_w), grad(lp0.ln_attn_b));
    report(sink, lp0.ln_attn_w, 2);
    ops_.add(dtmp, dres, dres);

    ops_.dropout(dres, dres, p, dropout_seed(L, kEmbedding));
    position_backward(dres, sink);
    ops_.embedding_backward(ids, dres, grad(word_), shape_.vocab);
    report(sink, word_);
}

// Every sequence takes positions 0..seq_len-1, so the position table's gradient is a sum over
// the batch: the column sums of dres seen as batch x (seq_len * hidden), fixed-order sums in
// place of embedding_backward's scattered adds; the rows past seq_len stay zero.
void Transformer::position_backward(const Tensor& dres, GradientSink* sink) {
    ops_.fill(grad_matrix(position_, shape_.max_positions), 0.0f);
    ops_.bias_grad(Tensor{dres.data, dres.dtype, batch_, shape_.seq_len * shape_.hidden}, grad(position_));
    report(sink, position_);
}

// ---- The vocabulary projection, tied to the word embedding.

void Transformer::decoder_forward(const Tensor& hn) {
    const int64_t H = shape_.hidden, V = shape_.vocab, Vp = shape_.padded_vocab();
    const bool bert = shape_.arch == TransformerArch::bert;
    const Tensor logits = act(logits_, Vp);
    if (Vp == V) {
        ops_.gemm(false, true, 1.0f, hn, weight(word_), 0.0f, logits, bert ? master(decoder_bias_) : nullptr);
        return;
    }
    // This step's weights into the first V rows of the padded copies (their padding stays).
    ops_.cast(weight(word_), decoder_w_.tensor(dtype_, V, H));
    if (bert)
        ops_.cast(Tensor{const_cast<float*>(master(decoder_bias_)), DType::f32, 1, V},
                  decoder_b_.tensor(DType::f32, 1, V));
    ops_.gemm(false, true, 1.0f, hn, decoder_w_.tensor(dtype_, Vp, H), 0.0f, logits, decoder_b_.as<float>());
}

void Transformer::decoder_backward(const Tensor& hn, const int32_t* labels, const Tensor& dx, GradientSink* sink) {
    const int64_t H = shape_.hidden, V = shape_.vocab, Vp = shape_.padded_vocab();
    const bool padded = Vp > V;
    const Tensor dlogits = act(logits_, Vp);  // zero in the padded columns
    // A padded gradient's first V rows are the word embedding's (rows are contiguous), and
    // the first V entries of a padded bias gradient the decoder bias's.
    const bool bert = shape_.arch == TransformerArch::bert;
    const Tensor dw = padded ? decoder_dw_.tensor(DType::f32, Vp, H) : grad_matrix(word_, V);
    float* db = !bert ? nullptr : padded ? decoder_db_.as<float>() : grad(decoder_bias_);
    // The bias gradient is a pass of its own here: with it in the epilogue (BGRADB), cuBLASLt's
    // vocabulary-wide weight-gradient GEMM runs slower than the two apart (op profiles on an H200).
    // It reads the labelled rows only: the loss wrote the others zero.
    if (bert) ops_.labelled_bias_grad(dlogits, labels, labelled_rows(), db);
    ops_.gemm(true, false, 1.0f, dlogits, hn, 0.0f, dw);
    if (padded) {
        if (bert) ops_.cast(decoder_db_.tensor(DType::f32, 1, V), grad_matrix(decoder_bias_, 1));
        ops_.cast(decoder_dw_.tensor(DType::f32, V, H), grad_matrix(word_, V));
    }
    if (bert) report(sink, decoder_bias_);
    ops_.gemm(false, false, 1.0f, dlogits, padded ? decoder_w_.tensor(dtype_, Vp, H) : weight(word_), 0.0f, dx);
}

// ---- The sub-layers both architectures share.

Activation Transformer::ffn_activation() const {
    return shape_.arch == TransformerArch::bert ? Activation::gelu_erf : Activation::gelu;
}

void Transformer::attention_block_forward(int l, const Tensor& in, const Tensor& out) {
    const LayerParams& lp = layer_params_[static_cast<size_t>(l)];
    LayerActs& a = acts_[static_cast<size_t>(l)];
    const int64_t H = shape_.hidden;
    const Tensor qkv = act(a.qkv, 3 * H), attn = act(a.attn, H);
    const Tensor w = qkv_weight(lp);  // its stand-in copies before the GEMM that reads them
    ops_.gemm(false, true, 1.0f, in, w, 0.0f, qkv, qkv_bias(lp));
    ops_.attention_forward(attention_shape(), qkv, attn, a.saved.get(), dropout_seed(l, kAttentionProbs));
    ops_.gemm(false, true, 1.0f, attn, weight(lp.proj_w), 0.0f, out, master(lp.proj_b));
}

void Transformer::ffn_block_forward(int l, const Tensor& in, const Tensor& out) {
    const LayerParams& lp = layer_params_[static_cast<size_t>(l)];
    LayerActs& a = acts_[static_cast<size_t>(l)];
    const int64_t F = shape_.ffn;
    const Tensor pre = act(a.ffn_pre, F), post = act(a.ffn_act, F);
    ops_.linear_activation_forward(in, weight(lp.fc_w), master(lp.fc_b), ffn_activation(), pre, post);
    ops_.gemm(false, true, 1.0f, post, weight(lp.out_w), 0.0f, out, master(lp.out_b));
}

Tensor Transformer::attention_block_backward(int l, const Tensor& in, const Tensor& dout, GradientSink* sink) {
    const LayerParams& lp = layer_params_[static_cast<size_t>(l)];
    LayerActs& a = acts_[static_cast<size_t>(l)];
    const int64_t H = shape_.hidden;
    const Tensor dtmp = act(dtmp_, H), dattn = act(dattn_, H), dqkv = act(dqkv_, 3 * H);
    ops_.linear_weight_grad(dout, act(a.attn, H), grad_matrix(lp.proj_w, H), grad(lp.proj_b));
    report(sink, lp.proj_w, 2);
    ops_.gemm(false, false, 1.0f, dout, weight(lp.proj_w), 0.0f, dattn);
    ops_.attention_backward(attention_shape(), act(a.qkv, 3 * H), act(a.attn, H), a.saved.get(), dattn, dqkv,
                            dropout_seed(l, kAttentionProbs));
    if (qkv_grad_.get()) {  // BERT's q, k and v landing apart: one GEMM into the stand-in, then each its part
        float* dw = qkv_grad_.as<float>();
        float* db = dw + 3 * H * H;
        ops_.linear_weight_grad(dqkv, in, Tensor{dw, DType::f32, 3 * H, H}, db);
        for (int part = 0; part < lp.qkv_parts; ++part) {
            ops_.cast(Tensor{dw + part * H * H, DType::f32, H, H}, grad_matrix(lp.qkv_w + part, H));
            ops_.cast(Tensor{db + part * H, DType::f32, 1, H}, grad_matrix(lp.qkv_b + part, 1));
        }
    } else {
        ops_.linear_weight_grad(dqkv, in, grad_matrix(lp.qkv_w, 3 * H), grad(lp.qkv_b));
    }
    report(sink, lp.qkv_w, 2 * lp.qkv_parts);  // q, k, v weights then biases: consecutive indices
    ops_.gemm(false, false, 1.0f, dqkv, qkv_weight(lp), 0.0f, dtmp);
    return dtmp;
}

Tensor Transformer::ffn_block_backward(int l, const Tensor& in, const Tensor& dout, GradientSink* sink) {
    const LayerParams& lp = layer_params_[static_cast<size_t>(l)];
    LayerActs& a = acts_[static_cast<size_t>(l)];
    const int64_t H = shape_.hidden, F = shape_.ffn;
    const Tensor dtmp = act(dtmp_, H), dffn = act(dffn_, F);
    ops_.linear_weight_grad(dout, act(a.ffn_act, F), grad_matrix(lp.out_w, H), grad(lp.out_b));
    report(sink, lp.out_w, 2);
    ops_.linear_activation_backward(dout, weight(lp.out_w), ffn_activation(), act(a.ffn_pre, F), dffn);
    ops_.linear_weight_grad(dffn, in, grad_matrix(lp.fc_w, F), grad(lp.fc_b));
    report(sink, lp.fc_w, 2);
    ops_.gemm(false, false, 1.0f, dffn, weight(lp.fc_w), 0.0f, dtmp);
    return dtmp;
}

// GEMM FLOPs actually issued per sample (2 per multiply-add), S tokens: per layer the
// QKV, output and two FFN projections, and attention's two batched products (Q K^T and
// P V, each 2 S^2 H, counted over the full S x S even when causal, as a batched GEMM
// computes it); the head (BERT's dense transform) and the vocabulary projection over
// every position. The backward issues two GEMMs per forward GEMM (dX and dW; for
// attention dQ, dK from dS and dP, dV from dO): 3x the forward in total.
double Transformer::flops_per_sample() const {
    const double S = shape_.seq_len, H = shape_.hidden, F = shape_.ffn, V = shape_.vocab;
    const double per_layer = 2.0 * S * H * (3.0 * H) + 2.0 * S * H * H + 2.0 * 2.0 * S * H * F + 2.0 * 2.0 * S * S * H;
    double forward = shape_.layers * per_layer + 2.0 * S * H * V;
    if (shape_.arch == TransformerArch::bert) forward += 2.0 * S * H * H;
    return 3.0 * forward;
}

}  // namespace sb
