// splitmix64's finalizer: a bijection of 64-bit words that mixes every input bit into
// every output bit. The dropout masks (models/dropout.h) and the replica checksum
// (models/checksum.h) are built on it, on the host and on the GPU alike.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SB_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define SB_HOST_DEVICE inline
#endif

namespace sb {

SB_HOST_DEVICE uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

}  // namespace sb
