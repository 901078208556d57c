// Bucketer: assignment in reverse parameter order with DDP's size rule, and a bucket
// starts its all-reduce exactly when its last gradient lands, in bucket order.
#include <gtest/gtest.h>

#include "collectives/bucketer.h"
#include "models/cpu/cpu_ops.h"

namespace sb {
namespace {

std::vector<ParamInfo> layout(const std::vector<int64_t>& counts) {
    std::vector<ParamInfo> params;
    size_t offset = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
        params.push_back({"p" + std::to_string(i), offset, 1, counts[i]});
        offset += static_cast<size_t>(counts[i]);
    }
    return params;
}

// Records every all-reduce it is asked for; requests complete immediately.
class RecordingComm final : public Communicator {
public:
    struct Call { const void* data; size_t count; ReduceOp op; };
    std::vector<Call> calls;
    std::string name() const override { return "recording"; }
    int rank() const override { return 0; }
    int size() const override { return 2; }
    struct Done final : CommRequest {
        int* waits;
        explicit Done(int* w) : waits(w) {}
        bool test() override { return true; }
        void wait() override { ++*waits; }
    };
    int waits = 0;
    std::unique_ptr<CommRequest> all_reduce(const void* send, void*, size_t count, DType, ReduceOp op) override {
        calls.push_back({send, count, op});
        return std::make_unique<Done>(&waits);
    }
    std::unique_ptr<CommRequest> reduce_scatter(const void*, void*, size_t, DType, ReduceOp) override { return nullptr; }
    std::unique_ptr<CommRequest> all_gather(const void*, void*, size_t, DType) override { return nullptr; }
    std::unique_ptr<CommRequest> broadcast(void*, size_t, DType, int) override { return nullptr; }
    std::unique_ptr<CommRequest> broadcast(const void*, void*, size_t, DType, int) override { return nullptr; }
    std::unique_ptr<CommRequest> reduce(const void*, void*, size_t, DType, ReduceOp, int) override { return nullptr; }
    std::unique_ptr<CommRequest> alltoall(const void*, void*, size_t, DType) override { return nullptr; }
    std::unique_ptr<CommRequest> sendrecv(const void*, void*, size_t, DType, int, int) override { return nullptr; }
    void barrier() override {}
    std::unique_ptr<Communicator> split_first(int) override { return nullptr; }
};

TEST(Bucketer, AssignsInReverseOrderClosingWhenFull) {
    // Element size 4 B, bucket 40 B = 10 elements.
    auto params = layout({6, 3, 5, 2, 12, 1});
    auto buckets = assign_buckets(params, 40, 4);
    // Reverse: p5(1) p4(12) -> 13 >= 10 closes; p3(2) p2(5) p1(3) -> 10 closes; p0(6) rest.
    ASSERT_EQ(buckets.size(), 3u);
    EXPECT_EQ(buckets[0].param_indices, (std::vector<int>{5, 4}));
    EXPECT_EQ(buckets[1].param_indices, (std::vector<int>{3, 2, 1}));
    EXPECT_EQ(buckets[2].param_indices, (std::vector<int>{0}));
    EXPECT_EQ(buckets[0].offset, 16u);  // p4 starts after 6+3+5+2
    EXPECT_EQ(buckets[0].count, 13u);
    EXPECT_EQ(buckets[1].offset, 6u);
    EXPECT_EQ(buckets[1].count, 10u);
    EXPECT_EQ(buckets[2].offset, 0u);
    EXPECT_EQ(buckets[2].count, 6u);
}

TEST(Bucketer, OneHugeBucketAndOneBucketPerParameter) {
    auto params = layout({4, 4, 4});
    EXPECT_EQ(assign_buckets(params, 1 << 30, 4).size(), 1u);
    auto each = assign_buckets(params, 1, 4);
    ASSERT_EQ(each.size(), 3u);
    for (size_t b = 0; b < 3; ++b) EXPECT_EQ(each[b].param_indices, std::vector<int>{static_cast<int>(2 - b)});
}

TEST(Bucketer, BucketsCoverTheBufferExactlyOnce) {
    auto params = layout({7, 1, 300, 2, 2, 64, 5, 9});
    auto buckets = assign_buckets(params, 100, 4);
    std::vector<int> covered(7 + 1 + 300 + 2 + 2 + 64 + 5 + 9, 0);
    for (const auto& b : buckets)
        for (size_t i = b.offset; i < b.offset + b.count; ++i) covered[i]++;
    for (int c : covered) EXPECT_EQ(c, 1);
}

TEST(Bucketer, LaunchesExactlyWhenTheLastGradientLands) {
    auto params = layout({6, 3, 5, 2, 12, 1});
    std::vector<float> grads(29, 1.0f);
    RecordingComm comm;
    CpuOps ops;
    Bucketer bucketer(params, 40.0 / (1024.0 * 1024.0), comm, grads.data(), ops);
    ASSERT_EQ(bucketer.buckets().size(), 3u);
    bucketer.start_step();
    bucketer.gradient_ready(5);
    EXPECT_EQ(comm.calls.size(), 0u);
    bucketer.gradient_ready(4);  // bucket 0 complete
    ASSERT_EQ(comm.calls.size(), 1u);
    EXPECT_EQ(comm.calls[0].data, grads.data() + 16);
    EXPECT_EQ(comm.calls[0].count, 13u);
    EXPECT_EQ(comm.calls[0].op, ReduceOp::avg);
    bucketer.gradient_ready(3);
    bucketer.gradient_ready(2);
    EXPECT_EQ(comm.calls.size(), 1u);
    bucketer.gradient_ready(1);  // bucket 1 complete
    EXPECT_EQ(comm.calls.size(), 2u);
    bucketer.gradient_ready(0);
    EXPECT_EQ(comm.calls.size(), 3u);
    bucketer.wait_all();
    EXPECT_EQ(comm.waits, 3);
}

TEST(Bucketer, LaterBucketWaitsForEarlierOnesToStartInOrder) {
    auto params = layout({6, 3, 5, 2, 12, 1});
    std::vector<float> grads(29, 1.0f);
    RecordingComm comm;
    CpuOps ops;
    Bucketer bucketer(params, 40.0 / (1024.0 * 1024.0), comm, grads.data(), ops);
    bucketer.start_step();
    for (int i : {3, 2, 1}) bucketer.gradient_ready(i);  // bucket 1 complete, bucket 0 not
    EXPECT_EQ(comm.calls.size(), 0u);
    bucketer.gradient_ready(5);
    bucketer.gradient_ready(4);  // now 0 and then 1 start, in order
    ASSERT_EQ(comm.calls.size(), 2u);
    EXPECT_EQ(comm.calls[0].data, grads.data() + 16);
    EXPECT_EQ(comm.calls[1].data, grads.data() + 6);
}

TEST(Bucketer, RejectsADoubleReportAndAnIncompleteStep) {
    auto params = layout({4, 4});
    std::vector<float> grads(8);
    RecordingComm comm;
    CpuOps ops;
    Bucketer bucketer(params, 1.0, comm, grads.data(), ops);
    bucketer.start_step();
    bucketer.gradient_ready(1);
    EXPECT_THROW(bucketer.gradient_ready(1), std::runtime_error);
    EXPECT_THROW(bucketer.wait_all(), std::runtime_error);
}

}  // namespace
}  // namespace sb
