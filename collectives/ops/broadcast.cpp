// broadcast (nccl-tests' src/broadcast.cu): every rank ends with the root's buffer. All
// data leaves the root through its one link, so busbw = algbw.
#include "collectives/sweep.h"

namespace sb {
namespace {

CollectiveCounts counts(size_t count, size_t, int) { return {count, count, count, 0, 0}; }

double bus_factor(int) { return 1.0; }

void expected(const CheckContext& c, size_t first, size_t n, double* out) {
    for (size_t k = 0; k < n; ++k) out[k] = c.input(c.root, first + k);
}

std::unique_ptr<CommRequest> run(Communicator& comm, const CollectiveArgs& a) {
    return comm.broadcast(a.send, a.recv, a.count, a.dtype, a.root);
}

}  // namespace

const Collective& broadcast_collective() {
    static const Collective c{"broadcast", /*reduces=*/false, /*rooted=*/true, /*checks_in_place=*/true,
                              counts, bus_factor, expected, run};
    return c;
}

}  // namespace sb
