#pragma once

// Recursive-doubling allreduce for small buffers: log2(p) rounds in which
// every rank swaps its whole buffer with one partner and reduces, where p is
// the largest power of two <= n. Latency-optimal (log2 p messages on the
// critical path, against 2(n-1) for the ring) but every round sends the whole
// buffer, so the ring (allreduce_ring.h) wins for large ones.
//
// Non-power-of-two worlds use the usual fold-in (Thakur, Rabenseifner and
// Gropp, "Optimization of Collective Communication Operations in MPICH",
// 2005, section 4.1): with r = n - p, each even rank below 2r sends its buffer
// to the odd rank above it and sits out; the remaining p ranks run the rounds;
// each odd rank below 2r then sends the result back to its even neighbour.
//
// Determinism: both partners of a round compute `lower rank's data op higher
// rank's data` (reduceInto with the lower rank's values as the destination),
// so every rank ends with the same bits, floats included. Integer results
// equal the ring's (the ops are exact or wrap the same way).
//
// Threading: runs on the caller's thread, which owns the Transport for the
// call. Blocking: returns when done on this rank, or with the first transport
// error (kPeerLost/kTimeout passed through); `out` is then unspecified. Every
// rank must call with the same count, dtype and op. kAverage reduces as kSum
// (the caller scales). count 0 sends nothing.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "ops/transport.h"

namespace tutti {

// Pure peer arithmetic (no I/O), unit-tested in tests/ops/small_algorithms_test.cc.
namespace recursive_doubling {

// Largest power of two <= n (n >= 1).
int powerOfTwoBelow(int n);
// This rank's index among the p ranks that run the rounds, or -1 for an even
// rank below 2(n - p), which folds its data into rank + 1 and sits out.
int virtualRank(int rank, int n);
// The real rank of virtual rank `vrank` (0 <= vrank < p): inverse of virtualRank.
int realRank(int vrank, int n);
// The partner of `rank` in the round of distance `mask` (1, 2, 4, ... < p);
// -1 for a rank that sits out.
int partner(int rank, int n, int mask);

}  // namespace recursive_doubling

// out[i] = op over ranks of in[i] for `count` elements of `dtype`; in == out
// is the in-place call, otherwise they must not overlap. `scratch` holds one
// received buffer (count elements); it is resized as needed and may be
// reused between calls.
Status allreduceRecursiveDoubling(Transport& transport, const void* in, void* out, size_t count,
                                  DataType dtype, ReduceOp op, std::vector<uint8_t>* scratch);

}  // namespace tutti
