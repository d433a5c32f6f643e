#pragma once

// An in-process Transport for tests and bench/scale: N ranks run as threads
// of one process and exchange bytes through shared mailboxes (one mutex for
// the whole world and one condition variable per rank, notified only for
// what concerns that rank; waits sleep on it, nothing spins). Channels are
// allocated on first use, so a world of 1,024 ranks that only exchanges
// control messages costs O(N) memory, not O(N^2).
//
// Semantics are deliberately strict so algorithm bugs show up:
// - a send completes only when the matching receive has copied it
//   (rendezvous), so an algorithm that waits on a send before posting the
//   receive that its peer needs deadlocks -> times out;
// - the n-th send from a to b matches the n-th receive posted by b from a;
//   their sizes must be equal, else both fail with kInternal;
// - every wait has a deadline (`op_timeout`); when it expires the whole world
//   is broken: every pending and later op on every rank fails with kTimeout,
//   and no memory of a failed op is touched again.
//
// Ownership: MemoryWorld owns the shared state and the per-rank transports;
// it must outlive the threads using them. Each MemoryTransport is used by one
// thread at a time (wake() from any thread), as Transport requires.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "ops/transport.h"

namespace tutti::testing {

class MemoryWorld;

class MemoryTransport : public Transport {
 public:
  MemoryTransport(MemoryWorld& world, int rank) : world_(world), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override;
  OpId postSend(int peer, const void* data, size_t bytes) override;
  OpId postRecv(int peer, void* data, size_t bytes) override;
  Status wait(OpId id) override;
  Status waitAll() override;
  Status sendControl(int peer, std::vector<uint8_t> bytes) override;
  Status pollControl(Clock::time_point deadline, std::vector<ControlMessage>* out) override;
  void wake() override;

  // Number of data messages this rank posted (tests check "sends nothing").
  size_t postedOps() const { return posted_; }
  // This rank hung up (as a closed tcp connection): once their control
  // queue is empty, its control peers' pollControl() returns kPeerLost
  // naming it (a worker's control peer is rank 0; rank 0's are the workers).
  void close();

 private:
  // postSend/postRecv: a send queues on the (rank -> peer) channel, a receive
  // on (peer -> rank).
  OpId post(bool send, int peer, const void* send_data, void* recv_data, size_t bytes);

  MemoryWorld& world_;
  int rank_;
  size_t posted_ = 0;
};

class MemoryWorld {
 public:
  explicit MemoryWorld(int size,
                       std::chrono::milliseconds op_timeout = std::chrono::milliseconds(20000));
  int size() const { return size_; }
  MemoryTransport& transport(int rank) { return *transports_[rank]; }

  // Runs fn(transport) for every rank on its own thread and joins them all.
  void run(const std::function<void(MemoryTransport&)>& fn);

 private:
  friend class MemoryTransport;
  struct Op {
    bool done = false;
    Status status;
    void* recv_data = nullptr;
    const void* send_data = nullptr;
    size_t bytes = 0;
  };
  struct Channel {  // one direction: from -> to
    std::deque<std::shared_ptr<Op>> sends;
    std::deque<std::shared_ptr<Op>> recvs;
  };
  // The (from -> to) channel, created on first use (mutex held).
  Channel& channel(int from, int to);
  // Pairs queued sends and receives on the (from -> to) channel and wakes
  // both ranks (mutex held).
  void matchLocked(int from, int to);
  // Fails every pending op and every later one (mutex held).
  void breakLocked(const Status& status);

  const int size_;
  const std::chrono::milliseconds op_timeout_;
  std::mutex mu_;
  std::unique_ptr<std::condition_variable[]> cvs_;  // by rank
  Status broken_;
  std::vector<std::unique_ptr<Channel>> channels_;  // from * size + to; null until used
  // Per rank: ops it posted and has not waited for yet.
  std::vector<std::map<Transport::OpId, std::shared_ptr<Op>>> pending_;
  std::vector<Transport::OpId> next_id_;
  std::vector<std::deque<ControlMessage>> control_;
  std::vector<bool> woken_;
  std::vector<bool> closed_;  // by rank: close() was called
  int closed_count_ = 0;
  // The lowest control peer of `rank` that closed, -1 when none (mutex held).
  int closedControlPeerLocked(int rank) const;
  std::vector<std::unique_ptr<MemoryTransport>> transports_;
};

}  // namespace tutti::testing
