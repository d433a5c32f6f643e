#pragma once

// The two fixed-size records peers of TcpTransport exchange after the auth
// handshake (rendezvous/auth.h), as pure functions so that they can be tested
// and fuzzed without sockets (tests/fuzz/). Thread-safe, no I/O.
//
// Hello, connecting side to accepting side, first on every peer connection:
//   u32 kHelloMagic, i32 rank, i32 size, u8 channel kind (13 bytes, host order).
// Shared-memory offer, lower rank to higher, first on the data connection of
// a pair on one host (ops/tcp/shm_setup.cc):
//   u8 ok, u32 ring bytes, u8 name length, name padded to kShmNameField bytes.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/wire.h"

namespace tutti {

constexpr uint32_t kHelloMagic = 0x31485454;  // "TTH1"
constexpr size_t kHelloBytes = 13;
enum class Channel : uint8_t { kData = 1, kControl = 2 };

struct Hello {
  uint32_t magic = 0;
  int32_t rank = -1;
  int32_t size = -1;
  uint8_t kind = 0;  // a Channel value when the peer is well-behaved
};

// Packed and read through core/wire.h (the framing every message uses).
template <size_t N>
std::array<uint8_t, N> toRecord(const BufferWriter& w) {
  std::array<uint8_t, N> out{};
  std::copy(w.bytes().begin(), w.bytes().begin() + std::min(N, w.bytes().size()), out.begin());
  return out;
}

inline std::array<uint8_t, kHelloBytes> encodeHello(int32_t rank, int32_t size, Channel kind) {
  BufferWriter w;
  w.putU32(kHelloMagic);
  w.putI32(rank);
  w.putI32(size);
  w.putU8(static_cast<uint8_t>(kind));
  return toRecord<kHelloBytes>(w);
}

inline Hello decodeHello(const std::array<uint8_t, kHelloBytes>& bytes) {
  Hello h;
  BufferReader r(bytes.data(), bytes.size());
  r.getU32(&h.magic);
  r.getI32(&h.rank);
  r.getI32(&h.size);
  r.getU8(&h.kind);
  return h;
}

// What the accepting rank `my_rank` of a `size`-rank job makes of a hello:
// kForeignJob: our magic but another world size (a setup error naming both);
// kBad: anything else it does not accept (wrong magic, a rank that must not
// connect to us, an unknown kind, a control channel to a rank other than 0);
// kOk otherwise (duplicates are the caller's to check).
enum class HelloVerdict { kOk, kForeignJob, kBad };
inline HelloVerdict judgeHello(const Hello& h, int my_rank, int size) {
  if (h.magic != kHelloMagic) return HelloVerdict::kBad;
  if (h.size != size) return HelloVerdict::kForeignJob;
  const bool kind_ok = h.kind == static_cast<uint8_t>(Channel::kData) ||
                       (h.kind == static_cast<uint8_t>(Channel::kControl) && my_rank == 0);
  return h.rank > my_rank && h.rank < size && kind_ok ? HelloVerdict::kOk : HelloVerdict::kBad;
}

constexpr size_t kShmNameField = 64;
constexpr size_t kShmOfferBytes = 1 + 4 + 1 + kShmNameField;

struct ShmOffer {
  bool ok = false;  // the lower rank created a segment
  uint32_t ring_bytes = 0;
  std::string name;  // at most kShmNameField bytes
};

inline std::array<uint8_t, kShmOfferBytes> encodeShmOffer(const ShmOffer& offer) {
  const size_t len = std::min(offer.name.size(), kShmNameField);
  BufferWriter w;
  w.putU8(offer.ok ? 1 : 0);
  w.putU32(offer.ring_bytes);
  w.putU8(static_cast<uint8_t>(len));
  w.putRaw(offer.name.data(), len);
  w.padTo(kShmOfferBytes);
  return toRecord<kShmOfferBytes>(w);
}

// Any bytes decode: ok only for the byte 1, a name length above the field is
// cut to the field. The name and ring size are checked by ShmChannel::open.
inline ShmOffer decodeShmOffer(const std::array<uint8_t, kShmOfferBytes>& bytes) {
  ShmOffer offer;
  BufferReader r(bytes.data(), bytes.size());
  uint8_t ok = 0, len = 0;
  r.getU8(&ok);
  r.getU32(&offer.ring_bytes);
  r.getU8(&len);
  offer.name.resize(std::min<size_t>(len, kShmNameField));
  r.getRaw(offer.name.data(), offer.name.size());
  offer.ok = ok == 1;
  return offer;
}

}  // namespace tutti
