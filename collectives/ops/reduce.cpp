// reduce (nccl-tests' src/reduce.cu): the root ends with the reduction of every rank's
// buffer; the other ranks' recv is left as it was. All data enters the root through its
// one link, so busbw = algbw.
#include "collectives/sweep.h"

namespace sb {
namespace {

CollectiveCounts counts(size_t count, size_t, int) { return {count, count, count, 0, 0}; }

double bus_factor(int) { return 1.0; }

void expected(const CheckContext& c, size_t first, size_t n, double* out) {
    for (size_t k = 0; k < n; ++k) {
        const size_t i = first + k;
        // Off the root recv is untouched: zeroed out of place, the rank's input in place.
        out[k] = c.rank == c.root ? c.reduced(i) : c.in_place ? c.input(c.rank, i) : 0.0;
    }
}

std::unique_ptr<CommRequest> run(Communicator& comm, const CollectiveArgs& a) {
    return comm.reduce(a.send, a.recv, a.count, a.dtype, a.op, a.root);
}

}  // namespace

const Collective& reduce_collective() {
    static const Collective c{"reduce", /*reduces=*/true, /*rooted=*/true, /*checks_in_place=*/true,
                              counts, bus_factor, expected, run};
    return c;
}

}  // namespace sb
