#pragma once

// Mutual challenge-response authentication with the per-job secret
// (libsodium). The secret never travels on the wire:
//
//   key = crypto_generichash(secret)                       (32 bytes)
//   server -> client : "TUTTIAU1" || nonce_s               (8 + 32 bytes)
//   client -> server : nonce_c || HMAC-SHA256(key, "tutti-client" || nonce_s || nonce_c)
//   server -> client : HMAC-SHA256(key, "tutti-server" || nonce_c || nonce_s)
//
// Each side checks the other's tag in constant time (sodium_memcmp). The
// accepting side of a connection plays "server", the connecting side
// "client". Used by the rendezvous server/client and every transport
// connection.
//
// Errors: a failed, malformed or timed-out handshake closes the socket, logs a
// warning naming the remote endpoint and reports kIoError (kTimeout when the
// deadline passed).

#include <array>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"

namespace tutti::auth {

constexpr size_t kKeyBytes = 32;
constexpr size_t kNonceBytes = 32;
constexpr size_t kTagBytes = 32;
constexpr char kMagic[8] = {'T', 'U', 'T', 'T', 'I', 'A', 'U', '1'};

using Key = std::array<uint8_t, kKeyBytes>;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Tag = std::array<uint8_t, kTagBytes>;

// Pure functions (thread-safe, no I/O).
Key deriveKey(const std::string& secret);
Nonce randomNonce();
// The tag the client sends: HMAC(key, "tutti-client" || nonce_s || nonce_c).
Tag clientTag(const Key& key, const Nonce& server_nonce, const Nonce& client_nonce);
// The tag the server answers: HMAC(key, "tutti-server" || nonce_c || nonce_s).
Tag serverTag(const Key& key, const Nonce& client_nonce, const Nonce& server_nonce);
// Constant-time comparison of two tags.
bool tagsEqual(const Tag& a, const Tag& b);

enum class Role { kServer, kClient };
using Clock = std::chrono::steady_clock;
using HandshakeDone = std::function<void(Status)>;

// Starts the handshake on a connected socket. `done` runs exactly once, on a
// thread driving the socket's io_context, with Ok or the error; on error the
// socket has been closed and a warning logged. `sock` must stay alive until
// `done` ran (or the io_context is destroyed). If `deadline` passes first the
// socket is closed and `done` gets kTimeout.
void asyncHandshake(boost::asio::ip::tcp::socket& sock, Role role, const Key& key,
                    Clock::time_point deadline, HandshakeDone done);

// Blocking form: drives `io` (the socket's io_context) on the calling thread
// until the handshake finished or `deadline` passed.
Status handshake(boost::asio::io_context& io, boost::asio::ip::tcp::socket& sock, Role role,
                 const Key& key, Clock::time_point deadline);

}  // namespace tutti::auth
