#include "ops/tcp/tcp_keepalive.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>

namespace tutti {
namespace {

// Linux's limits for TCP_KEEPIDLE/TCP_KEEPINTVL and TCP_KEEPCNT.
constexpr int kMaxKeepSeconds = 32767;
constexpr int kProbes = 3;

int clampSeconds(double s) {
  return static_cast<int>(std::clamp(std::floor(s), 1.0, static_cast<double>(kMaxKeepSeconds)));
}

}  // namespace

KeepaliveParams keepaliveFor(double timeout_seconds) {
  KeepaliveParams p;
  p.idle_seconds = clampSeconds(timeout_seconds / 2);
  p.interval_seconds = clampSeconds((timeout_seconds - p.idle_seconds) / kProbes);
  p.count = kProbes;
  p.user_timeout_ms = static_cast<unsigned>(
      std::clamp(std::round(timeout_seconds * 1000.0), 1.0, static_cast<double>(INT_MAX)));
  return p;
}

Status applyPeerKeepalive(int fd, const KeepaliveParams& params) {
  const int on = 1;
  const struct {
    int level, name;
    const void* value;
    const char* what;
  } options[] = {
      {SOL_SOCKET, SO_KEEPALIVE, &on, "SO_KEEPALIVE"},
      {IPPROTO_TCP, TCP_KEEPIDLE, &params.idle_seconds, "TCP_KEEPIDLE"},
      {IPPROTO_TCP, TCP_KEEPINTVL, &params.interval_seconds, "TCP_KEEPINTVL"},
      {IPPROTO_TCP, TCP_KEEPCNT, &params.count, "TCP_KEEPCNT"},
      {IPPROTO_TCP, TCP_USER_TIMEOUT, &params.user_timeout_ms, "TCP_USER_TIMEOUT"},
  };
  for (const auto& o : options) {
    // Every value is a 4-byte int (TCP_USER_TIMEOUT an unsigned int).
    if (setsockopt(fd, o.level, o.name, o.value, sizeof(int)) != 0) {
      return Status::ioError(std::string("setsockopt ") + o.what + ": " + std::strerror(errno));
    }
  }
  return Status::ok();
}

}  // namespace tutti
