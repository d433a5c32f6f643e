#pragma once

// Adasum allreduce: adaptive summation of every rank's vector, by recursive
// vector halving and distance doubling, then distance halving to gather the
// result back. Source: Horovod 0.28.1, horovod/common/ops/adasum/adasum.h
// (Adasum::FusedAllreduce, FusedPairwiseReduceWithComm) and
// adasum_mpi.cc (its reduction groups); the method is Maleki et al., "Scaling
// Distributed Training with Adaptive Summation", MLSys 2021.
//
// What it computes, per tensor: the ranks' vectors combine pairwise up a
// binary tree, ranks (0,1), (2,3), ... first, then the results of (0,1) and
// (2,3), and so on; two vectors a (lower ranks) and b (upper ranks) combine as
//   a' = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
// (ops/adasum_math.h: a vector with |v|^2 < 1e-8 keeps coefficient 1).
// Orthogonal vectors add; equal vectors give that vector.
//
// How, on `size` = 2^k ranks: at distance d = 1, 2, ..., size/2 each rank
// sends the half of its current segment that its partner rank ^ d keeps and
// receives the partner's copy of the half it keeps; the partial dot products
// and squared norms of the kept halves (float64, three per tensor) are summed
// over the 2d ranks that hold parts of the two vectors (recursive doubling:
// every one of them ends with the same sums), and each rank combines its half
// with the coefficients. Then at d = size/2, ..., 1 the partners swap their
// segments, so every rank ends with the whole result. Each rank sends about
// 2 (size-1)/size of the buffer, plus 24 bytes per tensor per step of the
// dot-product sums.
//
// Tensor boundaries: `counts` lists the tensors laid end to end in `buf`
// (a fused buffer); dot products and norms are per tensor, so the result is
// that of each tensor reduced alone (Horovod's tensor_counts).
//
// Transport: ranks 0..size-1 of `transport` (the whole world, or a process
// set's sub-transport); point-to-point only. Every rank must call with the
// same counts and dtype.
//
// Threading and blocking: as ops/algorithms/allreduce_ring.h (the caller's
// thread owns the transport for the call; returns when done on this rank or
// with the first transport error, the buffer then unspecified).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "ops/transport.h"

namespace tutti {

// ok for 1, 2, 4, 8, ...; else kInvalidArgument naming `size` and what is
// accepted (Horovod runs Adasum on power-of-two sizes only).
Status checkAdasumSize(int size);
// ok for float16, float32, float64; else kInvalidArgument naming the dtype.
Status checkAdasumType(DataType dtype);

// In place over `buf` (sum(counts) elements of `dtype`). `scratch` is resized
// to half the buffer and may be reused between calls. kInvalidArgument (before
// anything is sent) for a size or dtype the checks above reject.
Status allreduceAdasum(Transport& transport, void* buf, const std::vector<size_t>& counts,
                       DataType dtype, std::vector<uint8_t>* scratch);

}  // namespace tutti
