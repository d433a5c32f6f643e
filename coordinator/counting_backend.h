#pragma once

// CountingBackend: forwards every collective to another Backend and adds the
// bytes this rank is asked to send for it to a counter (for benchmarks:
// bytes on the wire per step, Runtime::bytesSent()).
//
// The count is algorithm-aware, in the tcp backend's ring terms (the mpi
// backend is counted the same way, as the ring-equivalent):
//   allreduce      2 (n-1) / n * bytes        (ring reduce-scatter + allgather;
//                  also allreduceOutOfPlace, and adasumAllreduce, whose
//                  halving and doubling move the same; its dot-product sums,
//                  24 bytes per tensor per step, are not counted; and
//                  allreduceCastAcrossHosts, counted in the wire dtype when
//                  it runs)
//   allgatherv     sum of the blocks except the right neighbour's (the ring
//                  forwards every block but that one; (n-1) * chunk when even)
//   reducescatter  (n-1) / n * input bytes
//   alltoallv      every block sent to another rank
//   broadcast      (n-1) / n * bytes (a chain/tree moves n-1 copies; this is
//                  the per-rank mean)
//   barrier        0
//   send / recv    the bytes sent (a point-to-point message) / 0
//   ringExchange   the bytes sent to the right neighbour (also what a ring
//                  algorithm reports through countRingBytes)
// Transport headers and the negotiation's control messages are not counted.
// A collective is counted when it is asked for, whether it succeeds or not.
//
// Threading: used by the background thread; the counter is atomic and may be
// read from any thread.

#include <atomic>
#include <cstdint>

#include "ops/backend.h"

namespace tutti {

class CountingBackend : public Backend {
 public:
  // `inner` and `bytes_sent` must outlive this object.
  CountingBackend(Backend& inner, std::atomic<uint64_t>* bytes_sent)
      : inner_(inner), bytes_sent_(bytes_sent) {}

  const char* name() const override { return inner_.name(); }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Status allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  Status allreduceOutOfPlace(const void* in, void* out, size_t count, DataType dtype,
                             ReduceOp op) override;
  Status adasumAllreduce(void* buf, const std::vector<size_t>& counts, DataType dtype) override;
  Status allreduceCastAcrossHosts(const void* in, void* out, size_t count, DataType dtype,
                                  ReduceOp op, DataType wire, bool* ran) override;
  Status allgatherv(const void* input, void* output,
                    const std::vector<size_t>& bytes_per_rank) override;
  Status broadcast(void* buf, size_t bytes, int root) override;
  Status alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                   const std::vector<size_t>& recv_bytes) override;
  Status reducescatter(const void* input, void* output, const std::vector<size_t>& counts,
                       DataType dtype, ReduceOp op) override;
  Status barrier() override { return inner_.barrier(); }
  Status send(const void* data, size_t bytes, int peer) override {
    add(bytes);
    return inner_.send(data, bytes, peer);
  }
  Status recv(void* data, size_t bytes, int peer) override {
    return inner_.recv(data, bytes, peer);
  }
  Status ringExchange(const void* send, size_t send_bytes, void* recv, size_t recv_bytes) override;
  Transport* ringTransport() override { return inner_.ringTransport(); }
  void countRingBytes(uint64_t bytes) override { add(bytes); }

 private:
  void add(uint64_t bytes) { bytes_sent_->fetch_add(bytes, std::memory_order_relaxed); }
  // bytes * (n-1) / n, in integers.
  uint64_t share(uint64_t bytes) const;

  Backend& inner_;
  std::atomic<uint64_t>* bytes_sent_;
};

}  // namespace tutti
