// Fuzzes the hello that opens every peer connection of TcpTransport
// (ops/tcp/peer_records.h): decodeHello and the accepting rank's verdict.
// Input: 13 hello bytes, then one byte choosing the accepting rank and the
// world size. Checks: encode(decode(x)) == x for real hellos, and an accepted
// hello names a higher rank of this job and a known channel.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ops/tcp/peer_records.h"
#include "tests/fuzz/fuzz_check.h"

using namespace tutti;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kHelloBytes) return 0;
  std::array<uint8_t, kHelloBytes> bytes{};
  std::memcpy(bytes.data(), data, kHelloBytes);
  const uint8_t pick = size > kHelloBytes ? data[kHelloBytes] : 0;
  const int world = 1 + pick % 8;
  const int me = (pick / 8) % world;
  const Hello h = decodeHello(bytes);
  const HelloVerdict v = judgeHello(h, me, world);
  if (v == HelloVerdict::kOk) {
    FUZZ_CHECK(h.magic == kHelloMagic && h.size == world);
    FUZZ_CHECK(h.rank > me && h.rank < world);
    FUZZ_CHECK(h.kind == static_cast<uint8_t>(Channel::kData) ||
               (h.kind == static_cast<uint8_t>(Channel::kControl) && me == 0));
  }
  if (v == HelloVerdict::kForeignJob) FUZZ_CHECK(h.size != world);
  if (h.kind == 1 || h.kind == 2) {
    FUZZ_CHECK(encodeHello(h.rank, h.size, static_cast<Channel>(h.kind)) == bytes ||
               h.magic != kHelloMagic);
  }
  return 0;
}
