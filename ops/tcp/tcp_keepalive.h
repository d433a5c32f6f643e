#pragma once

// Detection of a peer whose host vanished silently (power off, link down, a
// partition): no FIN or RST ever arrives, so without help a connection with
// nothing in flight would wait forever. Every peer connection of
// TcpTransport (data and control) therefore gets
//   SO_KEEPALIVE, TCP_KEEPIDLE = T/2, TCP_KEEPINTVL = (T - T/2)/3,
//   TCP_KEEPCNT = 3 (seconds, at least 1 each), TCP_USER_TIMEOUT = T
// with T = TUTTI_TIMEOUT_SECONDS. The peer's kernel answers keepalive probes
// and ACKs data whatever its process does, so a peer that is merely slow to
// reach a collective (or stopped in a debugger) is never declared lost by
// these; a host that stopped answering breaks the connection within about T
// (ETIMEDOUT), which the transport reports as kPeerLost naming the rank. For
// T below 2 s the one-second granularity of the keepalive timers makes
// detection take up to about 2 s.
//
// Threading: pure functions; applyPeerKeepalive touches only the given socket.

#include <cstdint>

#include "core/status.h"

namespace tutti {

struct KeepaliveParams {
  int idle_seconds = 0;          // TCP_KEEPIDLE
  int interval_seconds = 0;      // TCP_KEEPINTVL
  int count = 0;                 // TCP_KEEPCNT
  unsigned user_timeout_ms = 0;  // TCP_USER_TIMEOUT
};

// The values above for a timeout of `timeout_seconds` (> 0), clamped to what
// Linux accepts.
KeepaliveParams keepaliveFor(double timeout_seconds);

// Sets the options on a connected TCP socket. kIoError naming the option
// when the kernel refuses one.
Status applyPeerKeepalive(int fd, const KeepaliveParams& params);

}  // namespace tutti
