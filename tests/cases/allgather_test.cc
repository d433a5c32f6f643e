// docs/cases.md 8-9: allgather of uneven first dimensions, and its errors.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/host_tensor.h"
#include "tests/support/op_checks.h"
#include "tests/support/thread_harness.h"

namespace tutti {
namespace test {
namespace {

std::string sizeName(const ::testing::TestParamInfo<int>& info) {
  return "size" + std::to_string(info.param);
}

// Rank that contributed output row `row` when rank r contributed rows(r) rows.
template <typename RowsOf>
int ownerOfRow(int64_t row, int size, RowsOf rows) {
  for (int r = 0; r < size; ++r) {
    if (row < rows(r)) return r;
    row -= rows(r);
  }
  return -1;
}

OpResult allgatherNow(Runtime& rt, HostTensor& in, const std::string& name) {
  OpOptions opts;
  opts.name = name;
  return runOp(rt, [&](Handle* h) { return rt.allgather(in.view(), opts, h); });
}

// ---- 8. first dimension r + 1, filled with r --------------------------------
class AllgatherTest : public ::testing::TestWithParam<int> {};

TEST_P(AllgatherTest, UnevenFirstDimensionsInRankOrder) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    const int rank = rt.rank();
    auto rows = [](int r) { return int64_t{r} + 1; };
    const int64_t total_rows = int64_t{size} * (size + 1) / 2;
    for (DataType dtype : allDataTypes()) {
      SCOPED_TRACE(dataTypeName(dtype));
      // bool holds 0/1 only: rank r's block holds r % 2.
      auto fillValue = [&](int r) { return dtype == DataType::kBool ? r % 2 : r; };
      HostTensor in(dtype, {rows(rank), 2, 3});
      in.fill([&](int64_t) { return fillValue(rank); });
      OpResult result = allgatherNow(rt, in, std::string("ag.") + dataTypeName(dtype));
      ASSERT_TRUE(IsOk(result.status));
      ASSERT_TRUE(result.has_output) << "output(handle) is null after a successful allgather";
      EXPECT_EQ(result.output.dtype, dtype);
      ASSERT_EQ(shapeToString(result.output.shape), shapeToString({total_rows, 2, 3}));
      EXPECT_TRUE(elementsMatch(
          result.output, [&](int64_t i) { return fillValue(ownerOfRow(i / 6, size, rows)); }));
    }
  });
}

// Rank 0 contributes no rows; each element says which rank and element it was.
TEST_P(AllgatherTest, EmptyContributionAndElementOrder) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    const int rank = rt.rank();
    auto rows = [](int r) { return int64_t{r}; };
    HostTensor in(DataType::kInt32, {rows(rank), 5});
    in.fill([&](int64_t i) { return rank * 1000 + i; });
    OpResult result = allgatherNow(rt, in, "ag.rank0_empty");
    ASSERT_TRUE(IsOk(result.status));
    ASSERT_TRUE(result.has_output);
    const int64_t total_rows = int64_t{size} * (size - 1) / 2;
    ASSERT_EQ(shapeToString(result.output.shape), shapeToString({total_rows, 5}));
    EXPECT_TRUE(elementsMatch(result.output, [&](int64_t i) {
      const int owner = ownerOfRow(i / 5, size, rows);
      int64_t block_start = 0;
      for (int r = 0; r < owner; ++r) block_start += rows(r) * 5;
      return owner * 1000 + (i - block_start);
    }));
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, AllgatherTest, ::testing::Values(1, 2, 3, 4, 5, 8), sizeName);

// ---- 9. dimension mismatches and 0-dimensional input ---------------------------
class AllgatherErrorTest : public ::testing::TestWithParam<int> {};

TEST_P(AllgatherErrorTest, NonFirstDimensionMismatchFailsOnEveryRank) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    const bool odd_one = rt.rank() == size - 1;
    HostTensor in(DataType::kFloat32, {2, odd_one ? 4 : 3});
    OpResult result = allgatherNow(rt, in, "ag.inner_dims");
    EXPECT_TRUE(HasCode(result.status, StatusCode::kMismatch));
    EXPECT_TRUE(ContainsAll(result.status.message(), {"ag.inner_dims"}));
  });
}

TEST_P(AllgatherErrorTest, RankCountMismatchFailsOnEveryRank) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    const Shape shape = rt.rank() == size - 1 ? Shape{2, 3, 1} : Shape{2, 3};
    HostTensor in(DataType::kFloat32, shape);
    OpResult result = allgatherNow(rt, in, "ag.ndim");
    EXPECT_TRUE(HasCode(result.status, StatusCode::kMismatch));
    EXPECT_TRUE(ContainsAll(result.status.message(), {"ag.ndim"}));
  });
}

TEST_P(AllgatherErrorTest, ZeroDimensionalInputIsInvalidAndLaterOpsWork) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    HostTensor scalar(DataType::kFloat32, {});
    OpResult bad = allgatherNow(rt, scalar, "ag.scalar");
    EXPECT_TRUE(HasCode(bad.status, StatusCode::kInvalidArgument));
    EXPECT_TRUE(bad.enqueue_failed) << "a 0-dimensional input is a local error at enqueue";
    HostTensor in(DataType::kFloat32, {1});
    in.set(0, rt.rank());
    OpResult good = allgatherNow(rt, in, "ag.after_error");
    ASSERT_TRUE(IsOk(good.status));
    ASSERT_TRUE(good.has_output);
    EXPECT_TRUE(elementsMatch(good.output, [](int64_t i) { return i; }));
    EXPECT_EQ(numElements(good.output.shape), size);
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, AllgatherErrorTest, ::testing::Values(2, 3, 5), sizeName);

}  // namespace
}  // namespace test
}  // namespace tutti
