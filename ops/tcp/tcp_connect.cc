// Connection setup of TcpMesh: listen, publish the address, connect to lower
// ranks, accept from higher ranks, authenticate and say hello; then the
// shared-memory offers (shm_setup.cc) and one Link per peer. The connections
// are made asynchronously on io_, driven by connectAll() on the calling
// thread, so that slow peers in either direction never serialise the rest.

#include <sstream>

#include "core/logging.h"
#include "core/wire.h"
#include "ops/tcp/shm_link.h"
#include "ops/tcp/tcp_keepalive.h"
#include "ops/tcp/tcp_mesh.h"
#include "ops/tcp/zstd_link.h"
#include "rendezvous/asio_util.h"

namespace tutti {

using boost::system::error_code;

namespace {

constexpr auto kRetryDelay = std::chrono::milliseconds(100);
// How long to look up an address that should already be in the store.
constexpr auto kProbeTimeout = std::chrono::milliseconds(200);
constexpr int kSocketBufferBytes = 8 << 20;
// While waiting for peers to connect, how often to ask the store whether the
// rendezvous still stands (an elastic generation may be superseded).
constexpr auto kRendezvousCheck = std::chrono::milliseconds(500);

std::string joinRanks(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  return out.str();
}

// Every peer connection, data and control, either side.
void tuneSocket(tcp::socket& sock, double timeout_s) {
  error_code ec;  // best effort: the kernel may cap or refuse the sizes
  sock.set_option(tcp::no_delay(true), ec);
  sock.set_option(asio::socket_base::send_buffer_size(kSocketBufferBytes), ec);
  sock.set_option(asio::socket_base::receive_buffer_size(kSocketBufferBytes), ec);
  // Silent host loss (ops/tcp/tcp_keepalive.h).
  Status st = applyPeerKeepalive(sock.native_handle(), keepaliveFor(timeout_s));
  if (!st.isOk()) {
    TUTTI_LOG(kWarning) << "peer connection " << tcp_util::remoteString(sock) << ": "
                        << st.message() << "; a silently vanished host is not detected on it";
  }
}

}  // namespace

Status TcpMesh::listen(tcp::endpoint* bound) {
  error_code ec;
  tcp::endpoint ep(asio::ip::address_v4::any(), 0);
  if (!hostname_.empty()) {
    tcp::resolver resolver(io_);
    auto results = resolver.resolve(hostname_, "0", ec);
    if (ec || results.empty()) {
      return Status::ioError("rank " + std::to_string(rank_) + ": cannot resolve TUTTI_HOSTNAME '" +
                             hostname_ + "': " + ec.message());
    }
    ep = tcp::endpoint(results.begin()->endpoint().address(), 0);
  }
  acceptor_ = std::make_unique<tcp::acceptor>(io_);
  acceptor_->open(ep.protocol(), ec);
  if (!ec) acceptor_->bind(ep, ec);
  if (!ec) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (!ec) *bound = acceptor_->local_endpoint(ec);
  if (ec) {
    return Status::ioError("rank " + std::to_string(rank_) + ": cannot listen on " +
                           ep.address().to_string() + ": " + ec.message());
  }
  return Status::ok();
}

double TcpMesh::setupTimeoutSeconds(const Settings& settings) {
  return settings.elastic_worker_id >= 0 ? settings.elastic_timeout_seconds
                                         : settings.timeout_seconds;
}

Status TcpMesh::connect(Store& store, const std::string& advertise_host) {
  TUTTI_RETURN_IF_ERROR(publishZstdLevel(store, rank_, zstd_level_));
  TUTTI_RETURN_IF_ERROR(connectAll(store, advertise_host));
  TUTTI_RETURN_IF_ERROR(setupShm(store, &shm_));
  TUTTI_RETURN_IF_ERROR(checkZstdLevel(store, rank_, size_, zstd_level_, timeout_s_));
  TUTTI_RETURN_IF_ERROR(makeLinks());
  TUTTI_LOG(kDebug) << "rank " << rank_ << ": connected to " << size_ - 1 << " peers";
  return Status::ok();
}

Status TcpMesh::makeLinks() {
  const auto now = Clock::now();
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    auto sock = std::move(data_[r]);
    if (shm_[r]) {
      links_[r] = std::make_unique<ShmLink>(r, std::move(sock), *this, std::move(shm_[r]));
      ++shm_peers_;
    } else if (zstd_level_ > 0) {
      TUTTI_RETURN_IF_ERROR(
          ZstdLink::create(rank_, r, std::move(sock), *this, zstd_level_, &links_[r]));
    } else {
      links_[r] = std::make_unique<SocketLink>(r, std::move(sock), *this);
    }
    links_[r]->markProgress(now);
  }
  control_.startReading();
  return Status::ok();
}

Status TcpMesh::publishSelf(Store& store, const std::string& advertise_host) {
  tcp::endpoint bound;
  TUTTI_RETURN_IF_ERROR(listen(&bound));
  std::string host = !hostname_.empty()        ? hostname_
                     : !advertise_host.empty() ? advertise_host
                                               : std::string("127.0.0.1");
  std::string me = host + ":" + std::to_string(bound.port());
  // Before the address: whoever reads our address or connects to us can
  // then read this at once (shm_setup.cc).
  TUTTI_RETURN_IF_ERROR(
      store.set("rank/" + std::to_string(rank_) + "/host",
                std::vector<uint8_t>(shm_identity_.begin(), shm_identity_.end())));
  return store.set(rankAddressKey(rank_), std::vector<uint8_t>(me.begin(), me.end()));
}

Status TcpMesh::lowerAddresses(Store& store, std::vector<std::string>* addrs) {
  // The lower ranks publish before connecting anywhere.
  addrs->assign(rank_, std::string());
  std::vector<int> missing;
  for (int j = 0; j < rank_; ++j) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(setup_deadline_ - Clock::now());
    if (!missing.empty() || left < kProbeTimeout) left = kProbeTimeout;
    std::vector<uint8_t> v;
    Status st = store.get(rankAddressKey(j), left, &v);
    if (st.code() == StatusCode::kTimeout) {
      missing.push_back(j);
      continue;
    }
    TUTTI_RETURN_IF_ERROR(st);
    (*addrs)[j].assign(v.begin(), v.end());
  }
  if (!missing.empty()) {
    std::ostringstream msg;
    msg << "rank " << rank_ << ": " << joinRanks(missing)
        << " never published their address within " << setup_timeout_s_ << " s";
    return Status::timeout(msg.str());
  }
  return Status::ok();
}

Status TcpMesh::connectAll(Store& store, const std::string& advertise_host) {
  const auto timeout =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(setup_timeout_s_));
  setup_deadline_ = Clock::now() + timeout;
  key_ = auth::deriveKey(secret_);
  TUTTI_RETURN_IF_ERROR(publishSelf(store, advertise_host));
  std::vector<std::string> addrs;
  TUTTI_RETURN_IF_ERROR(lowerAddresses(store, &addrs));

  expected_ = (rank_ == 0 ? 2 * (size_ - 1) : (size_ - 1) + 1);
  if (rank_ < size_ - 1) acceptNext();
  for (int j = 0; j < rank_; ++j) {
    startOutgoing(j, Channel::kData, addrs[j]);
    if (j == 0) startOutgoing(0, Channel::kControl, addrs[0]);
  }
  return awaitConnections(store);
}

Status TcpMesh::awaitConnections(Store& store) {
  bool done = false;
  while (true) {
    const auto slice = std::min(setup_deadline_, Clock::now() + kRendezvousCheck);
    done = tcp_util::driveUntil(
        io_, [&] { return connected_ == expected_ || !setup_error_.isOk(); }, slice);
    if (done || Clock::now() >= setup_deadline_) break;
    // Our own address is in the store: a plain store answers at once; an
    // elastic one says so once this generation was superseded
    // (Status::generationSuperseded()), and then the peers we wait for will
    // never come.
    std::vector<uint8_t> v;
    Status st = store.get(rankAddressKey(rank_), kProbeTimeout, &v);
    if (st.generationSuperseded() && setup_error_.isOk()) setup_error_ = st;
  }
  error_code ec;
  acceptor_->close(ec);
  tcp_util::drainReady(io_);
  acceptor_.reset();
  if (!setup_error_.isOk()) return setup_error_;
  if (!done) return describeMissing(store);
  return Status::ok();
}

Status TcpMesh::describeMissing(Store& store) {
  std::vector<int> unpublished;
  std::vector<std::string> other;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    bool need_ctrl = (rank_ == 0 || r == 0);
    if (data_[r] && (!need_ctrl || control_.has(r))) continue;
    if (r < rank_) {
      other.push_back("could not connect to rank " + std::to_string(r) +
                      (last_connect_error_[r].empty() ? "" : " (" + last_connect_error_[r] + ")"));
      continue;
    }
    std::vector<uint8_t> v;
    if (store.get(rankAddressKey(r), kProbeTimeout, &v).isOk()) {
      other.push_back("rank " + std::to_string(r) + " published its address but never connected");
    } else {
      unpublished.push_back(r);
    }
  }
  std::ostringstream msg;
  msg << "rank " << rank_ << ": connecting to the job timed out after " << setup_timeout_s_ << " s";
  if (!unpublished.empty())
    msg << "; " << joinRanks(unpublished) << " never published their address";
  for (auto& o : other) msg << "; " << o;
  return Status::timeout(msg.str());
}

void TcpMesh::startOutgoing(int peer, Channel kind, const std::string& addr) {
  std::string host;
  int port = 0;
  if (!tcp_util::splitHostPort(addr, &host, &port)) {
    setup_error_ =
        Status::ioError("rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) +
                        " published a malformed address '" + addr + "'");
    return;
  }
  tcp::resolver resolver(io_);
  error_code ec;
  auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec || endpoints.empty()) {
    setup_error_ =
        Status::ioError("rank " + std::to_string(rank_) + ": cannot resolve rank " +
                        std::to_string(peer) + "'s address " + addr + ": " + ec.message());
    return;
  }
  connectAttempt(peer, kind, std::make_shared<tcp::socket>(io_), endpoints);
}

void TcpMesh::connectAttempt(int peer, Channel kind, std::shared_ptr<tcp::socket> sock,
                             tcp::resolver::results_type endpoints) {
  asio::async_connect(*sock, endpoints, [=](const error_code& ec, const tcp::endpoint&) {
    if (!setup_error_.isOk()) return;
    if (ec) {
      // The peer listens before it publishes, so this is rare; retry anyway.
      last_connect_error_[peer] = ec.message();
      auto timer = std::make_shared<asio::steady_timer>(io_, kRetryDelay);
      timer->async_wait([=](const error_code&) {
        (void)timer;
        if (Clock::now() < setup_deadline_) {
          connectAttempt(peer, kind, std::make_shared<tcp::socket>(io_), endpoints);
        }
      });
      return;
    }
    tuneSocket(*sock, timeout_s_);
    auth::asyncHandshake(*sock, auth::Role::kClient, key_, setup_deadline_, [=](Status st) {
      if (!st.isOk()) {
        if (setup_error_.isOk()) {
          setup_error_ =
              Status(st.code(), "rank " + std::to_string(rank_) + ": connection to rank " +
                                    std::to_string(peer) + " refused: " + st.message());
        }
        return;
      }
      auto hello =
          std::make_shared<std::array<uint8_t, kHelloBytes>>(encodeHello(rank_, size_, kind));
      asio::async_write(*sock, asio::buffer(*hello), [=](const error_code& wec, size_t) {
        (void)hello;
        if (wec) {
          last_connect_error_[peer] = "hello failed: " + wec.message();
          return;
        }
        install(peer, kind, sock);
      });
    });
  });
}

void TcpMesh::acceptNext() {
  auto sock = std::make_shared<tcp::socket>(io_);
  acceptor_->async_accept(*sock, [this, sock](const error_code& ec) {
    if (ec == asio::error::operation_aborted || !acceptor_ || !acceptor_->is_open()) return;
    acceptNext();
    if (ec) {
      TUTTI_LOG(kWarning) << "rank " << rank_ << ": accept failed: " << ec.message();
      return;
    }
    tuneSocket(*sock, timeout_s_);
    auth::asyncHandshake(
        *sock, auth::Role::kServer, key_, setup_deadline_, [this, sock](Status st) {
          if (!st.isOk()) return;  // logged and closed; keep waiting for the real peer
          auto hello = std::make_shared<std::array<uint8_t, kHelloBytes>>();
          asio::async_read(
              *sock, asio::buffer(*hello), [this, sock, hello](const error_code& rec, size_t) {
                if (rec) {
                  TUTTI_LOG(kWarning)
                      << "rank " << rank_ << ": no hello from " << tcp_util::remoteString(*sock)
                      << ": " << rec.message() << "; connection dropped";
                  return tcp_util::closeQuietly(*sock);
                }
                onHello(sock, decodeHello(*hello));
              });
        });
  });
}

void TcpMesh::onHello(std::shared_ptr<tcp::socket> sock, const Hello& h) {
  const std::string remote = tcp_util::remoteString(*sock);
  const int r = h.rank;
  const auto kind = static_cast<Channel>(h.kind);
  const HelloVerdict verdict = judgeHello(h, rank_, size_);
  if (verdict == HelloVerdict::kForeignJob && setup_error_.isOk()) {
    setup_error_ =
        Status::invalidArgument("rank " + std::to_string(rank_) + ": rank " + std::to_string(r) +
                                " at " + remote + " belongs to a job of " + std::to_string(h.size) +
                                " ranks, this one has " + std::to_string(size_));
    return tcp_util::closeQuietly(*sock);
  }
  bool ok = verdict == HelloVerdict::kOk;
  if (ok &&
      ((kind == Channel::kData && data_[r]) || (kind == Channel::kControl && control_.has(r)))) {
    ok = false;  // duplicate
  }
  if (!ok) {
    TUTTI_LOG(kWarning) << "rank " << rank_ << ": bad hello (rank " << r << ", kind "
                        << static_cast<int>(kind) << ") from " << remote << "; connection dropped";
    return tcp_util::closeQuietly(*sock);
  }
  install(r, kind, std::move(sock));
}

void TcpMesh::install(int peer, Channel kind, std::shared_ptr<tcp::socket> sock) {
  if (kind == Channel::kData) {
    data_[peer] = std::move(sock);
  } else {
    control_.install(peer, std::move(sock));
  }
  ++connected_;
}

}  // namespace tutti
