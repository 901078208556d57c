// The dropout mask every backend draws (Ops::dropout, attention): a counter-based hash of
// (seed, element index), so CPU and CUDA keep exactly the same elements and the backward
// recomputes the mask instead of storing it. splitmix64's finaliser mixes the counter; one
// 64-bit hash decides four consecutive elements, 16 bits each, so a kernel hashes once per
// four elements (the fused attention's per-element cost is what this saves).
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

// Element `index` draws the 16 bits r = bits [16 (index % 4), 16 (index % 4) + 16) of
// dropout_hash(seed, index / 4) and survives when r >= p * 2^16, that is r >= ceil(p * 2^16):
// the threshold is computed once per kernel, so the hot loops compare integers. The drop
// probability is p rounded up to a multiple of 2^-16 (0.1 drops 6554 of 65536, 0.10000610).
SB_HOST_DEVICE uint32_t dropout_threshold(float p) {
    const double x = static_cast<double>(p) * 65536.0;
    const uint32_t t = static_cast<uint32_t>(x);
    return static_cast<double>(t) < x ? t + 1 : t;
}

// The 16-bit draws of the four elements 4q .. 4q + 3 compared with the threshold: bit e of
// the result says element 4q + e survives.
SB_HOST_DEVICE uint32_t dropout_keep_nibble(uint64_t seed, uint64_t quad, uint32_t threshold) {
    const uint64_t h = dropout_hash(seed, quad);
    uint32_t bits = 0;
    for (int e = 0; e < 4; ++e) bits |= static_cast<uint32_t>(((h >> (16 * e)) & 0xffffu) >= threshold) << e;
    return bits;
}

SB_HOST_DEVICE bool dropout_keep_above(uint64_t seed, uint64_t index, uint32_t threshold) {
    return ((dropout_hash(seed, index >> 2) >> (16 * (index & 3))) & 0xffffu) >= threshold;
}

// True when element `index` survives dropout with probability p (0 <= p < 1).
SB_HOST_DEVICE bool dropout_keep(uint64_t seed, uint64_t index, float p) {
    return dropout_keep_above(seed, index, dropout_threshold(p));
}

// The mask index of attention's probability (query `row` of the batch*heads*seq rows, key
// `key`): rows are padded to a multiple of four keys, so each hash's four elements are four
// consecutive keys of one query.
SB_HOST_DEVICE uint64_t attention_dropout_index(uint64_t row, int key, int seq) {
    return row * static_cast<uint64_t>((seq + 3) & ~3) + static_cast<uint64_t>(key);
}

}  // namespace sb
