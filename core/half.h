#pragma once

// float16 (IEEE binary16) and bfloat16 <-> float32 conversions, for the
// reduction kernels (ops/reduce.h) and the compressors (compression/): round
// to nearest even; float16 overflows to +-inf, NaN stays NaN. The scalar forms
// are inline (branch-free, so that loops over them vectorise); the
// whole-buffer forms are in half.cc. Thread-safe: pure functions.

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tutti {
namespace half_detail {

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace half_detail

// The conversions are branch-free (every case computed, one selected) so that
// the block loops below vectorise.

// IEEE binary16 -> binary32, exact for every input (normals, subnormals,
// zeros, infinities; NaN payloads keep their top bits).
inline float halfToFloat(uint16_t h) {
  constexpr uint32_t kShiftedExp = 0x7c00u << 13;
  const uint32_t em = (static_cast<uint32_t>(h) & 0x7fffu) << 13;
  const uint32_t exp = em & kShiftedExp;
  const uint32_t normal = em + ((127u - 15u) << 23);
  const uint32_t inf_nan = normal + ((128u - 16u) << 23);  // exponent all ones
  // Zero or subnormal: renormalise through a float subtraction (exact).
  const uint32_t tiny = half_detail::floatBits(half_detail::bitsFloat(normal + (1u << 23)) -
                                               half_detail::bitsFloat(113u << 23));
  const uint32_t o = exp == kShiftedExp ? inf_nan : (exp == 0 ? tiny : normal);
  return half_detail::bitsFloat(o | ((static_cast<uint32_t>(h) & 0x8000u) << 16));
}

// binary32 -> binary16 rounding to nearest even. Overflow goes to infinity,
// tiny values to subnormals or signed zero, NaN stays a (quiet) NaN.
inline uint16_t floatToHalf(float f) {
  const uint32_t bits = half_detail::floatBits(f);
  const uint32_t sign = bits & 0x80000000u;
  const uint32_t x = bits ^ sign;
  const uint32_t inf_nan = x > 0x7f800000u ? 0x7e00u : 0x7c00u;
  // Subnormal or zero result: adding 0.5f aligns the mantissa so that the
  // hardware's round-to-nearest-even does the rounding.
  constexpr uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  const uint32_t tiny =
      half_detail::floatBits(half_detail::bitsFloat(x) + half_detail::bitsFloat(kDenormMagic)) -
      kDenormMagic;
  // Normal result: rebias the exponent, round half up, or to even on a tie.
  const uint32_t mant_odd = (x >> 13) & 1u;
  const uint32_t normal = (x + ((15u - 127u) << 23) + 0xfffu + mant_odd) >> 13;
  const uint32_t o = x >= 0x47800000u ? inf_nan : (x < 0x38800000u ? tiny : normal);
  return static_cast<uint16_t>((sign >> 16) | o);
}

inline float bfloat16ToFloat(uint16_t b) {
  return half_detail::bitsFloat(static_cast<uint32_t>(b) << 16);
}

inline uint16_t floatToBfloat16(float f) {
  const uint32_t x = half_detail::floatBits(f);
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);  // nearest, ties to even
  const uint32_t rounded = (x + rounding) >> 16;
  const uint32_t quiet_nan = (x >> 16) | 0x0040u;  // NaN stays a NaN, made quiet
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// Whole-buffer forms of the four conversions: out[i] = convert(in[i]) for
// i < count, equal to the scalar ones (bit for bit except NaN payloads).
// Vectorised: float16 uses the F16C instructions when the CPU has them
// (checked once at run time), the rest are loops the compiler turns into SIMD
// code. `in` and `out` must not overlap; no alignment beyond the element
// type's is needed.
void halfToFloatBuffer(const uint16_t* in, float* out, size_t count);
void floatToHalfBuffer(const float* in, uint16_t* out, size_t count);
void bfloat16ToFloatBuffer(const uint16_t* in, float* out, size_t count);
void floatToBfloat16Buffer(const float* in, uint16_t* out, size_t count);

}  // namespace tutti
