// Time of each CUDA transformer op at BERT-base's training shapes (batch 256 x seq 128,
// hidden 768, 12 heads, FFN 3072, vocab 30522, bf16), beside the fewest bytes it must
// move: the kernel-level breakdown behind the speed comparison with PyTorch. Disabled by
// default (it measures, it does not check); run it with
//   build-gpu/tests/scalebench_gpu_tests --gtest_also_run_disabled_tests \
//       --gtest_filter='*TransformerOpsSpeed*'
// Random inputs (never zeros), one warm-up call, then the mean over kIters calls between
// two events on the compute stream.
#include <gtest/gtest.h>

#include <cstdio>
#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "models/cuda/cuda_ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace sb {
namespace {

constexpr int kIters = 20;

class TransformerOpsSpeed : public gpu_test::CudaOpsFixture {};

// A rows x cols device tensor of random values: a 1M-element random pattern (never zero)
// uploaded over and over, so multi-GB tensors cost no host-side generation.
struct RandomTensor {
    DeviceBuffer buf;
    Tensor tensor;
    float* f32() const { return static_cast<float*>(tensor.data); }
};
std::unique_ptr<RandomTensor> random_tensor(CudaOps& gpu, std::mt19937_64& rng, int64_t rows, int64_t cols,
                                            DType dtype) {
    auto t = std::make_unique<RandomTensor>();
    const size_t n = static_cast<size_t>(rows * cols), es = dtype_size(dtype);
    t->buf = DeviceBuffer(gpu, n * es);
    t->tensor = t->buf.tensor(dtype, rows, cols);
    const std::vector<uint8_t> pattern =
        gpu_test::encode(gpu_test::random_values(rng, std::min<size_t>(n, size_t{1} << 20)), dtype);
    for (size_t done = 0; done < n * es; done += pattern.size())
        gpu.upload(static_cast<char*>(t->buf.get()) + done, pattern.data(), std::min(pattern.size(), n * es - done));
    return t;
}

// Mean ms of one call of f over kIters calls, after one warm-up.
double time_ms(CudaOps& gpu, const std::function<void()>& f) {
    f();
    gpu.synchronize();
    gpu.record_marker(0);
    for (int i = 0; i < kIters; ++i) f();
    gpu.record_marker(1);
    return gpu.elapsed_ms(0, 1) / kIters;
}

void report(const char* op, double ms, double bytes, double flops = 0.0) {
    std::printf("[  speed   ] %-34s %9.3f ms  %7.0f GB/s of %8.1f MB", op, ms, bytes / (ms * 1e6), bytes / 1e6);
    if (flops > 0) std::printf("  %6.0f TFLOP/s", flops / (ms * 1e9));
    std::printf("\n");
}

TEST_F(TransformerOpsSpeed, DISABLED_BertBaseBatch256Bf16) {
    const int batch = 256, seq = 128, hidden = 768, heads = 12, ffn = 3072, vocab = 30522;
    const int64_t tokens = int64_t{batch} * seq;
    const DType dt = DType::bf16;
    const double es = 2.0;
    CudaOps gpu(Precision::bf16, 0);
    std::mt19937_64& rng = rng_;
    auto filled = [&](int64_t rows, int64_t cols, DType dtype = DType::bf16) {
        return random_tensor(gpu, rng, rows, cols, dtype);
    };
    auto x = filled(tokens, hidden), y = filled(tokens, hidden), out = filled(tokens, hidden);
    auto gamma = filled(1, hidden, DType::f32), beta = filled(1, hidden, DType::f32);
    auto mean = filled(1, tokens, DType::f32), rstd = filled(1, tokens, DType::f32);
    auto dgamma = filled(1, hidden, DType::f32), dbeta = filled(1, hidden, DType::f32);
    const double act = static_cast<double>(tokens) * hidden * es;  // one activation tensor

    report("add", time_ms(gpu, [&] { gpu.add(x->tensor, y->tensor, out->tensor); }), 3 * act);
    report("dropout p=0.1", time_ms(gpu, [&] { gpu.dropout(x->tensor, out->tensor, 0.1f, 7); }), 2 * act);
    report("layernorm_forward",
           time_ms(gpu, [&] {
               gpu.layernorm_forward(x->tensor, gamma->f32(), beta->f32(), 1e-12f, out->tensor, mean->f32(),
                                     rstd->f32());
           }),
           2 * act);
    report("layernorm_backward (in place)",
           time_ms(gpu, [&] {
               gpu.layernorm_backward(x->tensor, y->tensor, gamma->f32(), mean->f32(), rstd->f32(), y->tensor,
                                      dgamma->f32(), dbeta->f32());
           }),
           3 * act);

    {
        auto pre = filled(tokens, ffn), post = filled(tokens, ffn);
        const double big = static_cast<double>(tokens) * ffn * es;
        report("gelu_erf forward", time_ms(gpu, [&] {
                   gpu.activation_forward(Activation::gelu_erf, pre->tensor, post->tensor);
               }),
               2 * big);
        report("gelu_erf backward", time_ms(gpu, [&] {
                   gpu.activation_backward(Activation::gelu_erf, pre->tensor, post->tensor, post->tensor);
               }),
               3 * big);
    }

    {
        auto table = filled(vocab, hidden);
        auto table_grad = filled(vocab, hidden, DType::f32);
        std::vector<int32_t> ids(static_cast<size_t>(tokens)), pos(static_cast<size_t>(tokens));
        std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
        for (size_t i = 0; i < ids.size(); ++i) {
            ids[i] = pick(rng);
            pos[i] = static_cast<int32_t>(i % seq);
        }
        DeviceBuffer gids(gpu, ids.size() * 4), gpos(gpu, pos.size() * 4);
        gpu.upload(gids.get(), ids.data(), gids.bytes());
        gpu.upload(gpos.get(), pos.data(), gpos.bytes());
        report("embedding_forward (word)",
               time_ms(gpu, [&] { gpu.embedding_forward(gids.as<int32_t>(), table->tensor, out->tensor, false); }),
               2 * act);
        report("embedding_backward (word ids)", time_ms(gpu, [&] {
                   gpu.embedding_backward(gids.as<int32_t>(), x->tensor, table_grad->f32(), vocab);
               }),
               act + static_cast<double>(tokens) * hidden * 8);
        report("embedding_backward (positions)", time_ms(gpu, [&] {
                   gpu.embedding_backward(gpos.as<int32_t>(), x->tensor, table_grad->f32(), seq);
               }),
               act + static_cast<double>(seq) * hidden * 8);
    }

    {
        Ops::AttentionShape shape;
        shape.batch = batch;
        shape.seq = seq;
        shape.heads = heads;
        shape.head_dim = hidden / heads;
        for (float p : {0.0f, 0.1f}) {
            shape.dropout_p = p;
            auto qkv = filled(tokens, 3 * hidden), gqkv = filled(tokens, 3 * hidden);
            DeviceBuffer saved(gpu, gpu.attention_saved_bytes(shape));
            // 4 GEMMs' FLOPs forward (2) / backward (4) of batch*heads seq x seq x head_dim products.
            const double gemm = 2.0 * batch * heads * seq * seq * (hidden / heads);
            const double probs = static_cast<double>(batch) * heads * seq * seq * es;
            const std::string tag = p > 0 ? " dropout 0.1" : " no dropout";
            report(("attention_forward" + tag).c_str(),
                   time_ms(gpu, [&] { gpu.attention_forward(shape, qkv->tensor, out->tensor, saved.get(), 3); }),
                   4 * act + (p > 0 ? 2 : 1) * probs, 2 * gemm);
            report(("attention_backward" + tag).c_str(), time_ms(gpu, [&] {
                       gpu.attention_backward(shape, qkv->tensor, out->tensor, saved.get(), y->tensor,
                                              gqkv->tensor, 3);
                   }),
                   4 * act + (p > 0 ? 2 : 1) * probs, 4 * gemm);
        }
    }

    {
        // Masked-LM: 15% of the rows labelled; the full logits matrix as Hugging Face computes it.
        auto logits = filled(tokens, vocab), grad = filled(tokens, vocab);
        auto loss = filled(1, 1, DType::f32);
        std::vector<int32_t> labels(static_cast<size_t>(tokens));
        std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
        std::bernoulli_distribution labelled(0.15);
        for (int32_t& l : labels) l = labelled(rng) ? pick(rng) : -100;
        const int64_t labelled_rows = std::count_if(labels.begin(), labels.end(), [](int32_t l) { return l >= 0; });
        DeviceBuffer glabels(gpu, labels.size() * 4);
        gpu.upload(glabels.get(), labels.data(), glabels.bytes());
        // The bytes each op must move: the labelled rows read, every label read.
        const double labelled_logits = static_cast<double>(labelled_rows) * vocab * es;
        const double lg = static_cast<double>(tokens) * vocab * es, label_bytes = 4.0 * tokens;
        report("softmax_cross_entropy (15% labelled)", time_ms(gpu, [&] {
                   gpu.softmax_cross_entropy(logits->tensor, glabels.as<int32_t>(), labelled_rows, loss->f32(),
                                             grad->tensor, 1.0f);
               }),
               label_bytes + labelled_logits + lg);
        auto db = filled(1, vocab, DType::f32);
        report("bias_grad (every row)", time_ms(gpu, [&] { gpu.bias_grad(grad->tensor, db->f32()); }),
               lg + 4.0 * vocab);
        report("labelled_bias_grad (15% labelled)", time_ms(gpu, [&] {
                   gpu.labelled_bias_grad(grad->tensor, glabels.as<int32_t>(), labelled_rows, db->f32());
               }),
               label_bytes + labelled_logits + 4.0 * vocab);
    }
}

}  // namespace
}  // namespace sb
