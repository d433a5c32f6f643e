#include "compression/int8_compressor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "compression/packed_format.h"
#include "tests/compression/compression_test_util.h"

namespace tutti {
namespace {

using testing::randomGradient;

// The documented bound, per element of a block with maximum magnitude m.
float int8Bound(float m) {
  const float scale = m / 127.0f;
  return scale * (0.5f + 127.0f * std::exp2(-21.0f));
}

class Int8Blocks : public ::testing::TestWithParam<uint32_t> {};

TEST_P(Int8Blocks, RoundTripWithinHalfAScale) {
  const uint32_t block = GetParam();
  for (size_t count : {size_t{0}, size_t{1}, size_t{255}, size_t{256}, size_t{257}, size_t{5003}}) {
    Int8Compressor comp(block);
    const std::vector<float> g = randomGradient(count, static_cast<uint32_t>(count * 31 + block));
    std::vector<uint8_t> packed;
    ASSERT_TRUE(comp.compress(g.data(), count, DataType::kFloat32, "w", &packed).isOk());
    ASSERT_EQ(packed.size(), comp.packedBytes(count));
    ASSERT_EQ(packed.size(), 16 + 4 * ((count + block - 1) / block) + count);
    std::vector<float> out(count);
    ASSERT_TRUE(comp.decompress(packed.data(), packed.size(), out.data(), count, DataType::kFloat32)
                    .isOk());
    const std::vector<float>& residual = comp.residuals().at("w");
    for (size_t b = 0; b * block < count; ++b) {
      const size_t begin = b * block;
      const size_t end = std::min(count, begin + block);
      float m = 0.0f;
      for (size_t i = begin; i < end; ++i) m = std::max(m, std::fabs(g[i]));
      for (size_t i = begin; i < end; ++i) {
        ASSERT_LE(std::fabs(out[i] - g[i]), int8Bound(m)) << "count " << count << " i " << i;
        // Error feedback keeps exactly what was not sent (up to one rounding).
        ASSERT_NEAR(residual[i], g[i] - out[i], std::fabs(g[i]) * 1e-6f + 1e-30f);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, Int8Blocks, ::testing::Values(1u, 7u, 256u, 512u, 100000u));

// quantise() (one ring hop) writes compress()'s format and leaves exactly
// what the chunk does not carry: decoded + left == the values before.
TEST(Int8Compressor, QuantiseLeavesWhatTheChunkDoesNotCarry) {
  Int8Compressor comp(64);
  EXPECT_EQ(comp.exchangeKind(), ExchangeKind::kQuantisedRing);
  const std::vector<float> before = randomGradient(1000, 11);
  std::vector<float> acc = before;
  std::vector<uint8_t> packed(comp.packedBytes(1000));
  ASSERT_TRUE(comp.quantise(acc.data(), 1000, packed.data()).isOk());
  std::vector<float> decoded(1000, 0.0f);
  ASSERT_TRUE(comp.accumulate(packed.data(), packed.size(), decoded.data(), 1000).isOk());
  for (size_t i = 0; i < 1000; ++i) {
    EXPECT_FLOAT_EQ(decoded[i] + acc[i], before[i]) << i;
  }
  // The residual slot for the ring is the one compress() uses.
  std::vector<float>* kept = comp.residualFor("t", 1000);
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(kept->size(), 1000u);
}

TEST(Int8Compressor, ZeroAndNonFiniteBlocks) {
  Int8Compressor comp(4);
  std::vector<float> g = {0,
                          0,
                          -0.0f,
                          0,  // zeros
                          1,
                          std::nanf(""),
                          2,
                          3,  // NaN
                          1,
                          2,
                          std::numeric_limits<float>::infinity(),
                          4,  // inf
                          1e-35f,
                          -2e-35f,
                          0,
                          0,  // tiny
                          -1,
                          0.5f,
                          0.25f,
                          127};
  std::vector<uint8_t> packed;
  ASSERT_TRUE(comp.compress(g.data(), g.size(), DataType::kFloat32, "t", &packed).isOk());
  std::vector<float> out(g.size());
  ASSERT_TRUE(
      comp.decompress(packed.data(), packed.size(), out.data(), g.size(), DataType::kFloat32)
          .isOk());
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(out[i], 0.0f);
  for (size_t i = 4; i < 12; ++i) EXPECT_TRUE(std::isnan(out[i])) << i;
  for (size_t i = 12; i < 16; ++i) EXPECT_EQ(out[i], 0.0f);
  EXPECT_EQ(out[16], -1.0f);
  EXPECT_EQ(out[19], 127.0f);
  const std::vector<float>& r = comp.residuals().at("t");
  for (size_t i = 4; i < 12; ++i) EXPECT_EQ(r[i], 0.0f) << "non-finite residual is dropped";
  EXPECT_EQ(r[12], 1e-35f);  // too tiny to send: kept
}

TEST(Int8Compressor, CorruptChunksAreErrors) {
  Int8Compressor comp(16);
  const std::vector<float> g = randomGradient(100, 5);
  std::vector<uint8_t> packed;
  ASSERT_TRUE(comp.compress(g.data(), g.size(), DataType::kFloat32, "t", &packed).isOk());
  std::vector<float> dense(100, 0.0f);
  for (size_t n = 0; n < packed.size(); ++n) {
    EXPECT_FALSE(comp.accumulate(packed.data(), n, dense.data(), 100).isOk()) << n;
  }
  EXPECT_FALSE(comp.accumulate(packed.data(), packed.size(), dense.data(), 101).isOk());
  Int8Compressor other(32);
  const Status st = other.accumulate(packed.data(), packed.size(), dense.data(), 100);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("different compression settings"), std::string::npos) << st.message();
  std::vector<uint8_t> bad = packed;
  bad[1] = 9;  // version
  EXPECT_FALSE(comp.accumulate(bad.data(), bad.size(), dense.data(), 100).isOk());
}

TEST(Int8Compressor, SixteenBitInputs) {
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat64}) {
    Int8Compressor comp(8);
    std::vector<float> f = randomGradient(64, 9, 0.0f);
    for (float& x : f) x = std::clamp(x, -100.0f, 100.0f);
    std::vector<uint8_t> input(f.size() * dataTypeSize(dtype));
    fromFloat32(f.data(), f.size(), dtype, input.data());
    std::vector<float> exact(f.size());
    toFloat32(input.data(), f.size(), dtype, exact.data());
    std::vector<uint8_t> packed;
    ASSERT_TRUE(comp.compress(input.data(), f.size(), dtype, "t", &packed).isOk());
    std::vector<float> out(f.size());
    ASSERT_TRUE(comp.accumulate(packed.data(), packed.size(), out.data(), f.size()).isOk());
    for (size_t b = 0; b < 8; ++b) {
      float m = 0.0f;
      for (size_t i = 8 * b; i < 8 * b + 8; ++i) m = std::max(m, std::fabs(exact[i]));
      for (size_t i = 8 * b; i < 8 * b + 8; ++i) {
        ASSERT_LE(std::fabs(out[i] - exact[i]), int8Bound(m)) << dataTypeName(dtype);
      }
    }
  }
}

}  // namespace
}  // namespace tutti
