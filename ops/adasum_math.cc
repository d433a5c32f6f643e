#include "ops/adasum_math.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "core/half.h"

namespace tutti {
namespace {

// float16 is widened to float32 in blocks of this many elements (on the
// stack), as ops/reduce.cc does.
constexpr size_t kBlock = 256;

template <typename T>
void accumulate(const T* __restrict a, const T* __restrict b, size_t count, DotAndNorms* out) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < count; ++i) {
    const double x = static_cast<double>(a[i]);
    const double y = static_cast<double>(b[i]);
    dot += x * y;
    aa += x * x;
    bb += y * y;
  }
  out->dot += dot;
  out->a_norm2 += aa;
  out->b_norm2 += bb;
}

template <typename T>
void scaledAdd(T* __restrict a, double ca, const T* __restrict b, double cb, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    a[i] = static_cast<T>(ca * static_cast<double>(a[i]) + cb * static_cast<double>(b[i]));
  }
}

// Calls fn(fa, fb, n) on float32 copies of the float16 arrays a and b, kBlock
// elements at a time; with a_out set, each block of fa is written back there
// as float16 after fn (a_out may be a).
template <typename Fn>
void forHalfBlocks(const uint16_t* a, const uint16_t* b, size_t count, uint16_t* a_out, Fn fn) {
  float fa[kBlock], fb[kBlock];
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t n = std::min(kBlock, count - start);
    halfToFloatBuffer(a + start, fa, n);
    halfToFloatBuffer(b + start, fb, n);
    fn(fa, fb, n);
    if (a_out != nullptr) floatToHalfBuffer(fa, a_out + start, n);
  }
}

}  // namespace

bool adasumSupportsType(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

DotAndNorms adasumDotAndNorms(const void* a, const void* b, size_t count, DataType dtype) {
  DotAndNorms out;
  switch (dtype) {
    case DataType::kFloat32:
      accumulate(static_cast<const float*>(a), static_cast<const float*>(b), count, &out);
      return out;
    case DataType::kFloat64:
      accumulate(static_cast<const double*>(a), static_cast<const double*>(b), count, &out);
      return out;
    case DataType::kFloat16:
      forHalfBlocks(static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), count,
                    nullptr, [&](float* fa, float* fb, size_t n) { accumulate(fa, fb, n, &out); });
      return out;
    default:
      break;
  }
  TUTTI_CHECK(adasumSupportsType(dtype));  // a caller's bug: validation rejects the rest
  return out;
}

AdasumCoefficients adasumCoefficients(double dot, double a_norm2, double b_norm2) {
  // Horovod's threshold (adasum.h, FusedPairwiseReduceWithComm): a squared
  // norm below sqrt(DBL_MIN), about 1.5e-154, counts as a zero vector.
  static const double kZeroNorm2 = std::sqrt(DBL_MIN);
  AdasumCoefficients c;
  if (a_norm2 >= kZeroNorm2) c.a = 1.0 - dot / a_norm2 * 0.5;
  if (b_norm2 >= kZeroNorm2) c.b = 1.0 - dot / b_norm2 * 0.5;
  return c;
}

void adasumScaledAdd(void* a, double ca, const void* b, double cb, size_t count, DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return scaledAdd(static_cast<float*>(a), ca, static_cast<const float*>(b), cb, count);
    case DataType::kFloat64:
      return scaledAdd(static_cast<double*>(a), ca, static_cast<const double*>(b), cb, count);
    case DataType::kFloat16: {
      auto* ha = static_cast<uint16_t*>(a);
      forHalfBlocks(ha, static_cast<const uint16_t*>(b), count, ha,
                    [&](float* fa, float* fb, size_t n) { scaledAdd(fa, ca, fb, cb, n); });
      return;
    }
    default:
      break;
  }
  TUTTI_CHECK(adasumSupportsType(dtype));
}

}  // namespace tutti
