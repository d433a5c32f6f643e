// docs/cases.md 10-11: broadcast from every root, in place, and disagreeing roots.

#include <gtest/gtest.h>

#include <string>

#include "tests/support/host_tensor.h"
#include "tests/support/op_checks.h"
#include "tests/support/thread_harness.h"

namespace tutti {
namespace test {
namespace {

std::string sizeName(const ::testing::TestParamInfo<int>& info) {
  return "size" + std::to_string(info.param);
}

// Rank k's tensor: distinct per rank and element, exact in every dtype.
double rankValue(DataType dtype, int rank, int64_t i) {
  if (dtype == DataType::kBool) return (rank + i) % 2;
  return static_cast<double>((rank * 13 + i) % 100);
}

Status broadcastNow(Runtime& rt, HostTensor& in, HostTensor& out, const std::string& name,
                    int root) {
  OpOptions opts;
  opts.name = name;
  opts.root = root;
  return runOpStatus(rt, [&](Handle* h) { return rt.broadcast(in.view(), out.view(), opts, h); });
}

// ---- 10. every root, every dtype, and in place ---------------------------------
class BroadcastTest : public ::testing::TestWithParam<int> {};

TEST_P(BroadcastTest, EveryRankEndsWithTheRootsTensor) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    const int rank = rt.rank();
    for (int root = 0; root < size; ++root) {
      for (DataType dtype : allDataTypes()) {
        SCOPED_TRACE("root " + std::to_string(root) + " " + dataTypeName(dtype));
        HostTensor in(dtype, {1009});
        HostTensor out(dtype, {1009});
        in.fill([&](int64_t i) { return rankValue(dtype, rank, i); });
        out.fill([](int64_t) { return 1; });  // not any rank's tensor
        const std::string name = "bc." + std::to_string(root) + "." + dataTypeName(dtype);
        ASSERT_TRUE(IsOk(broadcastNow(rt, in, out, name, root)));
        EXPECT_TRUE(elementsMatch(out, [&](int64_t i) { return rankValue(dtype, root, i); }));
        EXPECT_TRUE(elementsMatch(in, [&](int64_t i) { return rankValue(dtype, rank, i); }))
            << "the input was modified";
      }
    }
  });
}

TEST_P(BroadcastTest, InPlaceFromEveryRoot) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    const int rank = rt.rank();
    // Three segments and one element of the 4096-byte test segment size.
    const int64_t count = 3 * 1024 + 1;
    for (int root = 0; root < size; ++root) {
      SCOPED_TRACE("root " + std::to_string(root));
      HostTensor buffer(DataType::kFloat32, {count});
      buffer.fill([&](int64_t i) { return rankValue(DataType::kFloat32, rank, i); });
      ASSERT_TRUE(
          IsOk(broadcastNow(rt, buffer, buffer, "bc.inplace." + std::to_string(root), root)));
      EXPECT_TRUE(
          elementsMatch(buffer, [&](int64_t i) { return rankValue(DataType::kFloat32, root, i); }));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, BroadcastTest, ::testing::Values(1, 2, 3, 4, 5, 8), sizeName);

// ---- 11. ranks naming different roots ------------------------------------------
class BroadcastRootMismatchTest : public ::testing::TestWithParam<int> {};

TEST_P(BroadcastRootMismatchTest, ErrorOnEveryRankThenLaterOpsWork) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    const int rank = rt.rank();
    HostTensor in(DataType::kInt32, {16});
    HostTensor out(DataType::kInt32, {16});
    Status st = broadcastNow(rt, in, out, "bc.roots", rank);
    EXPECT_TRUE(HasCode(st, StatusCode::kMismatch));
    EXPECT_TRUE(ContainsAll(st.message(), {"bc.roots"}));
    in.fill([&](int64_t i) { return rankValue(DataType::kInt32, rank, i); });
    ASSERT_TRUE(IsOk(broadcastNow(rt, in, out, "bc.after_error", size - 1)));
    EXPECT_TRUE(
        elementsMatch(out, [&](int64_t i) { return rankValue(DataType::kInt32, size - 1, i); }));
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, BroadcastRootMismatchTest, ::testing::Values(2, 3, 5), sizeName);

}  // namespace
}  // namespace test
}  // namespace tutti
