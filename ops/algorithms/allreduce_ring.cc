#include "ops/algorithms/allreduce_ring.h"

#include "ops/algorithms/allgather_ring.h"
#include "ops/algorithms/reducescatter_ring.h"
#include "ops/algorithms/ring.h"

namespace tutti {

Status allreduceRing(Transport& transport, void* buf, size_t count, DataType dtype, ReduceOp op,
                     size_t segment_bytes, std::vector<uint8_t>* scratch) {
  const int n = transport.size();
  if (n == 1 || count == 0) return Status::ok();
  const size_t esize = dataTypeSize(dtype);
  // Rank r ends the reduce-scatter owning block r, which is exactly the input
  // layout the in-place allgather expects.
  const ring::Blocks blocks = ring::evenBlocks(count, n);
  auto* bytes = static_cast<uint8_t*>(buf);
  TUTTI_RETURN_IF_ERROR(ringReduceScatterBlocks(transport, buf, buf,
                                                bytes + blocks.offset[transport.rank()] * esize,
                                                blocks, dtype, op, segment_bytes, scratch));
  // Same segment boundaries as the reduce-scatter, in bytes.
  const size_t seg_bytes = ring::segmentElements(segment_bytes, esize) * esize;
  return ringAllgatherInPlace(transport, buf, blocks.scaled(esize), seg_bytes);
}

}  // namespace tutti
