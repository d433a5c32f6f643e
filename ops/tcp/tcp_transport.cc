#include "ops/tcp/tcp_transport.h"

#include <cstring>
#include <sstream>

#include "core/logging.h"
#include "core/wire.h"
#include "ops/tcp/asio_util.h"
#include "ops/tcp/tcp_transport_impl.h"

namespace tutti {

using boost::system::error_code;

TcpTransportImpl::TcpTransportImpl(const Settings& settings)
    : work_(asio::make_work_guard(io_)),
      rank_(settings.rank),
      size_(settings.size),
      timeout_s_(settings.timeout_seconds),
      setup_timeout_s_(setupTimeoutSeconds(settings)),
      secret_(settings.secret),
      hostname_(settings.hostname),
      peers_(static_cast<size_t>(settings.size > 0 ? settings.size : 1)),
      zstd_level_(settings.compression_zstd_level),
      last_connect_error_(peers_.size()) {
  if (settings.shm != "off") shm_identity_ = shmHostIdentity();
}

TcpTransportImpl::~TcpTransportImpl() {
  if (wire_.payload_bytes > 0) {
    TUTTI_LOG(kInfo) << "rank " << rank_ << ": tcp wire: " << wire_.payload_bytes
                     << " payload bytes sent as " << wire_.socket_bytes
                     << " socket bytes (zstd level " << zstd_level_ << ": "
                     << wire_.compressed_frames << " of " << wire_.frames << " frames compressed)";
  }
  closeAll();
  // Pending handlers reference user buffers and this object: they are
  // destroyed, never invoked, when io_ goes (it is not run again).
}

void TcpTransportImpl::closeAll() {
  if (acceptor_) {
    error_code ec;
    acceptor_->close(ec);
  }
  for (auto& p : peers_) {
    if (p.data) tcp_util::closeQuietly(*p.data);
    if (p.ctrl) tcp_util::closeQuietly(*p.ctrl);
  }
}

void TcpTransportImpl::breakWith(Status st, int failed_peer) {
  if (!broken_.isOk()) return;
  TUTTI_LOG(kDebug) << "transport broken: " << st.message();
  broken_ = std::move(st);
  // Nothing touches user buffers after this, even if the caller frees them:
  // the failed peer's connections are closed, the pending operations on the
  // others are cancelled (their handlers only record the abort). Healthy
  // connections stay open until the transport is destroyed: closing them now
  // would make the other survivors blame this rank for the loss, and rank 0
  // can still send its abort notice (sendControl's last words, drainControl).
  // A break with no known peer closes everything.
  if (acceptor_) {
    error_code ec;
    acceptor_->close(ec);
  }
  for (size_t r = 0; r < peers_.size(); ++r) {
    Peer& p = peers_[r];
    const bool failed = failed_peer < 0 || static_cast<int>(r) == failed_peer;
    if (p.data) {
      if (failed) {
        tcp_util::closeQuietly(*p.data);
      } else {
        error_code ec;
        p.data->cancel(ec);
      }
    }
    // Control connections close when they fail themselves (breakOnControl)
    // or with the transport: one that breaks on the data side may still
    // carry rank 0's abort notice.
    if (p.ctrl && failed_peer < 0) tcp_util::closeQuietly(*p.ctrl);
  }
}

void TcpTransportImpl::breakOnControl(int peer, const error_code& ec) {
  if (peers_[peer].ctrl) tcp_util::closeQuietly(*peers_[peer].ctrl);
  breakOn(peer, ec);
}

void TcpTransportImpl::breakOn(int peer, const error_code& ec) {
  if (!broken_.isOk()) {
    // Already broken: this peer's control connection is gone too, so that
    // drainControl() stops waiting for it.
    if (peers_[peer].ctrl) tcp_util::closeQuietly(*peers_[peer].ctrl);
    return;
  }
  if (ec == asio::error::eof) {
    breakWith(Status::peerLost("rank " + std::to_string(peer) + " closed its connection"), peer);
  } else {
    breakWith(
        Status::peerLost("connection to rank " + std::to_string(peer) + " broke: " + ec.message()),
        peer);
  }
}

// ---- data path ------------------------------------------------------------

TcpTransportImpl::OpId TcpTransportImpl::post(bool send, int peer, uint8_t* data, size_t bytes) {
  OpId id = next_id_++;
  if (peer < 0 || peer >= size_ || peer == rank_) {
    failed_[id] = Status::invalidArgument(std::string(send ? "send to" : "receive from") +
                                          " rank " + std::to_string(peer) + ": rank " +
                                          std::to_string(rank_) + " has peers 0.." +
                                          std::to_string(size_ - 1) + " other than itself");
    return id;
  }
  if (bytes == 0 || !broken_.isOk()) return id;  // complete now / wait() reports broken_
  Peer& p = peers_[peer];
  auto& queue = send ? p.sends : p.recvs;
  if (p.sends.empty() && p.recvs.empty()) p.last_progress = Clock::now();
  queue.push_back(Op{id, data, bytes, 0});
  pending_[id] = peer;
  if (p.shm) {
    pumpShm(peer);  // the doorbell read starts only when we are about to sleep
    return id;
  }
  if (send) {
    startSend(peer);
  } else {
    startRecv(peer);
  }
  return id;
}

void TcpTransportImpl::advance(std::deque<Op>& ops, size_t n) {
  Op& front = ops.front();
  front.done += n;
  if (front.done == front.bytes) {
    pending_.erase(front.id);
    ops.pop_front();
  }
}

void TcpTransportImpl::startSend(int peer) {
  Peer& p = peers_[peer];
  if (p.zstd) return startSendFramed(peer);
  if (p.send_active || p.sends.empty() || !broken_.isOk()) return;
  Op& op = p.sends.front();
  p.send_active = true;
  p.data->async_write_some(asio::buffer(op.data + op.done, op.bytes - op.done),
                           [this, peer](const error_code& ec, size_t n) {
                             Peer& q = peers_[peer];
                             q.send_active = false;
                             if (ec) return breakOn(peer, ec);
                             q.last_progress = Clock::now();
                             wire_.payload_bytes += n;
                             wire_.socket_bytes += n;
                             advance(q.sends, n);
                             startSend(peer);
                           });
}

void TcpTransportImpl::startRecv(int peer) {
  Peer& p = peers_[peer];
  if (p.zstd) return startRecvFramed(peer);
  if (p.recv_active || p.recvs.empty() || !broken_.isOk()) return;
  Op& op = p.recvs.front();
  p.recv_active = true;
  p.data->async_read_some(asio::buffer(op.data + op.done, op.bytes - op.done),
                          [this, peer](const error_code& ec, size_t n) {
                            Peer& q = peers_[peer];
                            q.recv_active = false;
                            if (ec) return breakOn(peer, ec);
                            q.last_progress = Clock::now();
                            advance(q.recvs, n);
                            startRecv(peer);
                          });
}

void TcpTransportImpl::runOneUntil(Clock::time_point deadline) {
  if (io_.stopped()) io_.restart();
  io_.run_one_until(deadline);
}

template <typename Done>
Status TcpTransportImpl::drive(Done done, int watch_peer) {
  const auto wait_start = Clock::now();
  const auto timeout =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  while (true) {
    if (shm_peers_ > 0) pumpAllShm();
    if (!broken_.isOk()) return broken_;
    if (done()) return Status::ok();
    if (shm_peers_ > 0 && checkShmClosed()) continue;
    // The earliest moment some watched connection has been silent for the
    // whole timeout (counting only time spent waiting).
    auto stall_at = Clock::time_point::max();
    int stall_peer = -1;
    for (int r = 0; r < size_; ++r) {
      if (watch_peer >= 0 && r != watch_peer) continue;
      const Peer& p = peers_[r];
      if (p.sends.empty() && p.recvs.empty()) continue;
      auto at = std::max(p.last_progress, wait_start) + timeout;
      if (at < stall_at) {
        stall_at = at;
        stall_peer = r;
      }
    }
    if (stall_peer < 0) stall_at = Clock::now() + std::chrono::hours(1);  // not expected
    if (stall_peer >= 0 && Clock::now() >= stall_at) {
      std::ostringstream msg;
      msg << "rank " << stall_peer << ": no progress for " << timeout_s_ << " s";
      breakWith(Status::peerLost(msg.str()), stall_peer);
      continue;
    }
    if (shm_peers_ > 0 && armShm()) continue;
    runOneUntil(stall_at);
    if (shm_peers_ > 0) disarmShm();
  }
}

Status TcpTransportImpl::wait(OpId id) {
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

Status TcpTransportImpl::waitAll() {
  Status first;
  if (!failed_.empty()) {
    first = failed_.begin()->second;
    failed_.clear();
  }
  Status st = drive([&] { return pending_.empty(); }, -1);
  return st.isOk() ? first : st;
}

// ---- control path ---------------------------------------------------------

Status TcpTransportImpl::sendControl(int peer, std::vector<uint8_t> bytes) {
  if (!broken_.isOk()) return lastWords(peer, bytes);
  if (peer < 0 || peer >= size_ || peer == rank_ || (rank_ != 0 && peer != 0)) {
    return Status::invalidArgument("sendControl from rank " + std::to_string(rank_) + " to rank " +
                                   std::to_string(peer) +
                                   ": control messages go between rank 0 and a worker");
  }
  if (bytes.size() > kMaxControlBytes) {
    return Status::invalidArgument("control message of " + std::to_string(bytes.size()) +
                                   " bytes exceeds the limit of " +
                                   std::to_string(kMaxControlBytes));
  }
  peers_[peer].ctrl_out.push_back(framed(bytes));
  startCtrlWrite(peer);
  return Status::ok();
}

Status TcpTransportImpl::lastWords(int peer, const std::vector<uint8_t>& bytes) {
  // After a break: one synchronous, best-effort frame on a control socket
  // that is still open (e.g. rank 0's abort notice naming the lost rank).
  if (peer < 0 || peer >= size_ || peer == rank_ || !peers_[peer].ctrl ||
      !peers_[peer].ctrl->is_open() || bytes.size() > kMaxControlBytes) {
    return broken_;
  }
  const std::vector<uint8_t> frame = framed(bytes);
  error_code ec;
  asio::write(*peers_[peer].ctrl, asio::buffer(frame), ec);
  return ec ? broken_ : Status::ok();
}

void TcpTransportImpl::startCtrlWrite(int peer) {
  Peer& p = peers_[peer];
  if (p.ctrl_writing || p.ctrl_out.empty() || !broken_.isOk()) return;
  p.ctrl_writing = true;
  // The front frame stays in the deque (stable address) until written.
  asio::async_write(*p.ctrl, asio::buffer(p.ctrl_out.front()),
                    [this, peer](const error_code& ec, size_t) {
                      Peer& q = peers_[peer];
                      q.ctrl_writing = false;
                      if (ec) return breakOnControl(peer, ec);
                      q.ctrl_out.pop_front();
                      startCtrlWrite(peer);
                    });
}

void TcpTransportImpl::startCtrlRead(int peer) {
  Peer& p = peers_[peer];
  asio::async_read(
      *p.ctrl, asio::buffer(p.ctrl_header), [this, peer](const error_code& ec, size_t) {
        if (ec) return breakOnControl(peer, ec);
        Peer& q = peers_[peer];
        const uint32_t n = frameLength(q.ctrl_header);
        if (n > kMaxControlBytes) {
          return breakWith(Status::peerLost("rank " + std::to_string(peer) +
                                            " sent a malformed control frame of " +
                                            std::to_string(n) + " bytes"));
        }
        q.ctrl_body.resize(n);
        asio::async_read(
            *q.ctrl, asio::buffer(q.ctrl_body), [this, peer](const error_code& ec2, size_t) {
              if (ec2) return breakOnControl(peer, ec2);
              inbox_.push_back(ControlMessage{peer, std::move(peers_[peer].ctrl_body)});
              peers_[peer].ctrl_body = {};
              startCtrlRead(peer);
            });
      });
}

Status TcpTransportImpl::pollControl(Clock::time_point deadline, std::vector<ControlMessage>* out) {
  out->clear();
  // Pick up whatever already arrived without sleeping.
  if (io_.stopped()) io_.restart();
  io_.poll();
  while (true) {
    // Ops left posted (no algorithm does that) still move while we poll.
    if (shm_peers_ > 0) pumpAllShm();
    // Messages that arrived before a break are delivered first: they may
    // explain it (rank 0's abort notice names the rank that was lost).
    if (!inbox_.empty()) {
      for (auto& m : inbox_) out->push_back(std::move(m));
      inbox_.clear();
      woken_.store(false);
      return Status::ok();
    }
    if (!broken_.isOk()) return broken_;
    if (woken_.exchange(false)) return Status::ok();
    if (Clock::now() >= deadline) return Status::ok();
    runOneUntil(deadline);
  }
}

Status TcpTransportImpl::drainControl(Clock::time_point deadline,
                                      std::vector<ControlMessage>* out) {
  out->clear();
  if (broken_.isOk()) return pollControl(deadline, out);
  while (true) {
    if (!inbox_.empty()) {
      for (auto& m : inbox_) out->push_back(std::move(m));
      inbox_.clear();
      return Status::ok();
    }
    bool any_open = false;
    for (const auto& p : peers_) any_open = any_open || (p.ctrl && p.ctrl->is_open());
    if (!any_open || Clock::now() >= deadline) return broken_;
    runOneUntil(deadline);
  }
}

void TcpTransportImpl::wake() {
  woken_.store(true);
  asio::post(io_, [] {});  // makes a sleeping run_one_until return
}

// ---- TcpTransport ---------------------------------------------------------

Status TcpTransport::connect(const Settings& settings, Store& store,
                             const std::string& advertise_host,
                             std::unique_ptr<TcpTransport>* out) {
  if (settings.size < 1 || settings.rank < 0 || settings.rank >= settings.size) {
    return Status::invalidArgument("rank " + std::to_string(settings.rank) +
                                   " is not in a job of size " + std::to_string(settings.size));
  }
  auto impl = std::make_unique<TcpTransportImpl>(settings);
  if (settings.size > 1) {
    TUTTI_RETURN_IF_ERROR(impl->publishZstdLevel(store));
    TUTTI_RETURN_IF_ERROR(impl->connectAll(store, advertise_host));
    TUTTI_RETURN_IF_ERROR(impl->checkZstdLevel(store));
    TUTTI_RETURN_IF_ERROR(impl->enableZstd());
  }
  out->reset(new TcpTransport(std::move(impl)));
  return Status::ok();
}

TcpTransport::TcpTransport(std::unique_ptr<TcpTransportImpl> impl) : impl_(std::move(impl)) {}
TcpTransport::~TcpTransport() = default;
int TcpTransport::rank() const {
  return impl_->rank();
}
int TcpTransport::size() const {
  return impl_->size();
}
Transport::OpId TcpTransport::postSend(int peer, const void* data, size_t bytes) {
  return impl_->post(true, peer, static_cast<uint8_t*>(const_cast<void*>(data)), bytes);
}
Transport::OpId TcpTransport::postRecv(int peer, void* data, size_t bytes) {
  return impl_->post(false, peer, static_cast<uint8_t*>(data), bytes);
}
Status TcpTransport::wait(OpId id) {
  return impl_->wait(id);
}
Status TcpTransport::waitAll() {
  return impl_->waitAll();
}
Status TcpTransport::sendControl(int peer, std::vector<uint8_t> bytes) {
  return impl_->sendControl(peer, std::move(bytes));
}
Status TcpTransport::pollControl(Clock::time_point deadline, std::vector<ControlMessage>* out) {
  return impl_->pollControl(deadline, out);
}
Status TcpTransport::drainControl(Clock::time_point deadline, std::vector<ControlMessage>* out) {
  return impl_->drainControl(deadline, out);
}
void TcpTransport::wake() {
  impl_->wake();
}
int TcpTransport::sharedMemoryPeers() const {
  return impl_->shmPeers();
}
TcpWireStats TcpTransport::wireStats() const {
  return impl_->wireStats();
}

}  // namespace tutti
