// The doctor's live readings on a real GPU (skip without one): every visible GPU is read
// (name, PCIe link, memory), its host copies come back verified at a rate no higher than
// the link's line rate, the link is read under load, the clocks, GEMM rate and settings
// under the GEMM load.
#include <gtest/gtest.h>

#include "src/doctor/checks.h"
#include "src/doctor/live_cuda.h"
#include "tests/gpu/gpu_test_util.h"

namespace sb::doctor {
namespace {

TEST(DoctorGpu, ReadsEveryGpuAndVerifiesItsCopies) {
    SKIP_WITHOUT_GPU();
    const SystemSnapshot s = read_host("this-host", 0.5);
    ASSERT_EQ(static_cast<int>(s.gpus.size()), visible_gpu_count());
    EXPECT_FALSE(s.versions.cuda_runtime.empty());
    ASSERT_EQ(s.hosts.size(), 1u);
    EXPECT_EQ(s.hosts[0].nccl, s.versions.nccl);
    for (const GpuReading& g : s.gpus) {
        EXPECT_FALSE(g.name.empty());
        EXPECT_GT(g.memory_mib, 0);
        EXPECT_GT(g.sm_clock_load_mhz, 0) << "GPU" << g.index << ": no clock read under the load";
        EXPECT_GT(g.gemm_tflops, 0) << "GPU" << g.index << ": no GEMM rate from the load";
        EXPECT_GT(g.memory_copy_gbps, 0) << "GPU" << g.index << ": no device copy rate";
        if (g.nvml_error.empty()) {
            EXPECT_GE(g.persistence, 0);
            EXPECT_GE(g.mig, 0);
            EXPECT_FALSE(g.compute_mode.empty());
            EXPECT_GE(g.pcie_replays, 0);
        }
        const Band band = host_copy_band(g);
        int copies = 0;
        for (const CopyReading& c : s.copies) {
            if ((c.kind != "h2d" || c.dst != g.index) && (c.kind != "d2h" || c.src != g.index)) continue;
            ++copies;
            EXPECT_TRUE(c.correct) << c.kind << " GPU" << g.index;
            EXPECT_GT(c.gbps, 0);
            if (band.known()) EXPECT_LE(c.gbps, band.ceiling * 1.02) << c.kind << " above the link's line rate";
        }
        EXPECT_EQ(copies, 4);  // h2d and d2h, one at a time and all at once
        if (g.pcie_max.gen > 0) EXPECT_GT(g.pcie_load.gen, 0) << "the link was not read under load";
    }
    for (const CopyReading& c : s.copies)
        if (c.kind == "peer" || c.kind == "staged") EXPECT_TRUE(c.correct) << c.kind << " " << c.src << "->" << c.dst;
}

}  // namespace
}  // namespace sb::doctor
