#include "ops/algorithms/broadcast_binomial.h"

#include <vector>

#include "core/check.h"
#include "ops/algorithms/ring.h"

namespace tutti {

Status broadcastBinomial(Transport& transport, void* buf, size_t bytes, int root) {
  const int n = transport.size();
  const int rank = transport.rank();
  TUTTI_CHECK_LE(0, root);
  TUTTI_CHECK_LT(root, n);
  if (n == 1 || bytes == 0) return Status::ok();
  // Ranks relative to the root; the parent of v is v with its lowest set bit
  // cleared, and v sends to v + 2^k for every 2^k below that bit.
  const int vrank = ring::mod(rank - root, n);
  int mask = 1;
  while (mask < n) {
    if (vrank & mask) {
      const int parent = ring::mod(vrank - mask + root, n);
      TUTTI_RETURN_IF_ERROR(transport.wait(transport.postRecv(parent, buf, bytes)));
      break;
    }
    mask <<= 1;
  }
  std::vector<Transport::OpId> sends;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vrank + mask < n) {
      sends.push_back(transport.postSend(ring::mod(vrank + mask + root, n), buf, bytes));
    }
  }
  for (Transport::OpId id : sends) TUTTI_RETURN_IF_ERROR(transport.wait(id));
  return Status::ok();
}

}  // namespace tutti
