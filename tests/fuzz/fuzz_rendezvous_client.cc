// Fuzzes the rendezvous client's reading of the server's answers
// (rendezvous/rendezvous_client.h): a fake server in this process authenticates,
// reads the client's request and answers with the input's bytes, then
// closes. Input: first byte picks the request (0 set, 1 get, 2 tryget); the
// rest is the answer as sent on the wire (u32 length + body, or anything).
// Checks: the client returns (bounded by its timeout) ok or an error, and a
// value it returns is what the answer carried.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/logging.h"
#include "rendezvous/auth.h"
#include "rendezvous/rendezvous_client.h"
#include "tests/fuzz/fuzz_check.h"

using namespace tutti;
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

const std::string kSecret = "fuzz secret";

// Serves one connection per answer handed to it.
class FakeServer {
 public:
  FakeServer() : acceptor_(io_, tcp::endpoint(asio::ip::address_v4::loopback(), 0)) {
    thread_ = std::thread([this] { loop(); });
    thread_.detach();  // lives as long as the fuzz process
  }
  int port() const { return acceptor_.local_endpoint().port(); }
  void answerNext(std::vector<uint8_t> answer) {
    std::lock_guard<std::mutex> lock(mu_);
    answer_ = std::move(answer);
  }

 private:
  void loop() {
    const auth::Key key = auth::deriveKey(kSecret);
    while (true) {
      tcp::socket sock(io_);
      boost::system::error_code ec;
      acceptor_.accept(sock, ec);
      if (ec) continue;
      std::vector<uint8_t> answer;
      {
        std::lock_guard<std::mutex> lock(mu_);
        answer = answer_;
      }
      io_.restart();
      if (!auth::handshake(io_, sock, auth::Role::kServer, key,
                           auth::Clock::now() + std::chrono::seconds(10))
               .isOk()) {
        continue;
      }
      io_.restart();
      uint32_t n = 0;
      asio::read(sock, asio::buffer(&n, 4), ec);
      std::vector<uint8_t> request(ec ? 0 : n);
      if (!ec) asio::read(sock, asio::buffer(request), ec);
      if (!ec) asio::write(sock, asio::buffer(answer), ec);
      sock.shutdown(tcp::socket::shutdown_send, ec);
      std::array<uint8_t, 256> drain;
      while (!ec) sock.read_some(asio::buffer(drain), ec);  // until the client closes
    }
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::mutex mu_;
  std::vector<uint8_t> answer_;
  std::thread thread_;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setLogLevel(LogLevel::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static FakeServer server;
  server.answerNext(std::vector<uint8_t>(data + 1, data + size));
  std::unique_ptr<RendezvousClient> client;
  const auto timeout = std::chrono::milliseconds(2000);
  FUZZ_CHECK(
      RendezvousClient::connect("127.0.0.1", server.port(), kSecret, timeout, &client).isOk());
  std::vector<uint8_t> value;
  const auto start = std::chrono::steady_clock::now();
  switch (data[0] % 3) {
    case 0:
      client->set("k", {1, 2}).isOk();
      break;
    case 1:
      if (client->get("k", timeout, &value).isOk()) {
        // u32 frame length, kReplyOk, u32 value length, value
        FUZZ_CHECK(size >= 1 + 9 + value.size());
        FUZZ_CHECK(std::equal(value.begin(), value.end(), data + 1 + 9));
      }
      break;
    default: {
      bool found = false;
      if (client->tryGet("k", &value, &found).isOk()) {
        FUZZ_CHECK(size >= 1 + 10 + value.size());
        FUZZ_CHECK(std::equal(value.begin(), value.end(), data + 1 + 10));
      }
    }
  }
  FUZZ_CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  return 0;
}
