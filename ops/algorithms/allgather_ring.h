#pragma once

// Ring allgather(v), pipelined in segments: at step s rank r forwards block
// r-s to its right neighbour and receives block r-s-1 from its left one; each
// segment is forwarded as soon as it arrived. Blocks may be uneven or empty
// (empty blocks send nothing, on both sides).
//
// Threading: runs on the caller's thread, which owns the Transport for the
// call. Blocking: returns when every op this rank posted completed, or with
// the first transport error (kPeerLost/kTimeout passed through). Every rank
// must make the same call with the same block sizes and segment size.

#include <cstddef>
#include <vector>

#include "core/status.h"
#include "ops/algorithms/ring.h"
#include "ops/transport.h"

namespace tutti {

// In place, in bytes: on entry `buf` holds this rank's block at
// blocks.offset[rank]; on return it holds every rank's block.
// `segment_bytes` 0 means ring::kDefaultSegmentBytes.
Status ringAllgatherInPlace(Transport& transport, void* buf, const ring::Blocks& blocks,
                            size_t segment_bytes);

// Backend::allgatherv: rank r contributes bytes_per_rank[r] bytes from
// `input`; `output` receives every rank's bytes in rank order.
// bytes_per_rank.size() must equal the world size. `ring_order`: the ranks in
// the order the ring visits them, where `transport`'s rank p is rank
// ring_order[p] (HostGroups::hostOrdered() with layout().host_order, so that
// the ring crosses each link once per step); empty: `transport`'s own order.
// The output is the same byte for byte in any order.
Status allgatherRing(Transport& transport, const void* input, void* output,
                     const std::vector<size_t>& bytes_per_rank, size_t segment_bytes,
                     const std::vector<int>& ring_order = {});

}  // namespace tutti
