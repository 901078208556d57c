// `scalebench comm` on the CUDA backend: every collective swept through NCCL on device
// buffers with #wrong = 0 in float, half and bfloat16, a planted wrong element caught, and
// the host 16-bit conversions the check relies on matching CUDA's own. One GPU under
// `mpirun -np 1`; the same binary checks 2-8 GPUs with -np N.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "collectives/host_dtype.h"
#include "collectives/nccl_communicator.h"
#include "collectives/sweep.h"
#include "models/cuda/cuda_ops.h"
#include "src/system/environment.h"
#include "tests/gpu/gpu_test_util.h"

namespace sb {
namespace {

// Host code, no GPU needed: the conversions agree with __float2half_rn/__float2bfloat16_rn.
TEST(HostDtypeCuda, ConversionsMatchCudaIntrinsics) {
    for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 997) {
        const float f = bits_float(static_cast<uint32_t>(bits));
        if (std::isnan(f)) continue;
        ASSERT_EQ(float_to_half(f), gpu_test::f16_bits(f)) << std::hex << bits;
        ASSERT_EQ(float_to_bf16(f), gpu_test::bf16_bits(f)) << std::hex << bits;
    }
    for (uint32_t h = 0; h < 0x10000u; ++h) {
        const float f = gpu_test::from_f16_bits(static_cast<uint16_t>(h));
        if (!std::isnan(f)) ASSERT_EQ(half_to_float(static_cast<uint16_t>(h)), f) << std::hex << h;
    }
}

class NcclSweep : public ::testing::Test {
protected:
    void SetUp() override {
        SKIP_WITHOUT_GPU();
        ops = std::make_unique<CudaOps>(Precision::fp32, process_info().local_rank);
        comm = std::make_unique<NcclCommunicator>(MPI_COMM_WORLD, ops->stream(), CollectiveStream::compute);
    }
    SweepOptions options(DType d, ReduceOp op = ReduceOp::sum) const {
        SweepOptions o;
        o.sizes = sweep_sizes(8, 4 << 20, 0, 8);  // 8 B .. 2 MiB
        o.sizes.push_back(1000);                   // counts round down to 16-byte groups per rank
        o.dtype = d;
        o.redop = op;
        o.iters = 5;
        o.root = comm->size() - 1;
        return o;
    }
    std::unique_ptr<CudaOps> ops;
    std::unique_ptr<NcclCommunicator> comm;
};

// On the compute stream (as `scalebench comm` issues them) and on the training's own
// communication stream.
TEST_F(NcclSweep, EveryCollectiveAndDtypeChecksClean) {
    for (CollectiveStream stream : {CollectiveStream::compute, CollectiveStream::own}) {
        comm = std::make_unique<NcclCommunicator>(MPI_COMM_WORLD, ops->stream(), stream);
        for (const Collective* c : all_collectives())
            for (DType d : {DType::f32, DType::f16, DType::bf16})
                for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
                    if (!c->reduces && op != ReduceOp::sum) continue;
                    const SweepResult r = run_sweep(*c, options(d, op), *ops, *comm, MPI_COMM_WORLD);
                    EXPECT_EQ(r.wrong_measurements, 0) << c->name << " " << dtype_name(d) << " " << reduce_op_name(op);
                    for (const SweepRow& row : r.rows) {
                        EXPECT_TRUE(row.out_of_place.checked);
                        EXPECT_GT(row.out_of_place.time_us, 0) << c->name;
                    }
                }
    }
}

TEST_F(NcclSweep, CheckCatchesAPlantedWrongElementInDeviceMemory) {
    SweepOptions o = options(DType::bf16);
    o.sizes = {1 << 16};
    o.tamper = [](Ops& backend, void* recv, size_t bytes) {
        if (bytes < 2) return;
        const uint16_t bad = 0xBF80;  // -1.0: inputs and their reductions are positive
        backend.upload(recv, &bad, sizeof bad);
    };
    const SweepResult r = run_sweep(all_reduce_collective(), o, *ops, *comm, MPI_COMM_WORLD);
    EXPECT_EQ(r.rows[0].out_of_place.wrong, comm->size());  // one per rank
    EXPECT_EQ(r.rows[0].in_place.wrong, comm->size());
    EXPECT_EQ(r.wrong_measurements, 2);
}

}  // namespace
}  // namespace sb
