#pragma once

// Hierarchical allgather(v) over ranks grouped by host (ops/host_groups.h):
//   1. allgather across the hosts among the ranks at this rank's local index
//      (every local rank drives its own column of blocks, so a host's link
//      carries (H-1)/H of the output each way, against (n-1)/n for the flat
//      ring over n ranks), each rank's block sent to every other host with
//      all messages posted at once;
//   2. ring allgather within the host of those columns;
// through a staging buffer laid out by column, then copied into rank order.
// Pipelined: every block is cut into as many pieces as the output has
// chunks, and piece t-1's step 2 runs while piece t's step 1 moves.
// After Horovod's MPIHierarchicalAllgather (horovod/common/ops/
// mpi_operations.cc), whose homogeneous case has every local rank allgather
// its column across nodes into a buffer shared within the node; here the
// columns are exchanged within the host by a ring allgather. The output is
// the flat ring's byte for byte.
//
// Threading, blocking and errors: as allgatherRing (ops/algorithms/
// allgather_ring.h). Every rank of the world calls it with the same
// bytes_per_rank and layout, passing its host's local transport and its
// cross transport (HostGroups::local()/cross()); every host holds the same
// number of ranks.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "ops/host_groups.h"
#include "ops/transport.h"

namespace tutti {

// Transport rank r contributes bytes_per_rank[r] bytes from `input`;
// `output` receives every rank's bytes in rank order. `work` is reused
// between calls (resized to the output's size). `chunk_bytes`: the
// pipeline's chunk of the output (0: 4 MiB).
Status allgatherHierarchical(Transport& local, Transport& cross, const HostLayout& layout,
                             const void* input, void* output,
                             const std::vector<size_t>& bytes_per_rank, size_t segment_bytes,
                             std::vector<uint8_t>* work, size_t chunk_bytes = 0);

}  // namespace tutti
