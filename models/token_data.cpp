// The synthetic token task: a hashed Markov chain (no vocab x vocab table, so the full
// BERT/GPT-2 vocabularies cost nothing) and the BERT masking rule, keyed by (seed, slot, row).
#include "models/token_data.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "models/rng.h"
#include "base/errors.h"

namespace sb {
namespace {

// Each token has kBranches successors; the first is taken with probability kPeak, the
// others share the rest. Entropy per step is about 1.2 nats against ln(vocab) uniform.
constexpr int kBranches = 4;
constexpr double kPeak = 0.7;
constexpr uint64_t kChainStream = 0xC4A1ULL;  // keys the transition table, apart from any batch slot

int chain_vocab(const TokenTask& task) {
    return task.objective == TokenTask::Objective::masked_lm ? task.vocab - 1 : task.vocab;
}

int32_t successor(const TokenTask& task, int32_t token, int branch) {
    const uint64_t h = mix_seed(task.seed ^ kChainStream, static_cast<uint64_t>(token), static_cast<uint64_t>(branch));
    return static_cast<int32_t>(h % static_cast<uint64_t>(chain_vocab(task)));
}

void check_task(const TokenTask& task) {
    const int min_vocab = task.objective == TokenTask::Objective::masked_lm ? 3 : 2;
    if (task.vocab < min_vocab || task.seq_len < 2)
        throw UserError("token task needs vocab >= " + std::to_string(min_vocab) + " and seq_len >= 2; got vocab " +
                        std::to_string(task.vocab) + ", seq_len " + std::to_string(task.seq_len));
    if (task.objective == TokenTask::Objective::masked_lm && !(task.mask_prob > 0.0f && task.mask_prob < 1.0f))
        throw UserError("token task: mask_prob must be in (0, 1); got " + std::to_string(task.mask_prob));
}

}  // namespace

int masked_positions(const TokenTask& task) {
    const int n = static_cast<int>(std::lround(static_cast<double>(task.mask_prob) * task.seq_len));
    return std::max(1, std::min(n, task.seq_len));
}

int labelled_positions(const TokenTask& task) {
    return task.objective == TokenTask::Objective::masked_lm ? masked_positions(task) : task.seq_len;
}

int32_t likely_successor(const TokenTask& task, int32_t token) { return successor(task, token, 0); }

void make_token_shard(const TokenTask& task, int64_t batch_slot, int64_t first_sample, int rows, int32_t* ids,
                      int32_t* labels) {
    check_task(task);
    SB_REQUIRE(rows >= 0 && first_sample >= 0 && batch_slot >= 0, "make_token_shard: negative slot, sample or rows");
    const int S = task.seq_len;
    const int V = chain_vocab(task);
    std::vector<int32_t> chain(static_cast<size_t>(S) + 1);
    std::vector<int> order(static_cast<size_t>(S));
    for (int r = 0; r < rows; ++r) {
        PortableRng rng(mix_seed(task.seed, static_cast<uint64_t>(batch_slot), static_cast<uint64_t>(first_sample + r)));
        chain[0] = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(V));
        for (int t = 1; t <= S; ++t) {
            const double u = rng.uniform();
            const int branch = u < kPeak ? 0 : 1 + static_cast<int>((u - kPeak) / (1.0 - kPeak) * (kBranches - 1));
            chain[t] = successor(task, chain[t - 1], std::min(branch, kBranches - 1));
        }
        int32_t* row_ids = ids + static_cast<size_t>(r) * S;
        int32_t* row_labels = labels + static_cast<size_t>(r) * S;
        if (task.objective == TokenTask::Objective::next_token) {
            for (int t = 0; t < S; ++t) {
                row_ids[t] = chain[t];
                row_labels[t] = chain[t + 1];
            }
            continue;
        }
        // Masked LM as BERT: a fixed number of distinct positions (partial Fisher-Yates);
        // each becomes [MASK] 80%, a random token 10%, itself 10%, and is the only kind labelled.
        for (int t = 0; t < S; ++t) {
            row_ids[t] = chain[t];
            row_labels[t] = -1;
        }
        std::iota(order.begin(), order.end(), 0);
        for (int k = 0; k < masked_positions(task); ++k) {
            const int pick = k + static_cast<int>(rng.next_u64() % static_cast<uint64_t>(S - k));
            std::swap(order[k], order[pick]);
            const int t = order[k];
            row_labels[t] = chain[t];
            const double u = rng.uniform();
            if (u < 0.8) row_ids[t] = mask_token(task);
            else if (u < 0.9) row_ids[t] = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(V));
        }
    }
}

TokenDataset::TokenDataset(Ops& ops, const TokenTask& task, int dataset_batches, int global_batch,
                           int rank_offset_rows, int local_rows)
    : Dataset("token dataset", dataset_batches, global_batch, rank_offset_rows, local_rows), task_(task) {
    check_task(task);
    const size_t per_batch = static_cast<size_t>(local_rows) * task.seq_len;
    std::vector<int32_t> host_ids(per_batch * dataset_batches), host_labels(per_batch * dataset_batches);
    for (int b = 0; b < dataset_batches; ++b)
        make_token_shard(task, b, rank_offset_rows, local_rows, host_ids.data() + b * per_batch,
                         host_labels.data() + b * per_batch);
    ids_ = DeviceBuffer(ops, host_ids.size() * sizeof(int32_t));
    labels_ = DeviceBuffer(ops, host_labels.size() * sizeof(int32_t));
    ops.upload(ids_.get(), host_ids.data(), host_ids.size() * sizeof(int32_t));
    ops.upload(labels_.get(), host_labels.data(), host_labels.size() * sizeof(int32_t));
    ops.synchronize();  // the host vectors go away on return
}

Tensor TokenDataset::inputs(int64_t step) const {
    const size_t offset = static_cast<size_t>(slot(step)) * local_rows_ * task_.seq_len;
    return Tensor{ids_.as<int32_t>() + offset, DType::i32, local_rows_, task_.seq_len};
}

const int32_t* TokenDataset::labels(int64_t step) const {
    return labels_.as<int32_t>() + static_cast<size_t>(slot(step)) * local_rows_ * task_.seq_len;
}

}  // namespace sb
