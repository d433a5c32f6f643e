#pragma once

// Backend (ops/backend.h) on MPI's own collectives, over the communicator of
// an MpiTransport, in their non-blocking forms: MPI_Iallreduce (in place),
// MPI_Iallgatherv, MPI_Ibcast, MPI_Ialltoallv, MPI_Ireduce_scatter,
// MPI_Ireduce and MPI_Ibarrier, each waited for with a bound
// (ops/mpi/mpi_wait.h); Open MPI picks their algorithms and shared-memory
// paths.
//
// Types and ops: integers and floats map onto MPI's predefined types and
// ops; float16 and bfloat16 travel as MPI_UINT16_T and reduce with
// user-defined ops (MPI_Op_create) that compute in float32 through
// ops/reduce.h; bool reduces with MPI_LOR (sum, max) and MPI_LAND (min,
// product).
//
// Sizes: MPI counts are ints. Buffers of more than `max_chunk_bytes` (default
// 1 GiB) are reduced and broadcast in chunks; allgatherv, alltoallv and
// reducescatter whose counts or displacements do not fit take a chunked path
// (broadcast per rank, point-to-point exchange, reduce per rank) instead of
// the single MPI call. Tests lower max_chunk_bytes to reach those paths.
// Allreduce goes in pieces of at most kAllreducePieceBytes (16 MiB) in any
// case: Open MPI's non-blocking allreduce (coll/libnbc) took 1.5-2.2 times as
// long as the blocking one (coll/tuned) on 64 MiB at 2 ranks on the test
// machine, and 16 MiB pieces matched the blocking call (docs/reliability.md);
// each piece completing is also progress for the bound below.
//
// Blocking, bounded: each call blocks the background thread, polling its
// request with MPI_Test (no sleep), until the collective finished on this
// rank, or until TUTTI_TIMEOUT_SECONDS passed since the MPI call started
// (each call moves at most max_chunk_bytes; an allreduce call 16 MiB). A
// rank that stops or hangs without dying (SIGSTOP, a deadlock, a host that
// stops answering) then gives kPeerLost on every rank waiting for it, naming the call, this
// backend's process set and the timeout, and the job ends with MPI_Abort a
// moment later (ops/mpi/mpi_wait.h: MPI cannot cancel a collective). A rank
// that dies makes Open MPI's mpirun abort the whole job at once (every rank
// is killed) rather than return an error.
//
// Not bounded: a rank that stops, or whose link is cut, between collectives,
// while the others wait in the negotiation (only the stall shutdown,
// TUTTI_STALL_SHUTDOWN_TIME_SECONDS, ends that; the fault matrix's mpi stop
// and link cells hit it now and then, docs/reliability.md); MPI_Comm_dup
// and MPI_Comm_split when the backend and a process set's communicator are
// created (collective, and MPI has no bounded form);
// the barrier before MPI_Finalize at exit, which waits for ranks still at
// work (ops/mpi/mpi_environment.h; MPI_Finalize itself is bounded there).
//
// Errors: the communicator returns errors (MPI_ERRORS_RETURN); an MPI error
// or a timeout is kPeerLost naming the call, and the backend is broken from
// then on: every later call returns the same status.
//
// Threading: the runtime's background thread only.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/backend.h"
#include "ops/mpi/mpi_transport.h"
#include "ops/mpi/mpi_wait.h"

namespace tutti {

class MpiBackend : public Backend {
 public:
  static constexpr size_t kDefaultMaxChunkBytes = size_t{1} << 30;
  static constexpr size_t kAllreducePieceBytes = size_t{16} << 20;

  // `transport` must outlive the backend.
  explicit MpiBackend(MpiTransport& transport, size_t max_chunk_bytes = kDefaultMaxChunkBytes);
  // Over a process set: collectives on `comm` (the set's communicator, ranks
  // in the set's order), point-to-point through `p2p` (a transport over the
  // same ranks). Both must outlive the backend. `scope` names the set and
  // gives the timeout of every wait.
  MpiBackend(Transport& p2p, MPI_Comm comm, MpiWaitScope scope,
             size_t max_chunk_bytes = kDefaultMaxChunkBytes);
  const char* name() const override { return "mpi"; }
  int rank() const override { return transport_.rank(); }
  int size() const override { return transport_.size(); }
  Status allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  // Adasum over the MpiTransport's point-to-point messages
  // (ops/algorithms/allreduce_adasum.h), as Horovod's MPI Adasum.
  Status adasumAllreduce(void* buf, const std::vector<size_t>& counts, DataType dtype) override;
  Status allgatherv(const void* input, void* output,
                    const std::vector<size_t>& bytes_per_rank) override;
  Status broadcast(void* buf, size_t bytes, int root) override;
  Status alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                   const std::vector<size_t>& recv_bytes) override;
  Status reducescatter(const void* input, void* output, const std::vector<size_t>& counts,
                       DataType dtype, ReduceOp op) override;
  Status barrier() override;
  // Point-to-point messages through the transport's MPI_Isend/MPI_Irecv
  // (ops/mpi/mpi_transport.h), bounded as its messages are.
  Status send(const void* data, size_t bytes, int peer) override;
  Status recv(void* data, size_t bytes, int peer) override;

 private:
  // The result of starting `call` (`code`, `request`), waited for.
  Status check(int code, MPI_Request request, const char* call);
  bool fitsOneCall(const std::vector<size_t>& counts) const;

  Transport& transport_;
  const MPI_Comm comm_;
  const MpiWaitScope scope_;
  const size_t max_chunk_bytes_;
  Status broken_;
  std::vector<uint8_t> adasum_scratch_;  // half the buffer; reused between calls
};

}  // namespace tutti
