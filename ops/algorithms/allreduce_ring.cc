#include "ops/algorithms/allreduce_ring.h"

#include <cstring>

#include "ops/algorithms/allgather_ring.h"
#include "ops/algorithms/reducescatter_ring.h"
#include "ops/algorithms/ring.h"

namespace tutti {

Status allreduceRing(Transport& transport, void* buf, size_t count, DataType dtype, ReduceOp op,
                     size_t segment_bytes, std::vector<uint8_t>* scratch) {
  return allreduceRing(transport, buf, buf, count, dtype, op, segment_bytes, scratch);
}

Status allreduceRing(Transport& transport, const void* in, void* out, size_t count, DataType dtype,
                     ReduceOp op, size_t segment_bytes, std::vector<uint8_t>* scratch) {
  const int n = transport.size();
  if (count == 0) return Status::ok();
  const size_t esize = dataTypeSize(dtype);
  if (n == 1) {
    if (in != out) std::memcpy(out, in, count * esize);
    return Status::ok();
  }
  // Rank r ends the reduce-scatter owning block r, which is exactly the input
  // layout the in-place allgather expects. In place (in == out) the ring
  // reduces into `out` through `scratch`; out of place it receives straight
  // into `out` and folds in this rank's block of `in`.
  const ring::Blocks blocks = ring::evenBlocks(count, n);
  auto* bytes = static_cast<uint8_t*>(out);
  TUTTI_RETURN_IF_ERROR(ringReduceScatterBlocks(transport, in, out,
                                                bytes + blocks.offset[transport.rank()] * esize,
                                                blocks, dtype, op, segment_bytes, scratch));
  // Same segment boundaries as the reduce-scatter, in bytes.
  const size_t seg_bytes = ring::segmentElements(segment_bytes, esize) * esize;
  return ringAllgatherInPlace(transport, out, blocks.scaled(esize), seg_bytes);
}

}  // namespace tutti
