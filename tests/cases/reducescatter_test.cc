// docs/cases.md 14: reducescatter gives rank r its rows of the reduction.

#include <gtest/gtest.h>

#include <string>

#include "tests/support/host_tensor.h"
#include "tests/support/op_checks.h"
#include "tests/support/reduce_values.h"
#include "tests/support/thread_harness.h"

namespace tutti {
namespace test {
namespace {

std::string sizeName(const ::testing::TestParamInfo<int>& info) {
  return "size" + std::to_string(info.param);
}

constexpr int64_t kRowElements = 3;

// Reduces a [first_dim, 3] tensor and checks rank r's rows: rows_r = d0 / size,
// plus one for the first d0 % size ranks, at offset Σ_{q<r} rows_q.
void checkReducescatter(Runtime& rt, DataType dtype, ReduceOp op, int64_t first_dim,
                        const std::string& name) {
  const int rank = rt.rank();
  const int size = rt.size();
  SCOPED_TRACE(std::string(dataTypeName(dtype)) + " " + reduceOpName(op) + " first dim " +
               std::to_string(first_dim));
  auto rowsOf = [&](int r) { return first_dim / size + (r < first_dim % size ? 1 : 0); };
  int64_t offset = 0;
  for (int r = 0; r < rank; ++r) offset += rowsOf(r);
  HostTensor in(dtype, {first_dim, kRowElements});
  in.fill([&](int64_t i) { return reduceInput(dtype, op, i, rank, size); });
  OpOptions opts;
  opts.name = name;
  opts.reduce_op = op;
  OpResult result = runOp(rt, [&](Handle* h) { return rt.reducescatter(in.view(), opts, h); });
  ASSERT_TRUE(IsOk(result.status));
  ASSERT_TRUE(result.has_output) << "output(handle) is null after a successful reducescatter";
  EXPECT_EQ(result.output.dtype, dtype);
  ASSERT_EQ(shapeToString(result.output.shape), shapeToString({rowsOf(rank), kRowElements}));
  EXPECT_TRUE(elementsMatch(
      result.output,
      [&](int64_t j) { return reduceExpected(dtype, op, offset * kRowElements + j, size); },
      reduceTolerance(dtype, op)));
}

class ReducescatterTest : public ::testing::TestWithParam<int> {};

// ---- 14. first dimension 4·size: rank r gets rows [4r, 4r + 4) ----------------------
TEST_P(ReducescatterTest, RankGetsItsFourRowsOfTheReduction) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    int index = 0;
    for (DataType dtype : {DataType::kInt8, DataType::kInt32, DataType::kFloat16,
                           DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax, ReduceOp::kProduct}) {
        checkReducescatter(rt, dtype, op, 4 * int64_t{size}, indexedName("rs", index++));
      }
    }
  });
}

// The header's rule for a first dimension that does not divide evenly, and a
// tensor large enough to take several 4096-byte segments per rank.
TEST_P(ReducescatterTest, UnevenAndMultiSegmentFirstDimensions) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    checkReducescatter(rt, DataType::kInt32, ReduceOp::kSum, 4 * int64_t{size} + size - 1,
                       "rs.uneven");
    checkReducescatter(rt, DataType::kFloat32, ReduceOp::kSum, 1009 * int64_t{size} + 1,
                       "rs.segments");
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, ReducescatterTest, ::testing::Values(1, 2, 3, 4, 5, 8), sizeName);

}  // namespace
}  // namespace test
}  // namespace tutti
