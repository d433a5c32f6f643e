// Error-feedback residuals as bytes (coordinator/residual_codec.h): the
// round trip is exact and every corruption is an error naming it.

#include "coordinator/residual_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tutti {
namespace {

CompressionResiduals sample() {
  CompressionResiduals r;
  r["topk:0.01"]["fc1.weight"] = {1.5f, -0.0f, std::numeric_limits<float>::denorm_min(), 3e38f};
  r["topk:0.01"]["empty"] = {};
  r["int8:256"]["conv.bias"] = std::vector<float>(1009, 0.25f);
  return r;
}

TEST(ResidualCodec, RoundTripIsBitExact) {
  const CompressionResiduals in = sample();
  const std::vector<uint8_t> bytes = encodeResiduals(in);
  // Header 12 + specs and names + 8-byte counts + 4 bytes per value.
  EXPECT_EQ(bytes.size(), 12u + (4 + 8 + 4) + (4 + 9 + 4) + (4 + 10 + 8 + 16) + (4 + 5 + 8) +
                              (4 + 9 + 8 + 4 * 1009));
  CompressionResiduals out;
  ASSERT_TRUE(decodeResiduals(bytes.data(), bytes.size(), &out).isOk());
  ASSERT_EQ(out.size(), 2u);
  const auto& w = out["topk:0.01"]["fc1.weight"];
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[0], 1.5f);
  EXPECT_TRUE(std::signbit(w[1]));
  EXPECT_EQ(w[2], std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(w[3], 3e38f);
  EXPECT_TRUE(out["topk:0.01"]["empty"].empty());
  EXPECT_EQ(out["int8:256"]["conv.bias"], std::vector<float>(1009, 0.25f));
  EXPECT_EQ(encodeResiduals(out), bytes);  // canonical: same residuals, same bytes
}

TEST(ResidualCodec, NothingIsTwelveBytes) {
  const std::vector<uint8_t> bytes = encodeResiduals({});
  EXPECT_EQ(bytes.size(), 12u);
  CompressionResiduals out = sample();
  ASSERT_TRUE(decodeResiduals(bytes.data(), bytes.size(), &out).isOk());
  EXPECT_TRUE(out.empty());
}

TEST(ResidualCodec, CorruptBytesAreErrorsAndLeaveTheOutputAlone) {
  const std::vector<uint8_t> good = encodeResiduals(sample());
  auto expectBad = [](std::vector<uint8_t> bytes, const std::string& needle) {
    CompressionResiduals out;
    out["keep"]["x"] = {7.0f};
    Status st = decodeResiduals(bytes.data(), bytes.size(), &out);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
    EXPECT_EQ(out["keep"]["x"], std::vector<float>{7.0f});
  };
  expectBad({}, "no 'TRES' header");
  std::vector<uint8_t> b = good;
  b[0] = 'X';
  expectBad(b, "no 'TRES' header");
  b = good;
  b[4] = 2;
  expectBad(b, "version 2");
  expectBad(std::vector<uint8_t>(good.begin(), good.begin() + 11), "truncated header");
  expectBad(std::vector<uint8_t>(good.begin(), good.begin() + 20), "truncated spec");
  // The last tensor ("fc1.weight", names in byte order) loses a byte of its values.
  expectBad(std::vector<uint8_t>(good.begin(), good.end() - 1), "past the end");
  b = good;
  b.push_back(0);
  expectBad(b, "trailing bytes");
  // A count far past the end (the first tensor's count: after header, spec, n, name).
  b = good;
  // Locate the 8-byte count of "conv.bias" (first spec in map order: "int8:256").
  const size_t at = 12 + (4 + 8) + 4 + (4 + 9);
  for (int i = 0; i < 8; ++i) b[at + i] = 0xff;
  expectBad(b, "past the end");
}

}  // namespace
}  // namespace tutti
