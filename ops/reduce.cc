#include "ops/reduce.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/check.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TUTTI_X86_F16C 1
#endif

// Why the kernels look the way they do: each is a plain loop over __restrict
// pointers, templated per element type and per operator, so that -O3 turns it
// into SIMD code. The operator is a template parameter (not a runtime switch
// inside the loop). float16/bfloat16 are widened in blocks to float32 scratch
// on the stack, reduced there, and rounded back once.

namespace tutti {
namespace {

uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// The conversions are branch-free (every case computed, one selected) so that
// the block loops below vectorise.

// IEEE binary16 -> binary32, exact for every input (normals, subnormals,
// zeros, infinities; NaN payloads keep their top bits).
inline float halfToFloatInline(uint16_t h) {
  constexpr uint32_t kShiftedExp = 0x7c00u << 13;
  const uint32_t em = (static_cast<uint32_t>(h) & 0x7fffu) << 13;
  const uint32_t exp = em & kShiftedExp;
  const uint32_t normal = em + ((127u - 15u) << 23);
  const uint32_t inf_nan = normal + ((128u - 16u) << 23);  // exponent all ones
  // Zero or subnormal: renormalise through a float subtraction (exact).
  const uint32_t tiny = floatBits(bitsFloat(normal + (1u << 23)) - bitsFloat(113u << 23));
  const uint32_t o = exp == kShiftedExp ? inf_nan : (exp == 0 ? tiny : normal);
  return bitsFloat(o | ((static_cast<uint32_t>(h) & 0x8000u) << 16));
}

// binary32 -> binary16 rounding to nearest even. Overflow goes to infinity,
// tiny values to subnormals or signed zero, NaN stays a (quiet) NaN.
inline uint16_t floatToHalfInline(float f) {
  const uint32_t bits = floatBits(f);
  const uint32_t sign = bits & 0x80000000u;
  const uint32_t x = bits ^ sign;
  const uint32_t inf_nan = x > 0x7f800000u ? 0x7e00u : 0x7c00u;
  // Subnormal or zero result: adding 0.5f aligns the mantissa so that the
  // hardware's round-to-nearest-even does the rounding.
  constexpr uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  const uint32_t tiny = floatBits(bitsFloat(x) + bitsFloat(kDenormMagic)) - kDenormMagic;
  // Normal result: rebias the exponent, round half up, or to even on a tie.
  const uint32_t mant_odd = (x >> 13) & 1u;
  const uint32_t normal = (x + ((15u - 127u) << 23) + 0xfffu + mant_odd) >> 13;
  const uint32_t o = x >= 0x47800000u ? inf_nan : (x < 0x38800000u ? tiny : normal);
  return static_cast<uint16_t>((sign >> 16) | o);
}

inline float bfloat16ToFloatInline(uint16_t b) {
  return bitsFloat(static_cast<uint32_t>(b) << 16);
}

inline uint16_t floatToBfloat16Inline(float f) {
  const uint32_t x = floatBits(f);
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);  // nearest, ties to even
  const uint32_t rounded = (x + rounding) >> 16;
  const uint32_t quiet_nan = (x >> 16) | 0x0040u;  // NaN stays a NaN, made quiet
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// Integers add and multiply with wrap-around (two's complement), computed in
// an unsigned type at least as wide as int so no signed overflow (undefined
// behaviour) and no promotion to signed int can occur.
template <typename T>
using WrapType = std::conditional_t<(sizeof(T) <= 4), uint32_t, uint64_t>;

struct SumOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrapType<T>>(a) + static_cast<WrapType<T>>(b));
    } else {
      return a + b;
    }
  }
};
struct ProductOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrapType<T>>(a) * static_cast<WrapType<T>>(b));
    } else {
      return a * b;
    }
  }
};
struct MinOp {
  template <typename T>
  static T apply(T a, T b) {
    return b < a ? b : a;
  }
};
struct MaxOp {
  template <typename T>
  static T apply(T a, T b) {
    return a < b ? b : a;
  }
};

template <typename Op, typename T>
void reduceLoop(T* __restrict dst, const T* __restrict src, size_t count) {
  for (size_t i = 0; i < count; ++i) dst[i] = Op::template apply<T>(dst[i], src[i]);
}

template <typename T>
void reduceTyped(void* dst, const void* src, size_t count, ReduceOp op) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      reduceLoop<SumOp>(d, s, count);
      return;
    case ReduceOp::kMin:
      reduceLoop<MinOp>(d, s, count);
      return;
    case ReduceOp::kMax:
      reduceLoop<MaxOp>(d, s, count);
      return;
    case ReduceOp::kProduct:
      reduceLoop<ProductOp>(d, s, count);
      return;
    case ReduceOp::kAdasum:  // not element-wise: ops/algorithms/allreduce_adasum.h
      break;
  }
  TUTTI_CHECK_EQ(static_cast<int>(op), -1);  // unknown operator: a bug upstream
}

// bool is one byte 0/1; any non-zero byte counts as true.
void reduceBool(void* dst, const void* src, size_t count, ReduceOp op) {
  uint8_t* __restrict d = static_cast<uint8_t*>(dst);
  const uint8_t* __restrict s = static_cast<const uint8_t*>(src);
  const bool logical_and = op == ReduceOp::kMin || op == ReduceOp::kProduct;
  if (logical_and) {
    for (size_t i = 0; i < count; ++i) d[i] = static_cast<uint8_t>((d[i] != 0) & (s[i] != 0));
  } else {
    for (size_t i = 0; i < count; ++i) d[i] = static_cast<uint8_t>((d[i] != 0) | (s[i] != 0));
  }
}

constexpr size_t kBlock = 256;

using ToFloat = float (*)(uint16_t);
using FromFloat = uint16_t (*)(float);

template <ToFloat kToFloat>
void widen(const uint16_t* __restrict in, float* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = kToFloat(in[i]);
}

template <FromFloat kFromFloat>
void narrow(const float* __restrict in, uint16_t* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = kFromFloat(in[i]);
}

#if TUTTI_X86_F16C
// float16 <-> float32 with the F16C instructions (round to nearest even, as
// the portable code), chosen at run time: the library is built for baseline
// x86-64, where the portable conversion costs ~10x more than the reduction.
bool haveF16c() {
  static const bool have = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return have;
}

__attribute__((target("avx,f16c"))) void widenHalfF16c(const uint16_t* __restrict in,
                                                       float* __restrict out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = halfToFloatInline(in[i]);
}

__attribute__((target("avx,f16c"))) void narrowHalfF16c(const float* __restrict in,
                                                        uint16_t* __restrict out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = floatToHalfInline(in[i]);
}

void reduceHalfF16c(void* dst, const void* src, size_t count, ReduceOp op) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  float a[kBlock];
  float b[kBlock];
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t n = count - start < kBlock ? count - start : kBlock;
    widenHalfF16c(d + start, a, n);
    widenHalfF16c(s + start, b, n);
    reduceTyped<float>(a, b, n, op);
    narrowHalfF16c(a, d + start, n);
  }
}

void scaleHalfF16c(void* buf, size_t count, float factor) {
  uint16_t* d = static_cast<uint16_t*>(buf);
  float a[kBlock];
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t n = count - start < kBlock ? count - start : kBlock;
    widenHalfF16c(d + start, a, n);
    for (size_t i = 0; i < n; ++i) a[i] *= factor;
    narrowHalfF16c(a, d + start, n);
  }
}
#endif

template <ToFloat kToFloat, FromFloat kFromFloat>
void reduceHalfLike(void* dst, const void* src, size_t count, ReduceOp op) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  float a[kBlock];
  float b[kBlock];
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t n = count - start < kBlock ? count - start : kBlock;
    widen<kToFloat>(d + start, a, n);
    widen<kToFloat>(s + start, b, n);
    reduceTyped<float>(a, b, n, op);
    narrow<kFromFloat>(a, d + start, n);
  }
}

template <ToFloat kToFloat, FromFloat kFromFloat>
void scaleHalfLike(void* buf, size_t count, float factor) {
  uint16_t* d = static_cast<uint16_t*>(buf);
  float a[kBlock];
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t n = count - start < kBlock ? count - start : kBlock;
    widen<kToFloat>(d + start, a, n);
    for (size_t i = 0; i < n; ++i) a[i] *= factor;
    narrow<kFromFloat>(a, d + start, n);
  }
}

template <typename T>
void scaleFloat(void* buf, size_t count, T factor) {
  T* __restrict d = static_cast<T*>(buf);
  for (size_t i = 0; i < count; ++i) d[i] *= factor;
}

// Integers: scaled in float64, truncated toward zero (a C++ conversion, as
// Horovod's ScaleBuffer into an integer type) and saturated to T's range.
// NaN becomes 0.
template <typename T>
void scaleInteger(void* buf, size_t count, double factor, double divisor) {
  T* __restrict d = static_cast<T*>(buf);
  // For int64 the largest T is not exactly representable; 2^63 (the double
  // it rounds to) is out of range, so compare with >= against it.
  const double lo = static_cast<double>(std::numeric_limits<T>::min());
  const double hi = static_cast<double>(std::numeric_limits<T>::max());
  for (size_t i = 0; i < count; ++i) {
    const double v = std::trunc(static_cast<double>(d[i]) * factor / divisor);
    if (v != v) {
      d[i] = 0;
    } else if (v <= lo) {
      d[i] = std::numeric_limits<T>::min();
    } else if (v >= hi) {
      d[i] = std::numeric_limits<T>::max();
    } else {
      d[i] = static_cast<T>(v);
    }
  }
}

}  // namespace

float halfToFloat(uint16_t h) {
  return halfToFloatInline(h);
}
uint16_t floatToHalf(float f) {
  return floatToHalfInline(f);
}
float bfloat16ToFloat(uint16_t b) {
  return bfloat16ToFloatInline(b);
}
uint16_t floatToBfloat16(float f) {
  return floatToBfloat16Inline(f);
}

void halfToFloatBuffer(const uint16_t* in, float* out, size_t count) {
#if TUTTI_X86_F16C
  if (haveF16c()) return widenHalfF16c(in, out, count);
#endif
  widen<halfToFloatInline>(in, out, count);
}
void floatToHalfBuffer(const float* in, uint16_t* out, size_t count) {
#if TUTTI_X86_F16C
  if (haveF16c()) return narrowHalfF16c(in, out, count);
#endif
  narrow<floatToHalfInline>(in, out, count);
}
void bfloat16ToFloatBuffer(const uint16_t* in, float* out, size_t count) {
  widen<bfloat16ToFloatInline>(in, out, count);
}
void floatToBfloat16Buffer(const float* in, uint16_t* out, size_t count) {
  narrow<floatToBfloat16Inline>(in, out, count);
}

void reduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  if (count == 0) return;
  switch (dtype) {
    case DataType::kUInt8:
      return reduceTyped<uint8_t>(dst, src, count, op);
    case DataType::kInt8:
      return reduceTyped<int8_t>(dst, src, count, op);
    case DataType::kInt16:
      return reduceTyped<int16_t>(dst, src, count, op);
    case DataType::kInt32:
      return reduceTyped<int32_t>(dst, src, count, op);
    case DataType::kInt64:
      return reduceTyped<int64_t>(dst, src, count, op);
    case DataType::kFloat16:
#if TUTTI_X86_F16C
      if (haveF16c()) return reduceHalfF16c(dst, src, count, op);
#endif
      return reduceHalfLike<halfToFloatInline, floatToHalfInline>(dst, src, count, op);
    case DataType::kBFloat16:
      return reduceHalfLike<bfloat16ToFloatInline, floatToBfloat16Inline>(dst, src, count, op);
    case DataType::kFloat32:
      return reduceTyped<float>(dst, src, count, op);
    case DataType::kFloat64:
      return reduceTyped<double>(dst, src, count, op);
    case DataType::kBool:
      return reduceBool(dst, src, count, op);
  }
  TUTTI_CHECK_EQ(static_cast<int>(dtype), -1);  // unknown dtype: a bug upstream
}

void scaleInPlace(void* buf, size_t count, DataType dtype, double factor_in, int divisor_in) {
  TUTTI_CHECK(divisor_in >= 1);
  if (count == 0 || (factor_in == 1.0 && divisor_in == 1)) return;
  const double divisor = divisor_in;
  const double factor = factor_in / divisor;  // for floating types
  switch (dtype) {
    case DataType::kUInt8:
      return scaleInteger<uint8_t>(buf, count, factor_in, divisor);
    case DataType::kInt8:
      return scaleInteger<int8_t>(buf, count, factor_in, divisor);
    case DataType::kInt16:
      return scaleInteger<int16_t>(buf, count, factor_in, divisor);
    case DataType::kInt32:
      return scaleInteger<int32_t>(buf, count, factor_in, divisor);
    case DataType::kInt64:
      return scaleInteger<int64_t>(buf, count, factor_in, divisor);
    case DataType::kFloat16:
#if TUTTI_X86_F16C
      if (haveF16c()) return scaleHalfF16c(buf, count, static_cast<float>(factor));
#endif
      return scaleHalfLike<halfToFloatInline, floatToHalfInline>(buf, count,
                                                                 static_cast<float>(factor));
    case DataType::kBFloat16:
      return scaleHalfLike<bfloat16ToFloatInline, floatToBfloat16Inline>(
          buf, count, static_cast<float>(factor));
    case DataType::kFloat32:
      return scaleFloat<float>(buf, count, static_cast<float>(factor));
    case DataType::kFloat64:
      return scaleFloat<double>(buf, count, factor);
    case DataType::kBool:
      return;
  }
  TUTTI_CHECK_EQ(static_cast<int>(dtype), -1);
}

}  // namespace tutti
