#pragma once

// Pipelined chain broadcast: root -> root+1 -> ... -> root-1, in segments of
// `segment_bytes` (0: ring::kDefaultSegmentBytes). Every rank forwards a
// segment as soon as it arrived, so a large buffer takes about one buffer
// transfer plus (n-2) segment transfers. For small buffers the binomial tree
// (broadcast_binomial.h) has lower latency.
//
// Threading: runs on the caller's thread, which owns the Transport for the
// call. Blocking: returns when this rank's part is done, or with the first
// transport error (kPeerLost/kTimeout passed through). Every rank must call
// with the same bytes, root and segment size; 0 <= root < size (checked).
// 0 bytes sends nothing.

#include <cstddef>

#include "core/status.h"
#include "ops/transport.h"

namespace tutti {

Status broadcastChain(Transport& transport, void* buf, size_t bytes, int root,
                      size_t segment_bytes);

}  // namespace tutti
