// The synthetic but learnable image task of the ResNet (DESIGN: Step): each class has a
// fixed random 4x4x3 pattern, blown up to the image size, and an image is its class's
// pattern plus uniform noise of the same scale, so the classes can be told apart and the
// loss falls. As teacher_data.h and token_data.h, every sample is a pure function of
// (seed, batch slot, row in the global batch): any split of a global batch over ranks
// sees exactly the samples one rank would. Images are NHWC rows of image_size^2 * 3.
#pragma once

#include <cstdint>

#include "models/dataset.h"
#include "models/ops.h"

namespace sb {

struct ImageTask {
    int image_size = 0;
    int num_classes = 0;
    uint64_t seed = 0;
};

// Fills rows [first_sample, first_sample + rows) of global batch `batch_slot`: host_images
// is rows x (image_size^2 * 3), host_labels rows classes in [0, num_classes).
void make_image_shard(const ImageTask& task, int64_t batch_slot, int64_t first_sample, int rows, float* host_images,
                      int32_t* host_labels);

// A rank's rows of `dataset_batches` global batches, built on the host a batch at a time
// and uploaded in the compute dtype.
class ImageDataset final : public Dataset {
public:
    ImageDataset(Ops& ops, const ImageTask& task, int dataset_batches, int global_batch, int rank_offset_rows,
                 int local_rows);
    Tensor inputs(int64_t step) const override;
    const int32_t* labels(int64_t step) const override;

private:
    int64_t image_elems() const { return static_cast<int64_t>(task_.image_size) * task_.image_size * 3; }

    ImageTask task_;
    DType dtype_;
    DeviceBuffer images_;  // dataset_batches x local_rows x image_elems, compute dtype
    DeviceBuffer labels_;  // dataset_batches x local_rows, int32
};

}  // namespace sb
