#include "compression/topk_compressor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "compression/packed_format.h"
#include "ops/reduce.h"
#include "tests/compression/compression_test_util.h"

namespace tutti {
namespace {

using testing::randomGradient;

// Decodes a chunk into (index, value) pairs, for checks.
std::vector<std::pair<uint32_t, float>> pairsOf(const std::vector<uint8_t>& packed) {
  compression_detail::PackedHeader h;
  EXPECT_TRUE(compression_detail::readPackedHeader(packed.data(), packed.size(), &h));
  const size_t k = h.param;
  std::vector<std::pair<uint32_t, float>> pairs(k);
  const uint8_t* idx = packed.data() + compression_detail::kPackedHeaderBytes;
  const uint8_t* val = idx + 4 * k;
  for (size_t j = 0; j < k; ++j) {
    uint16_t half;
    std::memcpy(&pairs[j].first, idx + 4 * j, 4);
    std::memcpy(&half, val + 2 * j, 2);
    pairs[j].second = halfToFloat(half);
  }
  return pairs;
}

TEST(TopKCompressor, SelectCount) {
  EXPECT_EQ(TopKCompressor::selectCount(0.01, 0), 0u);
  EXPECT_EQ(TopKCompressor::selectCount(0.01, 1), 1u);
  EXPECT_EQ(TopKCompressor::selectCount(0.01, 99), 1u);
  EXPECT_EQ(TopKCompressor::selectCount(0.01, 101), 2u);
  EXPECT_EQ(TopKCompressor::selectCount(0.07, 100), 7u);  // 0.07 * 100 = 7.000000000000001
  EXPECT_EQ(TopKCompressor::selectCount(0.5, 3), 2u);
  EXPECT_EQ(TopKCompressor::selectCount(1.0, 5), 5u);
  EXPECT_EQ(TopKCompressor::selectCount(0.001, 1000000), 1000u);
}

class TopKCounts : public ::testing::TestWithParam<size_t> {};

TEST_P(TopKCounts, KeepsExactlyTheKLargestMagnitudes) {
  const size_t count = GetParam();
  for (double ratio : {0.01, 0.1, 0.5, 1.0}) {
    TopKCompressor comp(ratio);
    const std::vector<float> g = randomGradient(count, static_cast<uint32_t>(count + 7));
    std::vector<uint8_t> packed;
    ASSERT_TRUE(comp.compress(g.data(), count, DataType::kFloat32, "w", &packed).isOk());
    const size_t k = TopKCompressor::selectCount(ratio, count);
    ASSERT_EQ(packed.size(), comp.packedBytes(count));
    const auto pairs = pairsOf(packed);
    ASSERT_EQ(pairs.size(), k);

    // Reference: sort indices by magnitude (descending), lower index first on ties.
    std::vector<uint32_t> order(count);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return std::fabs(g[a]) > std::fabs(g[b]); });
    std::vector<uint32_t> expected(order.begin(), order.begin() + static_cast<ptrdiff_t>(k));
    std::sort(expected.begin(), expected.end());
    for (size_t j = 0; j < k; ++j) {
      ASSERT_EQ(pairs[j].first, expected[j]) << "ratio " << ratio << " pair " << j;
      // First step: the values are the inputs rounded to float16.
      ASSERT_EQ(pairs[j].second, halfToFloat(floatToHalf(g[pairs[j].first])));
    }
    // Residual: the input, minus what was sent of the sent entries.
    const std::vector<float>& r = comp.residuals().at("w");
    std::vector<float> expected_r = g;
    for (uint32_t i : expected) expected_r[i] = g[i] - halfToFloat(floatToHalf(g[i]));
    ASSERT_EQ(r, expected_r);
  }
}

INSTANTIATE_TEST_SUITE_P(Counts, TopKCounts, ::testing::Values(0, 1, 2, 13, 100, 1009, 65537));

TEST(TopKCompressor, TiesGoToLowerIndices) {
  TopKCompressor comp(0.3);
  std::vector<float> g(20);
  for (size_t i = 0; i < g.size(); ++i) g[i] = (i % 2 ? -1.0f : 1.0f);
  g[17] = 2.0f;  // one clear winner, then 5 of the 19 tied ones
  std::vector<uint8_t> packed;
  ASSERT_TRUE(comp.compress(g.data(), g.size(), DataType::kFloat32, "t", &packed).isOk());
  const auto pairs = pairsOf(packed);
  ASSERT_EQ(pairs.size(), 6u);
  const std::vector<uint32_t> expected = {0, 1, 2, 3, 4, 17};
  for (size_t j = 0; j < pairs.size(); ++j) EXPECT_EQ(pairs[j].first, expected[j]);
}

TEST(TopKCompressor, NanAndInfinityAreSent) {
  TopKCompressor comp(0.2);
  std::vector<float> g(10, 0.5f);
  g[3] = std::nanf("");
  g[8] = -std::numeric_limits<float>::infinity();
  std::vector<uint8_t> packed;
  ASSERT_TRUE(comp.compress(g.data(), g.size(), DataType::kFloat32, "t", &packed).isOk());
  const auto pairs = pairsOf(packed);
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[0].first, 3u);
  EXPECT_TRUE(std::isnan(pairs[0].second));
  EXPECT_EQ(pairs[1].first, 8u);
  EXPECT_TRUE(std::isinf(pairs[1].second));
  for (float r : comp.residuals().at("t")) EXPECT_TRUE(std::isfinite(r));
}

TEST(TopKCompressor, SixteenBitAndFloat64Inputs) {
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat64}) {
    TopKCompressor comp(0.25);
    std::vector<double> values = {0.5, -4.0, 0.25, 2.0, -0.125, 1.0, 0.0, 3.0};
    std::vector<uint8_t> input(values.size() * dataTypeSize(dtype));
    if (dtype == DataType::kFloat64) {
      std::memcpy(input.data(), values.data(), input.size());
    } else {
      std::vector<float> f(values.begin(), values.end());
      fromFloat32(f.data(), f.size(), dtype, input.data());
    }
    std::vector<uint8_t> packed;
    ASSERT_TRUE(comp.compress(input.data(), values.size(), dtype, "t", &packed).isOk());
    std::vector<uint8_t> output(input.size());
    ASSERT_TRUE(
        comp.decompress(packed.data(), packed.size(), output.data(), values.size(), dtype).isOk());
    std::vector<float> dense(values.size());
    toFloat32(output.data(), values.size(), dtype, dense.data());
    EXPECT_EQ(dense, (std::vector<float>{0, -4.0f, 0, 0, 0, 0, 0, 3.0f})) << dataTypeName(dtype);
  }
}

TEST(TopKCompressor, Float16ValuesSaturateAndLeaveTheRestInTheResidual) {
  TopKCompressor comp(0.5);
  const std::vector<float> g = {1e6f, 0.0f, -1e6f, 0.0f, 1.0f + 1e-4f, 0.0f};
  std::vector<uint8_t> packed;
  ASSERT_TRUE(comp.compress(g.data(), g.size(), DataType::kFloat32, "big", &packed).isOk());
  EXPECT_EQ(packed.size(), 16u + 3 * 6);
  const auto pairs = pairsOf(packed);
  ASSERT_EQ(pairs.size(), 3u);
  EXPECT_EQ(pairs[0], std::make_pair(0u, 65504.0f));
  EXPECT_EQ(pairs[1], std::make_pair(2u, -65504.0f));
  EXPECT_EQ(pairs[2], std::make_pair(4u, 1.0f));
  const std::vector<float>& r = comp.residuals().at("big");
  EXPECT_EQ(r[0], 1e6f - 65504.0f);
  EXPECT_EQ(r[2], -1e6f + 65504.0f);
  EXPECT_EQ(r[4], (1.0f + 1e-4f) - 1.0f);
}

TEST(TopKCompressor, CorruptChunksAreErrors) {
  TopKCompressor comp(0.1);
  const std::vector<float> g = randomGradient(100, 3);
  std::vector<uint8_t> packed;
  ASSERT_TRUE(comp.compress(g.data(), g.size(), DataType::kFloat32, "t", &packed).isOk());
  std::vector<float> dense(100, 0.0f);
  ASSERT_TRUE(comp.accumulate(packed.data(), packed.size(), dense.data(), 100).isOk());

  // Every truncation, a wrong count, an index out of range, out of order.
  for (size_t n = 0; n < packed.size(); ++n) {
    EXPECT_FALSE(comp.accumulate(packed.data(), n, dense.data(), 100).isOk()) << n;
  }
  EXPECT_FALSE(comp.accumulate(packed.data(), packed.size(), dense.data(), 99).isOk());
  std::vector<uint8_t> bad = packed;
  const uint32_t big = 100;
  std::memcpy(bad.data() + compression_detail::kPackedHeaderBytes + 4 * 9, &big, 4);
  EXPECT_FALSE(comp.accumulate(bad.data(), bad.size(), dense.data(), 100).isOk());
  bad = packed;
  const uint32_t zero = 0;
  std::memcpy(bad.data() + compression_detail::kPackedHeaderBytes + 4 * 5, &zero, 4);
  EXPECT_FALSE(comp.accumulate(bad.data(), bad.size(), dense.data(), 100).isOk());
  bad = packed;
  bad[0] = compression_detail::kPackedInt8;
  EXPECT_FALSE(comp.accumulate(bad.data(), bad.size(), dense.data(), 100).isOk());
  bad = packed;
  const uint32_t huge_k = 1u << 30;
  std::memcpy(bad.data() + 4, &huge_k, 4);
  EXPECT_FALSE(comp.accumulate(bad.data(), bad.size(), dense.data(), 100).isOk());
}

// Sparsity warm-up: k follows r_n = 0.25 (ratio / 0.25)^(n / N) per name,
// then ratio; the count restarts with a new shape; a restore ends it.
TEST(TopKCompressor, WarmupFallsExponentiallyPerName) {
  TopKCompressor comp(0.01, 4);
  EXPECT_EQ(comp.spec(), "topk:0.01:warmup=4");
  EXPECT_DOUBLE_EQ(comp.ratioAt(0), 0.25);
  EXPECT_NEAR(comp.ratioAt(2), 0.05, 1e-12);  // geometric midpoint of 0.25 and 0.01
  EXPECT_DOUBLE_EQ(comp.ratioAt(4), 0.01);
  EXPECT_DOUBLE_EQ(comp.ratioAt(1000), 0.01);
  const std::vector<float> g = randomGradient(1000, 5);
  std::vector<uint8_t> packed;
  for (uint64_t n = 0; n < 6; ++n) {
    ASSERT_TRUE(comp.compress(g.data(), g.size(), DataType::kFloat32, "a", &packed).isOk());
    EXPECT_EQ(packed.size(), comp.packedBytesAt(n, 1000)) << n;
    std::vector<float> dense(1000, 0.0f);
    ASSERT_TRUE(comp.accumulate(packed.data(), packed.size(), dense.data(), 1000).isOk());
  }
  EXPECT_EQ(packed.size(), comp.packedBytes(1000));  // 10 pairs after the warm-up
  // Another name, and the same name with a new shape, start at 25 %.
  ASSERT_TRUE(comp.compress(g.data(), 1000, DataType::kFloat32, "b", &packed).isOk());
  EXPECT_EQ(packed.size(), 16u + 6u * 250u);
  ASSERT_TRUE(comp.compress(g.data(), 400, DataType::kFloat32, "a", &packed).isOk());
  EXPECT_EQ(packed.size(), 16u + 6u * 100u);
  // A restore (every rank makes it) ends every warm-up.
  comp.setResiduals(comp.residuals());
  ASSERT_TRUE(comp.compress(g.data(), 1000, DataType::kFloat32, "c", &packed).isOk());
  EXPECT_EQ(packed.size(), comp.packedBytes(1000));
  // Without warm-up (and with ratio >= 0.25) nothing changes.
  EXPECT_DOUBLE_EQ(TopKCompressor(0.01).ratioAt(0), 0.01);
  EXPECT_DOUBLE_EQ(TopKCompressor(0.5, 10).ratioAt(0), 0.5);
}

}  // namespace
}  // namespace tutti
