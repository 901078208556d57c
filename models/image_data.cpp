#include "models/image_data.h"

#include <string>
#include <vector>

#include "models/rng.h"
#include "base/errors.h"

namespace sb {
namespace {

constexpr int kPatternCells = 4;  // a class pattern is 4x4 cells of 3 channels
constexpr uint64_t kPatternStream = 0x1A6E, kSampleStream = 0x1A6F;

void check_task(const ImageTask& task) {
    if (task.image_size < kPatternCells || task.num_classes < 2)
        throw UserError("image dataset: need image_size >= " + std::to_string(kPatternCells) +
                        " and num_classes >= 2; got " + std::to_string(task.image_size) + " and " +
                        std::to_string(task.num_classes));
}

// Class c's pattern value of cell (cy, cx), channel ch: N(0, 1) keyed by (seed, c), so no
// table of every class is built.
void pattern(const ImageTask& task, int32_t label, float* cells) {
    PortableRng rng(mix_seed(task.seed, kPatternStream, static_cast<uint64_t>(label)));
    for (int i = 0; i < kPatternCells * kPatternCells * 3; ++i) cells[i] = static_cast<float>(rng.normal());
}

}  // namespace

void make_image_shard(const ImageTask& task, int64_t batch_slot, int64_t first_sample, int rows, float* host_images,
                      int32_t* host_labels) {
    check_task(task);
    SB_REQUIRE(rows >= 0 && first_sample >= 0 && batch_slot >= 0, "make_image_shard: negative slot, sample or rows");
    const int s = task.image_size;
    const size_t elems = static_cast<size_t>(s) * s * 3;
    float cells[kPatternCells * kPatternCells * 3];
    for (int r = 0; r < rows; ++r) {
        PortableRng rng(mix_seed(task.seed, kSampleStream,
                                 static_cast<uint64_t>(batch_slot) << 32 ^ static_cast<uint64_t>(first_sample + r)));
        const auto label = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(task.num_classes));
        host_labels[r] = label;
        pattern(task, label, cells);
        float* image = host_images + static_cast<size_t>(r) * elems;
        for (int y = 0; y < s; ++y)
            for (int x = 0; x < s; ++x) {
                const float* cell = cells + ((y * kPatternCells / s) * kPatternCells + x * kPatternCells / s) * 3;
                for (int ch = 0; ch < 3; ++ch)
                    image[(static_cast<size_t>(y) * s + x) * 3 + ch] =
                        cell[ch] + static_cast<float>(rng.uniform(-1.0, 1.0));
            }
    }
}

ImageDataset::ImageDataset(Ops& ops, const ImageTask& task, int dataset_batches, int global_batch,
                           int rank_offset_rows, int local_rows)
    : Dataset("image dataset", dataset_batches, global_batch, rank_offset_rows, local_rows),
      task_(task),
      dtype_(compute_dtype(ops.precision())) {
    check_task(task);
    const size_t per_batch = static_cast<size_t>(local_rows) * static_cast<size_t>(image_elems());
    images_ = DeviceBuffer(ops, per_batch * dataset_batches * dtype_size(dtype_));
    std::vector<float> host_images(per_batch);
    std::vector<int32_t> host_labels(static_cast<size_t>(local_rows) * dataset_batches);
    DeviceBuffer staging;  // one batch in fp32 on the backend when the compute dtype is narrower
    if (dtype_ != DType::f32) staging = DeviceBuffer(ops, per_batch * sizeof(float));
    for (int b = 0; b < dataset_batches; ++b) {
        make_image_shard(task, b, rank_offset_rows, local_rows, host_images.data(),
                         host_labels.data() + static_cast<size_t>(b) * local_rows);
        char* dst = static_cast<char*>(images_.get()) + per_batch * b * dtype_size(dtype_);
        if (dtype_ == DType::f32) {
            ops.upload(dst, host_images.data(), per_batch * sizeof(float));
        } else {
            ops.upload(staging.get(), host_images.data(), per_batch * sizeof(float));
            ops.cast(staging.tensor(DType::f32, local_rows, image_elems()),
                     Tensor{dst, dtype_, local_rows, image_elems()});
        }
        ops.synchronize();  // the host batch is refilled next
    }
    labels_ = DeviceBuffer(ops, host_labels.size() * sizeof(int32_t));
    ops.upload(labels_.get(), host_labels.data(), host_labels.size() * sizeof(int32_t));
    ops.synchronize();
}

Tensor ImageDataset::inputs(int64_t step) const {
    const size_t offset = static_cast<size_t>(slot(step)) * local_rows_ * image_elems() * dtype_size(dtype_);
    return Tensor{static_cast<char*>(images_.get()) + offset, dtype_, local_rows_, image_elems()};
}

const int32_t* ImageDataset::labels(int64_t step) const { return labels_.as<int32_t>() + slot(step) * local_rows_; }

}  // namespace sb
