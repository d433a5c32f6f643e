// Adasum (ops/algorithms/allreduce_adasum.h) over the in-memory transport on
// 1, 2, 4 and 8 ranks, against tests/support/adasum_reference.h (the same
// pairing evaluated in double without tutti): random vectors in float16,
// float32 and float64, single tensors and fused ones whose boundaries fall
// anywhere in the halving; orthogonal vectors add exactly, equal ones give
// themselves exactly, a zero vector leaves the other unchanged; sizes that are
// not powers of two and non-float dtypes are errors before anything is sent.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "ops/adasum_math.h"
#include "ops/algorithms/allreduce_adasum.h"
#include "tests/ops/test_values.h"
#include "tests/support/adasum_reference.h"
#include "tests/support/memory_transport.h"

namespace tutti {
namespace {

using testing::MemoryTransport;
using testing::MemoryWorld;

// Deterministic values in [-1, 1) per (rank, element).
double randomValue(int rank, size_t i, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(rank) * 0x632be59bd9b4e019ULL +
               i * 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 29;
  return static_cast<double>(x >> 11) / static_cast<double>(1ULL << 53) * 2 - 1;
}

// Tolerance relative to the largest expected magnitude: the library rounds
// to the dtype at every level, the reference does not.
double tolerance(DataType t) {
  switch (t) {
    case DataType::kFloat16:
      return 1e-2;
    case DataType::kFloat32:
      return 1e-5;
    default:
      return 1e-12;
  }
}

using ValueFn = std::function<double(int rank, size_t tensor, size_t i)>;

// Runs Adasum of tensors of `counts` elements on n ranks with inputs
// value(rank, tensor, i) (rounded to t) and checks every rank's result against
// the reference, within `tol` of the largest magnitude (0: exactly).
void checkAdasum(int n, DataType t, const std::vector<size_t>& counts, const ValueFn& value,
                 double tol) {
  const size_t esize = dataTypeSize(t);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  // Inputs, rounded to the dtype, and the reference per tensor.
  std::vector<std::vector<uint8_t>> inputs(n, std::vector<uint8_t>(total * esize + 1, 0xcd));
  std::vector<double> expected;
  for (size_t k = 0, at = 0; k < counts.size(); at += counts[k++]) {
    std::vector<std::vector<double>> per_rank(n);
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < counts[k]; ++i) {
        testing::setValue(inputs[r].data(), t, at + i, value(r, k, i));
        per_rank[r].push_back(testing::getValue(inputs[r].data(), t, at + i));
      }
    }
    const std::vector<double> ref = adasum_reference::tree(per_rank);
    expected.insert(expected.end(), ref.begin(), ref.end());
  }
  double scale = 0;
  for (double v : expected) scale = std::max(scale, std::fabs(v));
  MemoryWorld world(n);
  world.run([&](MemoryTransport& tr) {
    std::vector<uint8_t> buf = inputs[tr.rank()];
    std::vector<uint8_t> scratch;
    const Status st = allreduceAdasum(tr, buf.data(), counts, t, &scratch);
    ASSERT_TRUE(st.isOk()) << st.toString();
    for (size_t i = 0; i < total; ++i) {
      const double got = testing::getValue(buf.data(), t, i);
      if (tol == 0) {
        ASSERT_EQ(got, expected[i]) << "rank " << tr.rank() << " element " << i;
      } else {
        ASSERT_NEAR(got, expected[i], tol * std::max(1.0, scale))
            << "rank " << tr.rank() << " element " << i;
      }
    }
    ASSERT_EQ(buf.back(), 0xcd) << "wrote past the end";
  });
}

class AdasumTest : public ::testing::TestWithParam<std::tuple<int, DataType>> {};

TEST_P(AdasumTest, RandomVectorsMatchTheReference) {
  const int n = std::get<0>(GetParam());
  const DataType t = std::get<1>(GetParam());
  const ValueFn random = [](int r, size_t k, size_t i) { return randomValue(r, i, k + 1); };
  for (const std::vector<size_t>& counts :
       std::vector<std::vector<size_t>>{{1009}, {1}, {0}, {7}, {3, 0, 17, 64, 5, 1, 250}}) {
    SCOPED_TRACE(std::to_string(counts.size()) + " tensors, first " + std::to_string(counts[0]));
    checkAdasum(n, t, counts, random, tolerance(t));
  }
}

TEST_P(AdasumTest, OrthogonalVectorsAdd) {
  // Rank r is non-zero only on its own block of each tensor: every dot
  // product is 0, every coefficient 1, the result the exact sum.
  const int n = std::get<0>(GetParam());
  const DataType t = std::get<1>(GetParam());
  const size_t block = 5;
  const ValueFn own_block = [&](int r, size_t k, size_t i) {
    return i / block == static_cast<size_t>(r) ? static_cast<double>(i % block + k + 1) : 0.0;
  };
  checkAdasum(n, t, {block * n, block * n + 3}, own_block, 0);
}

TEST_P(AdasumTest, EqualVectorsGiveThemselves) {
  // a = b: the coefficients are exactly 1/2, so the result is the vector.
  const int n = std::get<0>(GetParam());
  const DataType t = std::get<1>(GetParam());
  const ValueFn same = [](int, size_t k, size_t i) { return randomValue(0, i, k + 7); };
  checkAdasum(n, t, {333, 64}, same, 0);
}

TEST_P(AdasumTest, ZeroVectorsLeaveTheOthers) {
  // Every rank but 0 sends zeros (a joined rank does): the result is rank 0's.
  const int n = std::get<0>(GetParam());
  const DataType t = std::get<1>(GetParam());
  const ValueFn only_rank0 = [](int r, size_t, size_t i) {
    return r == 0 ? randomValue(0, i, 3) : 0.0;
  };
  checkAdasum(n, t, {100}, only_rank0, 0);
}

std::string paramName(const ::testing::TestParamInfo<std::tuple<int, DataType>>& info) {
  return "size" + std::to_string(std::get<0>(info.param)) + "_" +
         dataTypeName(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(PowersOfTwo, AdasumTest,
                         ::testing::Combine(::testing::Values(1, 2, 4, 8),
                                            ::testing::Values(DataType::kFloat16,
                                                              DataType::kFloat32,
                                                              DataType::kFloat64)),
                         paramName);

TEST(AdasumErrors, OtherSizesFailOnEveryRankBeforeSending) {
  for (int n : {3, 5, 6}) {
    MemoryWorld world(n);
    world.run([&](MemoryTransport& tr) {
      std::vector<float> buf(16, 1.0f);
      std::vector<uint8_t> scratch;
      const Status st = allreduceAdasum(tr, buf.data(), {16}, DataType::kFloat32, &scratch);
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(st.message().find("power-of-two"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("has " + std::to_string(n)), std::string::npos) << st.message();
      EXPECT_EQ(tr.postedOps(), 0u);
    });
  }
}

TEST(AdasumErrors, NonFloatTypesFailBeforeSending) {
  for (DataType t : {DataType::kInt32, DataType::kUInt8, DataType::kInt64, DataType::kBool,
                     DataType::kBFloat16}) {
    MemoryWorld world(2);
    world.run([&](MemoryTransport& tr) {
      std::vector<uint8_t> buf(64, 0);
      std::vector<uint8_t> scratch;
      const Status st = allreduceAdasum(tr, buf.data(), {4}, t, &scratch);
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(st.message().find(dataTypeName(t)), std::string::npos) << st.message();
      EXPECT_EQ(tr.postedOps(), 0u);
    });
  }
}

TEST(AdasumMath, CoefficientsFollowTheFormulaAndTheZeroGuard) {
  const AdasumCoefficients c = adasumCoefficients(2.0, 4.0, 1.0);
  EXPECT_DOUBLE_EQ(c.a, 1 - 2.0 / 8.0);
  EXPECT_DOUBLE_EQ(c.b, 1 - 2.0 / 2.0);
  const AdasumCoefficients zero = adasumCoefficients(0.0, 0.0, 9e-9);
  EXPECT_EQ(zero.a, 1.0);
  EXPECT_EQ(zero.b, 1.0);
}

TEST(AdasumMath, ZeroGuardIsHorovodsSqrtDblMin) {
  // Horovod 0.28.1 (adasum.h): a squared norm below sqrt(DBL_MIN) ~ 1.49e-154
  // is a zero vector. Parallel vectors of float32's smallest normal (|v|^2
  // ~ 1.4e-76) and of 1e-20 (|v|^2 = 1e-40) are combined, coefficients 1/2.
  const double threshold = 1.4916681462400413e-154;  // sqrt(2.2250738585072014e-308)
  for (double norm2 : {1.3817869e-76, 1e-40, 9e-9, threshold}) {
    const AdasumCoefficients c = adasumCoefficients(norm2, norm2, norm2);
    EXPECT_DOUBLE_EQ(c.a, 0.5) << norm2;
    EXPECT_DOUBLE_EQ(c.b, 0.5) << norm2;
  }
  const double below = threshold * (1 - 1e-15);
  const AdasumCoefficients zero = adasumCoefficients(below, below, below);
  EXPECT_EQ(zero.a, 1.0);
  EXPECT_EQ(zero.b, 1.0);
}

TEST(AdasumMath, TinyFloat32AndFloat16NormsAccumulateInFloat64) {
  // Products formed in float64: float32's 2^-126 squared (2^-252) would be 0
  // in float32; float16's 2^-14 squared (2^-28) is below float16's range.
  const float f = 1.17549435e-38f;
  const float fa[3] = {f, f, 0}, fb[3] = {f, 2 * f, 0};
  const DotAndNorms d = adasumDotAndNorms(fa, fb, 3, DataType::kFloat32);
  const double f2 = static_cast<double>(f) * f;
  EXPECT_DOUBLE_EQ(d.dot, 3 * f2);
  EXPECT_DOUBLE_EQ(d.a_norm2, 2 * f2);
  EXPECT_DOUBLE_EQ(d.b_norm2, 5 * f2);
  const uint16_t h[2] = {0x0400, 0x0400};  // float16 2^-14 twice
  const DotAndNorms dh = adasumDotAndNorms(h, h, 2, DataType::kFloat16);
  EXPECT_DOUBLE_EQ(dh.a_norm2, 2 * std::ldexp(1.0, -28));
  EXPECT_DOUBLE_EQ(dh.dot, dh.b_norm2);
}

}  // namespace
}  // namespace tutti
