#pragma once

// The per-op layouts of Response.sizes (core/message.h), decoded in one place
// for the host executor and the device executor. Every rank decodes the same
// Response into the same layout, so the byte counts below agree across ranks.
// Pure functions; a Response whose sizes do not fit its op is a programming
// error (TUTTI_CHECK), as rank 0 built it.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/message.h"

namespace tutti {

// Allgather: sizes = rows contributed by each rank, then elements per row.
struct AllgatherLayout {
  std::vector<size_t> bytes_per_rank;  // block r of the output, in bytes
  int64_t rows = 0;                    // first dimension of the output
  size_t row_bytes = 0;
  size_t totalBytes() const { return static_cast<size_t>(rows) * row_bytes; }
};
AllgatherLayout allgatherLayout(const Response& r, int size);

// Alltoall: sizes = the size x size matrix of rows [sender * size + receiver],
// then elements per row. `rank` is the rank decoding it.
struct AlltoallLayout {
  std::vector<size_t> send_bytes;        // to each rank
  std::vector<size_t> recv_bytes;        // from each rank
  std::vector<int64_t> received_splits;  // rows from each rank
  size_t sent_bytes = 0;                 // sum of send_bytes
  int64_t rows = 0;                      // first dimension of the output
  size_t row_bytes = 0;
  size_t totalBytes() const { return static_cast<size_t>(rows) * row_bytes; }
};
AlltoallLayout alltoallLayout(const Response& r, int rank, int size);

// Reducescatter: sizes = elements of the whole input, then elements per row.
struct ReducescatterLayout {
  int64_t total = 0;           // elements of the whole input
  int64_t first_dim = 0;       // rows of the whole input
  std::vector<size_t> counts;  // elements each rank receives
};
ReducescatterLayout reducescatterLayout(const Response& r, int size);

}  // namespace tutti
