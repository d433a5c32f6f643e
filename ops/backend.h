#pragma once

// The interface between the coordinator and a collective backend (tcp today;
// mpi and nccl later). Each call is one collective over the whole world, made
// by every rank in the same order (the coordinator guarantees it). Buffers are
// contiguous host memory. Calls block the background thread until the
// collective finished on this rank or failed.
//
// Errors: kPeerLost (naming the rank) when a peer is lost; the backend is
// then broken and every later call fails the same way.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace tutti {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: buf[i] = op over ranks of buf[i], for `count` elements. kAverage
  // is not passed here (the coordinator sums and scales).
  virtual Status allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) = 0;

  // Rank r contributes `bytes_per_rank[r]` bytes from `input`; `output`
  // receives every rank's bytes in rank order (sum of bytes_per_rank).
  virtual Status allgatherv(const void* input, void* output,
                            const std::vector<size_t>& bytes_per_rank) = 0;

  // Root's `bytes` bytes of `buf` are copied into every rank's `buf`.
  virtual Status broadcast(void* buf, size_t bytes, int root) = 0;

  // Sends send_bytes[p] bytes (consecutive, in peer order, from `input`) to
  // each peer p and receives recv_bytes[p] bytes from each into `output`
  // (consecutive, in peer order).
  virtual Status alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                           const std::vector<size_t>& recv_bytes) = 0;

  // `input` holds sum(counts) elements on every rank; rank r receives in
  // `output` the reduction of elements [offset_r, offset_r + counts[r]).
  virtual Status reducescatter(const void* input, void* output, const std::vector<size_t>& counts,
                               DataType dtype, ReduceOp op) = 0;

  // Returns on every rank only after every rank entered it.
  virtual Status barrier() = 0;
};

}  // namespace tutti
