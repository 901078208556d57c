// TimedOps (see timed_ops.h): the calls that need more than forwarding.
#include "models/timed_ops.h"

#include <fmt/format.h>

#include "base/errors.h"

namespace sb {

bool TimedOps::unscale_and_check(float* grads, size_t n, float inv_scale) {
    if (!recording_) return backend_.unscale_and_check(grads, n, inv_scale);
    accounting_.unscale_and_check(grads, n, inv_scale);
    bool finite = true;
    // It reads its overflow flag on the host, so the stream must not be held around it.
    time_last_op(/*hold=*/false, [&] { finite = backend_.unscale_and_check(grads, n, inv_scale); });
    return finite;
}

void TimedOps::check_slot(int slot) const {
    SB_REQUIRE(slot != kOpStartMarker && slot != kOpEndMarker,
               fmt::format("marker slot {} is the op timer's (TimedOps::kOpStartMarker/kOpEndMarker)", slot));
}

void TimedOps::record_marker(int slot) {
    check_slot(slot);
    backend_.record_marker(slot);
}

double TimedOps::elapsed_ms(int from_slot, int to_slot) {
    check_slot(from_slot);
    check_slot(to_slot);
    return backend_.elapsed_ms(from_slot, to_slot);
}

}  // namespace sb
