#pragma once

// Liveness of the negotiation's control peers: tells a peer that is stopped
// (SIGSTOP, a debugger), hung with its background thread, or behind a cut
// link from one that is alive but busy, while this rank waits in the
// negotiation (Transport::pollControl) for it. Used by both transports (the
// tcp mesh's control channel, ops/tcp/tcp_mesh.h; the mpi transport,
// ops/mpi/mpi_transport.h); the transport owns the wire.
//
// Protocol. The control peers are rank 0 and each worker (a worker watches
// rank 0; rank 0 watches every worker). Every rank sends each control peer
// a heartbeat (an empty control frame on tcp, an empty message on a tag of
// its own on mpi) when it sent that peer nothing for `interval()` =
// TUTTI_TIMEOUT_SECONDS / 4, from every loop in which its background thread
// waits: the negotiation and the collectives' waits. Any frame from a peer
// counts as hearing from it. A peer not heard from for TUTTI_TIMEOUT_SECONDS
// while this rank waited in pollControl() is lost (kPeerLost naming it).
//
// This rank's own gaps do not count against its peers: after a gap of more
// than interval()/2 without running its transport (a long reduction on the
// CPU, a CUDA wait), every peer gets a whole timeout from its end, since the
// heartbeats it sent meanwhile may still wait unread. Before a peer's first
// frame the bound is `first_timeout_seconds` (connection set-up). Not
// covered: a peer whose background thread spends more than 3/4 of the
// timeout outside the transport's waits sends nothing meanwhile and is
// taken for lost (no tcp or mpi step does; a long CUDA wait on the device
// path can: docs/negotiation.md, "Liveness between collectives").
//
// Threading: the transport's thread only.

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tutti {

class PeerLiveness {
 public:
  using Clock = std::chrono::steady_clock;
  // Whether the connection to a peer is open (a closed one is not watched).
  using IsOpen = std::function<bool(int peer)>;

  // `first_timeout_seconds` (at least the timeout) bounds the silence
  // before a peer's first frame: a peer may still be connecting to others
  // (TcpMesh's setup timeout) when this rank starts waiting.
  PeerLiveness(int rank, int size, double timeout_seconds, double first_timeout_seconds);

  // The clocks start: every peer counts as sent to and heard from `now`.
  void start(Clock::time_point now);
  Clock::duration interval() const { return interval_; }
  // rank 0 <-> worker.
  bool isControlPeer(int peer) const;

  void sent(int peer, Clock::time_point now);
  void heard(int peer, Clock::time_point now);
  // Control peers with an open connection sent nothing for interval().
  std::vector<int> heartbeatsDue(Clock::time_point now, const IsOpen& open) const;
  // When the next heartbeat falls due (max() when none is open).
  Clock::time_point nextHeartbeat(const IsOpen& open) const;

  // This rank's thread runs its transport's waits at `now` (call before a
  // wait; a gap since the last call over interval()/2 restarts every peer's
  // timeout) and ran them until `now` (call after a wait).
  void enterWait(Clock::time_point now);
  void leftWait(Clock::time_point now) { last_wait_ = now; }

  // A control peer with an open connection not heard from for the timeout
  // (-1: none); *until is when the next one would be.
  int silentPeer(Clock::time_point now, const IsOpen& open, Clock::time_point* until) const;
  // "rank 2: nothing heard for 30 s (TUTTI_TIMEOUT_SECONDS) while rank 0
  // waited in the negotiation; ..."
  std::string silenceMessage(int peer) const;

 private:
  int rank_;
  double timeout_seconds_;
  Clock::duration timeout_;
  Clock::duration first_timeout_;
  Clock::duration interval_;
  std::vector<Clock::time_point> sent_at_;   // by rank
  std::vector<Clock::time_point> heard_at_;  // by rank
  std::vector<bool> heard_any_;              // by rank: a frame arrived
  Clock::time_point last_wait_{};
  Clock::time_point resumed_at_{};
};

}  // namespace tutti
