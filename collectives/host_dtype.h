// Host-side conversions between fp32 and the 16-bit dtypes (IEEE binary16 "half" and
// bfloat16), rounding to nearest even as the CUDA intrinsics do (__float2half_rn,
// __float2bfloat16_rn). Used where the host reduces or checks 16-bit data: the MPI
// communicator's half/bfloat16 reduction ops and the check of `scalebench comm`.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "models/ops.h"

namespace sb {

inline uint32_t float_bits(float f) {
    uint32_t x;
    std::memcpy(&x, &f, sizeof x);
    return x;
}

inline float bits_float(uint32_t x) {
    float f;
    std::memcpy(&f, &x, sizeof f);
    return f;
}

inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
    uint32_t x = float_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
    x += 0x7FFFu + ((x >> 16) & 1u);  // round to nearest even; overflow carries into inf
    return static_cast<uint16_t>(x >> 16);
}

inline float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1Fu;
    const uint32_t mantissa = h & 0x3FFu;
    if (exponent == 0x1Fu) return bits_float(sign | 0x7F800000u | (mantissa << 13));  // inf, NaN
    if (exponent == 0) {
        const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // zero or subnormal
        return sign ? -magnitude : magnitude;
    }
    return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t float_to_half(float f) {
    const uint32_t x = float_bits(f);
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const uint32_t magnitude = x & 0x7FFFFFFFu;
    if (magnitude > 0x7F800000u) return sign | 0x7E00u;   // NaN
    if (magnitude >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 rounds to inf
    if (magnitude < 0x38800000u) {                        // below 2^-14: a subnormal half or zero
        if (magnitude < 0x33000000u) return sign;         // below 2^-25: rounds to zero
        const uint32_t mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
        const uint32_t shift = 126u - (magnitude >> 23);  // value / 2^-24 = mantissa >> shift
        uint32_t q = mantissa >> shift;
        const uint32_t rest = mantissa & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
        if (rest > halfway || (rest == halfway && (q & 1u))) ++q;
        return static_cast<uint16_t>(sign | q);
    }
    uint32_t h = (magnitude - 0x38000000u) >> 13;  // rebias 127 -> 15, keep 10 mantissa bits
    const uint32_t rest = magnitude & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
    return static_cast<uint16_t>(sign | h);
}

// Element i of a buffer of `dtype` as fp32, and back (rounding to nearest even).
inline float load_as_float(DType dtype, const void* data, size_t i) {
    if (dtype == DType::f32) return static_cast<const float*>(data)[i];
    const uint16_t h = static_cast<const uint16_t*>(data)[i];
    return dtype == DType::bf16 ? bf16_to_float(h) : half_to_float(h);
}

inline void store_from_float(DType dtype, void* data, size_t i, float value) {
    if (dtype == DType::f32) {
        static_cast<float*>(data)[i] = value;
        return;
    }
    static_cast<uint16_t*>(data)[i] = dtype == DType::bf16 ? float_to_bf16(value) : float_to_half(value);
}

}  // namespace sb
