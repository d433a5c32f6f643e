// docs/cases.md 12-13: alltoall with and without splits, and bad splits.

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

// The value of every element rank `from` sends to rank `to` (exact in int8
// and bfloat16 for up to 8 ranks).
double blockValue(int from, int to) {
  return 16.0 * from + to;
}

OpResult alltoallNow(Runtime& rt, HostTensor& in, const std::string& name,
                     std::vector<int64_t> splits) {
  OpOptions opts;
  opts.name = name;
  opts.splits = std::move(splits);
  return runOp(
      rt, [&](Handle* h) { return rt.alltoall(in.view(), opts, h); }, kFetchSplits);
}

std::string splitsToString(const std::vector<int64_t>& splits) {
  std::string out = "[";
  for (size_t i = 0; i < splits.size(); ++i) out += (i ? ", " : "") + std::to_string(splits[i]);
  return out + "]";
}

// Receiving rank k: block j holds rows(j) rows of blockValue(j, k).
template <typename RowsOf>
double expectedReceived(int64_t row, int size, int k, RowsOf rows) {
  for (int j = 0; j < size; ++j) {
    if (row < rows(j)) return blockValue(j, k);
    row -= rows(j);
  }
  return -1;
}

class AlltoallTest : public ::testing::TestWithParam<int> {};

// ---- 12. rank r sends r + 1 rows to every peer ---------------------------------
TEST_P(AlltoallTest, SplitsOfRankPlusOneRows) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    const int rank = rt.rank();
    auto rows = [](int r) { return int64_t{r} + 1; };
    for (DataType dtype : {DataType::kInt8, DataType::kInt32, DataType::kInt64, DataType::kFloat16,
                           DataType::kBFloat16, DataType::kFloat64}) {
      SCOPED_TRACE(dataTypeName(dtype));
      HostTensor in(dtype, {size * rows(rank), 3});
      in.fill([&](int64_t i) { return blockValue(rank, static_cast<int>(i / 3 / rows(rank))); });
      OpResult result = alltoallNow(rt, in, std::string("a2a.") + dataTypeName(dtype),
                                    std::vector<int64_t>(size, rows(rank)));
      ASSERT_TRUE(IsOk(result.status));
      ASSERT_TRUE(result.has_output) << "output(handle) is null after a successful alltoall";
      std::vector<int64_t> want_splits;
      for (int j = 0; j < size; ++j) want_splits.push_back(rows(j));
      EXPECT_EQ(splitsToString(result.received_splits), splitsToString(want_splits));
      ASSERT_EQ(shapeToString(result.output.shape),
                shapeToString({int64_t{size} * (size + 1) / 2, 3}));
      EXPECT_TRUE(elementsMatch(
          result.output, [&](int64_t i) { return expectedReceived(i / 3, size, rank, rows); }));
    }
  });
}

// ---- 13. without splits the first dimension is divided evenly --------------------
TEST_P(AlltoallTest, EvenSplitWithoutSplits) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    const int rank = rt.rank();
    auto rows = [](int) { return int64_t{2}; };
    HostTensor in(DataType::kFloat32, {2 * int64_t{size}, 4});
    in.fill([&](int64_t i) { return blockValue(rank, static_cast<int>(i / 4 / 2)); });
    OpResult result = alltoallNow(rt, in, "a2a.even", {});
    ASSERT_TRUE(IsOk(result.status));
    ASSERT_TRUE(result.has_output);
    EXPECT_EQ(splitsToString(result.received_splits),
              splitsToString(std::vector<int64_t>(size, 2)));
    ASSERT_EQ(shapeToString(result.output.shape), shapeToString({2 * int64_t{size}, 4}));
    EXPECT_TRUE(elementsMatch(
        result.output, [&](int64_t i) { return expectedReceived(i / 4, size, rank, rows); }));
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, AlltoallTest, ::testing::Values(1, 2, 3, 4, 5, 8), sizeName);

// ---- 13. bad splits are local errors; the runtime goes on ---------------------------
class AlltoallErrorTest : public ::testing::TestWithParam<int> {};

TEST_P(AlltoallErrorTest, BadSplitsAreInvalidArguments) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    struct BadCase {
      const char* what;
      int64_t first_dim;
      std::vector<int64_t> splits;
    };
    std::vector<int64_t> negative(size, 2);
    negative[0] = -1;
    negative[1] = 5;
    const std::vector<BadCase> cases = {
        {"first dimension not divisible by size", 2 * int64_t{size} + 1, {}},
        {"splits of length size + 1", 2 * int64_t{size}, std::vector<int64_t>(size + 1, 1)},
        {"a negative split", 2 * int64_t{size}, negative},
        {"splits summing past the first dimension", 2 * int64_t{size} - 1,
         std::vector<int64_t>(size, 2)},
    };
    for (size_t c = 0; c < cases.size(); ++c) {
      SCOPED_TRACE(cases[c].what);
      HostTensor in(DataType::kInt32, {cases[c].first_dim, 2});
      OpResult result = alltoallNow(rt, in, indexedName("a2a.bad", c), cases[c].splits);
      EXPECT_TRUE(HasCode(result.status, StatusCode::kInvalidArgument));
      EXPECT_TRUE(result.enqueue_failed) << "bad local splits must fail at enqueue";
      if (!cases[c].splits.empty()) {
        EXPECT_TRUE(ContainsAll(result.status.message(), {"split"}));
      }
    }
    HostTensor in(DataType::kInt32, {int64_t{size}, 2});
    in.fill([&](int64_t i) { return blockValue(rt.rank(), static_cast<int>(i / 2)); });
    OpResult good = alltoallNow(rt, in, "a2a.after_errors", {});
    ASSERT_TRUE(IsOk(good.status));
    ASSERT_TRUE(good.has_output);
    EXPECT_TRUE(elementsMatch(
        good.output, [&](int64_t i) { return blockValue(static_cast<int>(i / 2), rt.rank()); }));
  });
}

// ---- bad splits on one rank only: the same error on every rank, no hang ------------
TEST_P(AlltoallErrorTest, BadSplitsOnOneRankFailEveryRankWithTheSameMessage) {
  const int size = GetParam();
  const int bad = size - 1;
  struct BadCase {
    std::vector<int64_t> splits;
    int64_t first_dim;
    std::string says;
  };
  std::vector<int64_t> negative(size, 1);
  negative[0] = -1;
  const std::vector<BadCase> cases = {
      {std::vector<int64_t>(size + 1, 1), int64_t{size} + 1,
       "splits has " + std::to_string(size + 1) + " entries; expected one per rank (" +
           std::to_string(size) + ")"},
      {negative, int64_t{size}, "splits[0] = -1 is negative; splits are rows sent to each rank"},
      {std::vector<int64_t>(size, 2), int64_t{size},
       "splits sum to " + std::to_string(2 * size) + " rows, more than the first dimension " +
           std::to_string(size)},
  };
  std::vector<std::vector<std::string>> messages(cases.size(), std::vector<std::string>(size));
  runThreadRanks(size, [&](Runtime& rt) {
    const int rank = rt.rank();
    for (size_t c = 0; c < cases.size(); ++c) {
      SCOPED_TRACE(cases[c].says);
      const bool mine = rank == bad;
      HostTensor in(DataType::kInt32, {mine ? cases[c].first_dim : int64_t{size}, 2});
      const std::string name = indexedName("a2a.one_bad", c);
      OpResult r = alltoallNow(rt, in, name, mine ? cases[c].splits : std::vector<int64_t>{});
      EXPECT_TRUE(HasCode(r.status, StatusCode::kInvalidArgument));
      EXPECT_EQ(r.enqueue_failed, mine) << "the bad rank fails at enqueue, the others at wait";
      EXPECT_TRUE(ContainsAll(r.status.message(), {"alltoall '" + name + "': rank " +
                                                   std::to_string(bad) + ": " + cases[c].says}))
          << r.status.message();
      messages[c][rank] = r.status.message();
    }
    HostTensor in(DataType::kInt32, {int64_t{size}, 2});
    in.fill([&](int64_t i) { return blockValue(rank, static_cast<int>(i / 2)); });
    OpResult good = alltoallNow(rt, in, "a2a.after_one_bad", {});
    ASSERT_TRUE(IsOk(good.status)) << good.status.toString();
    ASSERT_TRUE(good.has_output);
    EXPECT_TRUE(elementsMatch(
        good.output, [&](int64_t i) { return blockValue(static_cast<int>(i / 2), rank); }));
  });
  // Ranks as threads fill every row; under mpirun each process fills its own
  // rank's only, and the check above (the bad rank's text) is what remains.
  for (size_t c = 0; c < cases.size(); ++c) {
    for (int r = 1; r < size; ++r) {
      if (messages[c][0].empty() || messages[c][r].empty()) continue;
      EXPECT_EQ(messages[c][r], messages[c][0]) << "rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, AlltoallErrorTest, ::testing::Values(2, 3, 5), sizeName);

}  // namespace
}  // namespace test
}  // namespace tutti
