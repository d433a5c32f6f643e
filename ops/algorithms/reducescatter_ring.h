#pragma once

// Ring reduce-scatter, pipelined in segments. Used on its own (Backend::
// reducescatter) and as the first half of ring allreduce.
//
// Threading: runs on the caller's thread (the background thread), which owns
// the Transport for the duration of the call. Blocking: returns when this
// rank's part is done (every op it posted completed) or on the first
// transport error (kPeerLost/kTimeout from the Transport, passed through).
// Every rank of the transport must make the same call with the same block
// sizes, dtype and segment size.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "ops/algorithms/ring.h"
#include "ops/transport.h"

namespace tutti {

// The ring core. Rank r ends with the reduction of block r (in elements of
// `dtype`) over all ranks in `own_out`.
// - In place (`in == acc`): received segments land in `scratch` (resized to
//   two segments, reused across calls) and are reduced into `acc`; `own_out`
//   must be acc's block r. Blocks other than r in `acc` hold partial
//   reductions afterwards.
// - Out of place (`in != acc`): `in` is only read; received segments land in
//   `acc` (same layout as `in`, at least blocks.total() elements) and this
//   rank's contribution is reduced into them; block r lands in `own_out`.
// At step s rank r sends block r-s-1 to its right neighbour and receives block
// r-s-2 from its left one; a segment is forwarded as soon as it is reduced, so
// sending, receiving and reducing overlap.
Status ringReduceScatterBlocks(Transport& transport, const void* in, void* acc, void* own_out,
                               const ring::Blocks& blocks, DataType dtype, ReduceOp op,
                               size_t segment_bytes, std::vector<uint8_t>* scratch);

// Backend::reducescatter: `input` holds sum(counts) elements; this rank's
// reduced block (counts[rank] elements) goes to `output`. `work` is reused
// between calls (sized to the input). counts.size() must equal the world size.
// `ring_order` as for allgatherRing (ops/algorithms/allgather_ring.h): counts
// stay indexed by rank; the order changes which rank adds which partial sum,
// so floating-point results may differ in the last bits between orders.
Status reducescatterRing(Transport& transport, const void* input, void* output,
                         const std::vector<size_t>& counts, DataType dtype, ReduceOp op,
                         size_t segment_bytes, std::vector<uint8_t>* work,
                         const std::vector<int>& ring_order = {});

}  // namespace tutti
