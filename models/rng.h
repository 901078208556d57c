// The portable random generator of initial weights and synthetic data: the same
// stream on every compiler and standard library, so replicas start bit-identical.
#pragma once

#include <cstdint>

namespace sb {

// splitmix64 (Steele, Lea, Flood 2014): the same stream on every compiler and standard
// library, unlike std::*_distribution. Uniform and normal (Box-Muller) draws are derived
// here so that initial weights and synthetic data are bit-identical everywhere.
class PortableRng {
public:
    explicit PortableRng(uint64_t seed) : state_(seed) {}
    uint64_t next_u64() {
        uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        return z ^ (z >> 31);
    }
    // Uniform in [0, 1) with 53 random bits.
    double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
    double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
    // Standard normal, Box-Muller; the second value of each pair is kept for the next call.
    double normal();

private:
    uint64_t state_;
    bool has_spare_ = false;
    double spare_ = 0.0;
};

// Mixes several integers into one well-spread seed (a key for an independent stream).
uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0);

}  // namespace sb
