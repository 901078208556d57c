// sendrecv (nccl-tests' src/sendrecv.cu): a ring shift, every rank sends its buffer to
// rank + 1 and receives rank - 1's. Point to point, so busbw = algbw. In place is timed,
// not checked, as nccl-tests.
#include "collectives/sweep.h"

namespace sb {
namespace {

CollectiveCounts counts(size_t count, size_t, int) { return {count, count, count, 0, 0}; }

double bus_factor(int) { return 1.0; }

void expected(const CheckContext& c, size_t first, size_t n, double* out) {
    const int from = (c.rank - 1 + c.nranks) % c.nranks;
    for (size_t k = 0; k < n; ++k) out[k] = c.input(from, first + k);
}

std::unique_ptr<CommRequest> run(Communicator& comm, const CollectiveArgs& a) {
    const int n = comm.size(), r = comm.rank();
    return comm.sendrecv(a.send, a.recv, a.count, a.dtype, (r + 1) % n, (r - 1 + n) % n);
}

}  // namespace

const Collective& sendrecv_collective() {
    static const Collective c{"sendrecv", /*reduces=*/false, /*rooted=*/false, /*checks_in_place=*/false,
                              counts, bus_factor, expected, run};
    return c;
}

}  // namespace sb
