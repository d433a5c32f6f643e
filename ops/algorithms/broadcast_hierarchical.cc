#include "ops/algorithms/broadcast_hierarchical.h"

#include <algorithm>
#include <cstdint>

#include "core/check.h"
#include "ops/algorithms/broadcast_chain.h"

namespace tutti {
namespace {

constexpr size_t kDefaultChunkBytes = 4u << 20;

}  // namespace

Status broadcastHierarchical(Transport& local, Transport& cross, const HostLayout& layout,
                             void* buf, size_t bytes, int root, size_t segment_bytes,
                             size_t chunk_bytes, size_t tree_max_bytes) {
  TUTTI_CHECK_EQ(static_cast<int>(layout.grid.size()), layout.cross_size);
  TUTTI_CHECK_EQ(local.size(), layout.local_size);
  TUTTI_CHECK_LE(0, root);
  TUTTI_CHECK_LT(root, layout.cross_size * layout.local_size);
  // The root's host (its cross rank) and local index.
  int root_host = 0, root_index = 0;
  for (int h = 0; h < layout.cross_size; ++h) {
    const std::vector<int>& ranks = layout.grid[static_cast<size_t>(h)];
    const auto at = std::find(ranks.begin(), ranks.end(), root);
    if (at != ranks.end()) {
      root_host = h;
      root_index = static_cast<int>(at - ranks.begin());
    }
  }
  if (bytes == 0) return Status::ok();
  // This rank's column is the root's: it crosses hosts, over its cross group.
  const bool crosses = local.rank() == root_index;
  auto* data = static_cast<uint8_t*>(buf);
  if (bytes <= tree_max_bytes) {
    if (crosses) TUTTI_RETURN_IF_ERROR(broadcastBinomial(cross, data, bytes, root_host));
    return broadcastBinomial(local, data, bytes, root_index);
  }
  const size_t chunk = chunk_bytes == 0 ? kDefaultChunkBytes : chunk_bytes;
  for (size_t at = 0; at < bytes; at += chunk) {
    const size_t piece = std::min(chunk, bytes - at);
    if (crosses) {
      TUTTI_RETURN_IF_ERROR(broadcastChain(cross, data + at, piece, root_host, segment_bytes));
    }
    TUTTI_RETURN_IF_ERROR(broadcastChain(local, data + at, piece, root_index, segment_bytes));
  }
  return Status::ok();
}

}  // namespace tutti
