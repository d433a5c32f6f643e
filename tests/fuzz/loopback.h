#pragma once

// Loopback sockets for the fuzz targets that feed bytes to tutti's network
// code through a real socket (auth, rendezvous). Not thread-safe; one
// Loopback per fuzz process.

#include <array>
#include <boost/asio.hpp>
#include <memory>
#include <vector>

#include "tests/fuzz/fuzz_check.h"

namespace tutti::fuzz {

namespace asio = boost::asio;
using asio::ip::tcp;

class Loopback {
 public:
  Loopback() : acceptor_(io_, tcp::endpoint(asio::ip::address_v4::loopback(), 0)) {}

  asio::io_context& io() { return io_; }
  unsigned short port() const { return acceptor_.local_endpoint().port(); }

  // A connected pair on loopback: *ours is the side under test.
  void pair(std::unique_ptr<tcp::socket>* ours, std::unique_ptr<tcp::socket>* peer) {
    *ours = std::make_unique<tcp::socket>(io_);
    *peer = std::make_unique<tcp::socket>(io_);
    (*peer)->connect(acceptor_.local_endpoint());
    acceptor_.accept(**ours);
  }

  // Writes `bytes` to `sock`, then half-closes it, asynchronously; what the
  // other side writes is read and dropped.
  static void feed(tcp::socket& sock, std::shared_ptr<std::vector<uint8_t>> bytes) {
    asio::async_write(sock, asio::buffer(*bytes),
                      [&sock, bytes](const boost::system::error_code& ec, size_t) {
                        boost::system::error_code ignored;
                        if (!ec) sock.shutdown(tcp::socket::shutdown_send, ignored);
                      });
    drain(sock, std::make_shared<std::array<uint8_t, 4096>>());
  }

 private:
  static void drain(tcp::socket& sock, std::shared_ptr<std::array<uint8_t, 4096>> buf) {
    sock.async_read_some(asio::buffer(*buf),
                         [&sock, buf](const boost::system::error_code& ec, size_t) {
                           if (!ec) drain(sock, buf);
                         });
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
};

}  // namespace tutti::fuzz
