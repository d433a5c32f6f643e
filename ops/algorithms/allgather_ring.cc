#include "ops/algorithms/allgather_ring.h"

#include <cstdint>
#include <cstring>

#include "core/check.h"

namespace tutti {

Status ringAllgatherInPlace(Transport& transport, void* buf, const ring::Blocks& blocks,
                            size_t segment_bytes) {
  const int n = transport.size();
  const int rank = transport.rank();
  TUTTI_CHECK_EQ(blocks.size.size(), static_cast<size_t>(n));
  if (n == 1) return Status::ok();
  auto* bytes = static_cast<uint8_t*>(buf);
  const size_t seg = ring::segmentElements(segment_bytes, 1);
  const int right = ring::rightOf(rank, n);
  const int left = ring::leftOf(rank, n);

  std::vector<Transport::OpId> sends;
  for (size_t j = 0; j < ring::numSegments(blocks.size[rank], seg); ++j) {
    sends.push_back(transport.postSend(right, bytes + blocks.offset[rank] + j * seg,
                                       ring::segmentSize(blocks.size[rank], seg, j)));
  }
  std::vector<Transport::OpId> recvs;
  for (int step = 0; step <= n - 2; ++step) {
    const int c = ring::mod(rank - step - 1, n);
    const bool forward = step + 1 <= n - 2;
    const size_t count = blocks.size[c];
    const size_t nseg = ring::numSegments(count, seg);
    uint8_t* dst = bytes + blocks.offset[c];
    // Data lands in its final place, so all of a step's segments can be
    // posted at once; each is forwarded as soon as it arrived.
    recvs.clear();
    for (size_t j = 0; j < nseg; ++j) {
      recvs.push_back(transport.postRecv(left, dst + j * seg, ring::segmentSize(count, seg, j)));
    }
    for (size_t j = 0; j < nseg; ++j) {
      TUTTI_RETURN_IF_ERROR(transport.wait(recvs[j]));
      if (forward) {
        sends.push_back(transport.postSend(right, dst + j * seg, ring::segmentSize(count, seg, j)));
      }
    }
  }
  for (Transport::OpId id : sends) TUTTI_RETURN_IF_ERROR(transport.wait(id));
  return Status::ok();
}

Status allgatherRing(Transport& transport, const void* input, void* output,
                     const std::vector<size_t>& bytes_per_rank, size_t segment_bytes,
                     const std::vector<int>& ring_order) {
  TUTTI_CHECK_EQ(bytes_per_rank.size(), static_cast<size_t>(transport.size()));
  const ring::Blocks blocks = ring::reordered(ring::blocksFromSizes(bytes_per_rank), ring_order);
  const int rank = transport.rank();
  if (blocks.size[rank] > 0) {
    std::memmove(static_cast<uint8_t*>(output) + blocks.offset[rank], input, blocks.size[rank]);
  }
  return ringAllgatherInPlace(transport, output, blocks, segment_bytes);
}

}  // namespace tutti
