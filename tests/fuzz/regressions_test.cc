// What fuzzing found (tests/fuzz/, scripts/fuzz), as plain tests of the
// normal build: each case is the input that failed, reduced, and fails on the
// code before its fix.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "core/message.h"
#include "core/settings.h"
#include "ops/tcp/peer_records.h"

namespace {

// The largest single allocation since the last reset (this binary replaces
// the global operator new to watch it).
std::atomic<size_t> g_largest_alloc{0};

}  // namespace

void* operator new(size_t n) {
  size_t seen = g_largest_alloc.load(std::memory_order_relaxed);
  while (n > seen && !g_largest_alloc.compare_exchange_weak(seen, n)) {
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}

namespace tutti {
namespace {

// A list header claiming 4 M elements followed by nothing: malformed, and
// found so before any memory is set aside for the elements (the decoder
// allocated ~4 M elements first: hundreds of MiB per bad control frame).
TEST(FuzzRegressions, ListCountBeyondTheBytesIsMalformedWithoutAllocating) {
  const std::vector<uint8_t> bytes = {0x00, 0x00, 0x40, 0x00};  // 4,194,304 little-endian
  g_largest_alloc = 0;
  RequestList requests;
  Status st = deserialize(bytes, &requests);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("malformed request list"), std::string::npos) << st.message();
  ResponseList responses;
  st = deserialize(bytes, &responses);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_LT(g_largest_alloc.load(), size_t{1} << 16);

  // One response whose name count claims 4 M names.
  std::vector<uint8_t> names = {1, 0, 0, 0, /*kind*/ 0, /*type*/ 0, 0x00, 0x00, 0x40, 0x00};
  g_largest_alloc = 0;
  st = deserialize(names, &responses);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_LT(g_largest_alloc.load(), size_t{1} << 16);
}

// The largest counts that do fit still decode (the bound is not too tight).
TEST(FuzzRegressions, ListsWithManyEmptyElementsStillRoundTrip) {
  RequestList requests;
  requests.requests.resize(1000);
  RequestList back;
  ASSERT_TRUE(deserialize(serialize(requests), &back).isOk());
  EXPECT_EQ(back.requests.size(), 1000u);
  ResponseList responses;
  responses.responses.resize(1000);
  responses.responses[7].names.assign(500, "");
  ResponseList rback;
  ASSERT_TRUE(deserialize(serialize(responses), &rback).isOk());
  ASSERT_EQ(rback.responses.size(), 1000u);
  EXPECT_EQ(rback.responses[7].names.size(), 500u);
}

// A number with an embedded NUL: validateSetting read it as 0 (strtoll stops
// at the NUL) and loadSettings then threw std::invalid_argument from stoll.
TEST(FuzzRegressions, NumberWithEmbeddedNulIsABadValue) {
  const std::string value("\0\0\0\0001", 5);
  const SettingSpec* rank = findSettingSpec("TUTTI_RANK");
  ASSERT_NE(rank, nullptr);
  Status st = validateSetting(*rank, value);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("TUTTI_RANK"), std::string::npos) << st.message();
  const SettingSpec* timeout = findSettingSpec("TUTTI_TIMEOUT_SECONDS");
  ASSERT_NE(timeout, nullptr);
  EXPECT_EQ(validateSetting(*timeout, std::string("5\0x", 3)).code(), StatusCode::kInvalidArgument);
  Settings s;
  st = loadSettings(
      [&](const std::string& name) -> std::optional<std::string> {
        if (name == "TUTTI_RANK") return value;
        return std::nullopt;
      },
      &s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(validateSetting(*rank, "3").isOk());
}

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
