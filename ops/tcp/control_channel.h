#pragma once

// The negotiation control channel of the TCP transport's mesh: one
// connection between rank 0 and each worker carrying length-prefixed frames
// (core/wire.h's frame header; at most kMaxControlBytes each). Outgoing
// frames are queued and written in order; incoming ones land in an inbox the
// mesh empties. Not a public interface.
//
// Heartbeats (ops/peer_liveness.h): an empty frame (body length 0) is a
// heartbeat; it never reaches the inbox (no serialized RequestList or
// ResponseList is empty). Every frame sent and received is reported to the
// PeerLiveness the mesh passes in.
//
// Failures: a connection that fails is closed and reported to the host
// (LinkHost::linkFailed, kPeerLost naming the peer); a frame longer than
// kMaxControlBytes breaks the whole transport (the `on_malformed` callback).
// After the transport broke, stopWrites() holds queued frames back; open
// connections still read (rank 0's abort notice) and lastWords() writes one
// frame synchronously.
//
// Threading: the mesh's thread only; handlers run inside its io_context.

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "core/wire.h"
#include "ops/peer_liveness.h"
#include "ops/tcp/link.h"

namespace tutti {

// Control frames from authenticated peers; anything larger is a bug.
constexpr size_t kMaxControlBytes = 256u << 20;

class ControlChannel {
 public:
  // `size` ranks; `on_malformed(st)` breaks the transport with `st`;
  // `liveness` (outlives the channel) hears of every frame.
  ControlChannel(int size, LinkHost& host, PeerLiveness& liveness,
                 std::function<void(Status)> on_malformed);

  // Setup: the connection to `peer` (rank 0 <-> worker only).
  void install(int peer, std::shared_ptr<tcp::socket> socket);
  bool has(int peer) const { return peers_[peer].socket != nullptr; }
  // Starts reading frames from every installed connection (and the
  // liveness clocks).
  void startReading();

  // Queues one frame for `peer` (installed; bytes <= kMaxControlBytes).
  void send(int peer, std::vector<uint8_t> bytes);
  // Writes one frame synchronously on an open connection; false if there is
  // none or the write failed.
  bool lastWords(int peer, const std::vector<uint8_t>& bytes);
  void stopWrites() { writes_stopped_ = true; }
  // false: a failed or closed control connection is only closed here, not
  // reported to the mesh (the ordered lane, which never uses the channel).
  void setFailuresBreakMesh(bool on) { failures_break_mesh_ = on; }
  void close(int peer);
  void closeAll();
  bool anyOpen() const;

  std::deque<ControlMessage>& inbox() { return inbox_; }

  bool isOpen(int peer) const { return peers_[peer].socket && peers_[peer].socket->is_open(); }

 private:
  struct Peer {
    std::shared_ptr<tcp::socket> socket;
    std::deque<std::vector<uint8_t>> out;  // whole frames
    bool writing = false;
    FrameHeader header{};
    std::vector<uint8_t> body;
  };
  void startWrite(int peer);
  void startRead(int peer);
  void failed(int peer, const boost::system::error_code& ec);

  LinkHost& host_;
  PeerLiveness& liveness_;
  std::function<void(Status)> on_malformed_;
  std::vector<Peer> peers_;  // by rank
  std::deque<ControlMessage> inbox_;
  bool writes_stopped_ = false;
  bool failures_break_mesh_ = true;
};

}  // namespace tutti
