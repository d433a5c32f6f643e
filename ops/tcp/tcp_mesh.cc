// The data and control paths of TcpMesh (ops/tcp/tcp_mesh.h).

#include "ops/tcp/tcp_mesh.h"

#include <algorithm>
#include <sstream>
#include <thread>

#include "core/logging.h"
#include "rendezvous/asio_util.h"

namespace tutti {

using boost::system::error_code;

TcpMesh::TcpMesh(const Settings& settings)
    : work_(asio::make_work_guard(io_)),
      rank_(settings.rank),
      size_(settings.size),
      timeout_s_(settings.timeout_seconds),
      setup_timeout_s_(setupTimeoutSeconds(settings)),
      secret_(settings.secret),
      hostname_(settings.hostname),
      liveness_(settings.rank, settings.size, settings.timeout_seconds, setup_timeout_s_),
      control_(settings.size, *this, liveness_, [this](Status st) { breakWith(std::move(st)); }),
      links_(static_cast<size_t>(settings.size > 0 ? settings.size : 1)),
      zstd_level_(settings.compression_zstd_level),
      data_(links_.size()),
      shm_(links_.size()),
      last_connect_error_(links_.size()) {
  progress_timeout_s_ = settings.timeout_seconds;
  if (settings.shm != "off") shm_identity_ = shmHostIdentity();
}

TcpMesh::~TcpMesh() {
  if (wire_.payload_bytes > 0) {
    TUTTI_LOG(kInfo) << "rank " << rank_ << ": tcp wire: " << wire_.payload_bytes
                     << " payload bytes sent as " << wire_.socket_bytes
                     << " socket bytes (zstd level " << zstd_level_ << ": "
                     << wire_.compressed_frames << " of " << wire_.frames << " frames compressed)";
  }
  closeAll();
  // Pending handlers reference user buffers, links and this object: they
  // are destroyed, never invoked, when io_ goes (it is not run again).
}

void TcpMesh::closeAll() {
  if (acceptor_) {
    error_code ec;
    acceptor_->close(ec);
  }
  for (auto& sock : data_) {
    if (sock) tcp_util::closeQuietly(*sock);
  }
  for (auto& link : links_) {
    if (link) link->setState(LinkState::kClosed);
  }
  control_.closeAll();
}

void TcpMesh::linkFailed(int peer, Status st) {
  // Already broken: this peer's control connection is gone too, so that
  // drainControl() stops waiting for it.
  if (!broken_.isOk()) return control_.close(peer);
  breakWith(std::move(st), peer);
}

void TcpMesh::breakWith(Status st, int failed_peer) {
  if (!broken_.isOk()) return;
  TUTTI_LOG(kDebug) << "transport broken: " << st.message();
  // The peer that failed is the lost rank (core/status.h).
  if (st.code() == StatusCode::kPeerLost && failed_peer >= 0 && st.lostRank() < 0) {
    st = st.withLostRank(failed_peer);
  }
  broken_ = std::move(st);
  // Nothing touches user buffers after this, even if the caller frees them.
  // Healthy connections stay open until the transport is destroyed: closing
  // them now would make the other survivors blame this rank for the loss,
  // and rank 0 can still send its abort notice (sendControl's last words,
  // drainControl). A break with no known peer closes everything. Control
  // connections close when they fail themselves or with the transport: one
  // that breaks on the data side may still carry rank 0's abort notice.
  control_.stopWrites();
  for (auto& link : links_) {
    if (!link) continue;
    const bool failed = failed_peer < 0 || link->peer() == failed_peer;
    link->setState(failed ? LinkState::kClosed : LinkState::kStopped);
  }
  if (failed_peer < 0) control_.closeAll();
}

void TcpMesh::adoptLink(std::unique_ptr<Link> link) {
  const int peer = link->peer();
  link->markProgress(Clock::now());
  links_[peer] = std::move(link);
}

// ---- data path ------------------------------------------------------------

TcpMesh::OpId TcpMesh::post(bool send, int peer, uint8_t* data, size_t bytes) {
  OpId id = next_id_++;
  if (peer < 0 || peer >= size_ || peer == rank_) {
    failed_[id] = Status::invalidArgument(std::string(send ? "send to" : "receive from") +
                                          " rank " + std::to_string(peer) + ": rank " +
                                          std::to_string(rank_) + " has peers 0.." +
                                          std::to_string(size_ - 1) + " other than itself");
    return id;
  }
  if (bytes == 0 || !broken_.isOk()) return id;  // complete now / wait() reports broken_
  Link& link = *links_[peer];
  if (!link.busy()) link.markProgress(Clock::now());
  pending_[id] = peer;  // before posting: a link may complete it at once
  link.post(send, id, data, bytes);
  return id;
}

void TcpMesh::runOneUntil(Clock::time_point deadline) {
  // Longer waits are the data path's stall watch and the idle loop, where a
  // millisecond more does not matter and a timer per call would cost.
  constexpr auto kPreciseWait = std::chrono::milliseconds(20);
  if (io_.stopped()) io_.restart();
  // A wait armed for this deadline is still pending (or has fired); re-arming
  // would cancel it, and its cancellation would end this wait early.
  if (deadline - Clock::now() < kPreciseWait && deadline_timer_.expiry() != deadline) {
    deadline_timer_.expires_at(deadline);
    deadline_timer_.async_wait([](const boost::system::error_code&) {});
  }
  io_.run_one_until(deadline);
}

TcpMesh::Clock::time_point TcpMesh::stallAt(Clock::time_point wait_start, int watch_peer,
                                            int* peer) const {
  auto stall_at = Clock::time_point::max();
  *peer = -1;
  if (progress_timeout_s_ <= 0) return stall_at;
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(progress_timeout_s_));
  for (const auto& link : links_) {
    if (!link || !link->busy() || (watch_peer >= 0 && link->peer() != watch_peer)) continue;
    const auto at = std::max(link->lastProgress(), wait_start) + timeout;
    if (at < stall_at) {
      stall_at = at;
      *peer = link->peer();
    }
  }
  return stall_at;
}

template <typename Done>
Status TcpMesh::drive(Done done, int watch_peer) {
  const auto wait_start = Clock::now();
  while (true) {
    keepAlive();
    for (auto& link : links_) {
      if (link) link->pump();
    }
    if (cancelled_.load(std::memory_order_acquire) && broken_.isOk()) {
      std::lock_guard<std::mutex> lock(cancel_mu_);
      breakWith(cancel_status_);
    }
    if (!broken_.isOk()) return broken_;
    if (done()) return Status::ok();
    bool gone = false;
    for (auto& link : links_) gone = gone || (link && link->failIfPeerGone());
    if (gone) continue;
    int stall_peer = -1;
    auto stall_at = stallAt(wait_start, watch_peer, &stall_peer);
    if (stall_peer < 0) stall_at = Clock::now() + std::chrono::hours(1);  // not expected
    if (stall_peer >= 0 && Clock::now() >= stall_at) {
      std::ostringstream msg;
      msg << "rank " << stall_peer << ": no progress for " << progress_timeout_s_ << " s";
      breakWith(Status::peerLost(msg.str()), stall_peer);
      continue;
    }
    if (spin_ > Clock::duration::zero() && Clock::now() - wait_start < spin_) {
      // Spin phase: run ready handlers without sleeping, then look again.
      // Yielding lets a peer that shares this core (more ranks than cores)
      // run: its progress is what this wait needs.
      io_.poll();
      std::this_thread::yield();
      continue;
    }
    bool moved = false;
    for (auto& link : links_) moved = (link && link->beforeSleep()) || moved;
    if (!moved) {
      liveness_.enterWait(Clock::now());
      runOneUntil(std::min(stall_at, next_beat_));
      liveness_.leftWait(Clock::now());
    }
    for (auto& link : links_) {
      if (link) link->afterWake();
    }
  }
}

// Heartbeats go out from every wait, also one that ends at once and during
// long collectives: the peers waiting in the negotiation meanwhile must not
// take this rank for stopped. A wait that ends before sleeping runs no
// handlers, so one turn of them moves the control writes on (this frame,
// and the completion of the one before).
void TcpMesh::keepAlive() {
  if (!sendHeartbeats(Clock::now())) return;
  liveness_.enterWait(Clock::now());
  io_.poll();
  liveness_.leftWait(Clock::now());
}

Status TcpMesh::wait(OpId id) {
  keepAlive();  // also for an op that completed when it was posted
  auto f = failed_.find(id);
  if (f != failed_.end()) {
    Status st = std::move(f->second);
    failed_.erase(f);
    return st;
  }
  auto it = pending_.find(id);
  if (it == pending_.end()) {
    if (id == 0 || id >= next_id_) {
      return Status::invalidArgument("wait: op " + std::to_string(id) + " was never posted");
    }
    return broken_;  // completed (or posted after the transport broke)
  }
  return drive([&] { return pending_.count(id) == 0; }, it->second);
}

Status TcpMesh::waitAll() {
  Status first;
  if (!failed_.empty()) {
    first = failed_.begin()->second;
    failed_.clear();
  }
  Status st = drive([&] { return pending_.empty(); }, -1);
  return st.isOk() ? first : st;
}

// ---- control path ---------------------------------------------------------

Status TcpMesh::sendControl(int peer, std::vector<uint8_t> bytes) {
  if (!broken_.isOk()) {
    // After a break: one synchronous, best-effort frame on a control
    // connection that is still open (e.g. rank 0's abort notice naming the
    // lost rank).
    const bool valid = peer >= 0 && peer < size_ && peer != rank_;
    return valid && control_.lastWords(peer, bytes) ? Status::ok() : broken_;
  }
  if (peer < 0 || peer >= size_ || peer == rank_ || (rank_ != 0 && peer != 0)) {
    return Status::invalidArgument("sendControl from rank " + std::to_string(rank_) + " to rank " +
                                   std::to_string(peer) +
                                   ": control messages go between rank 0 and a worker");
  }
  if (bytes.empty()) {
    return Status::invalidArgument("an empty control message is reserved for heartbeats");
  }
  if (bytes.size() > kMaxControlBytes) {
    return Status::invalidArgument("control message of " + std::to_string(bytes.size()) +
                                   " bytes exceeds the limit of " +
                                   std::to_string(kMaxControlBytes));
  }
  control_.send(peer, std::move(bytes));
  return Status::ok();
}

bool TcpMesh::takeInbox(std::vector<ControlMessage>* out) {
  auto& inbox = control_.inbox();
  if (inbox.empty()) return false;
  for (auto& m : inbox) out->push_back(std::move(m));
  inbox.clear();
  return true;
}

Status TcpMesh::pollControl(Clock::time_point deadline, std::vector<ControlMessage>* out) {
  out->clear();
  // Pick up whatever already arrived without sleeping.
  if (io_.stopped()) io_.restart();
  io_.poll();
  while (true) {
    // Ops left posted (no algorithm does that) still move while we poll.
    for (auto& link : links_) {
      if (link) link->pump();
    }
    // Liveness first, also while messages keep coming (a busy stream must
    // neither silence this rank nor hide a stopped peer).
    const auto now = Clock::now();
    liveness_.enterWait(now);
    sendHeartbeats(now);
    auto silent_until = Clock::time_point::max();
    if (broken_.isOk() && loseSilentPeer(&silent_until)) continue;
    // Messages that arrived before a break are delivered first: they may
    // explain it (rank 0's abort notice names the rank that was lost).
    if (takeInbox(out)) {
      woken_.store(false);
      return Status::ok();
    }
    if (!broken_.isOk()) return broken_;
    if (woken_.exchange(false)) return Status::ok();
    if (now >= deadline) return Status::ok();
    runOneUntil(std::min({deadline, silent_until, next_beat_}));
    liveness_.leftWait(Clock::now());
  }
}

PeerLiveness::IsOpen TcpMesh::controlOpen() const {
  return [this](int peer) { return control_.isOpen(peer); };
}

bool TcpMesh::loseSilentPeer(Clock::time_point* until) {
  const PeerLiveness::IsOpen open = controlOpen();
  if (liveness_.silentPeer(Clock::now(), open, until) < 0) return false;
  // Frames that arrived but whose handlers have not run yet count.
  io_.poll();
  const int silent = liveness_.silentPeer(Clock::now(), open, until);
  if (silent < 0) return false;
  breakWith(Status::peerLost(liveness_.silenceMessage(silent)), silent);
  // Nothing more is written to it: a stopped peer's full socket would block
  // the abort notice's synchronous write (lastWords).
  control_.close(silent);
  return true;
}

bool TcpMesh::sendHeartbeats(Clock::time_point now) {
  if (!broken_.isOk() || !heartbeats_) {
    next_beat_ = Clock::time_point::max();
    return false;
  }
  if (now < next_beat_) return false;  // the common case: one comparison
  const PeerLiveness::IsOpen open = controlOpen();
  const auto due = liveness_.heartbeatsDue(now, open);
  for (int peer : due) control_.send(peer, {});
  next_beat_ = liveness_.nextHeartbeat(open);
  return !due.empty();
}

Status TcpMesh::drainControl(Clock::time_point deadline, std::vector<ControlMessage>* out) {
  out->clear();
  if (broken_.isOk()) return pollControl(deadline, out);
  while (true) {
    if (takeInbox(out)) return Status::ok();
    if (!control_.anyOpen() || Clock::now() >= deadline) return broken_;
    runOneUntil(deadline);
  }
}

void TcpMesh::wake() {
  woken_.store(true);
  asio::post(io_, [] {});  // makes a sleeping run_one_until return
}

void TcpMesh::cancel(const Status& status) {
  {
    std::lock_guard<std::mutex> lock(cancel_mu_);
    if (cancelled_.load()) return;
    cancel_status_ = status;
  }
  cancelled_.store(true, std::memory_order_release);
  asio::post(io_, [] {});  // the waiting thread breaks the mesh (drive())
}

}  // namespace tutti
