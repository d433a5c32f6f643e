#include "ops/tcp/control_channel.h"

#include "core/wire.h"
#include "rendezvous/asio_util.h"

namespace tutti {

using boost::system::error_code;

ControlChannel::ControlChannel(int size, LinkHost& host, PeerLiveness& liveness,
                               std::function<void(Status)> on_malformed)
    : host_(host),
      liveness_(liveness),
      on_malformed_(std::move(on_malformed)),
      peers_(static_cast<size_t>(size > 0 ? size : 1)) {}

void ControlChannel::install(int peer, std::shared_ptr<tcp::socket> socket) {
  peers_[peer].socket = std::move(socket);
}

void ControlChannel::startReading() {
  liveness_.start(PeerLiveness::Clock::now());
  for (size_t r = 0; r < peers_.size(); ++r) {
    if (peers_[r].socket) startRead(static_cast<int>(r));
  }
}

void ControlChannel::failed(int peer, const error_code& ec) {
  close(peer);
  if (failures_break_mesh_) host_.linkFailed(peer, connectionLost(peer, ec));
}

void ControlChannel::close(int peer) {
  if (peers_[peer].socket) tcp_util::closeQuietly(*peers_[peer].socket);
}

void ControlChannel::closeAll() {
  for (size_t r = 0; r < peers_.size(); ++r) close(static_cast<int>(r));
}

bool ControlChannel::anyOpen() const {
  for (const auto& p : peers_) {
    if (p.socket && p.socket->is_open()) return true;
  }
  return false;
}

void ControlChannel::send(int peer, std::vector<uint8_t> bytes) {
  peers_[peer].out.push_back(framed(bytes));
  liveness_.sent(peer, PeerLiveness::Clock::now());
  startWrite(peer);
}

bool ControlChannel::lastWords(int peer, const std::vector<uint8_t>& bytes) {
  Peer& p = peers_[peer];
  if (!p.socket || !p.socket->is_open() || bytes.size() > kMaxControlBytes) return false;
  const std::vector<uint8_t> frame = framed(bytes);
  error_code ec;
  asio::write(*p.socket, asio::buffer(frame), ec);
  return !ec;
}

void ControlChannel::startWrite(int peer) {
  Peer& p = peers_[peer];
  if (p.writing || p.out.empty() || writes_stopped_) return;
  p.writing = true;
  // The front frame stays in the deque (stable address) until written.
  asio::async_write(*p.socket, asio::buffer(p.out.front()),
                    [this, peer](const error_code& ec, size_t) {
                      Peer& q = peers_[peer];
                      q.writing = false;
                      if (ec) return failed(peer, ec);
                      q.out.pop_front();
                      startWrite(peer);
                    });
}

void ControlChannel::startRead(int peer) {
  Peer& p = peers_[peer];
  asio::async_read(*p.socket, asio::buffer(p.header), [this, peer](const error_code& ec, size_t) {
    if (ec) return failed(peer, ec);
    Peer& q = peers_[peer];
    const uint32_t n = frameLength(q.header);
    if (n > kMaxControlBytes) {
      return on_malformed_(Status::peerLost(peer, "rank " + std::to_string(peer) +
                                                      " sent a malformed control frame of " +
                                                      std::to_string(n) + " bytes"));
    }
    q.body.resize(n);
    asio::async_read(*q.socket, asio::buffer(q.body), [this, peer](const error_code& ec2, size_t) {
      if (ec2) return failed(peer, ec2);
      Peer& q2 = peers_[peer];
      liveness_.heard(peer, PeerLiveness::Clock::now());
      if (!q2.body.empty()) inbox_.push_back(ControlMessage{peer, std::move(q2.body)});
      q2.body = {};
      startRead(peer);
    });
  });
}

}  // namespace tutti
