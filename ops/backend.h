#pragma once

// The interface between the coordinator and a collective backend (tcp, mpi
// and nccl; ops/backend_registry.h picks one). Each call is one collective over the whole world,
// made by every rank in the same order (the coordinator guarantees it). Buffers are contiguous host
// memory. Calls block the background thread until the collective finished on this rank or failed.
//
// Errors: kPeerLost (naming the rank) when a peer is lost; the backend is
// then broken and every later call fails the same way.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "ops/algorithms/ring.h"
#include "ops/transport.h"

namespace tutti {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: buf[i] = op over ranks of buf[i], for `count` elements. kAverage
  // is not passed here (the coordinator sums and scales).
  virtual Status allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) = 0;

  // Out of place: out[i] = op over ranks of in[i]; `in` is not modified.
  // `in` and `out` do not overlap unless equal. The default copies `in` into
  // `out` and reduces in place; a backend may read `in` as its first
  // contribution instead (the tcp ring does), saving that pass over memory.
  virtual Status allreduceOutOfPlace(const void* in, void* out, size_t count, DataType dtype,
                                     ReduceOp op) {
    if (in != out && count > 0) std::memcpy(out, in, count * dataTypeSize(dtype));
    return allreduce(out, count, dtype, op);
  }

  // Adasum (ops/algorithms/allreduce_adasum.h), in place over `buf`: the
  // tensors of `counts` elements laid end to end, each combined on its own.
  // The coordinator validated dtype (float16/32/64) and size (a power of
  // two). The default returns kInvalidArgument naming the backend; tcp and
  // mpi run the algorithm over their point-to-point transport.
  virtual Status adasumAllreduce(void* /*buf*/, const std::vector<size_t>& /*counts*/,
                                 DataType /*dtype*/) {
    return Status::invalidArgument(std::string("the ") + name() +
                                   " backend does not run Adasum (tcp and mpi do)");
  }

  // Rank r contributes `bytes_per_rank[r]` bytes from `input`; `output`
  // receives every rank's bytes in rank order (sum of bytes_per_rank).
  virtual Status allgatherv(const void* input, void* output,
                            const std::vector<size_t>& bytes_per_rank) = 0;

  // Root's `bytes` bytes of `buf` are copied into every rank's `buf`.
  virtual Status broadcast(void* buf, size_t bytes, int root) = 0;

  // Sends send_bytes[p] bytes (consecutive, in peer order, from `input`) to
  // each peer p and receives recv_bytes[p] bytes from each into `output`
  // (consecutive, in peer order).
  virtual Status alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                           const std::vector<size_t>& recv_bytes) = 0;

  // `input` holds sum(counts) elements on every rank; rank r receives in
  // `output` the reduction of elements [offset_r, offset_r + counts[r]).
  virtual Status reducescatter(const void* input, void* output, const std::vector<size_t>& counts,
                               DataType dtype, ReduceOp op) = 0;

  // Returns on every rank only after every rank entered it.
  virtual Status barrier() = 0;

  // One ring hop of opaque bytes, for compressed ring algorithms
  // (coordinator/compressed_ring_allreduce.h): sends `send_bytes` bytes from
  // `send` to the right neighbour (ring::rightOf(rank, size)) and receives
  // exactly `recv_bytes` bytes from the left one (ring::leftOf) into `recv`;
  // returns when both are done. Every rank calls it at the same point, and
  // what a rank sends is exactly what its right neighbour expects to receive.
  // `send` and `recv` must not overlap. One rank: nothing moves.
  // The default is an alltoallv whose only non-empty blocks are those two
  // (the pairwise algorithm, ops/algorithms/alltoall_pairwise.h, moves
  // nothing for an empty block, so this is one exchange with each neighbour);
  // a backend may override it with a direct send and receive.
  virtual Status ringExchange(const void* send, size_t send_bytes, void* recv, size_t recv_bytes) {
    const int n = size();
    if (n <= 1) return Status::ok();
    std::vector<size_t> sends(static_cast<size_t>(n), 0);
    std::vector<size_t> recvs(static_cast<size_t>(n), 0);
    sends[static_cast<size_t>(ring::rightOf(rank(), n))] = send_bytes;
    recvs[static_cast<size_t>(ring::leftOf(rank(), n))] = recv_bytes;
    return alltoallv(send, sends, recv, recvs);
  }

  // A point-to-point message (coordinator/point_to_point.h): send() moves
  // `bytes` bytes from `data` to rank `peer`; recv() takes exactly `bytes`
  // bytes from `peer` into `data`. Blocks until this side is done. The
  // coordinator calls them on the two ranks of a matched pair only, at the
  // same point of both ranks' response order, with the same byte count;
  // peer != rank(), bytes > 0. Messages between two ranks arrive in the order
  // they were sent. The default returns kInvalidArgument naming the backend;
  // tcp (sockets, shared memory) and mpi (MPI_Isend/MPI_Irecv) send them
  // over their transport.
  virtual Status send(const void* /*data*/, size_t /*bytes*/, int /*peer*/) {
    return noPointToPoint();
  }
  virtual Status recv(void* /*data*/, size_t /*bytes*/, int /*peer*/) { return noPointToPoint(); }

  // Non-blocking point-to-point access for ring algorithms that overlap
  // their own work with the transfers, segment by segment
  // (coordinator/compressed_ring_allreduce.cc); null when the backend has
  // none (they then use ringExchange). Such an algorithm reports what it sent
  // through it with countRingBytes (CountingBackend adds it to its count).
  virtual Transport* ringTransport() { return nullptr; }
  virtual void countRingBytes(uint64_t /*bytes*/) {}

  // Allreduce (out of place, as allreduceOutOfPlace) whose data crosses hosts
  // as `wire` (kFloat16 or kBFloat16) and stays `dtype` (kFloat32) within a
  // host: compression of what crosses hosts only ("fp16:cross_host",
  // compression/cast_compressor.h). Sets *ran to whether it ran: a backend
  // that cannot (the default; tcp where its hierarchical allreduce would not
  // run for this call) returns ok with *ran false and touches nothing, and
  // the caller compresses the whole buffer instead. Every rank gets the same
  // *ran for the same call (it depends on the placement, the size and the
  // settings only).
  virtual Status allreduceCastAcrossHosts(const void* /*in*/, void* /*out*/, size_t /*count*/,
                                          DataType /*dtype*/, ReduceOp /*op*/, DataType /*wire*/,
                                          bool* ran) {
    *ran = false;
    return Status::ok();
  }

  // Autotune's hierarchical switches (coordinator/parameter_manager.h): false
  // declines the hierarchical allreduce (allgather) as
  // TUTTI_HIERARCHICAL_ALLREDUCE=0 (_ALLGATHER=0) does; true lets the
  // algorithm table choose it again. Called on the background thread between
  // collectives, on every rank before the same response list, so every rank
  // chooses alike. The default ignores it (backends without hierarchical
  // algorithms).
  virtual void allowHierarchical(bool /*allreduce*/, bool /*allgather*/) {}

 private:
  Status noPointToPoint() const {
    return Status::invalidArgument(std::string("the ") + name() +
                                   " backend does not send point-to-point messages (send/recv); "
                                   "the tcp and mpi backends do");
  }
};

}  // namespace tutti
