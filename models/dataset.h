// A rank's synthetic training data (DESIGN: Step): backend tensors of the batch a step
// uses. Every sample is a pure function of (seed, batch slot, row in the global batch),
// so any split of a global batch over ranks sees the samples one rank would.
#pragma once

#include <cstdint>
#include <string>

#include "models/ops.h"
#include "base/errors.h"

namespace sb {

class Dataset {
public:
    virtual ~Dataset() = default;
    // The model's input of step `step`'s batch (its rows are this rank's samples).
    virtual Tensor inputs(int64_t step) const = 0;
    // int32 targets on the backend, as the model's loss reads them.
    virtual const int32_t* labels(int64_t step) const = 0;

protected:
    // A pool of `dataset_batches` global batches of which this rank holds rows
    // [rank_offset_rows, rank_offset_rows + local_rows); `what` names the dataset in the error
    // when there is no batch or the rows do not lie inside a global batch.
    Dataset(const char* what, int dataset_batches, int global_batch, int rank_offset_rows, int local_rows)
        : dataset_batches_(dataset_batches), local_rows_(local_rows) {
        if (dataset_batches <= 0 || local_rows <= 0 || rank_offset_rows < 0 ||
            static_cast<int64_t>(rank_offset_rows) + local_rows > global_batch)
            throw UserError(std::string(what) + ": need dataset_batches > 0 and rows [" +
                            std::to_string(rank_offset_rows) + ", " +
                            std::to_string(static_cast<int64_t>(rank_offset_rows) + local_rows) +
                            ") inside a global batch of " + std::to_string(global_batch) + "; dataset_batches is " +
                            std::to_string(dataset_batches));
    }
    // The batch of the pool that step `step` uses: steps cycle over it.
    int64_t slot(int64_t step) const {
        const int64_t s = step % dataset_batches_;
        return s < 0 ? s + dataset_batches_ : s;
    }

    int dataset_batches_;
    int local_rows_;
};

}  // namespace sb
