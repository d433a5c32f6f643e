// docs/cases.md 15-16: barrier ordering and join.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <tuple>

#include "tests/support/host_tensor.h"
#include "tests/support/op_checks.h"
#include "tests/support/thread_harness.h"

namespace tutti {
namespace test {
namespace {

std::string sizeName(const ::testing::TestParamInfo<int>& info) {
  return "size" + std::to_string(info.param);
}

void sleepMs(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// ---- 15. a barrier returns only after every rank entered it ----------------------
class BarrierTest : public ::testing::TestWithParam<int> {};

TEST_P(BarrierTest, ReturnsOnlyAfterEveryRankEntered) {
  const int size = GetParam();
  std::atomic<int> entered_first{0};
  std::atomic<int> entered_second{0};
  runThreadRanks(size, [&, size](Runtime& rt) {
    const int rank = rt.rank();
    // Ranks arrive in rank order the first time, in reverse order the second.
    sleepMs(40 * rank);
    entered_first.fetch_add(1);
    EXPECT_TRUE(IsOk(runOpStatus(rt, [&](Handle* h) { return rt.barrier(h); })));
    EXPECT_EQ(entered_first.load(), size) << "barrier 1 returned before every rank entered it";
    sleepMs(40 * (size - 1 - rank));
    entered_second.fetch_add(1);
    EXPECT_TRUE(IsOk(runOpStatus(rt, [&](Handle* h) { return rt.barrier(h); })));
    EXPECT_EQ(entered_second.load(), size) << "barrier 2 returned before every rank entered it";
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, BarrierTest, ::testing::Values(1, 2, 3, 4, 5, 8), sizeName);

// ---- 16. join: the joined rank contributes zeros ------------------------------------
// Param: world size, rank that joins first, rank that joins last.
using JoinParam = std::tuple<int, int, int>;

class JoinTest : public ::testing::TestWithParam<JoinParam> {};

TEST_P(JoinTest, JoinedRankContributesZerosAndLastJoinerIsReported) {
  const auto [size, early, last] = GetParam();
  runThreadRanks(size, [size = size, early = early, last = last](Runtime& rt) {
    const int rank = rt.rank();
    if (rank != early) {
      // Every rank holds x = size · k; the average over size ranks, one of
      // them contributing zeros, is k · (size − 1).
      HostTensor a(DataType::kFloat32, {33});
      HostTensor b(DataType::kInt32, {4, 5});
      a.fill([&](int64_t i) { return size * (i % 7 + 1); });
      b.fill([&](int64_t i) { return size * (i % 5 + 2); });
      HostTensor a_out(DataType::kFloat32, a.shape());
      HostTensor b_out(DataType::kInt32, b.shape());
      OpOptions opts;
      opts.reduce_op = ReduceOp::kAverage;
      Handle ha = -1, hb = -1;
      opts.name = "join.a";
      ASSERT_TRUE(IsOk(rt.allreduce(a.view(), a_out.view(), opts, &ha)));
      opts.name = "join.b";
      ASSERT_TRUE(IsOk(rt.allreduce(b.view(), b_out.view(), opts, &hb)));
      EXPECT_TRUE(IsOk(finishHandle(rt, ha)));
      EXPECT_TRUE(IsOk(finishHandle(rt, hb)));
      EXPECT_TRUE(elementsMatch(a_out, [&](int64_t i) { return (i % 7 + 1) * (size - 1.0); }));
      EXPECT_TRUE(elementsMatch(b_out, [&](int64_t i) { return (i % 5 + 2) * (size - 1.0); }));
      if (rank == last) sleepMs(300);  // make `last` the last rank to join
    }
    OpResult joined = runOp(
        rt, [&](Handle* h) { return rt.join(h); }, kFetchJoin);
    ASSERT_TRUE(IsOk(joined.status));
    EXPECT_EQ(joined.join_result, last);
  });
}

std::string joinName(const ::testing::TestParamInfo<JoinParam>& info) {
  return "size" + std::to_string(std::get<0>(info.param)) + "_early" +
         std::to_string(std::get<1>(info.param)) + "_last" +
         std::to_string(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Cases, JoinTest,
                         ::testing::Values(JoinParam{1, 0, 0}, JoinParam{2, 1, 0},
                                           JoinParam{2, 0, 1}, JoinParam{3, 2, 0},
                                           JoinParam{3, 0, 2}, JoinParam{4, 3, 0},
                                           JoinParam{5, 0, 4}, JoinParam{5, 2, 1}),
                         joinName);

}  // namespace
}  // namespace test
}  // namespace tutti
