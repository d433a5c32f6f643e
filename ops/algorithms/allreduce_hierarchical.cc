#include "ops/algorithms/allreduce_hierarchical.h"

#include "ops/algorithms/allgather_ring.h"
#include "ops/algorithms/allreduce_ring.h"
#include "ops/algorithms/reducescatter_ring.h"
#include "ops/algorithms/ring.h"

namespace tutti {

Status allreduceHierarchical(Transport& local, Transport& cross, const void* in, void* out,
                             size_t count, DataType dtype, ReduceOp op, size_t segment_bytes,
                             std::vector<uint8_t>* scratch) {
  if (count == 0) return Status::ok();
  const size_t esize = dataTypeSize(dtype);
  const ring::Blocks blocks = ring::evenBlocks(count, local.size());
  auto* bytes = static_cast<uint8_t*>(out);
  uint8_t* own = bytes + blocks.offset[local.rank()] * esize;
  TUTTI_RETURN_IF_ERROR(
      ringReduceScatterBlocks(local, in, out, own, blocks, dtype, op, segment_bytes, scratch));
  // Every rank at this local index holds a block of the same size (possibly 0).
  TUTTI_RETURN_IF_ERROR(
      allreduceRing(cross, own, blocks.size[local.rank()], dtype, op, segment_bytes, scratch));
  const size_t seg_bytes = ring::segmentElements(segment_bytes, esize) * esize;
  return ringAllgatherInPlace(local, out, blocks.scaled(esize), seg_bytes);
}

}  // namespace tutti
