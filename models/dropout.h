// The dropout mask every backend draws (Ops::dropout, attention): a counter-based hash of
// (seed, element index), so CPU and CUDA keep exactly the same elements and the backward
// recomputes the mask instead of storing it. splitmix64's finaliser mixes the counter.
#pragma once

#include <cstdint>

#include "models/mix.h"

namespace sb {

SB_HOST_DEVICE uint64_t dropout_hash(uint64_t seed, uint64_t index) {
    return mix64(seed + 0x9e3779b97f4a7c15ull * (index + 1));
}

// The seed a dropout call made with `seed` draws with after `generation` advances of
// the dropout generation (Ops::advance_dropout_generation); generation 0 keeps the seed.
SB_HOST_DEVICE uint64_t dropout_seed_at(uint64_t seed, uint64_t generation) {
    return generation == 0 ? seed : dropout_hash(seed, generation);
}

// An element survives when the high 32 bits r of its hash satisfy r >= p * 2^32, that is
// r >= ceil(p * 2^32) (r is an integer; p * 2^32 is exact in double): the threshold is
// computed once per kernel, so the hot loops compare integers.
SB_HOST_DEVICE uint64_t dropout_threshold(float p) {
    const double x = static_cast<double>(p) * 4294967296.0;
    const uint64_t t = static_cast<uint64_t>(x);
    return static_cast<double>(t) < x ? t + 1 : t;
}

SB_HOST_DEVICE bool dropout_keep_above(uint64_t seed, uint64_t index, uint64_t threshold) {
    return (dropout_hash(seed, index) >> 32) >= threshold;
}

// True when element `index` survives dropout with probability p (0 <= p < 1).
SB_HOST_DEVICE bool dropout_keep(uint64_t seed, uint64_t index, float p) {
    return dropout_keep_above(seed, index, dropout_threshold(p));
}

}  // namespace sb
