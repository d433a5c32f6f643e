// Unit tests of the challenge-response in rendezvous/auth.h: the pure tag
// functions, and the handshake over a loopback connection.

#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <thread>

#include "rendezvous/auth.h"

namespace tutti {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

TEST(TcpAuth, KeyIsDeterministicAndSecretDependent) {
  EXPECT_EQ(auth::deriveKey("s3cret"), auth::deriveKey("s3cret"));
  EXPECT_NE(auth::deriveKey("s3cret"), auth::deriveKey("s3creT"));
  EXPECT_NE(auth::deriveKey(""), auth::deriveKey("x"));
}

TEST(TcpAuth, NoncesDiffer) {
  EXPECT_NE(auth::randomNonce(), auth::randomNonce());
}

TEST(TcpAuth, RightSecretPasses) {
  auto server_key = auth::deriveKey("job-secret");
  auto client_key = auth::deriveKey("job-secret");
  auto ns = auth::randomNonce();
  auto nc = auth::randomNonce();
  // What the client sends is what the server expects, and vice versa.
  EXPECT_TRUE(
      auth::tagsEqual(auth::clientTag(client_key, ns, nc), auth::clientTag(server_key, ns, nc)));
  EXPECT_TRUE(
      auth::tagsEqual(auth::serverTag(server_key, nc, ns), auth::serverTag(client_key, nc, ns)));
}

TEST(TcpAuth, WrongSecretFails) {
  auto good = auth::deriveKey("job-secret");
  auto bad = auth::deriveKey("other-secret");
  auto ns = auth::randomNonce();
  auto nc = auth::randomNonce();
  EXPECT_FALSE(auth::tagsEqual(auth::clientTag(bad, ns, nc), auth::clientTag(good, ns, nc)));
  EXPECT_FALSE(auth::tagsEqual(auth::serverTag(bad, nc, ns), auth::serverTag(good, nc, ns)));
}

TEST(TcpAuth, TamperedNonceFails) {
  auto key = auth::deriveKey("job-secret");
  auto ns = auth::randomNonce();
  auto nc = auth::randomNonce();
  auto tag = auth::clientTag(key, ns, nc);
  auto ns2 = ns;
  ns2[7] ^= 1;
  auto nc2 = nc;
  nc2[31] ^= 0x80;
  EXPECT_FALSE(auth::tagsEqual(tag, auth::clientTag(key, ns2, nc)));
  EXPECT_FALSE(auth::tagsEqual(tag, auth::clientTag(key, ns, nc2)));
  // Client and server tags are domain-separated: a reflected tag is useless.
  EXPECT_FALSE(auth::tagsEqual(auth::clientTag(key, ns, nc), auth::serverTag(key, ns, nc)));
}

// Runs a server-role handshake on an accepted socket (own thread) and a
// client-role one on a connected socket; returns both results.
std::pair<Status, Status> runHandshake(const std::string& server_secret,
                                       const std::string& client_secret) {
  asio::io_context sio;
  tcp::acceptor acceptor(sio, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  const auto port = acceptor.local_endpoint().port();
  const auto deadline = auth::Clock::now() + std::chrono::seconds(5);
  Status server_st, client_st;
  std::thread server([&] {
    tcp::socket s(sio);
    acceptor.accept(s);
    server_st =
        auth::handshake(sio, s, auth::Role::kServer, auth::deriveKey(server_secret), deadline);
  });
  asio::io_context cio;
  tcp::socket c(cio);
  c.connect(tcp::endpoint(asio::ip::address_v4::loopback(), port));
  client_st =
      auth::handshake(cio, c, auth::Role::kClient, auth::deriveKey(client_secret), deadline);
  server.join();
  return {server_st, client_st};
}

TEST(TcpAuth, HandshakeWithSameSecretSucceeds) {
  auto [s, c] = runHandshake("abc", "abc");
  EXPECT_TRUE(s.isOk()) << s.toString();
  EXPECT_TRUE(c.isOk()) << c.toString();
}

TEST(TcpAuth, HandshakeWithDifferentSecretFailsOnBothSides) {
  auto [s, c] = runHandshake("abc", "abd");
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.toString();
  EXPECT_NE(s.message().find("does not know the job secret"), std::string::npos) << s.message();
  EXPECT_EQ(c.code(), StatusCode::kIoError) << c.toString();
}

TEST(TcpAuth, HandshakeTimesOutAgainstASilentPeer) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  tcp::socket c(io);
  c.connect(acceptor.local_endpoint());  // nobody ever accepts and talks
  auto t0 = auth::Clock::now();
  Status st = auth::handshake(io, c, auth::Role::kClient, auth::deriveKey("x"),
                              t0 + std::chrono::milliseconds(200));
  EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.toString();
  EXPECT_LT(auth::Clock::now() - t0, std::chrono::seconds(3));
  EXPECT_FALSE(c.is_open());
}

}  // namespace
}  // namespace tutti
