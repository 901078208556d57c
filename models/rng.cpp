#include "models/rng.h"

#include <cmath>

namespace sb {

// Box-Muller with u1 in (0, 1] so log() is finite. log/sqrt/cos come from libm,
// which is correctly rounded or within an ulp on every platform we target.
double PortableRng::normal() {
    if (has_spare_) {
        has_spare_ = false;
        return spare_;
    }
    const double u1 = 1.0 - uniform();
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 6.283185307179586 * u2;
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
}

uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c) {
    // Each word goes through a full splitmix64 round before being combined.
    PortableRng ra(a), rb(b ^ 0x6A09E667F3BCC909ULL), rc(c ^ 0xBB67AE8584CAA73BULL);
    PortableRng out(ra.next_u64() ^ (rb.next_u64() * 3) ^ (rc.next_u64() * 7));
    return out.next_u64();
}

}  // namespace sb
