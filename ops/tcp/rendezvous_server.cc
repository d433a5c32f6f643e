#include "ops/tcp/rendezvous_server.h"

#include <boost/asio.hpp>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/logging.h"
#include "core/wire.h"
#include "ops/tcp/asio_util.h"
#include "ops/tcp/auth.h"
#include "ops/tcp/rendezvous_protocol.h"

namespace tutti {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {
// A peer that connects but never completes the handshake is dropped after this.
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
}  // namespace

// Everything below runs on the server's own thread, except keys(), lookup(),
// setFromOutside() and the constructor/stop(), which only touch kv_ under mu_,
// post to the thread or join it.
class RendezvousServerImpl {
 public:
  class Conn;

  RendezvousServerImpl(const std::string& secret) : acceptor_(io_), key_(auth::deriveKey(secret)) {}
  ~RendezvousServerImpl() { stop(); }

  Status bind(const std::string& bind_addr, int port) {
    error_code ec;
    auto addr = asio::ip::make_address(bind_addr, ec);
    if (ec) return Status::ioError("rendezvous server: bad bind address '" + bind_addr + "'");
    tcp::endpoint ep(addr, static_cast<unsigned short>(port));
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return Status::ioError("rendezvous server: cannot listen on " + bind_addr + ":" +
                             std::to_string(port) + ": " + ec.message());
    }
    port_ = acceptor_.local_endpoint(ec).port();
    return Status::ok();
  }

  void run() {
    accept();
    thread_ = std::thread([this] {
      error_code ec;
      io_.run(ec);
    });
  }

  void stop() {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopped_) return;
    stopped_ = true;
    io_.stop();
    if (thread_.joinable()) thread_.join();
    // No handler runs any more; close what is left so peers see EOF now.
    error_code ec;
    acceptor_.close(ec);
    for (auto& c : conns_) c->close();
    conns_.clear();
    waiters_.clear();
  }

  int port() const { return port_; }

  std::vector<std::string> keys(const std::string& prefix) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    for (auto it = kv_.lower_bound(prefix); it != kv_.end(); ++it) {
      if (it->first.compare(0, prefix.size(), prefix) != 0) break;
      out.push_back(it->first);
    }
    return out;
  }

  // One client connection: handshake, then frames until EOF or bad input.
  class Conn : public std::enable_shared_from_this<Conn> {
   public:
    Conn(RendezvousServerImpl& server, tcp::socket sock)
        : server_(server), sock_(std::move(sock)), remote_(tcp_util::remoteString(sock_)) {}

    void start() {
      auto self = shared_from_this();
      auth::asyncHandshake(sock_, auth::Role::kServer, server_.key_,
                           auth::Clock::now() + kHandshakeTimeout, [self](Status st) {
                             if (!st.isOk()) return self->drop(nullptr);  // auth logged it
                             self->readHeader();
                           });
    }

    void close() { tcp_util::closeQuietly(sock_); }

    // Answers a GET that was waiting for `value`.
    void answer(const std::vector<uint8_t>& value) {
      waiting_key_.clear();
      BufferWriter w;
      w.putU8(rendezvous::kReplyOk);
      w.putU32(static_cast<uint32_t>(value.size()));
      w.putRaw(value.data(), value.size());
      reply(w.take());
    }

    const std::string& waitingKey() const { return waiting_key_; }

   private:
    void readHeader() {
      auto self = shared_from_this();
      asio::async_read(sock_, asio::buffer(header_), [self](const error_code& ec, size_t) {
        if (ec) return self->drop(ec == asio::error::eof ? nullptr : "read failed");
        const uint32_t n = frameLength(self->header_);
        if (n == 0 || n > rendezvous::kMaxFrameBytes) return self->drop("bad frame length");
        if (!self->waiting_key_.empty()) return self->drop("request while a GET is pending");
        self->body_.resize(n);
        asio::async_read(self->sock_, asio::buffer(self->body_),
                         [self](const error_code& ec2, size_t) {
                           if (ec2) return self->drop("read failed");
                           self->handle();
                         });
      });
    }

    void handle() {
      BufferReader r(body_);
      uint8_t op = 0;
      std::string key;
      if (!r.getU8(&op) || !r.getString(&key, rendezvous::kMaxKeyBytes) || key.empty()) {
        return drop("malformed request");
      }
      if (op == rendezvous::kSet) {
        std::string value;
        if (!r.getString(&value, rendezvous::kMaxFrameBytes) || !r.atEnd()) {
          return drop("malformed SET");
        }
        server_.set(key, std::vector<uint8_t>(value.begin(), value.end()));
        BufferWriter w;
        w.putU8(rendezvous::kReplyOk);
        reply(w.take());
      } else if (op == rendezvous::kGet && r.atEnd()) {
        std::vector<uint8_t> value;
        if (server_.lookup(key, &value)) {
          waiting_key_ = key;  // answer() clears it
          answer(value);
        } else {
          waiting_key_ = key;
          server_.waiters_[key].push_back(shared_from_this());
        }
      } else if (op == rendezvous::kTryGet && r.atEnd()) {
        std::vector<uint8_t> value;
        bool found = server_.lookup(key, &value);
        BufferWriter w;
        w.putU8(rendezvous::kReplyOk);
        w.putU8(found ? 1 : 0);
        w.putU32(static_cast<uint32_t>(value.size()));
        w.putRaw(value.data(), value.size());
        reply(w.take());
      } else {
        return drop("unknown request");
      }
      // Keep reading: detects a client that gives up (EOF) while its GET
      // waits, and serves the next request.
      readHeader();
    }

    void reply(std::vector<uint8_t> body) {
      auto frame = std::make_shared<std::vector<uint8_t>>(framed(body));
      auto self = shared_from_this();
      asio::async_write(sock_, asio::buffer(*frame), [self, frame](const error_code& ec, size_t) {
        if (ec) self->drop(nullptr);
      });
    }

    // Drops the connection; `why` == nullptr for an ordinary close.
    void drop(const char* why) {
      if (dropped_) return;
      dropped_ = true;
      if (why != nullptr) {
        TUTTI_LOG(kWarning) << "rendezvous server: " << why << " from " << remote_
                            << "; connection dropped";
      }
      close();
      server_.conns_.erase(shared_from_this());
    }

    RendezvousServerImpl& server_;
    tcp::socket sock_;
    std::string remote_;
    FrameHeader header_{};
    std::vector<uint8_t> body_;
    std::string waiting_key_;
    bool dropped_ = false;
  };

  // From any thread: store now (a GET handled later finds the value), wake
  // the GETs already waiting on the server's thread.
  void setFromOutside(const std::string& key, std::vector<uint8_t> value) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      kv_[key] = value;
    }
    asio::post(io_, [this, key, value = std::move(value)] { wake(key, value); });
  }

  bool lookup(const std::string& key, std::vector<uint8_t>* value) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kv_.find(key);
    if (it == kv_.end()) return false;
    *value = it->second;
    return true;
  }

 private:
  void accept() {
    acceptor_.async_accept([this](const error_code& ec, tcp::socket sock) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (!ec) {
        auto conn = std::make_shared<Conn>(*this, std::move(sock));
        conns_.insert(conn);
        conn->start();
      } else {
        TUTTI_LOG(kWarning) << "rendezvous server: accept failed: " << ec.message();
      }
      accept();
    });
  }

  void set(const std::string& key, std::vector<uint8_t> value) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      kv_[key] = value;
    }
    wake(key, value);
  }

  // Server thread: answers the GETs waiting for `key`.
  void wake(const std::string& key, const std::vector<uint8_t>& value) {
    auto it = waiters_.find(key);
    if (it == waiters_.end()) return;
    auto waiting = std::move(it->second);
    waiters_.erase(it);
    for (auto& w : waiting) {
      auto conn = w.lock();
      if (conn && conn->waitingKey() == key) conn->answer(value);
    }
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  auth::Key key_;
  int port_ = 0;
  std::thread thread_;
  std::mutex stop_mu_;
  bool stopped_ = false;
  mutable std::mutex mu_;  // guards kv_ (keys() reads it from other threads)
  std::map<std::string, std::vector<uint8_t>> kv_;
  // Server thread only.
  std::set<std::shared_ptr<Conn>> conns_;
  std::map<std::string, std::vector<std::weak_ptr<Conn>>> waiters_;
};

Status RendezvousServer::start(const std::string& bind_addr, int port, const std::string& secret,
                               std::unique_ptr<RendezvousServer>* out) {
  if (port < 0 || port > 65535) {
    return Status::invalidArgument("rendezvous server: port " + std::to_string(port) +
                                   " is not in [0, 65535]");
  }
  auto impl = std::make_unique<RendezvousServerImpl>(secret);
  TUTTI_RETURN_IF_ERROR(impl->bind(bind_addr, port));
  impl->run();
  out->reset(new RendezvousServer(std::move(impl)));
  return Status::ok();
}

RendezvousServer::RendezvousServer(std::unique_ptr<RendezvousServerImpl> impl)
    : impl_(std::move(impl)) {}
RendezvousServer::~RendezvousServer() {
  stop();
}
int RendezvousServer::port() const {
  return impl_->port();
}
std::vector<std::string> RendezvousServer::keys(const std::string& prefix) const {
  return impl_->keys(prefix);
}
void RendezvousServer::set(const std::string& key, const std::string& value) {
  impl_->setFromOutside(key, std::vector<uint8_t>(value.begin(), value.end()));
}
bool RendezvousServer::get(const std::string& key, std::string* value) const {
  std::vector<uint8_t> bytes;
  if (!impl_->lookup(key, &bytes)) return false;
  value->assign(bytes.begin(), bytes.end());
  return true;
}
void RendezvousServer::stop() {
  impl_->stop();
}

}  // namespace tutti
