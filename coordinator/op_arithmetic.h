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

// The factor applied to a reduction's result: postscale, times 1/size for
// kAverage.
inline double outputScale(const Response& r, int size) {
  return r.postscale * averageFactor(r, size);
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
