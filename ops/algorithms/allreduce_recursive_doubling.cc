#include "ops/algorithms/allreduce_recursive_doubling.h"

#include <cstring>

#include "core/check.h"
#include "ops/reduce.h"

namespace tutti {
namespace recursive_doubling {

int powerOfTwoBelow(int n) {
  TUTTI_CHECK_LT(0, n);
  int p = 1;
  while (p <= n / 2) p <<= 1;
  return p;
}

int virtualRank(int rank, int n) {
  const int extra = n - powerOfTwoBelow(n);
  if (rank < 2 * extra) return rank % 2 == 0 ? -1 : rank / 2;
  return rank - extra;
}

int realRank(int vrank, int n) {
  const int extra = n - powerOfTwoBelow(n);
  return vrank < extra ? 2 * vrank + 1 : vrank + extra;
}

int partner(int rank, int n, int mask) {
  const int vrank = virtualRank(rank, n);
  return vrank < 0 ? -1 : realRank(vrank ^ mask, n);
}

}  // namespace recursive_doubling

namespace {

// Exchanges `bytes` of `data` with `peer` into `recv`.
Status swapWith(Transport& transport, int peer, void* data, void* recv, size_t bytes) {
  const Transport::OpId rid = transport.postRecv(peer, recv, bytes);
  const Transport::OpId sid = transport.postSend(peer, data, bytes);
  TUTTI_RETURN_IF_ERROR(transport.wait(rid));
  return transport.wait(sid);
}

// data = (the lower rank's values) op (the higher rank's values), whichever
// of data and received is whose: the same bits on both partners.
void combine(bool peer_is_lower, void* data, void* received, size_t count, size_t bytes,
             DataType dtype, ReduceOp op) {
  if (peer_is_lower) {
    reduceInto(received, data, count, dtype, op);
    std::memcpy(data, received, bytes);
  } else {
    reduceInto(data, received, count, dtype, op);
  }
}

}  // namespace

Status allreduceRecursiveDoubling(Transport& transport, const void* in, void* out, size_t count,
                                  DataType dtype, ReduceOp op, std::vector<uint8_t>* scratch) {
  namespace rd = recursive_doubling;
  const int n = transport.size();
  const int rank = transport.rank();
  const size_t bytes = count * dataTypeSize(dtype);
  if (count == 0) return Status::ok();
  if (in != out) std::memcpy(out, in, bytes);
  if (n == 1) return Status::ok();
  if (scratch->size() < bytes) scratch->resize(bytes);
  void* recv = scratch->data();
  const int p = rd::powerOfTwoBelow(n);
  const bool folded = rank < 2 * (n - p);
  if (folded && rank % 2 == 0) {
    // Sits out: hands its data to rank + 1 and gets the result back.
    const Transport::OpId sid = transport.postSend(rank + 1, out, bytes);
    TUTTI_RETURN_IF_ERROR(transport.wait(sid));
    return transport.wait(transport.postRecv(rank + 1, out, bytes));
  }
  if (folded) {
    TUTTI_RETURN_IF_ERROR(transport.wait(transport.postRecv(rank - 1, recv, bytes)));
    combine(true, out, recv, count, bytes, dtype, op);
  }
  for (int mask = 1; mask < p; mask <<= 1) {
    const int peer = rd::partner(rank, n, mask);
    TUTTI_RETURN_IF_ERROR(swapWith(transport, peer, out, recv, bytes));
    combine(peer < rank, out, recv, count, bytes, dtype, op);
  }
  if (folded) return transport.wait(transport.postSend(rank - 1, out, bytes));
  return Status::ok();
}

}  // namespace tutti
