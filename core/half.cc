#include "core/half.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TUTTI_X86_F16C 1
#endif

namespace tutti {
namespace {

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
  for (; i < n; ++i) out[i] = halfToFloat(in[i]);
}

__attribute__((target("avx,f16c"))) void narrowHalfF16c(const float* __restrict in,
                                                        uint16_t* __restrict out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = floatToHalf(in[i]);
}

#endif

}  // namespace

void halfToFloatBuffer(const uint16_t* in, float* out, size_t count) {
#if TUTTI_X86_F16C
  if (haveF16c()) return widenHalfF16c(in, out, count);
#endif
  widen<halfToFloat>(in, out, count);
}
void floatToHalfBuffer(const float* in, uint16_t* out, size_t count) {
#if TUTTI_X86_F16C
  if (haveF16c()) return narrowHalfF16c(in, out, count);
#endif
  narrow<floatToHalf>(in, out, count);
}
void bfloat16ToFloatBuffer(const uint16_t* in, float* out, size_t count) {
  widen<bfloat16ToFloat>(in, out, count);
}
void floatToBfloat16Buffer(const float* in, uint16_t* out, size_t count) {
  narrow<floatToBfloat16>(in, out, count);
}

}  // namespace tutti
