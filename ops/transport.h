#pragma once

// The narrow interface collective algorithms run on: point-to-point byte
// streams from this rank to every peer (Gloo's pair), plus the negotiation
// control channel between rank 0 and each worker.
//
// Threading: a Transport is used by one thread at a time, the runtime's
// background thread, except wake(), which any thread may call. Progress on
// posted operations happens inside wait()/waitAll()/pollControl() only, on the
// calling thread; nothing spins: those calls sleep in the kernel (epoll via
// Boost.Asio) until data moves or a deadline passes.
//
// Errors: a broken connection, a peer that closed, or no progress from a peer
// for the transport's timeout (TUTTI_TIMEOUT_SECONDS) is kPeerLost naming the
// peer's rank in its message and carrying it as Status::lostRank(). After the
// first kPeerLost the transport is broken: every later
// call returns that same status at once.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace tutti {

// A message on the control channel: a serialized RequestList (worker to rank
// 0) or ResponseList (rank 0 to workers).
struct ControlMessage {
  int from_rank = -1;
  std::vector<uint8_t> bytes;
};

class Transport {
 public:
  using OpId = uint64_t;
  using Clock = std::chrono::steady_clock;

  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Posts a send of `bytes` bytes from `data` to `peer` (peer != rank()). The
  // memory must stay valid and unchanged until the op completes. Operations
  // to one peer complete in posting order; sends and receives overlap.
  virtual OpId postSend(int peer, const void* data, size_t bytes) = 0;
  // Posts a receive of exactly `bytes` bytes from `peer` into `data`.
  virtual OpId postRecv(int peer, void* data, size_t bytes) = 0;
  // Blocks until op `id` completed (and drives every other posted op).
  virtual Status wait(OpId id) = 0;
  // Blocks until every posted op completed.
  virtual Status waitAll() = 0;

  // Control channel. Workers may send only to rank 0; rank 0 to any worker.
  // Queued; sent in order; completes in the background of later calls.
  // `bytes` is never empty (kInvalidArgument): an empty message is the
  // transports' heartbeat (ops/peer_liveness.h), which the control peers
  // exchange while they wait, so that pollControl() fails with kPeerLost
  // naming a control peer (rank 0 for a worker, a worker for rank 0) not
  // heard from for TUTTI_TIMEOUT_SECONDS (stopped, or its link cut).
  virtual Status sendControl(int peer, std::vector<uint8_t> bytes) = 0;
  // Returns control messages that have arrived (possibly during earlier
  // wait() calls), waiting for at least one until `deadline` or wake().
  // Returns kPeerLost if a control connection broke.
  virtual Status pollControl(Clock::time_point deadline, std::vector<ControlMessage>* out) = 0;
  // Thread-safe: makes a pending or the next pollControl() return at once.
  virtual void wake() = 0;

  // After the transport broke: returns control messages still arriving on
  // control connections that are open (rank 0's abort notice, which names
  // the rank that was lost), waiting until one arrives, no control
  // connection is left, or `deadline`. Returns the break's status when there
  // is nothing (more) to deliver. Default: pollControl().
  // Thread-safe (any thread, also while another thread waits): breaks the
  // transport with `status`, so that the wait in progress and every later
  // call return it. The ordered lane (coordinator/ordered_lane.h) ends an op
  // this way at shutdown. The default does nothing (the caller then waits
  // for the peers or the transport's own timeout).
  virtual void cancel(const Status& /*status*/) {}

  virtual Status drainControl(Clock::time_point deadline, std::vector<ControlMessage>* out) {
    return pollControl(deadline, out);
  }
};

}  // namespace tutti
