#include "ops/algorithms/allgather_hierarchical.h"

#include <cstring>

#include "core/check.h"
#include "ops/algorithms/allgather_ring.h"
#include "ops/algorithms/ring.h"

namespace tutti {

Status allgatherHierarchical(Transport& local, Transport& cross, const HostLayout& layout,
                             const void* input, void* output,
                             const std::vector<size_t>& bytes_per_rank, size_t segment_bytes,
                             std::vector<uint8_t>* work) {
  const int hosts = layout.cross_size;
  const int per_host = layout.local_size;
  TUTTI_CHECK_EQ(static_cast<int>(layout.grid.size()), hosts);
  // Staging: column l (the blocks of local index l, host by host) after column l-1.
  std::vector<size_t> column_bytes(static_cast<size_t>(per_host), 0);
  std::vector<size_t> at(bytes_per_rank.size(), 0);  // staging offset of each rank's block
  size_t total = 0;
  for (int l = 0; l < per_host; ++l) {
    for (int h = 0; h < hosts; ++h) {
      const int r = layout.grid[h][l];
      at[r] = total;
      total += bytes_per_rank[r];
      column_bytes[l] += bytes_per_rank[r];
    }
  }
  if (total == 0) return Status::ok();
  if (work->size() < total) work->resize(total);
  uint8_t* staging = work->data();
  const int me = layout.grid[cross.rank()][local.rank()];
  if (bytes_per_rank[me] > 0) std::memcpy(staging + at[me], input, bytes_per_rank[me]);
  // 1. Across hosts, within this rank's column.
  std::vector<size_t> sizes;
  for (int h = 0; h < hosts; ++h) sizes.push_back(bytes_per_rank[layout.grid[h][local.rank()]]);
  uint8_t* column = staging + at[layout.grid[0][local.rank()]];
  TUTTI_RETURN_IF_ERROR(
      ringAllgatherInPlace(cross, column, ring::blocksFromSizes(sizes), segment_bytes));
  // 2. Within the host, column by column.
  TUTTI_RETURN_IF_ERROR(
      ringAllgatherInPlace(local, staging, ring::blocksFromSizes(column_bytes), segment_bytes));
  auto* out = static_cast<uint8_t*>(output);
  for (size_t r = 0; r < bytes_per_rank.size(); ++r) {
    if (bytes_per_rank[r] > 0) std::memcpy(out, staging + at[r], bytes_per_rank[r]);
    out += bytes_per_rank[r];
  }
  return Status::ok();
}

}  // namespace tutti
