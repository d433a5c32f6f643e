#pragma once

// A Backend whose peers' data has already arrived: every rank's contribution
// to one collective was gathered beforehand (the ordered lane sends small
// payloads with its op signatures, coordinator/ordered_lane.h), so the
// collective is finished locally, without another message. Each rank folds
// the same blocks in the same rank order, so every rank computes the same
// bits (the property the ring keeps for integers, min and max; here it holds
// for float sums too).
//
// What each call expects in blocks[r] (rank r's payload):
//  - allreduce / allreduceOutOfPlace: rank r's input (count elements); the
//    result is blocks[0] op blocks[1] op ... in rank order. The caller's own
//    buffer is not read: the caller must not have scaled it (no prescale).
//  - allgatherv: rank r's bytes_per_rank[r] bytes.
//  - broadcast: blocks[root] holds the bytes; the others may be empty.
//  - reducescatter: rank r's whole input (sum of counts elements).
//  - barrier: nothing (gathering was the barrier).
// A block of the wrong size is kInternal naming the rank. alltoallv is not
// offered (kInternal): a rank's payload does not say where its rows go.
//
// Threading: one thread at a time; the blocks must outlive the calls.

#include <cstdint>
#include <vector>

#include "ops/backend.h"

namespace tutti {

class GatheredBackend : public Backend {
 public:
  GatheredBackend(int rank, const std::vector<std::vector<uint8_t>>& blocks)
      : rank_(rank), blocks_(blocks) {}

  const char* name() const override { return "gathered"; }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(blocks_.size()); }

  Status allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  Status allreduceOutOfPlace(const void* in, void* out, size_t count, DataType dtype,
                             ReduceOp op) override;
  Status allgatherv(const void* input, void* output,
                    const std::vector<size_t>& bytes_per_rank) override;
  Status broadcast(void* buf, size_t bytes, int root) override;
  Status alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                   const std::vector<size_t>& recv_bytes) override;
  Status reducescatter(const void* input, void* output, const std::vector<size_t>& counts,
                       DataType dtype, ReduceOp op) override;
  Status barrier() override { return Status::ok(); }

 private:
  // kInternal unless blocks_[r] holds exactly `bytes` bytes.
  Status checkBlock(int r, size_t bytes, const char* what) const;
  // out = blocks_[0][offset..] op ... op blocks_[n-1][offset..], `count` elements.
  Status fold(size_t offset, size_t count, DataType dtype, ReduceOp op, size_t block_bytes,
              void* out) const;

  const int rank_;
  const std::vector<std::vector<uint8_t>>& blocks_;
};

}  // namespace tutti
