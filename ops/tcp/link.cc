#include "ops/tcp/link.h"

#include "rendezvous/asio_util.h"

namespace tutti {

using boost::system::error_code;

Status connectionLost(int peer, const error_code& ec) {
  if (ec == asio::error::eof) {
    return Status::peerLost("rank " + std::to_string(peer) + " closed its connection");
  }
  return Status::peerLost("connection to rank " + std::to_string(peer) + " broke: " + ec.message());
}

Link::Link(int peer, std::shared_ptr<tcp::socket> socket, LinkHost& host)
    : peer_(peer), socket_(std::move(socket)), host_(host) {}

Link::~Link() = default;

void Link::post(bool send, OpId id, uint8_t* data, size_t bytes) {
  (send ? sends_ : recvs_).push_back(Op{id, data, bytes, 0});
  start(send);
}

void Link::advance(std::deque<Op>& ops, size_t n) {
  Op& front = ops.front();
  front.done += n;
  if (front.done == front.bytes) {
    const OpId id = front.id;
    ops.pop_front();
    host_.opCompleted(id);
  }
}

void Link::fail(Status st) {
  host_.linkFailed(peer_, std::move(st));
}

void Link::failOn(const error_code& ec) {
  host_.linkFailed(peer_, connectionLost(peer_, ec));
}

void Link::setState(LinkState next) {
  if (next == state_ || state_ == LinkState::kClosed) return;
  state_ = next;
  // Nothing touches user buffers after this: handlers of cancelled or
  // aborted operations only report the abort.
  if (next == LinkState::kClosed) {
    tcp_util::closeQuietly(*socket_);
  } else if (next == LinkState::kStopped) {
    error_code ec;
    socket_->cancel(ec);
  }
}

// ---- SocketLink -------------------------------------------------------------

void SocketLink::start(bool send) {
  bool& active = send ? send_active_ : recv_active_;
  std::deque<Op>& ops = send ? sends_ : recvs_;
  if (active || ops.empty() || !open()) return;
  Op& op = ops.front();
  const auto buffer = asio::buffer(op.data + op.done, op.bytes - op.done);
  auto done = completion(&active, [this, send](size_t n) {
    if (send) {
      TcpWireStats& wire = host().wireStats();
      wire.payload_bytes += n;
      wire.socket_bytes += n;
    }
    advance(send ? sends_ : recvs_, n);
    SocketLink::start(send);
  });
  active = true;
  if (send) {
    socket().async_write_some(buffer, std::move(done));
  } else {
    socket().async_read_some(buffer, std::move(done));
  }
}

}  // namespace tutti
