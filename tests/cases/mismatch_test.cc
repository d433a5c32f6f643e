// docs/cases.md 17-20: requests that ranks disagree on fail on every rank, with a
// message naming the tensor and the differing values; never a hang.

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

Status allreduceNow(Runtime& rt, HostTensor& in, HostTensor& out, const OpOptions& opts) {
  return runOpStatus(rt, [&](Handle* h) { return rt.allreduce(in.view(), out.view(), opts, h); });
}

// After a failed op the runtime goes on: a matching allreduce still works.
void expectLaterAllreduceWorks(Runtime& rt, const std::string& name) {
  HostTensor in(DataType::kInt32, {5});
  HostTensor out(DataType::kInt32, {5});
  in.fill([&](int64_t i) { return i + rt.rank(); });
  OpOptions opts;
  opts.name = name;
  ASSERT_TRUE(IsOk(allreduceNow(rt, in, out, opts))) << "an allreduce after the mismatch";
  const int size = rt.size();
  EXPECT_TRUE(elementsMatch(out, [&](int64_t i) { return size * i + size * (size - 1) / 2.0; }));
}

class MismatchTest : public ::testing::TestWithParam<int> {};

// ---- 17. shapes [17 + r] --------------------------------------------------------
TEST_P(MismatchTest, ShapesDiffer) {
  runThreadRanks(GetParam(), [](Runtime& rt) {
    HostTensor in(DataType::kFloat32, {17 + rt.rank()});
    HostTensor out(DataType::kFloat32, {17 + rt.rank()});
    OpOptions opts;
    opts.name = "mm.shape";
    Status st = allreduceNow(rt, in, out, opts);
    EXPECT_TRUE(HasCode(st, StatusCode::kMismatch));
    EXPECT_TRUE(ContainsAll(st.message(), {"mm.shape", "[17]", "[18]"}));
    expectLaterAllreduceWorks(rt, "mm.shape.after");
  });
}

// ---- 18. int32 on even ranks, float32 on odd ranks ---------------------------------
TEST_P(MismatchTest, DtypesDiffer) {
  runThreadRanks(GetParam(), [](Runtime& rt) {
    const DataType dtype = rt.rank() % 2 == 0 ? DataType::kInt32 : DataType::kFloat32;
    HostTensor in(dtype, {8});
    HostTensor out(dtype, {8});
    OpOptions opts;
    opts.name = "mm.dtype";
    Status st = allreduceNow(rt, in, out, opts);
    EXPECT_TRUE(HasCode(st, StatusCode::kMismatch));
    EXPECT_TRUE(ContainsAll(st.message(), {"mm.dtype", "int32", "float32"}));
    expectLaterAllreduceWorks(rt, "mm.dtype.after");
  });
}

// ---- 19. reduce ops, prescale or postscale differ --------------------------------------
TEST_P(MismatchTest, ReduceOpsDiffer) {
  runThreadRanks(GetParam(), [](Runtime& rt) {
    HostTensor in(DataType::kFloat32, {8});
    HostTensor out(DataType::kFloat32, {8});
    OpOptions opts;
    opts.name = "mm.op";
    opts.reduce_op = rt.rank() % 2 == 0 ? ReduceOp::kSum : ReduceOp::kMax;
    Status st = allreduceNow(rt, in, out, opts);
    EXPECT_TRUE(HasCode(st, StatusCode::kMismatch));
    EXPECT_TRUE(ContainsAll(st.message(), {"mm.op", "sum", "max"}));
    expectLaterAllreduceWorks(rt, "mm.op.after");
  });
}

TEST_P(MismatchTest, PrescalesDiffer) {
  runThreadRanks(GetParam(), [](Runtime& rt) {
    HostTensor in(DataType::kFloat32, {8});
    HostTensor out(DataType::kFloat32, {8});
    OpOptions opts;
    opts.name = "mm.prescale";
    opts.prescale = rt.rank() % 2 == 0 ? 0.5 : 2.5;
    Status st = allreduceNow(rt, in, out, opts);
    EXPECT_TRUE(HasCode(st, StatusCode::kMismatch));
    EXPECT_TRUE(ContainsAll(st.message(), {"mm.prescale", "0.5", "2.5"}));
    expectLaterAllreduceWorks(rt, "mm.prescale.after");
  });
}

TEST_P(MismatchTest, PostscalesDiffer) {
  runThreadRanks(GetParam(), [](Runtime& rt) {
    HostTensor in(DataType::kFloat32, {8});
    HostTensor out(DataType::kFloat32, {8});
    OpOptions opts;
    opts.name = "mm.postscale";
    opts.postscale = rt.rank() % 2 == 0 ? 0.75 : 1.25;
    Status st = allreduceNow(rt, in, out, opts);
    EXPECT_TRUE(HasCode(st, StatusCode::kMismatch));
    EXPECT_TRUE(ContainsAll(st.message(), {"mm.postscale", "0.75", "1.25"}));
    expectLaterAllreduceWorks(rt, "mm.postscale.after");
  });
}

// ---- a broadcast root out of range on one rank only: every rank fails, no hang ----
TEST_P(MismatchTest, RootOutOfRangeOnOneRankFailsEveryRank) {
  const int size = GetParam();
  std::vector<std::string> messages(size);
  runThreadRanks(size, [&](Runtime& rt) {
    HostTensor buf(DataType::kFloat32, {4});
    OpOptions opts;
    opts.name = "mm.root";
    opts.root = rt.rank() == 1 ? size : 0;
    Status st =
        runOpStatus(rt, [&](Handle* h) { return rt.broadcast(buf.view(), buf.view(), opts, h); });
    EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument));
    EXPECT_TRUE(
        ContainsAll(st.message(), {"broadcast 'mm.root': rank 1: root " + std::to_string(size) +
                                   " is out of range [0, " + std::to_string(size - 1) + "]"}))
        << st.message();
    messages[rt.rank()] = st.message();
    expectLaterAllreduceWorks(rt, "mm.root.after");
  });
  // Ranks as threads fill every entry; under mpirun each process its own only.
  for (int r = 1; r < size; ++r) {
    if (messages[0].empty() || messages[r].empty()) continue;
    EXPECT_EQ(messages[r], messages[0]) << "rank " << r;
  }
}

// ---- 20. a name already in flight on this rank ------------------------------------------
// The op under the name cannot complete while one rank (the holder) has not
// submitted it yet, so the second enqueue meets it in flight for certain. Two
// rounds with different holders check the duplicate on every rank.
TEST_P(MismatchTest, DuplicateInFlightNameFailsAtOnceAndLaterOpsWork) {
  const int size = GetParam();
  RankSync sync(size);
  runThreadRanks(size, [&sync, size](Runtime& rt) {
    const int rank = rt.rank();
    for (int holder : {size - 1, 0}) {
      SCOPED_TRACE("holder rank " + std::to_string(holder));
      const std::string name = "mm.dup." + std::to_string(holder);
      HostTensor in(DataType::kInt32, {6});
      HostTensor out(DataType::kInt32, {6});
      HostTensor second_out(DataType::kInt32, {6});
      in.fill([&](int64_t i) { return i * 10 + rank; });
      OpOptions opts;
      opts.name = name;
      Handle first = -1;
      if (rank != holder) {
        ASSERT_TRUE(IsOk(rt.allreduce(in.view(), out.view(), opts, &first)));
        Handle second = -1;
        Status dup = rt.allreduce(in.view(), second_out.view(), opts, &second);
        EXPECT_TRUE(HasCode(dup, StatusCode::kDuplicateName));
        EXPECT_TRUE(ContainsAll(dup.message(), {name}));
        sync.arriveAndWait();
      } else {
        sync.arriveAndWait();  // every other rank has checked its duplicate
        ASSERT_TRUE(IsOk(rt.allreduce(in.view(), out.view(), opts, &first)));
      }
      ASSERT_TRUE(IsOk(finishHandle(rt, first)));
      EXPECT_TRUE(
          elementsMatch(out, [&](int64_t i) { return size * i * 10 + size * (size - 1) / 2.0; }));
      // The name is free again once its op completed.
      HostTensor again(DataType::kInt32, {6});
      ASSERT_TRUE(IsOk(allreduceNow(rt, in, again, opts)));
      EXPECT_TRUE(
          elementsMatch(again, [&](int64_t i) { return size * i * 10 + size * (size - 1) / 2.0; }));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, MismatchTest, ::testing::Values(2, 3, 5), sizeName);

}  // namespace
}  // namespace test
}  // namespace tutti
