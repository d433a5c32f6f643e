#include "ops/tcp/shm_link.h"

#include <sys/socket.h>

#include <algorithm>

namespace tutti {

using boost::system::error_code;

namespace {

// Bytes moved per ring operation: the peer can start copying out while we
// copy in the rest, and we look at its sleeping flag this often.
constexpr size_t kShmChunkBytes = 64 << 10;

}  // namespace

ShmLink::ShmLink(int peer, std::shared_ptr<tcp::socket> socket, LinkHost& host,
                 std::unique_ptr<ShmChannel> channel)
    : Link(peer, std::move(socket), host), channel_(std::move(channel)) {}

void ShmLink::start(bool) {
  pump();  // the doorbell read starts only when the mesh is about to sleep
}

bool ShmLink::step(std::deque<Op>& ops, bool send, bool* moved) {
  if (ops.empty()) return true;
  Op& op = ops.front();
  const size_t want = std::min(op.bytes - op.done, kShmChunkBytes);
  const size_t n = send ? channel_->tx().write(op.data + op.done, want)
                        : channel_->rx().read(op.data + op.done, want);
  if (n == ShmRing::kCorrupt) {
    fail(Status::peerLost("rank " + std::to_string(peer()) +
                          ": the shared-memory ring with it holds impossible counters"));
    return false;
  }
  if (n > 0) {
    *moved = true;
    advance(ops, n);
  }
  return true;
}

bool ShmLink::pump() {
  if (!busy()) return false;
  // At most this much per call, so that the mesh's loop comes round (the
  // negotiation's heartbeats, ops/peer_liveness.h) during a long transfer.
  constexpr size_t kPumpBudgetBytes = size_t{64} << 20;
  bool moved = false;
  for (size_t chunks = 0; open() && chunks * kShmChunkBytes < kPumpBudgetBytes; ++chunks) {
    bool stepped = false;
    if (!step(sends_, true, &stepped) || !step(recvs_, false, &stepped)) return false;
    if (!stepped) break;
    moved = true;
    if (channel_->takePeerSleeping()) ringBell();
  }
  if (moved) markProgress(Clock::now());
  return moved;
}

bool ShmLink::failIfPeerGone() {
  if (!bell_closed_ || !busy()) return false;
  failOn(bell_error_);
  return true;
}

// No busy-wait before sleeping: a 10 us bounded spin was measured (np2/np4,
// 2 cores under load) and lost at np4, where ranks outnumber cores and the
// spinning rank takes the core its peer needs; at np2 it was noise.
bool ShmLink::beforeSleep() {
  if (!busy()) return false;
  channel_->setSleeping(true);
  armed_ = true;
  // The doorbell read starts here, not when ops are posted: a read started
  // while data flows would cost a recv() syscall (EAGAIN) for nothing.
  startBell();
  // A peer that moved before it could see our flag: its bytes are visible
  // now (setSleeping's fence), so look once more before sleeping.
  return pump();
}

void ShmLink::afterWake() {
  if (!armed_) return;
  channel_->setSleeping(false);
  armed_ = false;
}

void ShmLink::startBell() {
  if (bell_active_ || bell_closed_ || !open()) return;
  bell_active_ = true;
  socket().async_read_some(asio::buffer(bell_buf_), [this](const error_code& ec, size_t) {
    bell_active_ = false;
    // An error is acted on by failIfPeerGone(): bytes the peer wrote before
    // closing are still delivered, as on TCP. Not restarted here:
    // beforeSleep() does that before the next sleep.
    if (ec && ec != asio::error::operation_aborted) {
      bell_closed_ = true;
      bell_error_ = ec;
    }
  });
}

void ShmLink::ringBell() {
  // Non-blocking, one byte: the peer reads every doorbell it is sent (at
  // most one per time it sets its flag), so the socket never fills. An error
  // here shows up as EOF on our own doorbell read.
  const uint8_t bell = 1;
  ::send(socket().native_handle(), &bell, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace tutti
