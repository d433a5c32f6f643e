#include "ops/algorithms/allgather_hierarchical.h"

#include <cstring>

#include "core/check.h"
#include "ops/algorithms/allgather_ring.h"
#include "ops/algorithms/ring.h"

namespace tutti {
namespace {

constexpr size_t kDefaultChunkBytes = 4u << 20;

// Where every piece of every rank's block sits in the staging buffer: piece
// k of all ranks after piece k-1's; within a piece, column l (the ranks at
// local index l, host by host) after column l-1.
struct Staging {
  int pieces = 1;
  std::vector<size_t> at;             // at[k * n + r]: staging offset of rank r's piece k
  std::vector<size_t> size;           // its bytes
  std::vector<ring::Blocks> columns;  // per piece: the columns' staging blocks

  Staging(const HostLayout& layout, const std::vector<size_t>& bytes, size_t chunk_bytes) {
    size_t total = 0;
    for (size_t b : bytes) total += b;
    pieces = static_cast<int>((total + chunk_bytes - 1) / chunk_bytes);
    if (pieces < 1) pieces = 1;
    const size_t n = bytes.size();
    at.assign(n * pieces, 0);
    size.assign(n * pieces, 0);
    size_t offset = 0;
    for (int k = 0; k < pieces; ++k) {
      std::vector<size_t> column_bytes;
      for (int l = 0; l < layout.local_size; ++l) {
        column_bytes.push_back(0);
        for (int h = 0; h < layout.cross_size; ++h) {
          const size_t r = static_cast<size_t>(layout.grid[h][l]);
          at[k * n + r] = offset;
          size[k * n + r] = ring::chunkSize(bytes[r], pieces, k);
          offset += size[k * n + r];
          column_bytes.back() += size[k * n + r];
        }
      }
      columns.push_back(ring::blocksFromSizes(column_bytes));
    }
  }
};

}  // namespace

Status allgatherHierarchical(Transport& local, Transport& cross, const HostLayout& layout,
                             const void* input, void* output,
                             const std::vector<size_t>& bytes_per_rank, size_t segment_bytes,
                             std::vector<uint8_t>* work, size_t chunk_bytes) {
  TUTTI_CHECK_EQ(static_cast<int>(layout.grid.size()), layout.cross_size);
  const size_t n = bytes_per_rank.size();
  const Staging s(layout, bytes_per_rank, chunk_bytes == 0 ? kDefaultChunkBytes : chunk_bytes);
  size_t all = 0;
  for (size_t b : bytes_per_rank) all += b;
  if (all == 0) return Status::ok();
  if (work->size() < all) work->resize(all);
  uint8_t* staging = work->data();
  const int me = layout.grid[cross.rank()][local.rank()];
  const auto* in = static_cast<const uint8_t*>(input);
  for (int k = 0; k < s.pieces; ++k) {
    const size_t i = k * n + me;
    // An empty contribution may come with a null input (memcpy's arguments must not be null).
    if (s.size[i] == 0) continue;
    std::memcpy(staging + s.at[i], in + ring::chunkOffset(bytes_per_rank[me], s.pieces, k),
                s.size[i]);
  }
  // Step t: piece t's exchange across hosts (every message posted at once),
  // then piece t-1 within the host while piece t moves.
  std::vector<Transport::OpId> ops[2];
  for (int step = 0; step <= s.pieces; ++step) {
    if (step < s.pieces) {
      for (int h = 0; h < layout.cross_size; ++h) {
        if (h == cross.rank()) continue;
        const size_t mine = step * n + me;
        const size_t theirs = step * n + layout.grid[h][local.rank()];
        if (s.size[mine] > 0) {
          ops[step % 2].push_back(cross.postSend(h, staging + s.at[mine], s.size[mine]));
        }
        if (s.size[theirs] > 0) {
          ops[step % 2].push_back(cross.postRecv(h, staging + s.at[theirs], s.size[theirs]));
        }
      }
    }
    if (step >= 1) {
      const int k = step - 1;
      for (Transport::OpId id : ops[k % 2]) TUTTI_RETURN_IF_ERROR(cross.wait(id));
      ops[k % 2].clear();
      uint8_t* piece = staging + s.at[k * n + layout.grid[0][0]];
      TUTTI_RETURN_IF_ERROR(ringAllgatherInPlace(local, piece, s.columns[k], segment_bytes));
    }
  }
  auto* out = static_cast<uint8_t*>(output);
  for (size_t r = 0; r < n; ++r) {
    for (int k = 0; k < s.pieces; ++k) {
      const size_t i = k * n + r;
      if (s.size[i] > 0) std::memcpy(out, staging + s.at[i], s.size[i]);
      out += s.size[i];
    }
  }
  return Status::ok();
}

}  // namespace tutti
