// alltoall (nccl-tests' src/alltoall.cu): block j of rank r's send lands as block r of rank
// j's recv. The size is the whole buffer (count * n); (n-1)/n of it crosses links, so
// busbw = algbw * (n-1)/n. In place is timed, not checked, as nccl-tests (NCCL reads and
// writes the same blocks at once).
#include "collectives/sweep.h"

namespace sb {
namespace {

CollectiveCounts counts(size_t count, size_t element_size, int n) {
    const size_t block = per_rank_count(count, element_size, n);
    return {block * static_cast<size_t>(n), block * static_cast<size_t>(n), block, 0, 0};
}

double bus_factor(int n) { return static_cast<double>(n - 1) / n; }

void expected(const CheckContext& c, size_t first, size_t n, double* out) {
    for (size_t k = 0; k < n; ++k) {
        const size_t i = first + k, peer = i / c.count;
        out[k] = c.input(static_cast<int>(peer), static_cast<size_t>(c.rank) * c.count + i % c.count);
    }
}

std::unique_ptr<CommRequest> run(Communicator& comm, const CollectiveArgs& a) {
    return comm.alltoall(a.send, a.recv, a.count, a.dtype);
}

}  // namespace

const Collective& alltoall_collective() {
    static const Collective c{"alltoall", /*reduces=*/false, /*rooted=*/false, /*checks_in_place=*/false,
                              counts, bus_factor, expected, run};
    return c;
}

}  // namespace sb
