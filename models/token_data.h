// The synthetic but learnable token task of the transformer (DESIGN: Step): sequences
// from a fixed random first-order Markov chain whose transitions are peaked (each token
// is mostly followed by one of a few successors), so next-token prediction (GPT) and
// masked-token prediction (BERT, from the neighbours) both have far less entropy than
// uniform tokens and the loss falls within tens of steps. Every sample is a pure
// function of (seed, batch slot, row in the global batch), as in teacher_data.h, so any
// split of a global batch over ranks sees exactly the samples one rank would.
#pragma once

#include <cstdint>
#include <vector>

#include "models/dataset.h"
#include "models/ops.h"

namespace sb {

struct TokenTask {
    enum class Objective { masked_lm, next_token } objective = Objective::masked_lm;
    int vocab = 0;    // masked_lm reserves id vocab-1 as [MASK]; the chain uses the others
    int seq_len = 0;
    float mask_prob = 0.15f;  // masked_lm: round(mask_prob * seq_len) positions per sequence (at least 1)
    uint64_t seed = 0;
};

// Positions masked per sequence (the same in every sequence, so every rank's loss
// averages over the same number of labelled tokens and the all-reduced mean is exact).
int masked_positions(const TokenTask& task);
// Positions per sequence that carry a label (>= 0): every one for next_token,
// masked_positions() for masked_lm.
int labelled_positions(const TokenTask& task);
// The id that stands for [MASK] (masked_lm).
inline int32_t mask_token(const TokenTask& task) { return task.vocab - 1; }
// The chain's successor of `token` when the transition takes its most likely branch.
int32_t likely_successor(const TokenTask& task, int32_t token);

// Fills rows [first_sample, first_sample + rows) of global batch `batch_slot`: ids and
// labels are rows x seq_len; labels are the original token at masked positions (masked_lm)
// or the next token (next_token), -1 where nothing is predicted.
void make_token_shard(const TokenTask& task, int64_t batch_slot, int64_t first_sample, int rows, int32_t* ids,
                      int32_t* labels);

// A rank's rows of `dataset_batches` global batches, built on the host once and uploaded.
class TokenDataset final : public Dataset {
public:
    TokenDataset(Ops& ops, const TokenTask& task, int dataset_batches, int global_batch, int rank_offset_rows,
                 int local_rows);
    // int32 ids, local_rows x seq_len.
    Tensor inputs(int64_t step) const override;
    // int32, local_rows * seq_len.
    const int32_t* labels(int64_t step) const override;

private:

    TokenTask task_;
    DeviceBuffer ids_;     // dataset_batches x local_rows x seq_len
    DeviceBuffer labels_;  // same shape
};

}  // namespace sb
