#include "ops/algorithms/barrier_dissemination.h"

#include <cstdint>

#include "ops/algorithms/ring.h"

namespace tutti {

Status barrierDissemination(Transport& transport) {
  const int n = transport.size();
  const int rank = transport.rank();
  for (int distance = 1; distance < n; distance <<= 1) {
    const uint8_t token = 1;
    uint8_t received = 0;
    const Transport::OpId rid = transport.postRecv(ring::mod(rank - distance, n), &received, 1);
    const Transport::OpId sid = transport.postSend(ring::mod(rank + distance, n), &token, 1);
    TUTTI_RETURN_IF_ERROR(transport.wait(rid));
    TUTTI_RETURN_IF_ERROR(transport.wait(sid));
  }
  return Status::ok();
}

}  // namespace tutti
