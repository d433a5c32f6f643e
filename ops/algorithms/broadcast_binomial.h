#pragma once

// Binomial-tree broadcast: ceil(log2 n) rounds of whole-buffer messages.
// Lowest latency for small buffers; large ones go through the pipelined chain
// (broadcast_chain.h).
//
// Threading: runs on the caller's thread, which owns the Transport for the
// call. Blocking: returns when this rank's part is done, or with the first
// transport error (kPeerLost/kTimeout passed through). Every rank must call
// with the same bytes and root; 0 <= root < size (checked). 0 bytes sends
// nothing.

#include <cstddef>

#include "core/status.h"
#include "ops/transport.h"

namespace tutti {

// The largest payload the tcp backend broadcasts by the tree by default
// (ops/algorithm_table.cc); above it, the chain.
constexpr size_t kBinomialBroadcastMaxBytes = 64 * 1024;

Status broadcastBinomial(Transport& transport, void* buf, size_t bytes, int root);

}  // namespace tutti
