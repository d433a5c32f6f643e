#include "coordinator/response_layout.h"

#include "coordinator/request_validation.h"
#include "core/check.h"

namespace tutti {

AllgatherLayout allgatherLayout(const Response& r, int size) {
  TUTTI_CHECK_EQ(r.sizes.size(), static_cast<size_t>(size) + 1);
  AllgatherLayout out;
  out.row_bytes = static_cast<size_t>(r.sizes[size]) * dataTypeSize(r.dtype);
  out.bytes_per_rank.resize(size);
  for (int p = 0; p < size; ++p) {
    out.bytes_per_rank[p] = static_cast<size_t>(r.sizes[p]) * out.row_bytes;
    out.rows += r.sizes[p];
  }
  return out;
}

AlltoallLayout alltoallLayout(const Response& r, int rank, int size) {
  const size_t n = static_cast<size_t>(size);
  const size_t me = static_cast<size_t>(rank);
  TUTTI_CHECK_EQ(r.sizes.size(), n * n + 1);
  AlltoallLayout out;
  out.row_bytes = static_cast<size_t>(r.sizes[n * n]) * dataTypeSize(r.dtype);
  out.send_bytes.resize(n);
  out.recv_bytes.resize(n);
  out.received_splits.resize(n);
  for (size_t p = 0; p < n; ++p) {
    out.send_bytes[p] = static_cast<size_t>(r.sizes[me * n + p]) * out.row_bytes;
    out.sent_bytes += out.send_bytes[p];
    const int64_t in_rows = r.sizes[p * n + me];
    out.recv_bytes[p] = static_cast<size_t>(in_rows) * out.row_bytes;
    out.received_splits[p] = in_rows;
    out.rows += in_rows;
  }
  return out;
}

ReducescatterLayout reducescatterLayout(const Response& r, int size) {
  TUTTI_CHECK_EQ(r.sizes.size(), 2u);
  ReducescatterLayout out;
  out.total = r.sizes[0];
  const int64_t row = r.sizes[1];
  out.first_dim = row > 0 ? out.total / row : 0;
  out.counts.resize(size);
  for (int p = 0; p < size; ++p) {
    out.counts[p] = static_cast<size_t>(reducescatterRows(out.first_dim, p, size) * row);
  }
  return out;
}

}  // namespace tutti
