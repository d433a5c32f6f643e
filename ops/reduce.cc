#include "ops/reduce.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/check.h"

// Why the kernels look the way they do: each is a plain loop over __restrict
// pointers, templated per element type and per operator, so that -O3 turns it
// into SIMD code. The operator is a template parameter (not a runtime switch
// inside the loop). float16/bfloat16 are widened in blocks to float32 scratch
// on the stack, reduced there, and rounded back once (core/half.h).

namespace tutti {
namespace {

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

// float16/bfloat16: widened in blocks to float32 on the stack (core/half.h's
// whole-buffer conversions, F16C where the CPU has it), reduced or scaled
// there, rounded back once.
using WidenBuffer = void (*)(const uint16_t*, float*, size_t);
using NarrowBuffer = void (*)(const float*, uint16_t*, size_t);

void reduceHalfLike(void* dst, const void* src, size_t count, ReduceOp op, WidenBuffer widen,
                    NarrowBuffer narrow) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  float a[kBlock];
  float b[kBlock];
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t n = count - start < kBlock ? count - start : kBlock;
    widen(d + start, a, n);
    widen(s + start, b, n);
    reduceTyped<float>(a, b, n, op);
    narrow(a, d + start, n);
  }
}

void scaleHalfLike(void* buf, size_t count, float factor, WidenBuffer widen, NarrowBuffer narrow) {
  uint16_t* d = static_cast<uint16_t*>(buf);
  float a[kBlock];
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t n = count - start < kBlock ? count - start : kBlock;
    widen(d + start, a, n);
    for (size_t i = 0; i < n; ++i) a[i] *= factor;
    narrow(a, d + start, n);
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
      return reduceHalfLike(dst, src, count, op, halfToFloatBuffer, floatToHalfBuffer);
    case DataType::kBFloat16:
      return reduceHalfLike(dst, src, count, op, bfloat16ToFloatBuffer, floatToBfloat16Buffer);
    case DataType::kFloat32:
      return reduceTyped<float>(dst, src, count, op);
    case DataType::kFloat64:
      return reduceTyped<double>(dst, src, count, op);
    case DataType::kBool:
      return reduceBool(dst, src, count, op);
    case DataType::kUInt16:
      return reduceTyped<uint16_t>(dst, src, count, op);
    case DataType::kUInt32:
      return reduceTyped<uint32_t>(dst, src, count, op);
    case DataType::kUInt64:
      return reduceTyped<uint64_t>(dst, src, count, op);
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
      return scaleHalfLike(buf, count, static_cast<float>(factor), halfToFloatBuffer,
                           floatToHalfBuffer);
    case DataType::kBFloat16:
      return scaleHalfLike(buf, count, static_cast<float>(factor), bfloat16ToFloatBuffer,
                           floatToBfloat16Buffer);
    case DataType::kFloat32:
      return scaleFloat<float>(buf, count, static_cast<float>(factor));
    case DataType::kFloat64:
      return scaleFloat<double>(buf, count, factor);
    case DataType::kBool:
      return;
    case DataType::kUInt16:
      return scaleInteger<uint16_t>(buf, count, factor_in, divisor);
    case DataType::kUInt32:
      return scaleInteger<uint32_t>(buf, count, factor_in, divisor);
    case DataType::kUInt64:
      return scaleInteger<uint64_t>(buf, count, factor_in, divisor);
  }
  TUTTI_CHECK_EQ(static_cast<int>(dtype), -1);
}

}  // namespace tutti
