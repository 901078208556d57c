// all_reduce (nccl-tests' src/all_reduce.cu): every rank ends with the reduction of every
// rank's buffer. A ring moves each byte 2(n-1)/n times, so busbw = algbw * 2(n-1)/n.
#include "collectives/sweep.h"

namespace sb {
namespace {

CollectiveCounts counts(size_t count, size_t, int) { return {count, count, count, 0, 0}; }

double bus_factor(int n) { return 2.0 * (n - 1) / n; }

void expected(const CheckContext& c, size_t first, size_t n, double* out) {
    for (size_t k = 0; k < n; ++k) out[k] = c.reduced(first + k);
}

std::unique_ptr<CommRequest> run(Communicator& comm, const CollectiveArgs& a) {
    return comm.all_reduce(a.send, a.recv, a.count, a.dtype, a.op);
}

}  // namespace

const Collective& all_reduce_collective() {
    static const Collective c{"all_reduce", /*reduces=*/true, /*rooted=*/false, /*checks_in_place=*/true,
                              counts, bus_factor, expected, run};
    return c;
}

}  // namespace sb
