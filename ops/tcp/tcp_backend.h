#pragma once

// Backend over a Transport: the algorithms of ops/algorithms/, chosen per
// call by ops/algorithm_table.h (by collective and payload size, with
// TUTTI_ALGORITHMS's overrides first); ring and chain algorithms are
// pipelined in segments of `segment_bytes` (0: ring::kDefaultSegmentBytes).
// Adasum by ops/algorithms/allreduce_adasum.h. Hierarchical allreduce,
// allgather and broadcast (ops/algorithms/*_hierarchical.h) run over the
// transport's ranks grouped by host (ops/host_groups.h); the flat allreduce
// ring and broadcast chain and tree run through the ranks host by host.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/algorithm_table.h"
#include "ops/backend.h"
#include "ops/host_groups.h"
#include "ops/transport.h"

namespace tutti {

// What hierarchical collectives need; the same on every rank.
struct TcpHierarchy {
  std::string allreduce = "auto";  // TUTTI_HIERARCHICAL_ALLREDUCE: auto, 1 or 0
  std::string allgather = "auto";  // TUTTI_HIERARCHICAL_ALLGATHER: auto, 1 or 0
  std::vector<int> host_of_rank;   // host id of each transport rank; empty: one host
};

class TcpBackend : public Backend {
 public:
  // `transport` must outlive the backend. `overrides`: parsed
  // TUTTI_ALGORITHMS (parseAlgorithmOverrides); the same on every rank.
  // hierarchy.allreduce (.allgather) "1" puts the hierarchical allreduce
  // (allgather) after the overrides for every size, "0" declines it. The
  // hierarchical broadcast has no switch: the table picks it for every size
  // where the placement allows (TUTTI_ALGORITHMS=broadcast:0-inf:chain
  // chooses the flat chain instead).
  TcpBackend(Transport& transport, size_t segment_bytes,
             std::vector<AlgorithmOverride> overrides = {}, const TcpHierarchy& hierarchy = {});
  const char* name() const override { return "tcp"; }
  int rank() const override;
  int size() const override;
  Status allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  Status allreduceOutOfPlace(const void* in, void* out, size_t count, DataType dtype,
                             ReduceOp op) override;
  Status adasumAllreduce(void* buf, const std::vector<size_t>& counts, DataType dtype) override;
  // One host: a plain allreduce (nothing crosses hosts). Several: the
  // hierarchical allreduce with its cross-host exchange in `wire`, where the
  // algorithm table chooses it for these bytes; otherwise *ran is false.
  Status allreduceCastAcrossHosts(const void* in, void* out, size_t count, DataType dtype,
                                  ReduceOp op, DataType wire, bool* ran) override;
  Status allgatherv(const void* input, void* output,
                    const std::vector<size_t>& bytes_per_rank) override;
  Status broadcast(void* buf, size_t bytes, int root) override;
  Status alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                   const std::vector<size_t>& recv_bytes) override;
  Status reducescatter(const void* input, void* output, const std::vector<size_t>& counts,
                       DataType dtype, ReduceOp op) override;
  Status barrier() override;
  // Over the transport: sockets, or the shared-memory rings between two
  // ranks on one host (ops/tcp/shm_link.h).
  Status send(const void* data, size_t bytes, int peer) override;
  Status recv(void* data, size_t bytes, int peer) override;
  Transport* ringTransport() override { return &transport_; }
  // A switch fixed by TUTTI_HIERARCHICAL_*=1 keeps its forced entry (autotune
  // leaves such a switch alone).
  void allowHierarchical(bool allreduce, bool allgather) override {
    hierarchical_allreduce_ = allreduce;
    hierarchical_allgather_ = allgather;
  }

 private:
  AlgorithmChoice select(const char* collective, uint64_t bytes) const;
  AlgorithmId choose(const char* collective, uint64_t bytes) const;
  Status allreduceBySize(const void* in, void* out, size_t count, DataType dtype, ReduceOp op);

  Transport& transport_;
  size_t segment_bytes_;
  std::vector<AlgorithmOverride> overrides_;
  HostGroups groups_;
  bool hierarchical_allreduce_ = true;
  bool hierarchical_allgather_ = true;
  // Reused between calls so steady-state collectives do not allocate:
  // two received segments (allreduce; half the buffer for Adasum) and a
  // partial-sums buffer (reducescatter; also hierarchical allreduce's and
  // allgather's staging).
  std::vector<uint8_t> scratch_;
  std::vector<uint8_t> work_;
};

}  // namespace tutti
