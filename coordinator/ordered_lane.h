#pragma once

// The ordered lane of one process set on this rank: collectives that the
// caller promises to issue in the same order on every member of the set
// (torch.distributed's contract, FSDP2, JAX under jit), run without the
// negotiation through rank 0 (coordinator/controller.h).
//
// Protocol. Each op takes the set's next sequence number at submission.
// Executing op #s, every member sends its signature (the op's Request:
// collective, dtype, shape, reduce op, scale factors, root, splits,
// compression; named "#s") to every other member in one allgather of
// variable-sized blocks (ops/algorithms/allgather_bruck.h, ceil(log2 n)
// rounds). Every member then holds every member's signature and runs the
// negotiation's own checks on them (buildResponse,
// coordinator/request_validation.h): the same Response, or the same error,
// on every member, with no coordinator. A disagreement (another collective,
// dtype, shape, root, ...; a rank that skipped a call and is one op ahead)
// is kMismatch on every member, naming the sequence number, the ranks and
// the values; the lane stays usable, since every member read exactly the
// blocks that were sent. Then the collective runs on the lane's own
// connections with the executor the negotiated lane uses
// (coordinator/executor.h). Small ops carry their data in the signature
// block (at most TUTTI_ORDERED_INLINE_BYTES for all members' data together;
// allreduce without prescale, allgather, broadcast, reducescatter, barrier)
// and finish locally from the gathered blocks (ops/gathered_backend.h), so
// a 4-byte allreduce costs one exchange.
//
// Connections. The lane opens its own connections among the set's members
// (`connect`, the backend's, through the job's rendezvous store) when its
// first op executes: every member executes that op, so all of them connect.
// The negotiated lane's connections are never used, so no interleaving of
// the two lanes can mix bytes or deadlock. A peer that made no progress for
// TUTTI_ORDERED_TIMEOUT_SECONDS while this rank waits in an op (a rank that
// never issues the op) breaks the lane with kPeerLost naming it; a dead peer
// (closed or unreachable) is kPeerLost within TUTTI_TIMEOUT_SECONDS.
//
// Threads. The op runs on a thread that waits for it (runThrough(): the
// caller's own thread, no hand-off) when no other thread is running the
// lane; else that thread runs it and the waiter sleeps until done. Ops that
// nobody waits for (callbacks, polling) are run by the lane's own thread
// once they have been queued TUTTI_ORDERED_HANDOFF_US without a waiter
// (soon after a callback is set or the handle polled: nudge(); else within
// a few milliseconds: the thread is not woken per op, which on a busy host
// would cost a context switch each).
// Ops execute one at a time in sequence order, whoever runs them.
//
// Errors. A failed exchange or collective (kPeerLost, kInternal) breaks
// the lane: that op and every later one fail with the same status. close()
// fails every queued op with its status (kShutdown at shutdown).
//
// Thread-safety: every public method, from any thread.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "coordinator/executor.h"
#include "coordinator/handle_table.h"
#include "coordinator/process_sets.h"
#include "coordinator/tensor_queue.h"
#include "ops/backend_registry.h"

namespace tutti {

struct OrderedLaneOptions {
  // Largest op, in bytes of all members' data together, whose data travels
  // with its signature (TUTTI_ORDERED_INLINE_BYTES; 0: never).
  int64_t inline_bytes = 8 << 10;
  // How long a queued op waits for a waiting caller to run it before the
  // lane's thread does (TUTTI_ORDERED_HANDOFF_US).
  std::chrono::microseconds handoff{50};
  // false (TUTTI_ORDERED_EXECUTION=thread): the lane's thread runs every op
  // as soon as it is queued and waiters only sleep; kept to measure the
  // hand-off against the default (docs/ordered-lane.md).
  bool callers_run = true;
};

class OrderedLane {
 public:
  // Opens the lane's connections among the set's members (collective over them).
  using Connect = std::function<Status(SetBackend* out)>;

  // `handles` and `state` must outlive the lane. `rank` is this rank's global rank.
  OrderedLane(ProcessSetInfo set, int rank, Connect connect, HandleTable& handles,
              ExecutorState& state, OrderedLaneOptions options);
  ~OrderedLane();  // close(kShutdown)
  OrderedLane(const OrderedLane&) = delete;
  OrderedLane& operator=(const OrderedLane&) = delete;

  // Queues an op (one entry; a grouped allreduce's tensors) with the next
  // sequence number and returns that number. Entries whose handle is 0 failed
  // this rank's checks (request.error set): they still take part in the
  // exchange, so every member fails the op alike. After close(): the op
  // fails with close()'s status at once.
  uint64_t submit(std::vector<TensorEntry> entries);
  // Returns once op `seq` has run (or failed): runs it, and the ops queued
  // before it, on this thread unless another thread is running the lane.
  // timeout_seconds < 0: no deadline; on expiry kTimeout (the op goes on).
  Status runThrough(uint64_t seq, double timeout_seconds);
  // Fails every queued op with `status` and makes later submits fail alike;
  // waits for an op that is running, stops the lane's thread and closes the
  // connections. Idempotent (the first status stays).
  void close(const Status& status);
  // close(kShutdown), then waits for an op that is running (close() cancels
  // its waits), joins the lane's thread and closes the connections. Any
  // thread but the lane's own; idempotent.
  void shutdown();
  // Someone wants op completions without waiting (a completion callback,
  // polling): the lane's thread looks at the queue now, so the ops run
  // after the hand-off time. Any thread.
  void nudge();

  int32_t setId() const { return set_.id; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Op {
    uint64_t seq = 0;
    std::vector<TensorEntry> entries;
    std::chrono::steady_clock::time_point queued;
  };
  // With mu_ held and running_ set by the caller: runs the queue's front
  // (mu_ released meanwhile), then clears running_ and wakes the others.
  void runFront(std::unique_lock<std::mutex>& lock);
  void threadMain();
  // The op's exchange and collective (no lock held); fills one Completion
  // per entry, or returns the status that breaks the lane.
  Status execute(Op& op, std::vector<Completion>* done);
  Status exchange(const Op& op, std::vector<std::vector<uint8_t>>* blocks, bool* inlined);
  // Every member's requests and payload from the gathered blocks; kMismatch
  // (in *verdict) when they disagree.
  Status decide(const Op& op, const std::vector<std::vector<uint8_t>>& blocks,
                std::vector<Response>* responses, std::vector<std::vector<uint8_t>>* payloads,
                bool* inlined, Status* verdict);
  // The data this rank's block carries when the op goes inline (empty view: none).
  TensorView payloadOf(const Op& op) const;
  void complete(const Op& op, std::vector<Completion> done, const Status& failed);

  const ProcessSetInfo set_;
  const int rank_;
  const Connect connect_;
  HandleTable& handles_;
  ExecutorState& state_;
  const OrderedLaneOptions options_;

  std::mutex mu_;
  std::condition_variable cv_;         // waiters in runThrough()
  std::condition_variable thread_cv_;  // the lane's thread
  int waiters_ = 0;
  // When the lane's thread looks at the queue next (max: only when woken).
  Clock::time_point thread_deadline_ = Clock::time_point::max();
  Clock::time_point last_submit_{};
  std::deque<Op> queue_;
  uint64_t next_seq_ = 1;
  uint64_t done_seq_ = 0;  // every op up to it has run
  bool running_ = false;   // a thread runs the front op
  bool closing_ = false;
  Status closed_;  // close()'s status
  Status broken_;  // the status that broke the lane
  std::thread thread_;

  // The running thread's only (running_ guards them).
  SetBackend conn_;
  std::unique_ptr<Executor> executor_;
};

}  // namespace tutti
