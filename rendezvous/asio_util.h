#pragma once

// Small helpers shared by the TCP transport, the rendezvous server and client
// (internal to ops/tcp; nothing outside that folder includes this).
//
// Threading: every helper runs on the thread that drives the given
// io_context; none of them is thread-safe with respect to that io_context.

#include <boost/asio.hpp>
#include <chrono>
#include <string>

namespace tutti::tcp_util {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

// Runs handlers of `io` on the calling thread until `done()` is true or
// `deadline` passes (sleeping in epoll meanwhile, never spinning). Returns
// false on deadline. The caller must have an operation pending that will
// eventually make done() true, or the loop sleeps until the deadline.
template <typename Done>
bool driveUntil(asio::io_context& io, Done done, Clock::time_point deadline) {
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    if (io.stopped()) io.restart();
    io.run_one_until(deadline);
  }
  return true;
}

// Runs handlers that are ready now (e.g. aborted ops after a close) without
// blocking.
inline void drainReady(asio::io_context& io) {
  if (io.stopped()) io.restart();
  io.poll();
}

// "10.0.0.2:4711", or "<unknown>" when the socket has no remote endpoint.
inline std::string remoteString(const asio::ip::tcp::socket& sock) {
  boost::system::error_code ec;
  auto ep = sock.remote_endpoint(ec);
  if (ec) return "<unknown>";
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

// Closes a socket, ignoring errors (it may already be closed).
inline void closeQuietly(asio::ip::tcp::socket& sock) {
  boost::system::error_code ec;
  sock.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  sock.close(ec);
}

// Splits "host:port" (the last ':' separates). False if malformed.
inline bool splitHostPort(const std::string& s, std::string* host, int* port) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= s.size()) return false;
  int p = 0;
  for (size_t i = colon + 1; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    p = p * 10 + (s[i] - '0');
    if (p > 65535) return false;
  }
  if (p == 0) return false;
  *host = s.substr(0, colon);
  *port = p;
  return true;
}

}  // namespace tutti::tcp_util
