#include "ops/algorithms/broadcast_chain.h"

#include <cstdint>
#include <vector>

#include "core/check.h"
#include "ops/algorithms/ring.h"

namespace tutti {

Status broadcastChain(Transport& transport, void* buf, size_t bytes, int root,
                      size_t segment_bytes) {
  const int n = transport.size();
  const int rank = transport.rank();
  TUTTI_CHECK_LE(0, root);
  TUTTI_CHECK_LT(root, n);
  if (n == 1 || bytes == 0) return Status::ok();
  auto* data = static_cast<uint8_t*>(buf);
  const size_t seg = ring::segmentElements(segment_bytes, 1);
  const size_t nseg = ring::numSegments(bytes, seg);
  const int position = ring::mod(rank - root, n);  // 0 = root, n-1 = end of the chain
  const int right = ring::rightOf(rank, n);
  const int left = ring::leftOf(rank, n);

  std::vector<Transport::OpId> sends;
  if (position == 0) {
    for (size_t j = 0; j < nseg; ++j) {
      sends.push_back(transport.postSend(right, data + j * seg, ring::segmentSize(bytes, seg, j)));
    }
  } else {
    std::vector<Transport::OpId> recvs;
    for (size_t j = 0; j < nseg; ++j) {
      recvs.push_back(transport.postRecv(left, data + j * seg, ring::segmentSize(bytes, seg, j)));
    }
    for (size_t j = 0; j < nseg; ++j) {
      TUTTI_RETURN_IF_ERROR(transport.wait(recvs[j]));
      if (position < n - 1) {
        sends.push_back(
            transport.postSend(right, data + j * seg, ring::segmentSize(bytes, seg, j)));
      }
    }
  }
  for (Transport::OpId id : sends) TUTTI_RETURN_IF_ERROR(transport.wait(id));
  return Status::ok();
}

}  // namespace tutti
