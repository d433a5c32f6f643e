#include "compression/cast_compressor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tests/compression/compression_test_util.h"

namespace tutti {
namespace {

struct CastCase {
  DataType wire;
  double epsilon;    // relative bound of one rounding: 2^-11 (fp16), 2^-8 (bf16)
  float min_normal;  // smallest normal of the wire type
  float max_value;   // largest value tested (finite in the wire type)
};

class CastCompressorTest : public ::testing::TestWithParam<CastCase> {};

// Values spread log-uniformly over the wire type's normal range, both signs.
std::vector<double> normalValues(const CastCase& c, size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> lg(std::log2(c.min_normal), std::log2(c.max_value));
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (i % 2 ? -1.0 : 1.0) * std::exp2(lg(gen));
  return v;
}

TEST_P(CastCompressorTest, Float32RoundTripWithinEpsilon) {
  const CastCase c = GetParam();
  CastCompressor comp(c.wire);
  const std::vector<double> values = normalValues(c, 20000, 1);
  std::vector<float> in(values.begin(), values.end());
  std::vector<uint8_t> wire;
  ASSERT_TRUE(comp.compress(in.data(), in.size(), DataType::kFloat32, "t", &wire).isOk());
  EXPECT_EQ(wire.size(), 2 * in.size());
  std::vector<float> out(in.size());
  ASSERT_TRUE(
      comp.decompress(wire.data(), wire.size(), out.data(), out.size(), DataType::kFloat32).isOk());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_LE(std::fabs(out[i] - in[i]), c.epsilon * std::fabs(in[i])) << "value " << in[i];
  }
}

TEST_P(CastCompressorTest, Float64RoundTripWithinEpsilon) {
  const CastCase c = GetParam();
  CastCompressor comp(c.wire);
  const std::vector<double> in = normalValues(c, 5000, 2);
  std::vector<uint8_t> wire;
  ASSERT_TRUE(comp.compress(in.data(), in.size(), DataType::kFloat64, "t", &wire).isOk());
  std::vector<double> out(in.size());
  ASSERT_TRUE(
      comp.decompress(wire.data(), wire.size(), out.data(), out.size(), DataType::kFloat64).isOk());
  const double bound = c.epsilon + std::exp2(-24);  // float64 -> float32 first
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_LE(std::fabs(out[i] - in[i]), bound * std::fabs(in[i])) << "value " << in[i];
  }
}

TEST_P(CastCompressorTest, SpecialValues) {
  const CastCase c = GetParam();
  CastCompressor comp(c.wire);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> in = {0.0f, -0.0f, inf, -inf, std::nanf(""), 1.0f};
  std::vector<uint8_t> wire;
  ASSERT_TRUE(comp.compress(in.data(), in.size(), DataType::kFloat32, "t", &wire).isOk());
  std::vector<float> out(in.size());
  ASSERT_TRUE(
      comp.decompress(wire.data(), wire.size(), out.data(), out.size(), DataType::kFloat32).isOk());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_TRUE(std::signbit(out[1]));
  EXPECT_EQ(out[2], inf);
  EXPECT_EQ(out[3], -inf);
  EXPECT_TRUE(std::isnan(out[4]));
  EXPECT_EQ(out[5], 1.0f);
}

TEST_P(CastCompressorTest, KindAndDtypes) {
  CastCompressor comp(GetParam().wire);
  EXPECT_EQ(comp.exchangeKind(), ExchangeKind::kAllreduce);
  EXPECT_EQ(comp.wireDType(DataType::kFloat32), GetParam().wire);
  EXPECT_TRUE(comp.appliesTo(DataType::kFloat32));
  EXPECT_TRUE(comp.appliesTo(DataType::kFloat64));
  EXPECT_FALSE(comp.appliesTo(DataType::kFloat16));
  EXPECT_FALSE(comp.appliesTo(DataType::kBFloat16));
  EXPECT_TRUE(comp.residuals().empty());
}

TEST_P(CastCompressorTest, WrongSizeIsAnError) {
  CastCompressor comp(GetParam().wire);
  std::vector<uint8_t> wire(7);
  std::vector<float> out(4);
  const Status st = comp.decompress(wire.data(), wire.size(), out.data(), 4, DataType::kFloat32);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

TEST_P(CastCompressorTest, UnalignedWireBuffer) {
  CastCompressor comp(GetParam().wire);
  std::vector<float> in = {1.5f, -2.25f, 3.0f};
  std::vector<uint8_t> wire;
  ASSERT_TRUE(comp.compress(in.data(), 3, DataType::kFloat32, "t", &wire).isOk());
  std::vector<uint8_t> shifted(wire.size() + 1);
  std::copy(wire.begin(), wire.end(), shifted.begin() + 1);
  std::vector<float> out(3);
  ASSERT_TRUE(
      comp.decompress(shifted.data() + 1, wire.size(), out.data(), 3, DataType::kFloat32).isOk());
  EXPECT_EQ(out, in);
}

INSTANTIATE_TEST_SUITE_P(
    Wire, CastCompressorTest,
    ::testing::Values(CastCase{DataType::kFloat16, std::exp2(-11), std::exp2(-14.0f), 65504.0f},
                      CastCase{DataType::kBFloat16, std::exp2(-8), std::exp2(-126.0f), 1e38f}),
    [](const ::testing::TestParamInfo<CastCase>& info) {
      return std::string(dataTypeName(info.param.wire));
    });

TEST(CastCompressorOverflow, Fp16OverflowsToInfinity) {
  CastCompressor comp(DataType::kFloat16);
  std::vector<float> in = {70000.0f, -1e6f};
  std::vector<uint8_t> wire;
  ASSERT_TRUE(comp.compress(in.data(), 2, DataType::kFloat32, "t", &wire).isOk());
  std::vector<float> out(2);
  ASSERT_TRUE(comp.decompress(wire.data(), wire.size(), out.data(), 2, DataType::kFloat32).isOk());
  EXPECT_TRUE(std::isinf(out[0]) && out[0] > 0);
  EXPECT_TRUE(std::isinf(out[1]) && out[1] < 0);
}

}  // namespace
}  // namespace tutti
