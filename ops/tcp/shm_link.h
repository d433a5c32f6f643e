#pragma once

// A peer on the same host: data goes through a ShmChannel (ops/tcp/
// shm_channel.h, the segment and ring protocol), set up by
// ops/tcp/shm_setup.cc. Not a public interface.
//
// The pair's TCP data connection carries only doorbell bytes afterwards: a
// rank that published bytes or freed space while the peer had said it sleeps
// writes one byte; the peer's pending read wakes its epoll. That read is
// pending whenever the mesh sleeps with ops to the peer queued, so a peer
// that closes its connection (exits, crashes, is killed) is still seen as
// EOF, as on a socket link (failIfPeerGone(), after the bytes it wrote before
// closing were taken). Doorbells go over the TCP connection rather than
// eventfds because two processes cannot share an eventfd without passing it
// over a unix socket, which this transport does not have.
//
// Bytes move only in pump() (inside post() and the mesh's loops), on the
// mesh's thread; never in a handler.
//
// Threading: as Link.

#include <array>
#include <memory>

#include "ops/tcp/link.h"
#include "ops/tcp/shm_channel.h"

namespace tutti {

class ShmLink final : public Link {
 public:
  ShmLink(int peer, std::shared_ptr<tcp::socket> socket, LinkHost& host,
          std::unique_ptr<ShmChannel> channel);

  bool pump() override;
  bool failIfPeerGone() override;
  bool beforeSleep() override;
  void afterWake() override;

 protected:
  void start(bool send) override;

 private:
  // Moves one chunk of the front op of `ops` through `ring`; false when the
  // ring's counters are impossible (the link failed).
  bool step(std::deque<Op>& ops, bool send, bool* moved);
  void startBell();
  void ringBell();

  std::unique_ptr<ShmChannel> channel_;
  bool armed_ = false;        // our sleeping flag is set
  bool bell_active_ = false;  // a doorbell read is pending on the connection
  bool bell_closed_ = false;  // that read ended: the peer closed (bell_error_)
  boost::system::error_code bell_error_;
  std::array<uint8_t, 64> bell_buf_{};
};

}  // namespace tutti
