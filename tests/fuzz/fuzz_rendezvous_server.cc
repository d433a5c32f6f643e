// Fuzzes the rendezvous server (rendezvous/rendezvous_server.h, protocol in
// rendezvous/rendezvous_protocol.h) with the request bytes of an authenticated
// client: a real server in this process, a real connection, the input as
// the byte stream after the handshake, then a half-close. Checks: the server
// never crashes or over-reads (AddressSanitizer), closes the connection on
// bad input (the stream ends), and still serves a well-behaved client
// afterwards (checked every 32 inputs).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/logging.h"
#include "rendezvous/auth.h"
#include "rendezvous/rendezvous_client.h"
#include "rendezvous/rendezvous_server.h"
#include "tests/fuzz/loopback.h"

using namespace tutti;
namespace asio = boost::asio;

namespace {

const std::string kSecret = "fuzz secret";

RendezvousServer& server(bool fresh) {
  static std::unique_ptr<RendezvousServer> s;
  if (fresh || !s) {
    s.reset();  // a fresh one now and then: stored keys would pile up
    FUZZ_CHECK(RendezvousServer::start("127.0.0.1", 0, kSecret, &s).isOk());
  }
  return *s;
}

void checkStillServes(int port) {
  std::unique_ptr<RendezvousClient> client;
  FUZZ_CHECK(
      RendezvousClient::connect("127.0.0.1", port, kSecret, std::chrono::seconds(10), &client)
          .isOk());
  const std::vector<uint8_t> value = {1, 2, 3};
  FUZZ_CHECK(client->set("fuzz/check", value).isOk());
  std::vector<uint8_t> got;
  FUZZ_CHECK(client->get("fuzz/check", std::chrono::seconds(10), &got).isOk() && got == value);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setLogLevel(LogLevel::kError);  // bad requests are logged as warnings
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static uint64_t runs = 0;
  ++runs;
  RendezvousServer& s = server(runs % 4096 == 0);
  asio::io_context io;
  asio::ip::tcp::socket sock(io);
  sock.connect({asio::ip::address_v4::loopback(), static_cast<unsigned short>(s.port())});
  FUZZ_CHECK(auth::handshake(io, sock, auth::Role::kClient, auth::deriveKey(kSecret),
                             auth::Clock::now() + std::chrono::seconds(10))
                 .isOk());
  boost::system::error_code ec;
  asio::write(sock, asio::buffer(data, size), ec);
  sock.shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  // The server answers what it understood and closes at EOF or bad input.
  std::array<uint8_t, 4096> buf;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (true) {
    sock.read_some(asio::buffer(buf), ec);
    if (ec) break;
    FUZZ_CHECK(std::chrono::steady_clock::now() < deadline);
  }
  // Any end will do (EOF, a reset when the server dropped us with our bytes
  // unread, or another socket error once it closed): what matters is that
  // the stream ends and the server goes on serving.
  sock.close(ec);
  if (runs % 32 == 0) checkStillServes(s.port());
  return 0;
}
