// `scalebench comm` over MPI (run under mpirun -np 2 and -np 4): the MPI communicator's
// reduce, alltoall, sendrecv, out-of-place broadcast, NCCL-style in-place reduce-scatter
// and all-gather, and half/bfloat16 reductions, checked directly; then every collective
// swept by the harness with #wrong = 0, a planted wrong element counted across ranks, and
// a sweep on a scaling sub-world.
#include <gtest/gtest.h>

#include <climits>
#include <mpi.h>

#include <filesystem>
#include <numeric>
#include <vector>

#include "collectives/host_dtype.h"
#include "collectives/mpi_communicator.h"
#include "collectives/sweep.h"
#include "models/cpu/cpu_ops.h"
#include "src/commands/comm_command.h"
#include "src/core/results.h"

namespace sb {
namespace {

// The sweep records of a file (each size's `comm_size` record precedes its sweep's `comm` record).
std::vector<nlohmann::json> sweep_records(const std::string& path) {
    std::vector<nlohmann::json> sweeps;
    for (const auto& r : read_records(path).records)
        if (r["subcommand"] == "comm") sweeps.push_back(r);
    return sweeps;
}


TEST(MpiCommunicatorComm, ReduceToEveryRoot) {
    MpiCommunicator comm(MPI_COMM_WORLD);
    const int n = comm.size(), r = comm.rank();
    for (int root = 0; root < n; ++root) {
        std::vector<float> send(5), recv(5, -1.0f);
        for (int i = 0; i < 5; ++i) send[i] = static_cast<float>((r + 1) * (i + 1));
        comm.reduce(send.data(), recv.data(), 5, DType::f32, ReduceOp::sum, root)->wait();
        for (int i = 0; i < 5; ++i)
            EXPECT_EQ(recv[i], r == root ? static_cast<float>((i + 1) * n * (n + 1) / 2) : -1.0f) << root << " " << i;
        // In place, and the average: divided on the root only.
        comm.reduce(send.data(), send.data(), 5, DType::f32, ReduceOp::avg, root)->wait();
        EXPECT_FLOAT_EQ(send[0], r == root ? (n + 1) / 2.0f : static_cast<float>(r + 1));
    }
}

TEST(MpiCommunicatorComm, AlltoallSendsBlockJToRankJ) {
    MpiCommunicator comm(MPI_COMM_WORLD);
    const int n = comm.size(), r = comm.rank();
    const size_t per_peer = 3;
    std::vector<float> send(per_peer * n), recv(per_peer * n, -1.0f);
    for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>(100 * r + i);  // block j: 100r + 3j + k
    comm.alltoall(send.data(), recv.data(), per_peer, DType::f32)->wait();
    for (int j = 0; j < n; ++j)
        for (size_t k = 0; k < per_peer; ++k)
            EXPECT_EQ(recv[j * per_peer + k], static_cast<float>(100 * j + per_peer * r + k));
    comm.alltoall(send.data(), send.data(), per_peer, DType::f32)->wait();  // MPI_IN_PLACE
    EXPECT_EQ(send, recv);
}

TEST(MpiCommunicatorComm, SendrecvShiftsARing) {
    MpiCommunicator comm(MPI_COMM_WORLD);
    const int n = comm.size(), r = comm.rank();
    std::vector<float> send(7, static_cast<float>(r)), recv(7, -1.0f);
    comm.sendrecv(send.data(), recv.data(), 7, DType::f32, (r + 1) % n, (r - 1 + n) % n)->wait();
    EXPECT_EQ(recv, std::vector<float>(7, static_cast<float>((r - 1 + n) % n)));
    comm.sendrecv(send.data(), send.data(), 7, DType::f32, (r + 1) % n, (r - 1 + n) % n)->wait();  // replace
    EXPECT_EQ(send, recv);
}

TEST(MpiCommunicatorComm, OutOfPlaceBroadcastFillsRecvOnEveryRank) {
    MpiCommunicator comm(MPI_COMM_WORLD);
    const int n = comm.size(), r = comm.rank();
    const int root = n - 1;
    std::vector<float> send(4, static_cast<float>(10 + r)), recv(4, -1.0f);
    comm.broadcast(send.data(), recv.data(), 4, DType::f32, root)->wait();
    EXPECT_EQ(recv, std::vector<float>(4, static_cast<float>(10 + root)));
    EXPECT_EQ(send[0], static_cast<float>(10 + r));  // send is only read
}

TEST(MpiCommunicatorComm, InPlaceReduceScatterAndAllGatherUseNcclLayout) {
    MpiCommunicator comm(MPI_COMM_WORLD);
    const int n = comm.size(), r = comm.rank();
    const size_t block = 3;
    std::vector<float> buffer(block * n);
    for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<float>(i + r);
    // reduce_scatter in place: the result lands in this rank's own block.
    float* mine = buffer.data() + r * block;
    comm.reduce_scatter(buffer.data(), mine, block, DType::f32, ReduceOp::sum)->wait();
    for (size_t k = 0; k < block; ++k)
        EXPECT_EQ(mine[k], static_cast<float>(n * (r * block + k) + n * (n - 1) / 2)) << k;
    // all_gather in place: each rank's block is already in place in recv.
    std::vector<float> all(block * n, -1.0f);
    for (size_t k = 0; k < block; ++k) all[r * block + k] = static_cast<float>(1000 * r + k);
    comm.all_gather(all.data() + r * block, all.data(), block, DType::f32)->wait();
    for (int j = 0; j < n; ++j)
        for (size_t k = 0; k < block; ++k) EXPECT_EQ(all[j * block + k], static_cast<float>(1000 * j + k));
}

TEST(MpiCommunicatorComm, HalfAndBfloat16ReduceInFp32) {
    MpiCommunicator comm(MPI_COMM_WORLD);
    const int n = comm.size(), r = comm.rank();
    for (DType d : {DType::f16, DType::bf16})
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
            std::vector<uint16_t> data(6);
            for (size_t i = 0; i < data.size(); ++i)
                store_from_float(d, data.data(), i, 0.5f * static_cast<float>((r + 1) * (i + 1)));
            comm.all_reduce(data.data(), data.data(), data.size(), d, op)->wait();
            for (size_t i = 0; i < data.size(); ++i) {
                const float k = 0.5f * static_cast<float>(i + 1);
                const float sum = k * n * (n + 1) / 2.0f;
                const float want = op == ReduceOp::sum ? sum : op == ReduceOp::avg ? sum / n
                                 : op == ReduceOp::max ? k * n : k;
                // Every figure here is exact in both dtypes except avg's quotient, which rounds once.
                EXPECT_NEAR(load_as_float(d, data.data(), i), want, op == ReduceOp::avg ? want / 64 : 0.0)
                    << dtype_name(d) << " " << reduce_op_name(op) << " " << i;
            }
        }
    // A 16-bit broadcast and gather carry the bits unchanged.
    std::vector<uint16_t> bits(2, static_cast<uint16_t>(0xABC0 + r)), gathered(2 * n);
    comm.all_gather(bits.data(), gathered.data(), 2, DType::bf16)->wait();
    for (int j = 0; j < n; ++j) EXPECT_EQ(gathered[2 * j + 1], 0xABC0 + j);
}

SweepOptions quick(DType d = DType::f32, ReduceOp op = ReduceOp::sum) {
    SweepOptions o;
    o.sizes = sweep_sizes(8, 1 << 18, 0, 8);  // 8 B .. 256 KiB
    o.dtype = d;
    o.redop = op;
    o.iters = 3;
    return o;
}

TEST(CommSweepMpi, EveryCollectiveChecksCleanInFloat) {
    CpuOps ops;
    MpiCommunicator comm(MPI_COMM_WORLD);
    const int n = comm.size();
    for (const Collective* c : all_collectives()) {
        SweepOptions o = quick();
        o.root = n - 1;
        o.sizes.push_back(1000);  // not a multiple of 16 bytes x ranks: counts round down
        const SweepResult r = run_sweep(*c, o, ops, comm, MPI_COMM_WORLD);
        EXPECT_EQ(r.wrong_measurements, 0) << c->name;
        EXPECT_EQ(r.nranks, n);
        EXPECT_EQ(r.root, c->rooted ? n - 1 : -1);
        ASSERT_EQ(r.rows.size(), o.sizes.size());
        for (size_t i = 0; i < r.rows.size(); ++i) {
            const SweepRow& row = r.rows[i];
            const CollectiveCounts k = c->counts(o.sizes[i] / 4, 4, n);
            EXPECT_EQ(row.count, k.param) << c->name;
            EXPECT_EQ(row.bytes, std::max(k.send, k.recv) * 4) << c->name;
            EXPECT_TRUE(row.out_of_place.checked);
            EXPECT_EQ(row.out_of_place.wrong, 0) << c->name << " " << row.bytes;
            EXPECT_EQ(row.in_place.checked, c->checks_in_place);
            if (row.in_place.checked) EXPECT_EQ(row.in_place.wrong, 0) << c->name << " " << row.bytes;
            EXPECT_GE(row.out_of_place.time_us_max, row.out_of_place.time_us);
            EXPECT_NEAR(row.out_of_place.busbw_gbps, row.out_of_place.algbw_gbps * c->bus_factor(n), 1e-12);
        }
        EXPECT_TRUE(r.fit.valid) << c->name;
    }
}

TEST(CommSweepMpi, SixteenBitDtypesAndEveryRedopCheckClean) {
    CpuOps ops;
    MpiCommunicator comm(MPI_COMM_WORLD);
    for (const Collective* c : all_collectives())
        for (DType d : {DType::f16, DType::bf16})
            for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
                if (!c->reduces && op != ReduceOp::sum) continue;
                SweepOptions o = quick(d, op);
                o.sizes = {64, 4096, 65536};
                const SweepResult r = run_sweep(*c, o, ops, comm, MPI_COMM_WORLD);
                EXPECT_EQ(r.wrong_measurements, 0) << c->name << " " << dtype_name(d) << " " << reduce_op_name(op);
            }
}

// Counts past an int go in pieces (MPI takes an int count). With the largest call lowered to 100 elements,
// every collective, dtype and placement of sizes up to 64 KiB (blocks of up to 16384 elements,
// so up to 164 pieces, the last a short one) checks clean, as the same sweep in one call does.
TEST(CommSweepMpi, CountsPastTheLargestCallGoInPiecesAndCheckClean) {
    CpuOps ops;
    MpiCommunicator comm(MPI_COMM_WORLD);
    MpiCommunicator::set_max_count(100);
    for (const Collective* c : all_collectives())
        for (DType d : {DType::f32, DType::bf16})
            for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
                if (!c->reduces && op != ReduceOp::sum) continue;
                SweepOptions o = quick(d, op);
                o.sizes = {64, 4096, 65536, 65536 + 2 * 100 * 16};
                o.root = comm.size() - 1;
                const SweepResult r = run_sweep(*c, o, ops, comm, MPI_COMM_WORLD);
                EXPECT_EQ(r.wrong_measurements, 0) << c->name << " " << dtype_name(d) << " " << reduce_op_name(op);
                for (const SweepRow& row : r.rows) EXPECT_TRUE(row.out_of_place.checked) << c->name;
            }
    MpiCommunicator::set_max_count(static_cast<size_t>(INT_MAX));
}

TEST(CommSweepMpi, AWrongElementOnOneRankCountsForAll) {
    CpuOps ops;
    MpiCommunicator comm(MPI_COMM_WORLD);
    SweepOptions o = quick();
    o.sizes = {4096};
    const int planted_on = comm.size() - 1;
    o.tamper = [&](Ops& backend, void* recv, size_t bytes) {
        if (comm.rank() != planted_on || bytes < 8) return;
        const float bad[2] = {0.0f, 0.0f};  // inputs are >= 1: zero is never right
        backend.upload(recv, bad, sizeof bad);
    };
    for (const Collective* c : {&all_reduce_collective(), &alltoall_collective(), &reduce_collective()}) {
        o.root = planted_on;  // reduce writes recv on the root only
        const SweepResult r = run_sweep(*c, o, ops, comm, MPI_COMM_WORLD);
        EXPECT_EQ(r.rows[0].out_of_place.wrong, 2) << c->name;  // seen by every rank
        if (c->checks_in_place) EXPECT_EQ(r.rows[0].in_place.wrong, 2) << c->name;
        EXPECT_GT(r.wrong_measurements, 0);
    }
}

TEST(CommSweepMpi, SweepsOnTheFirstRanksOfAScalingSubWorld) {
    CpuOps ops;
    MpiCommunicator world(MPI_COMM_WORLD);
    const int n = 2;
    MPI_Comm sub = split_first_ranks(MPI_COMM_WORLD, n);
    std::unique_ptr<Communicator> comm = world.split_first(n);
    if (sub == MPI_COMM_NULL) {
        EXPECT_EQ(comm, nullptr);
        return;
    }
    const SweepResult r = run_sweep(all_reduce_collective(), quick(), ops, *comm, sub);
    EXPECT_EQ(r.nranks, n);
    EXPECT_EQ(r.wrong_measurements, 0);
    EXPECT_DOUBLE_EQ(r.rows.back().out_of_place.busbw_gbps, r.rows.back().out_of_place.algbw_gbps);  // 2(n-1)/n = 1
    MPI_Comm_free(&sub);
}

TEST(CommCommandMpi, RunCommWritesOneRecordPerWorldSizeAndCollective) {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const std::string out = (std::filesystem::temp_directory_path() / "scalebench-comm-mpi-test.jsonl").string();
    if (rank == 0) std::filesystem::remove(out);
    MPI_Barrier(MPI_COMM_WORLD);
    CommOptions o;
    o.op = "all";
    o.backend = "mpi";
    o.min_bytes = "64";
    o.max_bytes = "4K";
    o.step_factor = 8;
    o.iters = 2;
    o.scaling = {1, size};
    o.root = 0;
    o.out = out;
    EXPECT_EQ(run_comm(o, MPI_COMM_WORLD), 0);
    if (rank != 0) return;
    const auto records = sweep_records(out);
    ASSERT_EQ(records.size(), 14u);  // 7 collectives x 2 world sizes
    for (const auto& rec : records) {
        EXPECT_EQ(rec["subcommand"], "comm");
        EXPECT_EQ(rec["launched_world_size"], size);
        EXPECT_EQ(rec["backend"], "mpi");
        EXPECT_EQ(rec["rows"].size(), 3u);  // 64 B, 512 B, 4 KiB
        EXPECT_TRUE(rec["checks_passed"].get<bool>());
        EXPECT_TRUE(rec["environment"].contains("hostnames"));
    }
    EXPECT_EQ(records.front()["world_size"], 1);
    EXPECT_EQ(records.back()["world_size"], size);
    std::filesystem::remove(out);
}

}  // namespace
}  // namespace sb
