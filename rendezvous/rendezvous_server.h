#pragma once

// The job's rendezvous key-value server (Boost.Asio, own I/O thread), hosted
// by tuttirun or, for a program started by hand, by rank 0. Every connection
// must pass the challenge-response of rendezvous/auth.h with the job secret;
// unauthenticated or malformed input is dropped and logged, never a crash.
//
// Key conventions: "rank/<r>/generation" = how many times rank r has entered
// the rendezvous, minus one (set at each init; the launcher uses it to name
// ranks that did not arrive); "gen/<g>/rank/<r>/addr" = "host:port" of rank
// r's data listener in generation g (rendezvous/generation_store.h).

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace tutti {

class RendezvousServerImpl;

class RendezvousServer {
 public:
  // Binds bind_addr:port (port 0 = any free port) and starts serving on a
  // thread of its own. kIoError if the port cannot be bound.
  static Status start(const std::string& bind_addr, int port, const std::string& secret,
                      std::unique_ptr<RendezvousServer>* out);
  ~RendezvousServer();  // stop()s
  int port() const;
  // Keys set so far that start with `prefix`. Thread-safe.
  std::vector<std::string> keys(const std::string& prefix) const;
  // Sets key to value as a client's SET does, from any thread: clients blocked
  // in a GET of `key` are answered (on the server's thread, right after this
  // returns). Sets from one thread are seen by clients in the order made.
  // Used by tuttirun's elastic driver (docs/elastic.md).
  void set(const std::string& key, const std::string& value);
  // The value of `key`, if set (false otherwise). Thread-safe; never waits.
  bool get(const std::string& key, std::string* value) const;
  // Stops serving and joins the thread. Idempotent.
  void stop();

 private:
  explicit RendezvousServer(std::unique_ptr<RendezvousServerImpl> impl);
  std::unique_ptr<RendezvousServerImpl> impl_;
};

}  // namespace tutti
