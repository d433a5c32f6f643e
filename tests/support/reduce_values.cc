#include "tests/support/reduce_values.h"

#include <algorithm>

#include "tests/support/host_tensor.h"

namespace tutti {
namespace test {

double baseValue(DataType dtype, int64_t index) {
  const double x = static_cast<double>(index % 11);
  return isSignedOrFloat(dtype) ? x - 5 : x;
}

double reduceInput(DataType dtype, ReduceOp op, int64_t index, int rank, int size) {
  if (dtype == DataType::kBool) {
    const bool hit = (index + rank) % (size + 1) == 0;
    const bool logical_and = op == ReduceOp::kMin || op == ReduceOp::kProduct;
    return (logical_and ? !hit : hit) ? 1 : 0;
  }
  const double x = baseValue(dtype, index);
  switch (op) {
    case ReduceOp::kSum:
      return x + rank;
    case ReduceOp::kAverage:
      return x + 2.0 * rank;
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return x + static_cast<double>((index * (rank + 1) + rank) % 7);
    case ReduceOp::kProduct: {
      static const double kSigned[] = {2, -1, 3, 1};
      static const double kUnsigned[] = {2, 3, 1, 1};
      const int64_t k = (index + rank) % 4;
      return isSignedOrFloat(dtype) ? kSigned[k] : kUnsigned[k];
    }
    case ReduceOp::kAdasum:  // not element-wise: tests/cases/adasum_test.cc
      break;
  }
  return 0;
}

double reduceExpected(DataType dtype, ReduceOp op, int64_t index, int size) {
  double acc = reduceInput(dtype, op, index, 0, size);
  for (int r = 1; r < size; ++r) {
    const double v = reduceInput(dtype, op, index, r, size);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc += v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      case ReduceOp::kAdasum:
        break;
    }
  }
  if (op == ReduceOp::kAverage) acc /= size;
  if (dtype == DataType::kBool) acc = acc != 0 ? 1 : 0;
  return acc;
}

bool opAllowed(DataType dtype, ReduceOp op) {
  // Adasum is not element-wise: tests/cases/adasum_test.cc checks it.
  if (op == ReduceOp::kAdasum) return false;
  return !(dtype == DataType::kBool && op == ReduceOp::kAverage);
}

double reduceTolerance(DataType dtype, ReduceOp op) {
  if (op != ReduceOp::kAverage) return 0;
  switch (dtype) {
    case DataType::kFloat16:
      return 1e-3;
    case DataType::kBFloat16:
      return 8e-3;
    case DataType::kFloat32:
    case DataType::kFloat64:
      return 1e-4;
    default:
      return 0;
  }
}

}  // namespace test
}  // namespace tutti
