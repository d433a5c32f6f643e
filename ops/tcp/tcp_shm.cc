// The shared-memory path of TcpTransport (see shm_channel.h for the segment
// and ring protocol).
//
// Setup, after every TCP connection is up: each rank has published its host
// identity under "rank/<r>/host" ("" with TUTTI_SHM=off). A pair whose two
// identities are equal and non-empty tries shared memory; both ranks decide
// that from the same two store entries. The lower rank creates the segment
// and sends an offer on the pair's data socket (ok flag, ring size, name);
// the higher rank opens it and answers one byte, ok or not. Both use shared
// memory exactly when the offer and the answer said ok; otherwise the pair
// stays on TCP (a warning says why).
//
// Afterwards the data socket of such a pair carries only doorbell bytes: a
// rank that published bytes or freed space while the peer had said it
// sleeps writes one byte; the peer's pending read wakes its epoll. That read
// is pending whenever we sleep with ops to the peer pending, so a peer that
// closes its connection (exits, crashes, is killed) is still seen as EOF, as
// on the TCP path.
// Doorbells go over the TCP socket rather than eventfds because two
// processes cannot share an eventfd without passing it over a unix socket,
// which this transport does not have.

#include <sys/socket.h>

#include <algorithm>
#include <sstream>

#include "core/logging.h"
#include "core/wire.h"
#include "ops/tcp/asio_util.h"
#include "ops/tcp/tcp_transport_impl.h"

namespace tutti {

using boost::system::error_code;

namespace {

// Offer, lower rank to higher: u8 ok, u32 ring bytes, u8 name length, name
// (padded). Answer: u8 ok.
constexpr size_t kNameField = 64;
constexpr size_t kOfferBytes = 1 + 4 + 1 + kNameField;
// Bytes moved per ring operation: the peer can start copying out while we
// copy in the rest, and we look at its sleeping flag this often.
constexpr size_t kShmChunkBytes = 64 << 10;

std::string hostKey(int rank) {
  return "rank/" + std::to_string(rank) + "/host";
}

struct ShmOffer {
  bool ok = false;
  uint32_t ring_bytes = 0;
  std::string name;
};

void encodeOffer(const ShmOffer& offer, std::array<uint8_t, kOfferBytes>* out) {
  const size_t len = std::min(offer.name.size(), kNameField);
  BufferWriter w;
  w.putU8(offer.ok ? 1 : 0);
  w.putU32(offer.ring_bytes);
  w.putU8(static_cast<uint8_t>(len));
  w.putRaw(offer.name.data(), len);
  w.padTo(kOfferBytes);
  std::copy(w.bytes().begin(), w.bytes().end(), out->begin());
}

ShmOffer decodeOffer(const std::array<uint8_t, kOfferBytes>& bytes) {
  ShmOffer offer;
  BufferReader r(bytes.data(), bytes.size());
  uint8_t ok = 0, len = 0;
  r.getU8(&ok);
  r.getU32(&offer.ring_bytes);
  r.getU8(&len);
  offer.name.resize(std::min<size_t>(len, kNameField));
  r.getRaw(offer.name.data(), offer.name.size());
  offer.ok = ok == 1;
  return offer;
}

}  // namespace

Status TcpTransportImpl::setupShm(Store& store) {
  if (shm_identity_.empty()) return Status::ok();
  struct Pending {
    std::unique_ptr<ShmChannel> channel;
    std::string name;  // lower rank: to unlink
    std::array<uint8_t, kOfferBytes> offer{};
    std::array<uint8_t, 1> answer{};
    std::string why;  // why not shared memory, for the warning
    bool finished = false;
  };
  std::vector<std::shared_ptr<Pending>> pending(size_);
  int expected = 0, finished = 0;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    std::vector<uint8_t> v;
    // Every rank publishes this key before its address, and r has
    // connected to us, so a missing key means a peer without shared memory.
    if (!store.get(hostKey(r), std::chrono::milliseconds(200), &v).isOk()) continue;
    if (std::string(v.begin(), v.end()) != shm_identity_) continue;
    pending[r] = std::make_shared<Pending>();
    ++expected;
  }
  auto finish = [&](Pending& p, bool ok) {
    if (!ok) p.channel.reset();
    if (!p.name.empty()) ShmChannel::unlinkName(p.name);
    p.finished = true;
    ++finished;
  };
  for (int r = 0; r < size_; ++r) {
    auto p = pending[r];
    if (!p) continue;
    auto& sock = *peers_[r].data;
    if (rank_ < r) {
      Status st = ShmChannel::create(kShmRingBytes, &p->name, &p->channel);
      if (!st.isOk()) p->why = st.message();
      encodeOffer({st.isOk(), static_cast<uint32_t>(kShmRingBytes), p->name}, &p->offer);
      asio::async_write(sock, asio::buffer(p->offer), [&, r, p](const error_code& ec, size_t) {
        if (ec) {
          setup_error_ =
              Status::ioError("rank " + std::to_string(rank_) + ": rank " + std::to_string(r) +
                              " shared-memory offer: " + ec.message());
          return finish(*p, false);
        }
        asio::async_read(sock, asio::buffer(p->answer), [&, r, p](const error_code& ec2, size_t) {
          if (ec2) {
            setup_error_ =
                Status::ioError("rank " + std::to_string(rank_) + ": rank " + std::to_string(r) +
                                " shared-memory answer: " + ec2.message());
          } else if (p->answer[0] != 1 && p->why.empty()) {
            p->why = "rank " + std::to_string(r) + " could not open the segment";
          }
          finish(*p, !ec2 && p->answer[0] == 1 && p->channel);
        });
      });
    } else {
      asio::async_read(sock, asio::buffer(p->offer), [&, r, p](const error_code& ec, size_t) {
        if (ec) {
          setup_error_ =
              Status::ioError("rank " + std::to_string(rank_) + ": rank " + std::to_string(r) +
                              " shared-memory offer: " + ec.message());
          return finish(*p, false);
        }
        const ShmOffer offer = decodeOffer(p->offer);
        if (offer.ok) {
          Status st = ShmChannel::open(offer.name, offer.ring_bytes, &p->channel);
          if (!st.isOk()) p->why = st.message();
        } else {
          p->why = "rank " + std::to_string(r) + " could not create a segment";
        }
        p->answer[0] = p->channel ? 1 : 0;
        asio::async_write(sock, asio::buffer(p->answer), [&, r, p](const error_code& ec2, size_t) {
          if (ec2) {
            setup_error_ =
                Status::ioError("rank " + std::to_string(rank_) + ": rank " + std::to_string(r) +
                                " shared-memory answer: " + ec2.message());
          }
          finish(*p, !ec2 && p->answer[0] == 1);
        });
      });
    }
  }
  bool done = tcp_util::driveUntil(
      io_, [&] { return finished == expected || !setup_error_.isOk(); }, setup_deadline_);
  for (int r = 0; r < size_; ++r) {
    auto& p = pending[r];
    if (!p) continue;
    if (!p->finished) {
      // Timed out or failed elsewhere: the handlers hold `this` and locals;
      // closing the socket aborts them before we return.
      tcp_util::closeQuietly(*peers_[r].data);
      ShmChannel::unlinkName(p->name);
      continue;
    }
    if (p->channel) {
      peers_[r].shm = std::move(p->channel);
      ++shm_peers_;
    } else {
      TUTTI_LOG(kWarning) << "rank " << rank_ << ": no shared memory with rank " << r
                          << " on the same host (" << p->why << "); using TCP";
    }
  }
  if (!done || !setup_error_.isOk()) {
    std::ostringstream msg;
    msg << "rank " << rank_ << ": shared-memory setup with its peers timed out after " << timeout_s_
        << " s";
    Status st = setup_error_.isOk() ? Status::timeout(msg.str()) : setup_error_;
    tcp_util::drainReady(io_);  // runs the aborted handlers while locals live
    return st;
  }
  TUTTI_LOG(kDebug) << "rank " << rank_ << ": shared memory with " << shm_peers_ << " peers";
  return Status::ok();
}

bool TcpTransportImpl::pumpShm(int peer) {
  Peer& p = peers_[peer];
  bool moved = false;
  while (broken_.isOk()) {
    bool step = false;
    if (!p.sends.empty()) {
      Op& op = p.sends.front();
      size_t n = p.shm->tx().write(op.data + op.done, std::min(op.bytes - op.done, kShmChunkBytes));
      if (n == ShmRing::kCorrupt) return breakCorrupt(peer);
      if (n > 0) {
        step = true;
        op.done += n;
        if (op.done == op.bytes) {
          pending_.erase(op.id);
          p.sends.pop_front();
        }
      }
    }
    if (!p.recvs.empty()) {
      Op& op = p.recvs.front();
      size_t n = p.shm->rx().read(op.data + op.done, std::min(op.bytes - op.done, kShmChunkBytes));
      if (n == ShmRing::kCorrupt) return breakCorrupt(peer);
      if (n > 0) {
        step = true;
        op.done += n;
        if (op.done == op.bytes) {
          pending_.erase(op.id);
          p.recvs.pop_front();
        }
      }
    }
    if (!step) break;
    moved = true;
    if (p.shm->takePeerSleeping()) ringBell(peer);
  }
  if (moved) p.last_progress = Clock::now();
  return moved;
}

bool TcpTransportImpl::breakCorrupt(int peer) {
  breakWith(Status::peerLost("rank " + std::to_string(peer) +
                             ": the shared-memory ring with it holds impossible counters"),
            peer);
  return false;
}

bool TcpTransportImpl::pumpAllShm() {
  bool moved = false;
  for (int r = 0; r < size_; ++r) {
    if (peers_[r].shm && (!peers_[r].sends.empty() || !peers_[r].recvs.empty())) {
      moved = pumpShm(r) || moved;
    }
  }
  return moved;
}

// No busy-wait before sleeping: a 10 us bounded spin was measured (np2/np4,
// 2 cores under load) and lost at np4, where ranks outnumber cores and the
// spinning rank takes the core its peer needs; at np2 it was noise.
bool TcpTransportImpl::armShm() {
  for (auto& p : peers_) {
    if (p.shm && (!p.sends.empty() || !p.recvs.empty())) {
      p.shm->setSleeping(true);
      p.shm_armed = true;
    }
  }
  // The doorbell reads start here, not when ops are posted: a read started
  // while data flows would cost a recv() syscall (EAGAIN) for nothing.
  for (int r = 0; r < size_; ++r) {
    if (peers_[r].shm_armed) startBell(r);
  }
  // A peer that moved before it could see our flag: its bytes are visible
  // now (setSleeping's fence), so look once more before sleeping.
  if (!pumpAllShm()) return false;
  disarmShm();
  return true;
}

void TcpTransportImpl::disarmShm() {
  for (auto& p : peers_) {
    if (p.shm_armed) {
      p.shm->setSleeping(false);
      p.shm_armed = false;
    }
  }
}

bool TcpTransportImpl::checkShmClosed() {
  for (int r = 0; r < size_; ++r) {
    Peer& p = peers_[r];
    if (p.shm && p.bell_closed && (!p.sends.empty() || !p.recvs.empty())) {
      breakOn(r, p.bell_error);
      return true;
    }
  }
  return false;
}

void TcpTransportImpl::startBell(int peer) {
  Peer& p = peers_[peer];
  if (p.bell_active || p.bell_closed || !broken_.isOk()) return;
  p.bell_active = true;
  p.data->async_read_some(asio::buffer(p.bell_buf), [this, peer](const error_code& ec, size_t) {
    Peer& q = peers_[peer];
    q.bell_active = false;
    if (ec) {
      // Acted on by checkShmClosed(): bytes the peer wrote before closing
      // are still delivered, as on TCP.
      if (ec != asio::error::operation_aborted) {
        q.bell_closed = true;
        q.bell_error = ec;
      }
      return;
    }
    // Not restarted here: armShm() does that before the next sleep.
  });
}

void TcpTransportImpl::ringBell(int peer) {
  // Non-blocking, one byte: the peer reads every doorbell it is sent
  // (at most one per time it sets its flag), so the socket never fills. An
  // error here shows up as EOF on our own doorbell read.
  const uint8_t bell = 1;
  ::send(peers_[peer].data->native_handle(), &bell, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace tutti
