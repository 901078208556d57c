// `train --profile-ops` on CUDA: the profile of a transformer step (bf16, dropout on) has
// exactly the ops of the projection's trace, each with a device time, and holding the stream
// around each op never stalls it (the gate's own timeout is 10 s: a held stream that a host
// wait met would show as a run of many seconds). fp16, whose unscale reads a flag on the
// host and so is timed unheld, completes the same way.
#include <gtest/gtest.h>

#include <chrono>
#include <map>

#include "models/cuda/cuda_ops.h"
#include "src/core/config.h"
#include "src/system/environment.h"
#include "src/projection/op_profile.h"
#include "src/projection/projection.h"
#include "tests/gpu/gpu_test_util.h"

namespace sb {
namespace {

class CudaOpProfile : public ::testing::TestWithParam<Precision> {};

TEST_P(CudaOpProfile, HasTheTracesOpsWithDeviceTimesAndNeverStalls) {
    SKIP_WITHOUT_GPU();
    TrainConfig cfg = load_config_file(std::string(SCALEBENCH_SOURCE_DIR) + "/configs/ci-transformer.yaml");
    cfg.backend = BackendChoice::cuda;
    cfg.precision = GetParam();
    cfg.transformer.shape.dropout = cfg.transformer.shape.attention_dropout = 0.1f;
    cfg.warmup = 1;
    cfg.steps = 3;
    validate_config(cfg);
    CudaOps gpu(cfg.precision, process_info().local_rank);
    const auto start = std::chrono::steady_clock::now();
    const OpProfile profile = profile_training_ops(cfg, gpu);
    gpu.synchronize();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0)
        << "a held stream waited for its gate's timeout";

    // Traced for the limits the profile ran under (the device's, or SCALEBENCH_DEVICE_LIMITS's).
    const StepTrace trace = trace_step(cfg, per_rank_batch(cfg, 1), *gpu.device_limits());
    std::map<std::string, int> traced_calls;
    for (const TracedOp& op : trace.ops) ++traced_calls[op_key(op)];
    // fp16 may skip the optimizer in every measured step (an overflow at the first loss scale).
    if (cfg.precision == Precision::fp16) ASSERT_GE(profile.ops.size() + 1, traced_calls.size());
    else ASSERT_EQ(profile.ops.size(), traced_calls.size());
    EXPECT_GE(profile.measured_steps, 1);
    for (const OpTiming& t : profile.ops) {
        ASSERT_TRUE(traced_calls.count(op_key(t.op))) << op_label(t.op) << " is not an op of the trace";
        EXPECT_EQ(t.calls_per_step, traced_calls[op_key(t.op)]) << op_label(t.op);
        EXPECT_GT(t.ms.min, 0.0) << op_label(t.op);
        EXPECT_LT(t.ms.median, 100.0) << op_label(t.op);
    }
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaOpProfile, ::testing::Values(Precision::bf16, Precision::fp16),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

}  // namespace
}  // namespace sb
