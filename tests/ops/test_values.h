#pragma once

// Test helpers: read and write elements of any DataType as double, and the
// exact expected result of a reduction. Values used with these helpers are
// small integers, exact in every type (float16 and bfloat16 included).

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "ops/reduce.h"

namespace tutti::testing {

inline const std::vector<DataType>& allDataTypes() {
  static const std::vector<DataType> kAll = {
      DataType::kUInt8,   DataType::kInt8,    DataType::kInt16,    DataType::kInt32,
      DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
      DataType::kFloat64, DataType::kBool,    DataType::kUInt16,   DataType::kUInt32,
      DataType::kUInt64};
  return kAll;
}

inline const std::vector<ReduceOp>& allReduceOps() {
  static const std::vector<ReduceOp> kAll = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                                             ReduceOp::kMax, ReduceOp::kProduct};
  return kAll;
}

inline bool isSigned(DataType t) {
  return t != DataType::kUInt8 && t != DataType::kUInt16 && t != DataType::kUInt32 &&
         t != DataType::kUInt64 && t != DataType::kBool;
}

template <typename T>
void storeAs(void* buf, size_t i, T v) {
  std::memcpy(static_cast<uint8_t*>(buf) + i * sizeof(T), &v, sizeof(T));
}
template <typename T>
T loadAs(const void* buf, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(buf) + i * sizeof(T), sizeof(T));
  return v;
}

inline void setValue(void* buf, DataType t, size_t i, double v) {
  switch (t) {
    case DataType::kUInt8:
      return storeAs<uint8_t>(buf, i, static_cast<uint8_t>(v));
    case DataType::kInt8:
      return storeAs<int8_t>(buf, i, static_cast<int8_t>(v));
    case DataType::kInt16:
      return storeAs<int16_t>(buf, i, static_cast<int16_t>(v));
    case DataType::kInt32:
      return storeAs<int32_t>(buf, i, static_cast<int32_t>(v));
    case DataType::kInt64:
      return storeAs<int64_t>(buf, i, static_cast<int64_t>(v));
    case DataType::kUInt16:
      return storeAs<uint16_t>(buf, i, static_cast<uint16_t>(v));
    case DataType::kUInt32:
      return storeAs<uint32_t>(buf, i, static_cast<uint32_t>(v));
    case DataType::kUInt64:
      return storeAs<uint64_t>(buf, i, static_cast<uint64_t>(v));
    case DataType::kFloat16:
      return storeAs<uint16_t>(buf, i, floatToHalf(static_cast<float>(v)));
    case DataType::kBFloat16:
      return storeAs<uint16_t>(buf, i, floatToBfloat16(static_cast<float>(v)));
    case DataType::kFloat32:
      return storeAs<float>(buf, i, static_cast<float>(v));
    case DataType::kFloat64:
      return storeAs<double>(buf, i, v);
    case DataType::kBool:
      return storeAs<uint8_t>(buf, i, v != 0 ? 1 : 0);
  }
}

inline double getValue(const void* buf, DataType t, size_t i) {
  switch (t) {
    case DataType::kUInt8:
      return loadAs<uint8_t>(buf, i);
    case DataType::kInt8:
      return loadAs<int8_t>(buf, i);
    case DataType::kInt16:
      return loadAs<int16_t>(buf, i);
    case DataType::kInt32:
      return loadAs<int32_t>(buf, i);
    case DataType::kInt64:
      return static_cast<double>(loadAs<int64_t>(buf, i));
    case DataType::kUInt16:
      return loadAs<uint16_t>(buf, i);
    case DataType::kUInt32:
      return loadAs<uint32_t>(buf, i);
    case DataType::kUInt64:
      return static_cast<double>(loadAs<uint64_t>(buf, i));
    case DataType::kFloat16:
      return halfToFloat(loadAs<uint16_t>(buf, i));
    case DataType::kBFloat16:
      return bfloat16ToFloat(loadAs<uint16_t>(buf, i));
    case DataType::kFloat32:
      return loadAs<float>(buf, i);
    case DataType::kFloat64:
      return loadAs<double>(buf, i);
    case DataType::kBool:
      return loadAs<uint8_t>(buf, i);
  }
  return 0;
}

// Input of rank `rank` at element `i` for reductions with `op`: small
// integers chosen so that the reduction over up to 8 ranks is exact and in
// range for every type (sums <= 72; products <= 8 in magnitude).
inline double inputValue(DataType t, ReduceOp op, int rank, size_t i) {
  const long k = static_cast<long>(i) * 7 + rank * 13;
  if (t == DataType::kBool) return (i + rank) % 3 == 0 ? 1 : 0;
  if (op == ReduceOp::kProduct) {
    if ((i + rank) % 3 == 0) return 2;
    if (isSigned(t) && (i + 2 * rank) % 5 == 1) return -1;
    return 1;
  }
  const double v = static_cast<double>(k % 10);
  return isSigned(t) ? v - 4 : v;
}

inline double applyOp(DataType t, ReduceOp op, double a, double b) {
  if (t == DataType::kBool) {
    const bool x = a != 0, y = b != 0;
    return (op == ReduceOp::kMin || op == ReduceOp::kProduct) ? (x && y) : (x || y);
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return a + b;
    case ReduceOp::kMin:
      return b < a ? b : a;
    case ReduceOp::kMax:
      return a < b ? b : a;
    case ReduceOp::kProduct:
      return a * b;
    case ReduceOp::kAdasum:  // not element-wise: tests/ops/adasum_test.cc
      break;
  }
  return 0;
}

// Expected reduction over ranks [0, size) at element i.
inline double expectedValue(DataType t, ReduceOp op, int size, size_t i) {
  double acc = inputValue(t, op, 0, i);
  for (int r = 1; r < size; ++r) acc = applyOp(t, op, acc, inputValue(t, op, r, i));
  return acc;
}

}  // namespace tutti::testing
