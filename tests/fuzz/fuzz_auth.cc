// Fuzzes the authentication handshake (rendezvous/auth.h) with the bytes of a
// peer that does not know the secret: every connection to a rendezvous
// server or a rank starts with it. Input: first byte even = tutti plays the
// server (it reads the client's nonce and tag), odd = tutti plays the client
// (it reads the server's magic, nonce and tag); the rest is what the peer
// sends before it closes. Checks: the handshake ends (within its deadline)
// with an error, never success, and never touches memory it should not.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/logging.h"
#include "rendezvous/auth.h"
#include "tests/fuzz/loopback.h"

using namespace tutti;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setLogLevel(LogLevel::kError);  // every input is a failed handshake: quiet
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 4096) return 0;
  static fuzz::Loopback loop;
  static const auth::Key key = auth::deriveKey("fuzz secret");
  std::unique_ptr<fuzz::tcp::socket> ours, peer;
  loop.pair(&ours, &peer);
  const auto role = data[0] % 2 == 0 ? auth::Role::kServer : auth::Role::kClient;
  fuzz::Loopback::feed(*peer, std::make_shared<std::vector<uint8_t>>(data + 1, data + size));
  Status st =
      auth::handshake(loop.io(), *ours, role, key, auth::Clock::now() + std::chrono::seconds(5));
  FUZZ_CHECK(!st.isOk());  // nobody without the secret gets in
  boost::system::error_code ec;
  peer->close(ec);
  ours->close(ec);
  loop.io().restart();
  loop.io().poll();  // run the aborted handlers while the sockets exist
  loop.io().restart();
  return 0;
}
