#pragma once

// CPU reduction and scaling kernels, written so that the compiler vectorises
// them (-O3, contiguous loops, no aliasing). float16 and bfloat16 are reduced
// in float32 and rounded back (round to nearest even; core/half.h, included
// here for the kernels' users).

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/half.h"

namespace tutti {

// dst[i] = dst[i] op src[i] for i < count. `op` is kSum, kMin, kMax or
// kProduct (kAverage reduces as kSum; kAdasum is not element-wise and is a
// bug here: ops/algorithms/allreduce_adasum.h). bool: sum and max are logical or,
// min and product logical and.
void reduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op);

// buf[i] = buf[i] * factor / divisor (divisor >= 1: the number of ranks of
// an average). Floating types multiply by factor / divisor in their own
// precision (float16/bfloat16 via float32). Integers, as Horovod's
// ScaleBuffer: in float64, x * factor then / divisor, truncated toward zero
// (75 / 2 -> 37, -75 / 2 -> -37, 3 * 0.5 -> 1) and saturated to the type's
// range; NaN becomes 0. Dividing (not multiplying by 1 / divisor) keeps exact
// multiples exact (49 * (1.0 / 49) is just below 1). bool is left unchanged.
// factor == 1 with divisor == 1, or count == 0, touches nothing (so int64
// values beyond 2^53 pass exactly).
void scaleInPlace(void* buf, size_t count, DataType dtype, double factor, int divisor = 1);

}  // namespace tutti
