#pragma once

// One peer of the TCP transport's mesh (ops/tcp/tcp_mesh.h): the byte stream
// between this rank and one other rank, after Gloo's tcp::Pair (one object
// per peer with an explicit state) and TensorPipe's transports (every kind
// of connection behind one interface). Not a public interface.
//
// Implementations: SocketLink (a plain byte stream on the pair's TCP data
// connection), ZstdLink (the same connection carrying zstd frames;
// ops/tcp/zstd_link.h) and ShmLink (a shared-memory channel, with the TCP
// connection kept for doorbells and to see the peer go; ops/tcp/shm_link.h).
//
// Ops: post() queues a send or a receive; sends complete in posting order,
// receives too, and the two directions overlap. A completed op is reported to
// the host (LinkHost::opCompleted) from inside post(), pump() or an I/O
// handler, all on the mesh's thread.
//
// States: kOpen moves bytes. The mesh moves a link out of kOpen when the
// transport breaks (kStopped: pending reads and writes on the connection are
// cancelled, the connection stays open, so that the peer does not blame this
// rank; kClosed: the connection is closed). setState() is the one place where
// a link cleans up; no state leads back to kOpen. A link that sees its own
// connection fail (EOF, reset, a frame or ring it cannot take) reports it to
// the host (LinkHost::linkFailed), which breaks the transport.
//
// Threading: a link is used by the mesh's thread only; handlers run inside
// the mesh's io_context on that thread.

#include <boost/asio.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "core/status.h"
#include "ops/tcp/tcp_transport.h"
#include "ops/transport.h"

namespace tutti {

namespace asio = boost::asio;
using asio::ip::tcp;

// What a link (and the control channel) tells the mesh that owns it.
class LinkHost {
 public:
  // Op `id` moved its last byte.
  virtual void opCompleted(Transport::OpId id) = 0;
  // The connection to `peer` failed with `st` (kPeerLost naming the peer);
  // reported for every failure, also after the transport broke.
  virtual void linkFailed(int peer, Status st) = 0;
  // Counters of what the data sockets carried.
  virtual TcpWireStats& wireStats() = 0;

 protected:
  ~LinkHost() = default;
};

enum class LinkState {
  kOpen,     // moving bytes
  kStopped,  // the transport broke elsewhere: pending I/O cancelled, connection open
  kClosed,   // this link failed or the transport closed: connection closed
};

// kPeerLost for a failed connection to `peer`: "rank P closed its connection"
// on EOF, else "connection to rank P broke: <error>".
Status connectionLost(int peer, const boost::system::error_code& ec);

class Link {
 public:
  using OpId = Transport::OpId;
  using Clock = Transport::Clock;

  // `socket` is the pair's connected, authenticated data connection.
  Link(int peer, std::shared_ptr<tcp::socket> socket, LinkHost& host);
  virtual ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  int peer() const { return peer_; }
  LinkState state() const { return state_; }
  bool open() const { return state_ == LinkState::kOpen; }
  // Ops are queued (posted and not complete).
  bool busy() const { return !sends_.empty() || !recvs_.empty(); }
  // When a byte last moved (or the queue last became non-empty).
  Clock::time_point lastProgress() const { return last_progress_; }
  void markProgress(Clock::time_point now) { last_progress_ = now; }

  // Queues an op of `bytes` > 0 bytes and starts moving it. The memory stays
  // valid until the op completes or the transport broke.
  void post(bool send, OpId id, uint8_t* data, size_t bytes);

  // Moves the bytes that can move without waiting (shared memory); true if
  // any did. The socket links move bytes in I/O handlers only: false.
  virtual bool pump() { return false; }
  // Fails the link when its peer was seen gone and ops to it cannot progress
  // any more; true if it did.
  virtual bool failIfPeerGone() { return false; }
  // The mesh is about to sleep in epoll: arm what wakes it when this link
  // can move; true if bytes moved meanwhile (then it must not sleep).
  virtual bool beforeSleep() { return false; }
  // The mesh woke (or did not sleep after all): disarm.
  virtual void afterWake() {}

  // The one state change, and all cleanup with it (see above).
  void setState(LinkState next);

 protected:
  struct Op {
    OpId id;
    uint8_t* data;
    size_t bytes;
    size_t done;
  };

  // Starts moving the front op of the queue that just grew.
  virtual void start(bool send) = 0;
  // Counts n bytes done on the front op of `ops`; reports and pops it when
  // complete.
  void advance(std::deque<Op>& ops, size_t n);
  // Reports a fault this link found while open (a bad frame, a corrupt ring).
  void fail(Status st);
  // Reports a failed operation on the connection (also after the break).
  void failOn(const boost::system::error_code& ec);

  tcp::socket& socket() { return *socket_; }
  LinkHost& host() { return host_; }

  std::deque<Op> sends_, recvs_;

 private:
  int peer_;
  std::shared_ptr<tcp::socket> socket_;
  LinkHost& host_;
  LinkState state_ = LinkState::kOpen;
  Clock::time_point last_progress_{};
};

// A plain byte stream on the data connection.
class SocketLink : public Link {
 public:
  using Link::Link;

 protected:
  void start(bool send) override;
  // Runs then(n) when an operation on the connection moved n bytes; on an
  // error the link fails instead. `active` is cleared either way.
  template <typename Then>
  auto completion(bool* active, Then then) {
    return [this, active, then](const boost::system::error_code& ec, size_t n) {
      *active = false;
      if (ec) return failOn(ec);
      markProgress(Clock::now());
      then(n);
    };
  }

  bool send_active_ = false;  // a write is pending on the connection
  bool recv_active_ = false;  // a read is pending on the connection
};

}  // namespace tutti
