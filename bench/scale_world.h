#pragma once

// The pieces bench/scale runs the real runtime on: N ranks as threads of one
// process, each a Runtime (Runtime::createConnected) whose control channel is
// tests/support/memory_transport.h with counters and heartbeats around it,
// and whose data path is a backend that moves nothing and only checks that
// every rank asked for the same collective with the same sizes.
//
// What is real: the background loops, the controller, the response cache,
// fusion, the stall inspector, the tensor queue and handles, serialization
// of every RequestList and ResponseList, and the control peers' heartbeats
// (ops/peer_liveness.h, the same class the tcp and mpi transports use).
// What is not: sockets (a message is a mutex, a deque and a notify) and the
// collectives' data.
//
// Threading: ScaleTransport as any Transport (the rank's background thread,
// wake() from any thread); ControlCounters are atomics read by any thread;
// SizeLedger is thread-safe.

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ops/backend.h"
#include "ops/peer_liveness.h"
#include "ops/transport.h"
#include "tests/support/memory_transport.h"

namespace tutti::bench {

// A copy of ControlCounters at one moment; differences give per-step figures.
struct ControlSnapshot {
  uint64_t sent_messages = 0;  // control messages, heartbeats excluded
  uint64_t sent_bytes = 0;
  uint64_t received_messages = 0;
  uint64_t received_bytes = 0;
  uint64_t heartbeats = 0;  // sent and received
  int64_t cpu_ns = 0;       // the background thread's CPU time (CLOCK_THREAD_CPUTIME_ID)
  ControlSnapshot operator-(const ControlSnapshot& earlier) const;
};

// One rank's control-plane traffic, counted by its ScaleTransport.
struct ControlCounters {
  std::atomic<uint64_t> sent_messages{0};
  std::atomic<uint64_t> sent_bytes{0};
  std::atomic<uint64_t> received_messages{0};
  std::atomic<uint64_t> received_bytes{0};
  std::atomic<uint64_t> heartbeats{0};
  // Sampled when the background thread enters and leaves pollControl, so it
  // includes everything the thread did up to its last wait.
  std::atomic<int64_t> cpu_ns{0};
  ControlSnapshot snapshot() const;
};

// A Transport over a MemoryTransport that counts control messages and bytes
// and exchanges heartbeats with the control peers (empty control messages,
// never passed up) as the tcp transport does: sent when a peer got nothing
// for TUTTI_TIMEOUT_SECONDS / 4, a peer silent for the timeout is kPeerLost
// naming it. Data ops pass through uncounted.
class ScaleTransport : public Transport {
 public:
  // `inner` and `counters` must outlive this object.
  ScaleTransport(testing::MemoryTransport& inner, double timeout_seconds,
                 ControlCounters* counters);
  // Hangs up (MemoryTransport::close): the runtime destroys its transport
  // last, so its control peers see the close as they would on tcp.
  ~ScaleTransport() override { inner_.close(); }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  OpId postSend(int peer, const void* data, size_t bytes) override {
    return inner_.postSend(peer, data, bytes);
  }
  OpId postRecv(int peer, void* data, size_t bytes) override {
    return inner_.postRecv(peer, data, bytes);
  }
  Status wait(OpId id) override { return inner_.wait(id); }
  Status waitAll() override { return inner_.waitAll(); }
  Status sendControl(int peer, std::vector<uint8_t> bytes) override;
  Status pollControl(Clock::time_point deadline, std::vector<ControlMessage>* out) override;
  void wake() override { inner_.wake(); }

 private:
  void sampleCpu();

  testing::MemoryTransport& inner_;
  ControlCounters* counters_;
  PeerLiveness liveness_;
  bool started_ = false;
};

// The sizes every rank's NullBackend was asked for, call by call: the n-th
// collective of every rank must have the signature of the n-th collective
// of the first rank that reached it.
class SizeLedger {
 public:
  explicit SizeLedger(int size) : size_(size), next_(static_cast<size_t>(size), 0) {}
  // kInternal naming both ranks and signatures when `signature` differs.
  Status check(int rank, const std::string& signature);
  // Collectives every rank checked so far (the first rank's count).
  uint64_t completed() const;

 private:
  struct Entry {
    std::string signature;
    int first_rank = 0;
    int seen = 0;
  };
  const int size_;
  mutable std::mutex mu_;
  std::vector<uint64_t> next_;  // by rank: its next call's number
  std::map<uint64_t, Entry> open_;
  uint64_t completed_ = 0;
};

// A Backend that moves no data: each collective checks its signature (the
// collective, dtype, reduce op, counts or byte sizes, root) against the
// ledger and returns; an out-of-place allreduce copies its input. The
// result of a reduction is therefore this rank's own input.
class NullBackend : public Backend {
 public:
  NullBackend(int rank, int size, SizeLedger* ledger) : rank_(rank), size_(size), ledger_(ledger) {}
  const char* name() const override { return "null"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  Status allreduceOutOfPlace(const void* in, void* out, size_t count, DataType dtype,
                             ReduceOp op) override;
  Status allgatherv(const void* input, void* output,
                    const std::vector<size_t>& bytes_per_rank) override;
  Status broadcast(void* buf, size_t bytes, int root) override;
  Status alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                   const std::vector<size_t>& recv_bytes) override;
  Status reducescatter(const void* input, void* output, const std::vector<size_t>& counts,
                       DataType dtype, ReduceOp op) override;
  Status barrier() override { return ledger_->check(rank_, "barrier"); }

 private:
  int rank_;
  int size_;
  SizeLedger* ledger_;
};

}  // namespace tutti::bench
