// The device limits in the CUDA context and the variants they pick (models/device_limits.h):
// the limits read from the GPU, SCALEBENCH_DEVICE_LIMITS replacing them, and the attention
// backward of short sequences under each claimed architecture's limits (one block per
// (batch, head) where its shared memory fits, the tiled kernels where not) against the CPU
// reference, with the variant each ran recorded.
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "models/cpu/cpu_ops.h"
#include "models/cuda/cuda_ops.h"
#include "models/device_limits.h"
#include "base/errors.h"
#include "tests/gpu/gpu_test_util.h"

namespace sb {
namespace {

using gpu_test::close;
using gpu_test::GpuArray;
using gpu_test::host_view;
using gpu_test::rounded;

// Sets an environment variable for one scope, restoring what was there.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old, had_ = true;
        if (value)
            setenv(name, value, 1);
        else
            unsetenv(name);
    }
    ~ScopedEnv() {
        if (had_)
            setenv(name_, old_.c_str(), 1);
        else
            unsetenv(name_);
    }

private:
    const char* name_;
    std::string old_;
    bool had_ = false;
};

TEST(DeviceLimitsGpu, ReadFromTheDeviceAndReplacedByTheVariable) {
    SKIP_WITHOUT_GPU();
    {
        ScopedEnv none(kDeviceLimitsVariable, nullptr);
        CudaOps gpu(Precision::bf16, 0);
        const DeviceLimits& own = gpu.hardware_limits();
        EXPECT_EQ(own.source, "device");
        EXPECT_EQ(gpu.device_limits()->arch, own.arch);
        // What every GPU since sm_80 grants: at least the smallest claimed architecture's.
        EXPECT_GE(own.smem_per_block_optin, architecture_limits("sm_89")->smem_per_block_optin);
        EXPECT_GT(own.smem_per_sm, own.smem_per_block_optin);
        EXPECT_GT(own.sm_count, 0);
        EXPECT_GT(own.l2_bytes, 0);
        EXPECT_EQ(own.regs_per_sm, 65536);
        // The table's row of this GPU's own architecture says what the device says.
        if (const auto row = architecture_limits(own.arch)) {
            EXPECT_EQ(row->smem_per_block_optin, own.smem_per_block_optin);
            EXPECT_EQ(row->smem_per_sm, own.smem_per_sm);
            EXPECT_EQ(row->max_threads_per_sm, own.max_threads_per_sm);
            EXPECT_EQ(row->max_blocks_per_sm, own.max_blocks_per_sm);
            EXPECT_EQ(row->smem_reserved_per_block, own.smem_reserved_per_block);
        }
    }
    {
        ScopedEnv emulate(kDeviceLimitsVariable, "sm_89");
        CudaOps gpu(Precision::bf16, 0);
        EXPECT_EQ(gpu.device_limits()->arch, "sm_89");
        EXPECT_EQ(gpu.device_limits()->smem_per_block_optin, 99 * 1024);
        EXPECT_EQ(gpu.device_limits()->sm_count, gpu.hardware_limits().sm_count);  // the product's, kept
        EXPECT_EQ(gpu.hardware_limits().source, "device");
    }
    {
        ScopedEnv bad(kDeviceLimitsVariable, "sm_75");
        try {
            CudaOps gpu(Precision::bf16, 0);
            ADD_FAILURE() << "an unknown architecture was accepted";
        } catch (const UserError& e) {
            EXPECT_NE(std::string(e.what()).find("SCALEBENCH_DEVICE_LIMITS=sm_75"), std::string::npos) << e.what();
        }
    }
}

struct LimitsCase {
    int batch, seq, heads, head_dim;
    bool causal;
    float dropout_p;
};

// Under each claimed architecture's limits, the backward of short sequences takes the variant
// backward_variant() names, records it, and matches the CPU; the variants agree with each other.
TEST(DeviceLimitsGpu, AttentionBackwardUnderEveryClaimedArchitecture) {
    SKIP_WITHOUT_GPU();
    const uint64_t test_seed = gpu_test::test_seed();
    std::mt19937_64 rng(test_seed);
    CpuOps cpu;
    const LimitsCase cases[] = {{2, 128, 4, 64, false, 0.1f}, {2, 128, 2, 128, true, 0.0f},
                                {1, 100, 2, 64, true, 0.1f},  {1, 77, 2, 128, false, 0.1f},
                                {1, 200, 2, 64, false, 0.0f}};
    for (Precision precision : {Precision::bf16, Precision::fp16}) {
        const DType dtype = compute_dtype(precision);
        CudaOps gpu(precision, 0);
        for (const LimitsCase& c : cases) {
            Ops::AttentionShape shape;
            shape.batch = c.batch;
            shape.seq = c.seq;
            shape.heads = c.heads;
            shape.head_dim = c.head_dim;
            shape.causal = c.causal;
            shape.dropout_p = c.dropout_p;
            const uint64_t seed = rng();
            const int64_t rows = int64_t{c.batch} * c.seq, width = int64_t{c.heads} * c.head_dim;
            std::vector<float> qkv = rounded(gpu_test::random_values(rng, static_cast<size_t>(rows * 3 * width)), dtype);
            std::vector<float> grad_out = rounded(gpu_test::random_values(rng, static_cast<size_t>(rows * width)), dtype);
            std::vector<float> out(static_cast<size_t>(rows * width)), grad_qkv(qkv.size());
            std::vector<uint8_t> cpu_saved(cpu.attention_saved_bytes(shape));
            cpu.attention_forward(shape, host_view(qkv, rows, 3 * width), host_view(out, rows, width),
                                  cpu_saved.data(), seed);
            cpu.attention_backward(shape, host_view(qkv, rows, 3 * width), host_view(out, rows, width),
                                   cpu_saved.data(), host_view(grad_out, rows, width),
                                   host_view(grad_qkv, rows, 3 * width), seed);
            std::vector<std::vector<float>> by_arch;
            for (const DeviceLimits& arch : claimed_architectures()) {
                SCOPED_TRACE(testing::Message() << precision_name(precision) << " " << arch.arch << " B=" << c.batch
                                                << " S=" << c.seq << " H=" << c.heads << " D=" << c.head_dim
                                                << " causal=" << c.causal << " dropout=" << c.dropout_p
                                                << " seed=" << test_seed);
                DeviceLimits limits = arch;
                limits.sm_count = gpu.hardware_limits().sm_count;
                gpu.set_device_limits(limits);
                GpuArray gqkv(gpu, dtype, rows, 3 * width), gout(gpu, dtype, rows, width);
                GpuArray ggrad_out(gpu, dtype, rows, width), ggrad_qkv(gpu, dtype, rows, 3 * width);
                DeviceBuffer saved(gpu, gpu.attention_saved_bytes(shape));
                gqkv.set(qkv);
                ggrad_out.set(grad_out);
                gpu.attention_forward(shape, gqkv.tensor, gout.tensor, saved.get(), seed);
                gpu.attention_backward(shape, gqkv.tensor, gout.tensor, saved.get(), ggrad_out.tensor,
                                       ggrad_qkv.tensor, seed);
                EXPECT_TRUE(close(gout.get(), out, 1e-2)) << "out";
                EXPECT_TRUE(close(ggrad_qkv.get(), grad_qkv, 1e-2)) << "grad_qkv";
                EXPECT_TRUE(ggrad_qkv.guards_intact());
                const std::string key = std::string("attention_backward ") + (dtype == DType::bf16 ? "bf16" : "fp16") +
                                        " head_dim " + std::to_string(c.head_dim) +
                                        (c.seq <= 128 ? " seq <= 128" : " seq > 128");
                const auto variants = gpu.kernel_variants();
                ASSERT_EQ(variants.count(key), 1u) << key;
                EXPECT_EQ(variants.at(key), attention_plan::backward_variant(limits, dtype, shape));
                by_arch.push_back(ggrad_qkv.get());
            }
            // sm_86/sm_89 always run the tiled kernels; sm_90 the one-block kernel at seq <= 128:
            // two implementations of one gradient, each within the CPU tolerance of the other.
            for (size_t i = 1; i < by_arch.size(); ++i) EXPECT_TRUE(close(by_arch[i], by_arch[0], 2e-2));
        }
    }
}

}  // namespace
}  // namespace sb
