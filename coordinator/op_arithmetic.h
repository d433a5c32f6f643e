#pragma once

// What every executor (coordinator/executor.h, coordinator/device_executor.h,
// coordinator/compressed_allreduce.h) derives from a Response the same way:
// backends reduce kAverage as a sum and the executor divides by the world
// size afterwards (or, for 16-bit casts, before the sum); outputs sized by
// the runtime keep the input's shape but for the first dimension.
//
// Pure functions.

#include <cstdint>

#include "core/message.h"
#include "core/tensor.h"

namespace tutti {

// The op the backend runs for `op`: kSum for kAverage, else `op`.
inline ReduceOp backendOp(ReduceOp op) {
  return op == ReduceOp::kAverage ? ReduceOp::kSum : op;
}

// 1/size for kAverage, else 1.
inline double averageFactor(const Response& r, int size) {
  return r.reduce_op == ReduceOp::kAverage ? 1.0 / size : 1.0;
}

// What a reduction's result is divided by: size for kAverage (every rank of
// the job, joined ones included), else 1. The result is scaled with
// scaleInPlace(..., r.postscale, averageDivisor(r, size)) (ops/reduce.h), so
// that an integer average is the sum divided by size, truncated, as Horovod's.
inline int averageDivisor(const Response& r, int size) {
  return r.reduce_op == ReduceOp::kAverage ? size : 1;
}

// The factor applied to a floating-point reduction's result: postscale /
// averageDivisor (what scaleInPlace multiplies floats by).
inline double outputScale(const Response& r, int size) {
  return r.postscale / averageDivisor(r, size);
}

// `shape` with its first dimension set to `first` (a 0-dimensional shape
// becomes [first]).
inline Shape withFirstDim(const Shape& shape, int64_t first) {
  Shape out = shape;
  if (out.empty()) out.push_back(first);
  out[0] = first;
  return out;
}

}  // namespace tutti
