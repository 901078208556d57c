// all_gather (nccl-tests' src/all_gather.cu): every rank ends with every rank's block, in
// rank order. The size is the whole recv buffer (count * n); busbw = algbw * (n-1)/n.
// In place, send is the rank's own block of recv.
#include "collectives/sweep.h"

namespace sb {
namespace {

CollectiveCounts counts(size_t count, size_t element_size, int n) {
    const size_t block = per_rank_count(count, element_size, n);
    return {block, block * static_cast<size_t>(n), block, block, 0};
}

double bus_factor(int n) { return static_cast<double>(n - 1) / n; }

void expected(const CheckContext& c, size_t first, size_t n, double* out) {
    for (size_t k = 0; k < n; ++k) {
        const size_t i = first + k;
        out[k] = c.input(static_cast<int>(i / c.count), i % c.count);
    }
}

std::unique_ptr<CommRequest> run(Communicator& comm, const CollectiveArgs& a) {
    return comm.all_gather(a.send, a.recv, a.count, a.dtype);
}

}  // namespace

const Collective& all_gather_collective() {
    static const Collective c{"all_gather", /*reduces=*/false, /*rooted=*/false, /*checks_in_place=*/true,
                              counts, bus_factor, expected, run};
    return c;
}

}  // namespace sb
