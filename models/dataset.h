// A rank's synthetic training data (DESIGN: Step): backend tensors of the batch a step
// uses. Every sample is a pure function of (seed, batch slot, row in the global batch),
// so any split of a global batch over ranks sees the samples one rank would.
#pragma once

#include <cstdint>

#include "models/ops.h"

namespace sb {

class Dataset {
public:
    virtual ~Dataset() = default;
    // The model's input of step `step`'s batch (its rows are this rank's samples).
    virtual Tensor inputs(int64_t step) const = 0;
    // int32 targets on the backend, as the model's loss reads them.
    virtual const int32_t* labels(int64_t step) const = 0;
};

}  // namespace sb
