#pragma once

// Hierarchical broadcast over ranks grouped by host (ops/host_groups.h).
// The root is at local index l of host h:
//   1. across the hosts among the ranks at local index l (grid[.][l], the
//      cross group of those ranks), from host h's;
//   2. within every host, from its rank at local index l.
// Each step is the flat broadcast over its group: the binomial tree
// (broadcast_binomial.h) for a payload of at most `tree_max_bytes`, else the
// pipelined chain (broadcast_chain.h). Only the ranks at local index l
// cross hosts, so each host receives the buffer once over its link, against
// a flat chain or tree over all n ranks, whose messages cross a link wherever
// they join ranks of different hosts (a tree sends the buffer to a host once
// per subtree of it there).
// Pipelined for large payloads: the buffer is cut into pieces of
// `chunk_bytes`, and piece k's step 2 runs as soon as piece k is through
// this rank's part of step 1, before piece k+1's: a host broadcasts piece k
// within itself while the pieces after it are still crossing the links,
// instead of waiting for the whole buffer.
// After Horovod's hierarchical scheme for allreduce and allgather
// (horovod/common/ops: across nodes among the ranks of one local index, then
// within each node), here applied to broadcast.
//
// Results: every rank ends with the root's bytes, byte for byte the flat
// broadcast's. Threading, blocking and errors: as broadcastChain. Every rank
// of the world calls it with the same bytes, root, segment and chunk sizes
// and layout, passing its host's local transport and its cross transport
// (HostGroups::local()/cross()); every host holds the same number of ranks.
// `root` is a rank of the transport `layout` describes, 0 <= root < the
// number of ranks (checked). 0 bytes sends nothing.

#include <cstddef>

#include "core/status.h"
#include "ops/algorithms/broadcast_binomial.h"
#include "ops/host_groups.h"
#include "ops/transport.h"

namespace tutti {

// `buf`: `bytes` bytes, the input on the root, the output elsewhere.
// `segment_bytes`: the chain's segment (0: ring::kDefaultSegmentBytes).
// `chunk_bytes`: the pipeline's piece (0: 4 MiB). `tree_max_bytes`: the
// largest payload broadcast by the binomial tree, in one piece.
Status broadcastHierarchical(Transport& local, Transport& cross, const HostLayout& layout,
                             void* buf, size_t bytes, int root, size_t segment_bytes,
                             size_t chunk_bytes = 0,
                             size_t tree_max_bytes = kBinomialBroadcastMaxBytes);

}  // namespace tutti
