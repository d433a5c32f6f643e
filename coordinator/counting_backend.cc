#include "coordinator/counting_backend.h"

#include <numeric>

namespace tutti {

uint64_t CountingBackend::share(uint64_t bytes) const {
  const uint64_t n = static_cast<uint64_t>(size());
  return n <= 1 ? 0 : bytes / n * (n - 1) + bytes % n * (n - 1) / n;
}

Status CountingBackend::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  add(2 * share(static_cast<uint64_t>(count) * dataTypeSize(dtype)));
  return inner_.allreduce(buf, count, dtype, op);
}

Status CountingBackend::allreduceOutOfPlace(const void* in, void* out, size_t count, DataType dtype,
                                            ReduceOp op) {
  add(2 * share(static_cast<uint64_t>(count) * dataTypeSize(dtype)));
  return inner_.allreduceOutOfPlace(in, out, count, dtype, op);
}

Status CountingBackend::allreduceCastAcrossHosts(const void* in, void* out, size_t count,
                                                 DataType dtype, ReduceOp op, DataType wire,
                                                 bool* ran) {
  const Status st = inner_.allreduceCastAcrossHosts(in, out, count, dtype, op, wire, ran);
  if (*ran) add(2 * share(static_cast<uint64_t>(count) * dataTypeSize(wire)));
  return st;
}

Status CountingBackend::adasumAllreduce(void* buf, const std::vector<size_t>& counts,
                                        DataType dtype) {
  const uint64_t elements = std::accumulate(counts.begin(), counts.end(), uint64_t{0});
  add(2 * share(elements * dataTypeSize(dtype)));
  return inner_.adasumAllreduce(buf, counts, dtype);
}

Status CountingBackend::allgatherv(const void* input, void* output,
                                   const std::vector<size_t>& bytes_per_rank) {
  const int n = size();
  if (n > 1 && bytes_per_rank.size() == static_cast<size_t>(n)) {
    const uint64_t total =
        std::accumulate(bytes_per_rank.begin(), bytes_per_rank.end(), uint64_t{0});
    add(total - bytes_per_rank[static_cast<size_t>((rank() + 1) % n)]);
  }
  return inner_.allgatherv(input, output, bytes_per_rank);
}

Status CountingBackend::broadcast(void* buf, size_t bytes, int root) {
  add(share(bytes));
  return inner_.broadcast(buf, bytes, root);
}

Status CountingBackend::alltoallv(const void* input, const std::vector<size_t>& send_bytes,
                                  void* output, const std::vector<size_t>& recv_bytes) {
  const size_t self = static_cast<size_t>(rank());
  uint64_t sent = 0;
  for (size_t p = 0; p < send_bytes.size(); ++p) sent += p == self ? 0 : send_bytes[p];
  add(sent);
  return inner_.alltoallv(input, send_bytes, output, recv_bytes);
}

Status CountingBackend::reducescatter(const void* input, void* output,
                                      const std::vector<size_t>& counts, DataType dtype,
                                      ReduceOp op) {
  const uint64_t elements = std::accumulate(counts.begin(), counts.end(), uint64_t{0});
  add(share(elements * dataTypeSize(dtype)));
  return inner_.reducescatter(input, output, counts, dtype, op);
}

Status CountingBackend::ringExchange(const void* send, size_t send_bytes, void* recv,
                                     size_t recv_bytes) {
  if (size() > 1) add(send_bytes);
  return inner_.ringExchange(send, send_bytes, recv, recv_bytes);
}

}  // namespace tutti
