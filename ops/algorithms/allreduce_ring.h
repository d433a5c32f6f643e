#pragma once

// Ring allreduce = ring reduce-scatter + ring allgather, both pipelined in
// segments of `segment_bytes` (rounded down to whole elements; 0 means
// ring::kDefaultSegmentBytes). Bandwidth-optimal: each rank sends and
// receives 2(n-1)/n of the buffer.
//
// Threading: runs on the caller's thread, which owns the Transport for the
// call. Blocking: returns when done on this rank, or with the first transport
// error (kPeerLost/kTimeout passed through); the buffer's contents are then
// unspecified. Every rank must call with the same count, dtype, op and
// segment size. count 0 sends nothing.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "ops/transport.h"

namespace tutti {

// In place: buf[i] = op over ranks of buf[i] for `count` elements of `dtype`.
// kAverage reduces as kSum (the caller scales). `scratch` holds two received
// segments; it is resized as needed and may be reused between calls.
Status allreduceRing(Transport& transport, void* buf, size_t count, DataType dtype, ReduceOp op,
                     size_t segment_bytes, std::vector<uint8_t>* scratch);

// Out of place: out[i] = op over ranks of in[i]; `in` is only read (it is
// this rank's first contribution; received segments land straight in `out`),
// so no copy of the input is made. `in` and `out` must not overlap unless
// they are equal (then this is the in-place call above).
Status allreduceRing(Transport& transport, const void* in, void* out, size_t count, DataType dtype,
                     ReduceOp op, size_t segment_bytes, std::vector<uint8_t>* scratch);

}  // namespace tutti
