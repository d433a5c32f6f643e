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
  if (send) {
    startSend();
  } else {
    startRecv();
  }
}

void SocketLink::startSend() {
  if (send_active_ || sends_.empty() || !open()) return;
  Op& op = sends_.front();
  send_active_ = true;
  socket().async_write_some(asio::buffer(op.data + op.done, op.bytes - op.done),
                            completion(&send_active_, [this](size_t n) {
                              TcpWireStats& wire = host().wireStats();
                              wire.payload_bytes += n;
                              wire.socket_bytes += n;
                              advance(sends_, n);
                              startSend();
                            }));
}

void SocketLink::startRecv() {
  if (recv_active_ || recvs_.empty() || !open()) return;
  Op& op = recvs_.front();
  recv_active_ = true;
  socket().async_read_some(asio::buffer(op.data + op.done, op.bytes - op.done),
                           completion(&recv_active_, [this](size_t n) {
                             advance(recvs_, n);
                             startRecv();
                           }));
}

}  // namespace tutti
