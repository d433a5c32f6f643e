// What fuzzing found (tests/fuzz/, scripts/fuzz), as plain tests of the
// normal build: each case is the input that failed, reduced, and fails on the
// code before its fix.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/tcp/peer_records.h"

namespace tutti {
namespace {

// The peer records: what the transport sends decodes to what it meant.
TEST(FuzzRegressions, HelloAndShmOfferRoundTrip) {
  const Hello h = decodeHello(encodeHello(2, 4, Channel::kControl));
  EXPECT_EQ(h.magic, kHelloMagic);
  EXPECT_EQ(h.rank, 2);
  EXPECT_EQ(h.size, 4);
  EXPECT_EQ(h.kind, static_cast<uint8_t>(Channel::kControl));
  EXPECT_EQ(judgeHello(h, 0, 4), HelloVerdict::kOk);
  EXPECT_EQ(judgeHello(h, 1, 4), HelloVerdict::kBad);  // control goes to rank 0 only
  EXPECT_EQ(judgeHello(h, 0, 3), HelloVerdict::kForeignJob);
  EXPECT_EQ(judgeHello(h, 2, 4), HelloVerdict::kBad);  // only higher ranks connect
  const std::string name = "/tutti-12-0123456789abcdef0123456789abcdef";
  const ShmOffer o = decodeShmOffer(encodeShmOffer({true, 1u << 20, name}));
  EXPECT_TRUE(o.ok);
  EXPECT_EQ(o.ring_bytes, 1u << 20);
  EXPECT_EQ(o.name, name);
  auto bytes = encodeShmOffer({true, 4096, name});
  bytes[5] = 255;  // a length past the field is cut to the field
  EXPECT_EQ(decodeShmOffer(bytes).name.size(), kShmNameField);
}

}  // namespace
}  // namespace tutti
