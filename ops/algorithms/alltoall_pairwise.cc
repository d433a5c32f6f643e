#include "ops/algorithms/alltoall_pairwise.h"

#include <cstdint>
#include <cstring>

#include "core/check.h"
#include "ops/algorithms/ring.h"

namespace tutti {

Status alltoallPairwise(Transport& transport, const void* input,
                        const std::vector<size_t>& send_bytes, void* output,
                        const std::vector<size_t>& recv_bytes) {
  const int n = transport.size();
  const int rank = transport.rank();
  TUTTI_CHECK_EQ(send_bytes.size(), static_cast<size_t>(n));
  TUTTI_CHECK_EQ(recv_bytes.size(), static_cast<size_t>(n));
  TUTTI_CHECK_EQ(send_bytes[rank], recv_bytes[rank]);
  const ring::Blocks send = ring::blocksFromSizes(send_bytes);
  const ring::Blocks recv = ring::blocksFromSizes(recv_bytes);
  const auto* in = static_cast<const uint8_t*>(input);
  auto* out = static_cast<uint8_t*>(output);
  if (send_bytes[rank] > 0) {
    std::memmove(out + recv.offset[rank], in + send.offset[rank], send_bytes[rank]);
  }
  for (int k = 1; k < n; ++k) {
    const int to = ring::mod(rank + k, n);
    const int from = ring::mod(rank - k, n);
    // Receive posted before the send: a send may not complete until the
    // peer reads it.
    const bool have_recv = recv_bytes[from] > 0;
    const bool have_send = send_bytes[to] > 0;
    Transport::OpId rid = 0;
    Transport::OpId sid = 0;
    if (have_recv) rid = transport.postRecv(from, out + recv.offset[from], recv_bytes[from]);
    if (have_send) sid = transport.postSend(to, in + send.offset[to], send_bytes[to]);
    if (have_recv) TUTTI_RETURN_IF_ERROR(transport.wait(rid));
    if (have_send) TUTTI_RETURN_IF_ERROR(transport.wait(sid));
  }
  return Status::ok();
}

}  // namespace tutti
