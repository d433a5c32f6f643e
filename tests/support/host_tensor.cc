#include "tests/support/host_tensor.h"

#include <cmath>
#include <cstring>
#include <sstream>

namespace tutti {
namespace test {

uint16_t floatToHalf(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int32_t biased = static_cast<int32_t>((x >> 23) & 0xffu);
  uint32_t mantissa = x & 0x7fffffu;
  if (biased == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
  const int32_t exponent = biased - 127 + 15;
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exponent <= 0) {  // subnormal half (or zero)
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    const int shift = 14 - exponent;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  // A carry out of the mantissa correctly bumps the exponent.
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float halfToFloat(uint16_t bits) {
  const bool negative = (bits & 0x8000u) != 0;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa ? NAN : INFINITY;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  }
  return negative ? -magnitude : magnitude;
}

uint16_t floatToBFloat16(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  if (std::isnan(value)) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float bfloat16ToFloat(uint16_t bits) {
  const uint32_t x = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &x, sizeof(value));
  return value;
}

namespace {

template <typename T>
double load(const void* data, int64_t index) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(data) + index * sizeof(T), sizeof(T));
  return static_cast<double>(v);
}

template <typename T>
void store(void* data, int64_t index, T v) {
  std::memcpy(static_cast<uint8_t*>(data) + index * sizeof(T), &v, sizeof(T));
}

}  // namespace

double getElement(DataType dtype, const void* data, int64_t index) {
  switch (dtype) {
    case DataType::kUInt8:
      return load<uint8_t>(data, index);
    case DataType::kInt8:
      return load<int8_t>(data, index);
    case DataType::kInt16:
      return load<int16_t>(data, index);
    case DataType::kInt32:
      return load<int32_t>(data, index);
    case DataType::kInt64:
      return load<int64_t>(data, index);
    case DataType::kUInt16:
      return load<uint16_t>(data, index);
    case DataType::kUInt32:
      return load<uint32_t>(data, index);
    case DataType::kUInt64:
      return load<uint64_t>(data, index);
    case DataType::kFloat16: {
      uint16_t bits;
      std::memcpy(&bits, static_cast<const uint8_t*>(data) + index * 2, 2);
      return halfToFloat(bits);
    }
    case DataType::kBFloat16: {
      uint16_t bits;
      std::memcpy(&bits, static_cast<const uint8_t*>(data) + index * 2, 2);
      return bfloat16ToFloat(bits);
    }
    case DataType::kFloat32:
      return load<float>(data, index);
    case DataType::kFloat64:
      return load<double>(data, index);
    case DataType::kBool:
      return load<uint8_t>(data, index) != 0 ? 1.0 : 0.0;
  }
  return NAN;
}

void setElement(DataType dtype, void* data, int64_t index, double value) {
  switch (dtype) {
    case DataType::kUInt8:
      return store<uint8_t>(data, index, static_cast<uint8_t>(std::llround(value)));
    case DataType::kInt8:
      return store<int8_t>(data, index, static_cast<int8_t>(std::llround(value)));
    case DataType::kInt16:
      return store<int16_t>(data, index, static_cast<int16_t>(std::llround(value)));
    case DataType::kInt32:
      return store<int32_t>(data, index, static_cast<int32_t>(std::llround(value)));
    case DataType::kInt64:
      return store<int64_t>(data, index, static_cast<int64_t>(std::llround(value)));
    case DataType::kUInt16:
      return store<uint16_t>(data, index, static_cast<uint16_t>(std::llround(value)));
    case DataType::kUInt32:
      return store<uint32_t>(data, index, static_cast<uint32_t>(std::llround(value)));
    case DataType::kUInt64:
      return store<uint64_t>(data, index, static_cast<uint64_t>(std::llround(value)));
    case DataType::kFloat16:
      return store<uint16_t>(data, index, floatToHalf(static_cast<float>(value)));
    case DataType::kBFloat16:
      return store<uint16_t>(data, index, floatToBFloat16(static_cast<float>(value)));
    case DataType::kFloat32:
      return store<float>(data, index, static_cast<float>(value));
    case DataType::kFloat64:
      return store<double>(data, index, value);
    case DataType::kBool:
      return store<uint8_t>(data, index, value != 0 ? 1 : 0);
  }
}

double roundTrip(DataType dtype, double value) {
  uint8_t buffer[8] = {};
  setElement(dtype, buffer, 0, value);
  return getElement(dtype, buffer, 0);
}

HostTensor::HostTensor(DataType dtype, Shape shape)
    : dtype_(dtype),
      shape_(std::move(shape)),
      bytes_(static_cast<size_t>(tutti::numElements(shape_)) * dataTypeSize(dtype)) {}

void HostTensor::fill(const ElementFn& value) {
  const int64_t n = numElements();
  for (int64_t i = 0; i < n; ++i) set(i, value(i));
}

::testing::AssertionResult elementsMatch(DataType dtype, const void* data, int64_t count,
                                         const ElementFn& expected, double rel_tol) {
  constexpr int kShown = 5;
  int64_t wrong = 0;
  std::ostringstream detail;
  for (int64_t i = 0; i < count; ++i) {
    const double want = roundTrip(dtype, expected(i));
    const double got = getElement(dtype, data, i);
    bool ok = got == want;
    if (!ok && rel_tol > 0)
      ok = std::fabs(got - want) <= rel_tol * std::max(std::fabs(want), 1e-30);
    if (ok) continue;
    if (wrong < kShown) detail << "\n  element " << i << ": expected " << want << ", got " << got;
    ++wrong;
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << wrong << " of " << count << " " << dataTypeName(dtype)
                                       << " elements differ" << detail.str();
}

::testing::AssertionResult elementsMatch(const OwnedTensor& tensor, const ElementFn& expected,
                                         double rel_tol) {
  const int64_t count = tutti::numElements(tensor.shape);
  const size_t want_bytes = static_cast<size_t>(count) * dataTypeSize(tensor.dtype);
  if (tensor.bytes.size() != want_bytes) {
    return ::testing::AssertionFailure()
           << "output holds " << tensor.bytes.size() << " bytes, shape "
           << shapeToString(tensor.shape) << " needs " << want_bytes;
  }
  return elementsMatch(tensor.dtype, tensor.bytes.data(), count, expected, rel_tol);
}

::testing::AssertionResult elementsMatch(const HostTensor& tensor, const ElementFn& expected,
                                         double rel_tol) {
  return elementsMatch(tensor.dtype(), tensor.data(), tensor.numElements(), expected, rel_tol);
}

const std::vector<DataType>& allDataTypes() {
  static const std::vector<DataType> all = [] {
    std::vector<DataType> v;
    for (int i = 0; i < kNumDataTypes; ++i) v.push_back(static_cast<DataType>(i));
    return v;
  }();
  return all;
}

bool isSignedOrFloat(DataType dtype) {
  return dtype != DataType::kUInt8 && dtype != DataType::kUInt16 && dtype != DataType::kUInt32 &&
         dtype != DataType::kUInt64 && dtype != DataType::kBool;
}

bool isInteger(DataType dtype) {
  return !isFloatingPoint(dtype) && dtype != DataType::kBool;
}

}  // namespace test
}  // namespace tutti
