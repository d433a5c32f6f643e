#include "rendezvous/auth.h"

#include <sodium.h>

#include <cstring>
#include <memory>

#include "core/logging.h"
#include "rendezvous/asio_util.h"

namespace tutti::auth {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

void ensureSodium() {
  // sodium_init is idempotent and thread-safe; it fails only if the system
  // has no entropy source, in which case randombytes would abort anyway.
  static const int rc = sodium_init();
  (void)rc;
}

Tag hmac(const Key& key, const char* label, const Nonce& a, const Nonce& b) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, key.data(), key.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(label),
                                std::strlen(label));
  crypto_auth_hmacsha256_update(&st, a.data(), a.size());
  crypto_auth_hmacsha256_update(&st, b.data(), b.size());
  Tag tag;
  crypto_auth_hmacsha256_final(&st, tag.data());
  sodium_memzero(&st, sizeof(st));
  return tag;
}

// State of one handshake in flight. Handlers hold it by shared_ptr; the
// socket is borrowed (see asyncHandshake's contract).
class Handshake : public std::enable_shared_from_this<Handshake> {
 public:
  Handshake(asio::ip::tcp::socket& sock, Role role, const Key& key, HandshakeDone done)
      : sock_(sock),
        timer_(sock.get_executor()),
        role_(role),
        key_(key),
        done_(std::move(done)),
        remote_(tcp_util::remoteString(sock)) {}

  void start(Clock::time_point deadline) {
    auto self = shared_from_this();
    timer_.expires_at(deadline);
    timer_.async_wait([self](const error_code& ec) {
      if (ec || self->finished_) return;
      self->timed_out_ = true;
      tcp_util::closeQuietly(self->sock_);  // aborts the pending read/write
    });
    if (role_ == Role::kServer) {
      nonce_s_ = randomNonce();
      std::memcpy(out_.data(), kMagic, sizeof(kMagic));
      std::memcpy(out_.data() + sizeof(kMagic), nonce_s_.data(), kNonceBytes);
      write(sizeof(kMagic) + kNonceBytes, [self] { self->serverReadClient(); });
    } else {
      read(sizeof(kMagic) + kNonceBytes, [self] { self->clientGotChallenge(); });
    }
  }

 private:
  template <typename Next>
  void write(size_t n, Next next) {
    auto self = shared_from_this();
    asio::async_write(sock_, asio::buffer(out_.data(), n),
                      [self, next](const error_code& ec, size_t) {
                        if (ec) return self->fail(ec);
                        next();
                      });
  }
  template <typename Next>
  void read(size_t n, Next next) {
    auto self = shared_from_this();
    asio::async_read(sock_, asio::buffer(in_.data(), n),
                     [self, next](const error_code& ec, size_t) {
                       if (ec) return self->fail(ec);
                       next();
                     });
  }

  // Server: got nonce_c || client tag.
  void serverReadClient() {
    auto self = shared_from_this();
    read(kNonceBytes + kTagBytes, [self] {
      std::memcpy(self->nonce_c_.data(), self->in_.data(), kNonceBytes);
      Tag got;
      std::memcpy(got.data(), self->in_.data() + kNonceBytes, kTagBytes);
      if (!tagsEqual(got, clientTag(self->key_, self->nonce_s_, self->nonce_c_))) {
        return self->failWith(Status::ioError("authentication failed: the client at " +
                                              self->remote_ + " does not know the job secret"));
      }
      Tag reply = serverTag(self->key_, self->nonce_c_, self->nonce_s_);
      std::memcpy(self->out_.data(), reply.data(), kTagBytes);
      self->write(kTagBytes, [self] { self->succeed(); });
    });
  }

  // Client: got magic || nonce_s.
  void clientGotChallenge() {
    if (std::memcmp(in_.data(), kMagic, sizeof(kMagic)) != 0) {
      return failWith(Status::ioError("authentication failed: " + remote_ +
                                      " does not speak the tutti handshake"));
    }
    std::memcpy(nonce_s_.data(), in_.data() + sizeof(kMagic), kNonceBytes);
    nonce_c_ = randomNonce();
    Tag tag = clientTag(key_, nonce_s_, nonce_c_);
    std::memcpy(out_.data(), nonce_c_.data(), kNonceBytes);
    std::memcpy(out_.data() + kNonceBytes, tag.data(), kTagBytes);
    auto self = shared_from_this();
    write(kNonceBytes + kTagBytes, [self] {
      self->read(kTagBytes, [self] {
        Tag got;
        std::memcpy(got.data(), self->in_.data(), kTagBytes);
        if (!tagsEqual(got, serverTag(self->key_, self->nonce_c_, self->nonce_s_))) {
          return self->failWith(Status::ioError("authentication failed: the server at " +
                                                self->remote_ + " does not know the job secret"));
        }
        self->succeed();
      });
    });
  }

  void fail(const error_code& ec) {
    if (timed_out_) {
      return failWith(Status::timeout("authentication with " + remote_ + " timed out"));
    }
    if (ec == asio::error::eof) {
      // The server closes on a bad client tag, so a client seeing EOF most
      // likely holds the wrong secret.
      return failWith(Status::ioError("authentication with " + remote_ +
                                      " failed: the peer closed the connection during the "
                                      "handshake (different TUTTI_SECRET?)"));
    }
    failWith(Status::ioError("authentication with " + remote_ + " failed: " + ec.message()));
  }

  void failWith(Status st) {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    TUTTI_LOG(kWarning) << st.message() << "; connection dropped";
    tcp_util::closeQuietly(sock_);
    done_(std::move(st));
  }

  void succeed() {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    done_(Status::ok());
  }

  asio::ip::tcp::socket& sock_;
  asio::steady_timer timer_;
  Role role_;
  Key key_;
  HandshakeDone done_;
  std::string remote_;
  Nonce nonce_s_{};
  Nonce nonce_c_{};
  std::array<uint8_t, 8 + kNonceBytes + kTagBytes> out_{};
  std::array<uint8_t, 8 + kNonceBytes + kTagBytes> in_{};
  bool finished_ = false;
  bool timed_out_ = false;
};

}  // namespace

Key deriveKey(const std::string& secret) {
  ensureSodium();
  Key key;
  crypto_generichash(key.data(), key.size(), reinterpret_cast<const unsigned char*>(secret.data()),
                     secret.size(), nullptr, 0);
  return key;
}

Nonce randomNonce() {
  ensureSodium();
  Nonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

Tag clientTag(const Key& key, const Nonce& server_nonce, const Nonce& client_nonce) {
  return hmac(key, "tutti-client", server_nonce, client_nonce);
}

Tag serverTag(const Key& key, const Nonce& client_nonce, const Nonce& server_nonce) {
  return hmac(key, "tutti-server", client_nonce, server_nonce);
}

bool tagsEqual(const Tag& a, const Tag& b) {
  return sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

void asyncHandshake(boost::asio::ip::tcp::socket& sock, Role role, const Key& key,
                    Clock::time_point deadline, HandshakeDone done) {
  auto hs = std::make_shared<Handshake>(sock, role, key, std::move(done));
  hs->start(deadline);
}

Status handshake(boost::asio::io_context& io, boost::asio::ip::tcp::socket& sock, Role role,
                 const Key& key, Clock::time_point deadline) {
  bool finished = false;
  Status result;
  asyncHandshake(sock, role, key, deadline, [&](Status st) {
    finished = true;
    result = std::move(st);
  });
  // The handshake's own timer closes the socket at the deadline, so this
  // loop ends shortly after it at the latest; the grace covers that handler.
  if (!tcp_util::driveUntil(
          io, [&] { return finished; }, deadline + std::chrono::seconds(5))) {
    tcp_util::closeQuietly(sock);
    tcp_util::drainReady(io);
    if (!finished) return Status::timeout("authentication timed out");
  }
  return result;
}

}  // namespace tutti::auth
