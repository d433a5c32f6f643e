#include "ops/tcp/rendezvous_client.h"

#include <cstring>

#include "core/wire.h"
#include "ops/tcp/asio_util.h"
#include "ops/tcp/auth.h"
#include "ops/tcp/rendezvous_protocol.h"

namespace tutti {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {
constexpr auto kRetryDelay = std::chrono::milliseconds(100);
}  // namespace

RendezvousClient::RendezvousClient(std::string host, int port, std::string secret,
                                   std::chrono::milliseconds default_timeout)
    : host_(std::move(host)),
      port_(port),
      secret_(std::move(secret)),
      default_timeout_(default_timeout) {}

RendezvousClient::~RendezvousClient() {
  disconnect();
}

Status RendezvousClient::connect(const std::string& host, int port, const std::string& secret,
                                 std::chrono::milliseconds timeout,
                                 std::unique_ptr<RendezvousClient>* out) {
  std::unique_ptr<RendezvousClient> client(new RendezvousClient(host, port, secret, timeout));
  TUTTI_RETURN_IF_ERROR(client->ensureConnected(Clock::now() + timeout));
  *out = std::move(client);
  return Status::ok();
}

void RendezvousClient::disconnect() {
  if (!sock_) return;
  tcp_util::closeQuietly(*sock_);
  tcp_util::drainReady(io_);  // aborted handlers reference this call's locals
  sock_.reset();
}

Status RendezvousClient::ensureConnected(Clock::time_point deadline) {
  if (sock_ && sock_->is_open()) return Status::ok();
  const std::string where = host_ + ":" + std::to_string(port_);
  tcp::resolver resolver(io_);
  error_code ec;
  auto results = resolver.resolve(host_, std::to_string(port_), ec);
  if (ec || results.empty()) {
    return Status::ioError("cannot resolve rendezvous server " + where + ": " + ec.message());
  }
  std::string last_error = "no attempt";
  while (true) {
    auto sock = std::make_unique<tcp::socket>(io_);
    bool finished = false;
    error_code cec;
    asio::async_connect(*sock, results, [&](const error_code& e, const tcp::endpoint&) {
      cec = e;
      finished = true;
    });
    if (!tcp_util::driveUntil(
            io_, [&] { return finished; }, deadline)) {
      tcp_util::closeQuietly(*sock);
      tcp_util::drainReady(io_);
      return Status::timeout("could not reach the rendezvous server at " + where + " (" +
                             last_error + ")");
    }
    if (!cec) {
      sock->set_option(tcp::no_delay(true), ec);
      Status st =
          auth::handshake(io_, *sock, auth::Role::kClient, auth::deriveKey(secret_), deadline);
      if (!st.isOk()) {
        return Status(st.code(), "rendezvous server " + where + ": " + st.message());
      }
      auto local = sock->local_endpoint(ec);
      if (!ec) local_address_ = local.address().to_string();
      sock_ = std::move(sock);
      return Status::ok();
    }
    // Not listening yet (or a transient error): retry until the deadline.
    last_error = cec.message();
    if (Clock::now() + kRetryDelay >= deadline) {
      return Status::timeout("could not reach the rendezvous server at " + where + " (" +
                             last_error + ")");
    }
    asio::steady_timer timer(io_, kRetryDelay);
    bool slept = false;
    timer.async_wait([&](const error_code&) { slept = true; });
    tcp_util::driveUntil(
        io_, [&] { return slept; }, deadline + kRetryDelay);
  }
}

Status RendezvousClient::roundTrip(const std::vector<uint8_t>& request, Clock::time_point deadline,
                                   const std::string& what, std::vector<uint8_t>* reply) {
  TUTTI_RETURN_IF_ERROR(ensureConnected(deadline));
  const std::vector<uint8_t> frame = framed(request);

  enum Phase { kWriting, kReadingHeader, kReadingBody, kDone } phase = kWriting;
  error_code err;
  FrameHeader header{};
  bool wrote = false;
  asio::async_write(*sock_, asio::buffer(frame), [&](const error_code& ec, size_t) {
    wrote = true;
    if (ec && !err) err = ec;
  });
  asio::async_read(*sock_, asio::buffer(header), [&](const error_code& ec, size_t) {
    if (ec) {
      err = ec;
      phase = kDone;
      return;
    }
    const uint32_t len = frameLength(header);
    if (len == 0 || len > rendezvous::kMaxFrameBytes) {
      err = asio::error::message_size;
      phase = kDone;
      return;
    }
    reply->resize(len);
    phase = kReadingBody;
    asio::async_read(*sock_, asio::buffer(*reply), [&](const error_code& ec2, size_t) {
      if (ec2) err = ec2;
      phase = kDone;
    });
  });
  bool ok = tcp_util::driveUntil(
      io_, [&] { return phase == kDone && wrote; }, deadline);
  if (!ok || err) {
    disconnect();  // runs the aborted handlers while their locals still exist
    if (!ok) return Status::timeout(what + ": no answer from the rendezvous server in time");
    return Status::ioError(what + ": rendezvous connection failed: " + err.message());
  }
  if (reply->empty() || (*reply)[0] != rendezvous::kReplyOk) {
    disconnect();
    return Status::ioError(what + ": malformed answer from the rendezvous server");
  }
  return Status::ok();
}

Status RendezvousClient::set(const std::string& key, const std::vector<uint8_t>& value) {
  BufferWriter w;
  w.putU8(rendezvous::kSet);
  w.putString(key);
  w.putU32(static_cast<uint32_t>(value.size()));
  w.putRaw(value.data(), value.size());
  std::vector<uint8_t> reply;
  return roundTrip(w.bytes(), Clock::now() + default_timeout_, "set '" + key + "'", &reply);
}

Status RendezvousClient::get(const std::string& key, std::chrono::milliseconds timeout,
                             std::vector<uint8_t>* value) {
  BufferWriter w;
  w.putU8(rendezvous::kGet);
  w.putString(key);
  std::vector<uint8_t> reply;
  Status st = roundTrip(w.bytes(), Clock::now() + timeout, "get '" + key + "'", &reply);
  if (st.code() == StatusCode::kTimeout) {
    return Status::timeout("key '" + key + "' did not appear in the rendezvous store within " +
                           std::to_string(timeout.count()) + " ms");
  }
  TUTTI_RETURN_IF_ERROR(st);
  BufferReader r(reply);
  uint8_t code = 0;
  std::string s;
  if (!r.getU8(&code) || !r.getString(&s, rendezvous::kMaxFrameBytes) || !r.atEnd()) {
    disconnect();
    return Status::ioError("get '" + key + "': malformed answer from the rendezvous server");
  }
  value->assign(s.begin(), s.end());
  return Status::ok();
}

Status RendezvousClient::tryGet(const std::string& key, std::vector<uint8_t>* value, bool* found) {
  BufferWriter w;
  w.putU8(rendezvous::kTryGet);
  w.putString(key);
  std::vector<uint8_t> reply;
  TUTTI_RETURN_IF_ERROR(
      roundTrip(w.bytes(), Clock::now() + default_timeout_, "tryget '" + key + "'", &reply));
  BufferReader r(reply);
  uint8_t code = 0, flag = 0;
  std::string s;
  if (!r.getU8(&code) || !r.getU8(&flag) || flag > 1 ||
      !r.getString(&s, rendezvous::kMaxFrameBytes) || !r.atEnd()) {
    disconnect();
    return Status::ioError("tryget '" + key + "': malformed answer from the rendezvous server");
  }
  *found = flag == 1;
  value->assign(s.begin(), s.end());
  return Status::ok();
}

}  // namespace tutti
