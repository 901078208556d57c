// The replica checksum: the sum, modulo 2^64, of a bijective mix of each 8-byte word with
// its index, plus the length. A change confined to one word always changes it (the mix is
// a bijection of the word), and a sum can be formed in any order, so the GPU computes it
// in parallel at memory bandwidth and gets the bits the CPU gets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "models/mix.h"

namespace sb {

// The word keyed by its index, mixed: for a fixed index a bijection of the word.
SB_HOST_DEVICE uint64_t checksum_term(uint64_t word, uint64_t index) {
    return mix64(word ^ (index * 0x9e3779b97f4a7c15ull));
}

// The last word, when bytes is not a multiple of 8, is zero-padded.
inline uint64_t checksum_host(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    uint64_t sum = bytes;
    const size_t words = (bytes + 7) / 8;
    for (size_t i = 0; i < words; ++i) {
        uint64_t word = 0;
        std::memcpy(&word, p + 8 * i, i + 1 < words || bytes % 8 == 0 ? 8 : bytes % 8);
        sum += checksum_term(word, i);
    }
    return sum;
}

}  // namespace sb
