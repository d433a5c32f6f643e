// RendezvousServer + RendezvousClient: set/get, waiting gets, timeouts, and a
// stranger sending garbage (dropped and logged, the server keeps serving).

#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <thread>

#include "rendezvous/auth.h"
#include "rendezvous/rendezvous_client.h"
#include "rendezvous/rendezvous_server.h"

namespace tutti {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace std::chrono_literals;

std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

std::unique_ptr<RendezvousServer> startServer(const std::string& secret = "sekrit") {
  std::unique_ptr<RendezvousServer> server;
  Status st = RendezvousServer::start("127.0.0.1", 0, secret, &server);
  EXPECT_TRUE(st.isOk()) << st.toString();
  return server;
}

std::unique_ptr<RendezvousClient> connectClient(int port, const std::string& secret = "sekrit") {
  std::unique_ptr<RendezvousClient> client;
  Status st = RendezvousClient::connect("127.0.0.1", port, secret, 5000ms, &client);
  EXPECT_TRUE(st.isOk()) << st.toString();
  return client;
}

TEST(TcpRendezvous, SetThenGet) {
  auto server = startServer();
  ASSERT_GT(server->port(), 0);
  auto a = connectClient(server->port());
  auto b = connectClient(server->port());
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->localAddress(), "127.0.0.1");
  ASSERT_TRUE(a->set("rank/0/addr", bytes("10.0.0.1:1234")).isOk());
  ASSERT_TRUE(a->set("empty", {}).isOk());
  std::vector<uint8_t> v;
  ASSERT_TRUE(b->get("rank/0/addr", 1000ms, &v).isOk());
  EXPECT_EQ(v, bytes("10.0.0.1:1234"));
  ASSERT_TRUE(b->get("empty", 1000ms, &v).isOk());
  EXPECT_TRUE(v.empty());
  // Replace.
  ASSERT_TRUE(b->set("rank/0/addr", bytes("x:1")).isOk());
  ASSERT_TRUE(a->get("rank/0/addr", 1000ms, &v).isOk());
  EXPECT_EQ(v, bytes("x:1"));
  EXPECT_EQ(server->keys("rank/"), std::vector<std::string>{"rank/0/addr"});
}

TEST(TcpRendezvous, GetWaitsForALaterSet) {
  auto server = startServer();
  auto getter = connectClient(server->port());
  std::thread setter([&] {
    std::this_thread::sleep_for(200ms);
    auto c = connectClient(server->port());
    EXPECT_TRUE(c->set("late", bytes("value")).isOk());
  });
  std::vector<uint8_t> v;
  auto t0 = std::chrono::steady_clock::now();
  Status st = getter->get("late", 5000ms, &v);
  setter.join();
  ASSERT_TRUE(st.isOk()) << st.toString();
  EXPECT_EQ(v, bytes("value"));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 150ms);
}

TEST(TcpRendezvous, ClientTimesOutThenStillWorks) {
  auto server = startServer();
  auto c = connectClient(server->port());
  std::vector<uint8_t> v;
  auto t0 = std::chrono::steady_clock::now();
  Status st = c->get("never", 200ms, &v);
  EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.toString();
  EXPECT_NE(st.message().find("never"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  // The client reconnects; a later set of the same key is not confused by
  // the abandoned GET.
  ASSERT_TRUE(c->set("k", bytes("v")).isOk());
  ASSERT_TRUE(c->get("k", 1000ms, &v).isOk());
  EXPECT_EQ(v, bytes("v"));
  ASSERT_TRUE(c->set("never", bytes("now")).isOk());
  ASSERT_TRUE(c->get("never", 1000ms, &v).isOk());
  EXPECT_EQ(v, bytes("now"));
}

TEST(TcpRendezvous, ClientRetriesUntilTheServerStarts) {
  // Find a free port, then start the server on it after the client began.
  int port = 0;
  {
    asio::io_context io;
    tcp::acceptor probe(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    port = probe.local_endpoint().port();
  }
  std::unique_ptr<RendezvousServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(300ms);
    EXPECT_TRUE(RendezvousServer::start("127.0.0.1", port, "s", &server).isOk());
  });
  std::unique_ptr<RendezvousClient> c;
  Status st = RendezvousClient::connect("127.0.0.1", port, "s", 5000ms, &c);
  starter.join();
  ASSERT_TRUE(st.isOk()) << st.toString();
  EXPECT_TRUE(c->set("a", bytes("b")).isOk());
}

TEST(TcpRendezvous, ConnectTimesOutWithoutServer) {
  int port = 0;
  {
    asio::io_context io;
    tcp::acceptor probe(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    port = probe.local_endpoint().port();
  }
  std::unique_ptr<RendezvousClient> c;
  Status st = RendezvousClient::connect("127.0.0.1", port, "s", 300ms, &c);
  EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.toString();
}

TEST(TcpRendezvous, WrongSecretIsRefused) {
  auto server = startServer("right");
  std::unique_ptr<RendezvousClient> c;
  Status st = RendezvousClient::connect("127.0.0.1", server->port(), "wrong", 2000ms, &c);
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.toString();
  EXPECT_EQ(c, nullptr);
  EXPECT_TRUE(server->keys("").empty());
}

// Sends raw bytes to the server and returns once the server closed the
// connection (or after 3 s).
bool strangerIsDropped(int port, const std::vector<uint8_t>& junk, bool read_challenge_first) {
  asio::io_context io;
  tcp::socket s(io);
  s.connect(tcp::endpoint(asio::ip::address_v4::loopback(), port));
  boost::system::error_code ec;
  if (read_challenge_first) {
    std::array<uint8_t, 8 + auth::kNonceBytes> challenge{};
    asio::read(s, asio::buffer(challenge), ec);
    if (ec) return false;
  }
  asio::write(s, asio::buffer(junk), ec);
  // Wait for EOF with a deadline.
  std::array<uint8_t, 256> buf{};
  bool closed = false;
  std::function<void()> readMore = [&] {
    s.async_read_some(asio::buffer(buf), [&](const boost::system::error_code& e, size_t) {
      if (e) {
        closed = true;
        return;
      }
      readMore();
    });
  };
  readMore();
  io.run_for(3s);
  return closed;
}

TEST(TcpRendezvous, GarbageIsDroppedAndTheServerKeepsServing) {
  auto server = startServer();
  // Garbage instead of a handshake answer.
  std::vector<uint8_t> garbage(64, 0xAB);
  EXPECT_TRUE(strangerIsDropped(server->port(), garbage, true));
  // Plain-text protocol guess, without reading the challenge first.
  std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n" + std::string(100, 'x');
  EXPECT_TRUE(strangerIsDropped(server->port(), bytes(http), false));
  // Unauthenticated "SET" frame: u32 length + body.
  std::vector<uint8_t> frame = {9, 0, 0, 0, 1, 1, 0, 0, 0, 'k', 0, 0, 0};
  frame.resize(64 + 8, 0);
  EXPECT_TRUE(strangerIsDropped(server->port(), frame, true));
  EXPECT_TRUE(server->keys("").empty());
  // A proper client is still served.
  auto c = connectClient(server->port());
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->set("k", bytes("v")).isOk());
  std::vector<uint8_t> v;
  ASSERT_TRUE(c->get("k", 1000ms, &v).isOk());
  EXPECT_EQ(v, bytes("v"));
}

TEST(TcpRendezvous, AuthenticatedButMalformedFramesAreDropped) {
  auto server = startServer();
  auto key = auth::deriveKey("sekrit");
  auto send_after_auth = [&](const std::vector<uint8_t>& junk) {
    asio::io_context io;
    tcp::socket s(io);
    s.connect(tcp::endpoint(asio::ip::address_v4::loopback(), server->port()));
    Status st = auth::handshake(io, s, auth::Role::kClient, key,
                                auth::Clock::now() + std::chrono::seconds(3));
    EXPECT_TRUE(st.isOk()) << st.toString();
    boost::system::error_code ec;
    asio::write(s, asio::buffer(junk), ec);
    std::array<uint8_t, 16> buf{};
    size_t n = s.read_some(asio::buffer(buf), ec);  // blocks until the server closes
    return n == 0 && ec == asio::error::eof;
  };
  // Oversize frame (1 GiB announced).
  EXPECT_TRUE(send_after_auth({0, 0, 0, 0x40}));
  // Unknown op.
  EXPECT_TRUE(send_after_auth({6, 0, 0, 0, 9, 1, 0, 0, 0, 'k'}));
  // String length running past the frame.
  EXPECT_TRUE(send_after_auth({6, 0, 0, 0, 1, 0xff, 0, 0, 0, 'k'}));
  // Zero-length frame.
  EXPECT_TRUE(send_after_auth({0, 0, 0, 0}));
  auto c = connectClient(server->port());
  ASSERT_TRUE(c && c->set("ok", bytes("1")).isOk());
}

TEST(TcpRendezvous, StopIsIdempotentAndClientsSeeErrors) {
  auto server = startServer();
  auto c = connectClient(server->port());
  server->stop();
  server->stop();
  std::vector<uint8_t> v;
  Status st = c->get("x", 500ms, &v);
  EXPECT_FALSE(st.isOk());
}

}  // namespace
}  // namespace tutti
