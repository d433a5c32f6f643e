#pragma once

// Store (core/store.h) over TCP to a RendezvousServer, authenticated with the
// job secret (rendezvous/auth.h).
//
// Ownership: the client owns its socket and a private io_context; it starts
// no threads. Blocking: every call blocks the calling thread (sleeping in
// epoll) until it is answered or its deadline passes. Threading: one thread
// at a time (the Store contract).
//
// Timeouts: connect() retries refused connections (the server may start after
// the client) until its timeout. set() waits at most the client's default
// timeout; get() at most the timeout given. After a timeout or a broken
// connection the client reconnects on the next call.
//
// Errors: kTimeout (naming the key or the server address), kIoError (cannot
// resolve, authentication refused: usually a different TUTTI_SECRET).

#include <boost/asio.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "core/store.h"

namespace tutti {

class RendezvousClient : public Store {
 public:
  // Connects to host:port (retrying until `timeout`) and authenticates.
  // `default_timeout` bounds set() and reconnects.
  static Status connect(const std::string& host, int port, const std::string& secret,
                        std::chrono::milliseconds timeout, std::unique_ptr<RendezvousClient>* out);
  ~RendezvousClient() override;

  Status set(const std::string& key, const std::vector<uint8_t>& value) override;
  // Looks a key up without waiting: *found says whether it exists.
  Status tryGet(const std::string& key, std::vector<uint8_t>* value, bool* found);
  Status get(const std::string& key, std::chrono::milliseconds timeout,
             std::vector<uint8_t>* value) override;

  // The local address of the connection to the server: the address peers can
  // most likely reach this host on ("" if not connected).
  std::string localAddress() const { return local_address_; }

 private:
  using Clock = std::chrono::steady_clock;
  RendezvousClient(std::string host, int port, std::string secret,
                   std::chrono::milliseconds default_timeout);
  Status ensureConnected(Clock::time_point deadline);
  // Sends one request frame and reads the reply body; on any failure the
  // connection is closed (a late reply must not be taken for the next one).
  Status roundTrip(const std::vector<uint8_t>& request, Clock::time_point deadline,
                   const std::string& what, std::vector<uint8_t>* reply);
  void disconnect();

  std::string host_;
  int port_;
  std::string secret_;
  std::chrono::milliseconds default_timeout_;
  std::string local_address_;
  boost::asio::io_context io_;
  std::unique_ptr<boost::asio::ip::tcp::socket> sock_;
};

}  // namespace tutti
