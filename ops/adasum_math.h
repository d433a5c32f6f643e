#pragma once

// The arithmetic of Adasum's combine step (ops/algorithms/allreduce_adasum.h),
// per element type. Source: Horovod 0.28.1 horovod/common/ops/adasum/adasum.h
// (ComputeDotAndNormSqrds, ScaledAdd, FusedPairwiseReduceWithComm) and Maleki
// et al., "Scaling Distributed Training with Adaptive Summation", MLSys 2021.
//
// Types: float16, float32 and float64 only (adasumSupportsType). Dot products
// and squared norms are accumulated in float64 (products formed in float64;
// Horovod forms float32 products in float32); the combine a = ca * a + cb * b
// is computed in float64 and rounded once to the element type (float16
// through float32). Pure functions, thread-safe.

#include <cstddef>

#include "core/dtype.h"

namespace tutti {

// float16, float32, float64: the types Horovod's Adasum accepts.
bool adasumSupportsType(DataType dtype);

struct DotAndNorms {
  double dot = 0;      // a . b
  double a_norm2 = 0;  // |a|^2
  double b_norm2 = 0;  // |b|^2
};

// a . b, |a|^2 and |b|^2 over `count` elements of `dtype` (a supported type).
DotAndNorms adasumDotAndNorms(const void* a, const void* b, size_t count, DataType dtype);

struct AdasumCoefficients {
  double a = 1;
  double b = 1;
};

// The coefficients of a' = ca a + cb b given the dot product and squared
// norms summed over every rank that holds a part of the two vectors:
// ca = 1 - dot / (2 |a|^2), cb = 1 - dot / (2 |b|^2); a coefficient is 1 when
// its vector's squared norm is below sqrt(DBL_MIN), about 1.49e-154
// (Horovod's guard for zero vectors), so a zero vector leaves the other
// unchanged. Vectors of tiny magnitude (float32's smallest normal, 1.2e-38)
// are combined, not summed; float64 values below about 1e-154 square to
// zero and count as zero, as in Horovod.
AdasumCoefficients adasumCoefficients(double dot, double a_norm2, double b_norm2);

// a[i] = ca * a[i] + cb * b[i] for i < count. `a` and `b` must not overlap.
void adasumScaledAdd(void* a, double ca, const void* b, double cb, size_t count, DataType dtype);

}  // namespace tutti
