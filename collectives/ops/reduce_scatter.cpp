// reduce_scatter (nccl-tests' src/reduce_scatter.cu): rank r ends with block r of the
// reduction of every rank's n blocks. The size is the whole send buffer (count * n);
// busbw = algbw * (n-1)/n. In place, recv is the rank's own block of send.
#include "collectives/sweep.h"

namespace sb {
namespace {

CollectiveCounts counts(size_t count, size_t element_size, int n) {
    const size_t block = per_rank_count(count, element_size, n);
    return {block * static_cast<size_t>(n), block, block, 0, block};
}

double bus_factor(int n) { return static_cast<double>(n - 1) / n; }

void expected(const CheckContext& c, size_t first, size_t n, double* out) {
    const size_t offset = static_cast<size_t>(c.rank) * c.count;
    for (size_t k = 0; k < n; ++k) out[k] = c.reduced(offset + first + k);
}

std::unique_ptr<CommRequest> run(Communicator& comm, const CollectiveArgs& a) {
    return comm.reduce_scatter(a.send, a.recv, a.count, a.dtype, a.op);
}

}  // namespace

const Collective& reduce_scatter_collective() {
    static const Collective c{"reduce_scatter", /*reduces=*/true, /*rooted=*/false, /*checks_in_place=*/true,
                              counts, bus_factor, expected, run};
    return c;
}

}  // namespace sb
