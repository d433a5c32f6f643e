#include "ops/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tests/ops/test_values.h"

namespace tutti {
namespace {

using testing::allDataTypes;
using testing::allReduceOps;
using testing::getValue;
using testing::setValue;

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(HalfTest, KnownValues) {
  EXPECT_EQ(floatToHalf(0.0f), 0x0000);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);  // largest finite
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);  // below the halfway point to 65536
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);  // tie rounds to even = inf
  EXPECT_EQ(floatToHalf(1e10f), 0x7c00);
  EXPECT_EQ(floatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00);
  const uint16_t nan = floatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_TRUE(std::isnan(halfToFloat(0x7e00)));
  EXPECT_TRUE(std::isinf(halfToFloat(0x7c00)));
  // Subnormals: 2^-24 is the smallest; 2^-25 ties to even (0); 3*2^-25 -> 2.
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -25)), 0x0002);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(halfToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(halfToFloat(0x8001), -std::ldexp(1.0f, -24));
  // Ties between normals: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
}

TEST(HalfTest, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = halfToFloat(static_cast<uint16_t>(h));
    if ((h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0) {
      EXPECT_TRUE(std::isnan(f)) << h;
      continue;
    }
    ASSERT_EQ(floatToHalf(f), h) << "half 0x" << std::hex << h;
  }
}

#if defined(__FLT16_MAX__)
// The compiler's own conversion rounds to nearest even; compare with it.
TEST(HalfTest, MatchesCompilerFloat16OnRandomFloats) {
  std::mt19937 gen(42);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    // Exponents around the half range, so that normals, subnormals and
    // overflow are all hit.
    uint32_t u = bits(gen);
    u = (u & 0x807fffffu) | ((100u + (u >> 23) % 50u) << 23);
    const float f = floatOf(u);
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t expected;
    std::memcpy(&expected, &h, 2);
    ASSERT_EQ(floatToHalf(f), expected) << "float bits 0x" << std::hex << u;
    ASSERT_EQ(bitsOf(halfToFloat(expected)), bitsOf(static_cast<float>(h)));
  }
}
#endif

TEST(Bfloat16Test, KnownValuesAndRounding) {
  EXPECT_EQ(floatToBfloat16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBfloat16(-0.0f), 0x8000);
  EXPECT_EQ(floatToBfloat16(floatOf(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(floatToBfloat16(floatOf(0x3f818000u)), 0x3f82);  // tie -> even
  EXPECT_EQ(floatToBfloat16(floatOf(0x3f808001u)), 0x3f81);
  EXPECT_EQ(floatToBfloat16(floatOf(0x7f7fffffu)), 0x7f80);  // overflow -> inf
  EXPECT_EQ(floatToBfloat16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(floatToBfloat16(floatOf(0x00000001u)), 0x0000);  // subnormal rounds down
  EXPECT_EQ(floatToBfloat16(floatOf(0x00018000u)), 0x0002);  // subnormal tie -> even
  // A NaN whose payload is only in the low bits must stay a NaN.
  const uint16_t nan = floatToBfloat16(floatOf(0x7f800001u));
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(nan)));
  EXPECT_EQ(bfloat16ToFloat(0x4049), floatOf(0x40490000u));
}

TEST(Bfloat16Test, EveryBfloat16RoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bfloat16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBfloat16(f))));
      continue;
    }
    ASSERT_EQ(floatToBfloat16(f), b) << b;
  }
}

// Reduces two "ranks" with every dtype x op, over a count that is not a
// multiple of the float16/bfloat16 block (256) nor of any vector width.
TEST(ReduceTest, EveryDtypeAndOpIsExact) {
  for (DataType t : allDataTypes()) {
    for (ReduceOp op : allReduceOps()) {
      for (size_t count : {0u, 1u, 7u, 1009u}) {
        const size_t esize = dataTypeSize(t);
        std::vector<uint8_t> a(count * esize + 1), b(count * esize + 1);
        for (size_t i = 0; i < count; ++i) {
          setValue(a.data(), t, i, testing::inputValue(t, op, 0, i));
          setValue(b.data(), t, i, testing::inputValue(t, op, 1, i));
        }
        a.back() = 0xab;
        reduceInto(a.data(), b.data(), count, t, op);
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(getValue(a.data(), t, i), testing::expectedValue(t, op, 2, i))
              << dataTypeName(t) << " " << reduceOpName(op) << " count " << count << " i " << i;
        }
        EXPECT_EQ(a.back(), 0xab) << "wrote past the end";
      }
    }
  }
}

TEST(ReduceTest, IntegersWrapAround) {
  int32_t a[2] = {std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
  const int32_t b[2] = {1, -1};
  reduceInto(a, b, 2, DataType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(a[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(a[1], std::numeric_limits<int32_t>::max());
  int16_t c = 300;
  const int16_t d = 300;  // 90000 mod 2^16 = 24464
  reduceInto(&c, &d, 1, DataType::kInt16, ReduceOp::kProduct);
  EXPECT_EQ(c, 24464);
  uint8_t e = 200;
  const uint8_t f = 100;
  reduceInto(&e, &f, 1, DataType::kUInt8, ReduceOp::kSum);
  EXPECT_EQ(e, 44);
}

TEST(ReduceTest, BoolTreatsNonZeroAsTrue) {
  uint8_t a[4] = {2, 0, 1, 0};
  const uint8_t b[4] = {1, 7, 0, 0};
  reduceInto(a, b, 4, DataType::kBool, ReduceOp::kProduct);
  EXPECT_EQ(std::vector<uint8_t>(a, a + 4), (std::vector<uint8_t>{1, 0, 0, 0}));
  uint8_t c[4] = {2, 0, 1, 0};
  reduceInto(c, b, 4, DataType::kBool, ReduceOp::kSum);
  EXPECT_EQ(std::vector<uint8_t>(c, c + 4), (std::vector<uint8_t>{1, 1, 1, 0}));
}

TEST(ReduceTest, HalfSumRoundsOnce) {
  // 2048 + 1 is not representable in float16: rounds to even (2048); 2048 + 3
  // rounds to 2052.
  uint16_t a[2] = {floatToHalf(2048), floatToHalf(2048)};
  const uint16_t b[2] = {floatToHalf(1), floatToHalf(3)};
  reduceInto(a, b, 2, DataType::kFloat16, ReduceOp::kSum);
  EXPECT_EQ(halfToFloat(a[0]), 2048.0f);
  EXPECT_EQ(halfToFloat(a[1]), 2052.0f);
}

// The bulk paths (vectorised, or F16C where the CPU has it) must round
// exactly like the scalar conversions, on arbitrary finite inputs.
TEST(ReduceTest, HalfAndBfloat16BulkPathsMatchScalarConversions) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffff);
  const size_t count = 4099;
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    const bool half = t == DataType::kFloat16;
    auto toF = [&](uint16_t v) { return half ? halfToFloat(v) : bfloat16ToFloat(v); };
    auto fromF = [&](float f) { return half ? floatToHalf(f) : floatToBfloat16(f); };
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMax}) {
      std::vector<uint16_t> a(count), b(count), expected(count);
      for (size_t i = 0; i < count; ++i) {
        do {
          a[i] = static_cast<uint16_t>(bits(gen));
          b[i] = static_cast<uint16_t>(bits(gen));
        } while (std::isnan(toF(a[i])) || std::isnan(toF(b[i])));
        const float x = toF(a[i]), y = toF(b[i]);
        const float r = op == ReduceOp::kSum       ? x + y
                        : op == ReduceOp::kProduct ? x * y
                                                   : (x < y ? y : x);
        expected[i] = fromF(r);
      }
      reduceInto(a.data(), b.data(), count, t, op);
      for (size_t i = 0; i < count; ++i) {
        const float got = toF(a[i]);
        if (std::isnan(got)) {  // inf - inf and 0 * inf: any NaN will do
          ASSERT_TRUE(std::isnan(toF(expected[i]))) << i;
        } else {
          ASSERT_EQ(a[i], expected[i]) << dataTypeName(t) << " " << reduceOpName(op) << " " << i;
        }
      }
    }
    std::vector<uint16_t> c(count), expected(count);
    for (size_t i = 0; i < count; ++i) {
      c[i] = fromF(static_cast<float>(i % 300) * 0.75f);
      expected[i] = fromF(toF(c[i]) * 0.3f);
    }
    scaleInPlace(c.data(), count, t, 0.3f);
    EXPECT_EQ(c, expected) << dataTypeName(t);
  }
}

TEST(ScaleTest, Floats) {
  for (DataType t :
       {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
    const size_t count = 1001;
    std::vector<uint8_t> buf(count * dataTypeSize(t));
    for (size_t i = 0; i < count; ++i) setValue(buf.data(), t, i, static_cast<double>(i % 64) - 32);
    scaleInPlace(buf.data(), count, t, 0.25);
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(getValue(buf.data(), t, i), (static_cast<double>(i % 64) - 32) * 0.25)
          << dataTypeName(t) << " " << i;
    }
  }
}

TEST(ScaleTest, IntegersTruncateTowardZeroAndSaturate) {
  int8_t a[6] = {100, -100, 3, 5, -3, 7};
  scaleInPlace(a, 2, DataType::kInt8, 2.0);
  EXPECT_EQ(a[0], 127);
  EXPECT_EQ(a[1], -128);
  scaleInPlace(a + 2, 4, DataType::kInt8, 0.5);  // 1.5 2.5 -1.5 3.5, as Horovod: truncated
  EXPECT_EQ(a[2], 1);
  EXPECT_EQ(a[3], 2);
  EXPECT_EQ(a[4], -1);
  EXPECT_EQ(a[5], 3);
  uint8_t u[2] = {10, 200};
  scaleInPlace(u, 1, DataType::kUInt8, -1.0);
  EXPECT_EQ(u[0], 0);
  scaleInPlace(u + 1, 1, DataType::kUInt8, 2.0);
  EXPECT_EQ(u[1], 255);
  int64_t big[3] = {std::numeric_limits<int64_t>::max() / 2, -(int64_t{1} << 62), 1000};
  scaleInPlace(big, 3, DataType::kInt64, 4.0);
  EXPECT_EQ(big[0], std::numeric_limits<int64_t>::max());
  EXPECT_EQ(big[1], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(big[2], 4000);
  int32_t i32[2] = {8, -8};
  scaleInPlace(i32, 2, DataType::kInt32, 1.0 / 3.0);  // 2.67 -> 2, -2.67 -> -2
  EXPECT_EQ(i32[0], 2);
  EXPECT_EQ(i32[1], -2);
  uint8_t flags[2] = {0, 1};
  scaleInPlace(flags, 2, DataType::kBool, 0.0);
  EXPECT_EQ(flags[1], 1);
}

// An average: the sum divided by the number of ranks, truncated toward zero.
TEST(ScaleTest, IntegerDivisorTruncatesAndKeepsExactMultiples) {
  int32_t s[6] = {75, -75, 49, -49, 98, 7};
  scaleInPlace(s, 2, DataType::kInt32, 1.0, 2);
  EXPECT_EQ(s[0], 37);
  EXPECT_EQ(s[1], -37);
  // 49 * (1.0 / 49) is 0.99999999999999989 in float64; 49 / 49 is 1.
  scaleInPlace(s + 2, 3, DataType::kInt32, 1.0, 49);
  EXPECT_EQ(s[2], 1);
  EXPECT_EQ(s[3], -1);
  EXPECT_EQ(s[4], 2);
  scaleInPlace(s + 5, 1, DataType::kInt32, 3.0, 2);  // postscale 3 of an average over 2
  EXPECT_EQ(s[5], 10);
  int64_t big = (int64_t{1} << 53) + 2;  // divisor only: exact in float64 here
  scaleInPlace(&big, 1, DataType::kInt64, 1.0, 2);
  EXPECT_EQ(big, (int64_t{1} << 52) + 1);
  float f[2] = {3.0f, -1.0f};
  scaleInPlace(f, 2, DataType::kFloat32, 3.0, 2);
  EXPECT_EQ(f[0], 4.5f);
  EXPECT_EQ(f[1], -1.5f);
}

}  // namespace
}  // namespace tutti
