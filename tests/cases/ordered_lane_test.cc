// The ordered lane (coordinator/ordered_lane.h): collectives issued in the
// same order on every rank, without negotiation. Values against references
// computed here; every kind of disagreement is kMismatch on every rank with
// the sequence number and both sides named, never a hang; both lanes at once.

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/host_tensor.h"
#include "tests/support/op_checks.h"
#include "tests/support/thread_harness.h"

namespace tutti {
namespace test {
namespace {

OpOptions ordered(int32_t set = kGlobalProcessSet) {
  OpOptions o;
  o.ordered = true;
  o.process_set = set;
  return o;
}

Status allreduceOrdered(Runtime& rt, HostTensor& in, HostTensor& out, OpOptions o) {
  return runOpStatus(rt, [&](Handle* h) { return rt.allreduce(in.view(), out.view(), o, h); });
}

// Elements i of rank r: (r + 1) * (i % 7 + 1), small integers, exact in every dtype.
double valueOf(int rank, int64_t i) {
  return (rank + 1) * static_cast<double>(i % 7 + 1);
}

struct Case {
  int size;
  int64_t count;  // 3 stays inline; 70000 float32 elements do not (256 KiB over 2+ ranks)
};

class OrderedLaneTest : public ::testing::TestWithParam<Case> {};

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  return "size" + std::to_string(info.param.size) + "_count" + std::to_string(info.param.count);
}

TEST_P(OrderedLaneTest, AllreduceSumAverageMinMax) {
  const Case c = GetParam();
  runThreadRanks(c.size, [c](Runtime& rt) {
    const int n = rt.size();
    for (DataType dtype : {DataType::kFloat32, DataType::kInt32, DataType::kFloat64}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax}) {
        HostTensor in(dtype, {c.count});
        HostTensor out(dtype, {c.count});
        in.fill([&](int64_t i) { return valueOf(rt.rank(), i); });
        OpOptions o = ordered();
        o.reduce_op = op;
        ASSERT_TRUE(IsOk(allreduceOrdered(rt, in, out, o)));
        EXPECT_TRUE(elementsMatch(out,
                                  [&](int64_t i) {
                                    const double base = static_cast<double>(i % 7 + 1);
                                    const double sum = base * n * (n + 1) / 2.0;
                                    switch (op) {
                                      case ReduceOp::kSum:
                                        return sum;
                                      case ReduceOp::kAverage:
                                        return dtype == DataType::kInt32
                                                   ? static_cast<double>(
                                                         static_cast<int64_t>(sum / n))
                                                   : sum / n;
                                      case ReduceOp::kMin:
                                        return base;
                                      default:
                                        return base * n;
                                    }
                                  }))
            << dataTypeName(dtype) << " " << reduceOpName(op);
      }
    }
  });
}

TEST_P(OrderedLaneTest, AllgatherBroadcastAlltoallReducescatterBarrier) {
  const Case c = GetParam();
  runThreadRanks(c.size, [c](Runtime& rt) {
    const int n = rt.size();
    const int r = rt.rank();
    // Allgather: rank r contributes r + 1 rows of 2 * count elements... uneven.
    const int64_t cols = c.count;
    HostTensor mine(DataType::kInt32, {r + 1, cols});
    mine.fill([&](int64_t i) { return 1000 * r + i; });
    OpResult g = runOp(rt, [&](Handle* h) { return rt.allgather(mine.view(), ordered(), h); });
    ASSERT_TRUE(IsOk(g.status));
    std::vector<double> want;
    for (int p = 0; p < n; ++p) {
      for (int64_t i = 0; i < (p + 1) * cols; ++i) want.push_back(1000.0 * p + i);
    }
    EXPECT_EQ(g.output.shape, (Shape{n * (n + 1) / 2, cols}));
    EXPECT_TRUE(elementsMatch(g.output, [&](int64_t i) { return want[static_cast<size_t>(i)]; }));
    // Broadcast from the last rank.
    HostTensor b(DataType::kFloat32, {c.count});
    b.fill([&](int64_t i) { return r == n - 1 ? i * 0.5 : -1.0; });
    OpOptions bo = ordered();
    bo.root = n - 1;
    ASSERT_TRUE(
        IsOk(runOpStatus(rt, [&](Handle* h) { return rt.broadcast(b.view(), b.view(), bo, h); })));
    EXPECT_TRUE(elementsMatch(b, [](int64_t i) { return i * 0.5; }));
    // Alltoall: rank r sends p + 1 rows to rank p; a row is [r, p].
    std::vector<int64_t> splits;
    for (int p = 0; p < n; ++p) splits.push_back(p + 1);
    HostTensor a(DataType::kInt64, {n * (n + 1) / 2, 2});
    int64_t row = 0;
    for (int p = 0; p < n; ++p) {
      for (int k = 0; k <= p; ++k, ++row) {
        a.set(2 * row, r);
        a.set(2 * row + 1, p);
      }
    }
    OpOptions ao = ordered();
    ao.splits = splits;
    OpResult t = runOp(
        rt, [&](Handle* h) { return rt.alltoall(a.view(), ao, h); }, kFetchSplits);
    ASSERT_TRUE(IsOk(t.status));
    EXPECT_EQ(t.received_splits, std::vector<int64_t>(static_cast<size_t>(n), r + 1));
    EXPECT_TRUE(elementsMatch(t.output, [&](int64_t i) {
      return i % 2 == 1 ? r : static_cast<double>(i / 2 / (r + 1));
    }));
    // Reducescatter of n * 2 rows of 1 column: rank r gets rows 2r, 2r + 1.
    HostTensor s(DataType::kFloat32, {2 * n, 1});
    s.fill([&](int64_t i) { return valueOf(r, i); });
    OpResult rs = runOp(rt, [&](Handle* h) { return rt.reducescatter(s.view(), ordered(), h); });
    ASSERT_TRUE(IsOk(rs.status));
    EXPECT_TRUE(elementsMatch(rs.output, [&](int64_t i) {
      return static_cast<double>((2 * r + i) % 7 + 1) * n * (n + 1) / 2.0;
    }));
    ASSERT_TRUE(
        IsOk(runOpStatus(rt, [&](Handle* h) { return rt.barrier(h, kGlobalProcessSet, true); })));
  });
}

// A grouped allreduce is one ordered op of several tensors; a group of
// another size on one rank is a mismatch on every rank.
TEST_P(OrderedLaneTest, GroupedAllreduce) {
  const Case c = GetParam();
  runThreadRanks(c.size, [c](Runtime& rt) {
    const int n = rt.size();
    std::vector<HostTensor> ins, outs;
    for (int k = 0; k < 3; ++k) {
      ins.emplace_back(DataType::kFloat32, Shape{c.count + k});
      outs.emplace_back(DataType::kFloat32, Shape{c.count + k});
      ins.back().fill([&](int64_t i) { return valueOf(rt.rank(), i + k); });
    }
    std::vector<TensorView> in_views, out_views;
    for (int k = 0; k < 3; ++k) {
      in_views.push_back(ins[static_cast<size_t>(k)].view());
      out_views.push_back(outs[static_cast<size_t>(k)].view());
    }
    std::vector<Handle> hs;
    ASSERT_TRUE(IsOk(rt.groupedAllreduce(in_views, out_views, ordered(), &hs)));
    for (Handle h : hs) EXPECT_TRUE(IsOk(finishHandle(rt, h)));
    for (int k = 0; k < 3; ++k) {
      EXPECT_TRUE(elementsMatch(outs[static_cast<size_t>(k)], [&](int64_t i) {
        return static_cast<double>((i + k) % 7 + 1) * n * (n + 1) / 2.0;
      }));
    }
    if (n == 1) return;
    const size_t mine = rt.rank() == 0 ? 2 : 3;
    in_views.resize(mine);
    out_views.resize(mine);
    ASSERT_TRUE(IsOk(rt.groupedAllreduce(in_views, out_views, ordered(), &hs)));
    for (Handle h : hs) {
      Status st = finishHandle(rt, h);
      EXPECT_TRUE(HasCode(st, StatusCode::kMismatch));
      EXPECT_TRUE(ContainsAll(st.message(), {"ordered collective #2", "numbers of tensors"}));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, OrderedLaneTest,
                         ::testing::Values(Case{1, 3}, Case{2, 3}, Case{3, 3}, Case{4, 3},
                                           Case{2, 70000}, Case{3, 70000}),
                         caseName);

// allgatherInto: a buffer of exactly the result's size is written in place
// (no runtime output); another size leaves it alone and the handle holds the
// result. Both lanes, uneven rows.
TEST_P(OrderedLaneTest, AllgatherIntoTheCallersBuffer) {
  const Case c = GetParam();
  runThreadRanks(c.size, [c](Runtime& rt) {
    const int n = rt.size();
    const int r = rt.rank();
    HostTensor mine(DataType::kFloat32, {r + 1, c.count});
    mine.fill([&](int64_t i) { return 100.0 * r + i; });
    std::vector<double> want;
    for (int p = 0; p < n; ++p) {
      for (int64_t i = 0; i < (p + 1) * c.count; ++i) want.push_back(100.0 * p + i);
    }
    for (bool use_lane : {true, false}) {
      OpOptions o = ordered();
      o.ordered = use_lane;
      o.name = "into";
      HostTensor exact(DataType::kFloat32, {static_cast<int64_t>(want.size())});
      Handle h = 0;
      ASSERT_TRUE(IsOk(rt.allgatherInto(mine.view(), exact.view(), o, &h)));
      ASSERT_TRUE(IsOk(rt.wait(h)));
      EXPECT_EQ(rt.output(h), nullptr) << "written into the caller's buffer";
      EXPECT_TRUE(IsOk(rt.release(h)));
      EXPECT_TRUE(elementsMatch(exact, [&](int64_t i) { return want[static_cast<size_t>(i)]; }));
      HostTensor other(DataType::kFloat32, {static_cast<int64_t>(want.size()) + 1});
      other.fill([](int64_t) { return -1.0; });
      OpResult g =
          runOp(rt, [&](Handle* hh) { return rt.allgatherInto(mine.view(), other.view(), o, hh); });
      ASSERT_TRUE(IsOk(g.status));
      ASSERT_TRUE(g.has_output) << "another size: the result is the handle's";
      EXPECT_TRUE(elementsMatch(g.output, [&](int64_t i) { return want[static_cast<size_t>(i)]; }));
      EXPECT_TRUE(elementsMatch(other, [](int64_t) { return -1.0; }));
    }
  });
}

// ---- disagreements: kMismatch on every rank, never a hang ----------------------

// After a disagreement the lane goes on: a matching allreduce works.
void expectLaterOpWorks(Runtime& rt, int32_t set, int members) {
  HostTensor in(DataType::kInt32, {4});
  HostTensor out(DataType::kInt32, {4});
  in.fill([](int64_t i) { return i; });
  ASSERT_TRUE(IsOk(allreduceOrdered(rt, in, out, ordered(set))));
  EXPECT_TRUE(elementsMatch(out, [&](int64_t i) { return static_cast<double>(members * i); }));
}

// The set of the last two ranks (size >= 3), else the world.
int32_t setUnderTest(Runtime& rt, bool use_set, std::vector<int>* members) {
  members->clear();
  if (!use_set) {
    for (int r = 0; r < rt.size(); ++r) members->push_back(r);
    return kGlobalProcessSet;
  }
  *members = {rt.size() - 2, rt.size() - 1};
  int32_t id = -1;
  EXPECT_TRUE(IsOk(rt.addProcessSet(*members, &id)));
  return id;
}

// Runs `body(rank within set, set)` on the members of the world or of a set.
void onMembers(int size, bool use_set,
               const std::function<void(Runtime&, int, int32_t, int)>& body) {
  runThreadRanks(size, [&](Runtime& rt) {
    std::vector<int> members;
    const int32_t set = setUnderTest(rt, use_set, &members);
    int me = -1;
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i] == rt.rank()) me = static_cast<int>(i);
    }
    if (me >= 0) {
      body(rt, me, set, static_cast<int>(members.size()));
      expectLaterOpWorks(rt, set, static_cast<int>(members.size()));
    }
  });
}

class OrderedMismatchSetTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

std::string setCaseName(const ::testing::TestParamInfo<std::tuple<int, bool>>& info) {
  return "size" + std::to_string(std::get<0>(info.param)) +
         (std::get<1>(info.param) ? "_set" : "_world");
}

TEST_P(OrderedMismatchSetTest, AllreduceAgainstAllgather) {
  const auto [size, use_set] = GetParam();
  onMembers(size, use_set, [](Runtime& rt, int me, int32_t set, int) {
    HostTensor in(DataType::kFloat32, {4});
    HostTensor out(DataType::kFloat32, {4});
    Status st;
    if (me == 0) {
      st = allreduceOrdered(rt, in, out, ordered(set));
    } else {
      st = runOp(rt, [&](Handle* h) { return rt.allgather(in.view(), ordered(set), h); }).status;
    }
    EXPECT_TRUE(HasCode(st, StatusCode::kMismatch));
    EXPECT_TRUE(ContainsAll(
        st.message(), {"ordered collective #1", "collectives differ", "allreduce", "allgather"}));
  });
}

TEST_P(OrderedMismatchSetTest, ShapesDtypesAndRootsDiffer) {
  const auto [size, use_set] = GetParam();
  onMembers(size, use_set, [](Runtime& rt, int me, int32_t set, int) {
    HostTensor in(DataType::kFloat32, {17 + me});
    HostTensor out(DataType::kFloat32, {17 + me});
    Status st = allreduceOrdered(rt, in, out, ordered(set));
    EXPECT_TRUE(HasCode(st, StatusCode::kMismatch));
    EXPECT_TRUE(ContainsAll(st.message(), {"ordered collective #1", "shapes", "[17]", "[18]"}));
    const DataType dtype = me == 0 ? DataType::kInt32 : DataType::kFloat32;
    HostTensor d(dtype, {8});
    st = allreduceOrdered(rt, d, d, ordered(set));
    EXPECT_TRUE(HasCode(st, StatusCode::kMismatch));
    EXPECT_TRUE(ContainsAll(st.message(), {"ordered collective #2", "dtypes", "int32", "float32"}));
    ProcessSetInfo info;
    ASSERT_TRUE(IsOk(rt.processSet(set, &info)));
    OpOptions bo = ordered(set);
    bo.root = info.ranks[me == 0 ? 0 : 1];
    HostTensor f(DataType::kFloat32, {8});
    st = runOpStatus(rt, [&](Handle* h) { return rt.broadcast(f.view(), f.view(), bo, h); });
    EXPECT_TRUE(HasCode(st, StatusCode::kMismatch));
    EXPECT_TRUE(ContainsAll(st.message(), {"ordered collective #3", "roots"}));
  });
}

// Rank 0 of the set skips the first of two calls: its #1 is the others' #2.
TEST_P(OrderedMismatchSetTest, OneRankSkippedACall) {
  const auto [size, use_set] = GetParam();
  onMembers(size, use_set, [](Runtime& rt, int me, int32_t set, int) {
    HostTensor first(DataType::kFloat32, {5});
    HostTensor second(DataType::kInt64, {2, 3});
    Status st;
    if (me != 0) {
      st = allreduceOrdered(rt, first, first, ordered(set));
      EXPECT_TRUE(HasCode(st, StatusCode::kMismatch));
      st =
          runOp(rt, [&](Handle* h) { return rt.allgather(second.view(), ordered(set), h); }).status;
      EXPECT_TRUE(HasCode(st, StatusCode::kMismatch)) << "#2 meets rank 0's next call";
    } else {
      st =
          runOp(rt, [&](Handle* h) { return rt.allgather(second.view(), ordered(set), h); }).status;
      EXPECT_TRUE(HasCode(st, StatusCode::kMismatch));
      EXPECT_TRUE(ContainsAll(st.message(), {"ordered collective #1", "allreduce", "allgather"}));
      // Rank 0 issues a second call too, so the lane is in step again.
      st = allreduceOrdered(rt, first, first, ordered(set));
      EXPECT_TRUE(HasCode(st, StatusCode::kMismatch));
    }
  });
}

// A bad argument on one rank fails the op on every member, naming that rank.
TEST_P(OrderedMismatchSetTest, LocalErrorFailsEveryMember) {
  const auto [size, use_set] = GetParam();
  onMembers(size, use_set, [](Runtime& rt, int me, int32_t set, int) {
    HostTensor in(DataType::kFloat32, {6});
    HostTensor out(DataType::kFloat32, {me == 0 ? 5 : 6});  // rank 0: output too small
    Status st = allreduceOrdered(rt, in, out, ordered(set));
    EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument)) << st.toString();
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, OrderedMismatchSetTest,
                         ::testing::Values(std::make_tuple(2, false), std::make_tuple(3, false),
                                           std::make_tuple(3, true), std::make_tuple(4, true)),
                         setCaseName);

// ---- both lanes at once, from several threads ------------------------------------

TEST(OrderedLaneConcurrency, OrderedAndNegotiatedOpsFromSeveralThreads) {
  runThreadRanks(3, [](Runtime& rt) {
    const int n = rt.size();
    constexpr int kRounds = 40;
    std::atomic<int> failures{0};
    // Thread A: ordered allreduces of growing size (some inline, some not).
    std::thread ordered_thread([&] {
      for (int k = 0; k < kRounds; ++k) {
        const int64_t count = (k % 4 == 0) ? 30000 : k + 1;
        HostTensor in(DataType::kInt32, {count});
        HostTensor out(DataType::kInt32, {count});
        in.fill([&](int64_t i) { return i + rt.rank() * k; });
        Status st = allreduceOrdered(rt, in, out, ordered());
        EXPECT_TRUE(IsOk(st)) << "ordered round " << k;
        if (!st.isOk() ||
            !elementsMatch(out, [&](int64_t i) { return n * i + k * n * (n - 1) / 2.0; })) {
          ++failures;
        }
      }
    });
    // Thread B: negotiated, named allreduces.
    std::thread negotiated_thread([&] {
      for (int k = 0; k < kRounds; ++k) {
        const int j = k;
        HostTensor in(DataType::kFloat32, {64});
        HostTensor out(DataType::kFloat32, {64});
        in.fill([&](int64_t i) { return i + j; });
        OpOptions o;
        o.name = "negotiated." + std::to_string(j);
        Status st = allreduceOrdered(rt, in, out, o);
        EXPECT_TRUE(IsOk(st)) << "negotiated round " << k;
        if (!st.isOk() || !elementsMatch(out, [&](int64_t i) { return n * (i + j); })) {
          ++failures;
        }
      }
    });
    ordered_thread.join();
    negotiated_thread.join();
    EXPECT_EQ(failures.load(), 0);
  });
}

// Ops nobody waits for run on the lane's thread: polling sees them complete.
TEST(OrderedLaneConcurrency, OpsNobodyWaitsForComplete) {
  runThreadRanks(2, [](Runtime& rt) {
    std::vector<HostTensor> bufs;
    for (int k = 0; k < 8; ++k) bufs.emplace_back(DataType::kInt32, std::vector<int64_t>{3});
    std::vector<Handle> handles;
    for (int k = 0; k < 8; ++k) {
      bufs[static_cast<size_t>(k)].fill([&](int64_t i) { return k + i; });
      Handle h = 0;
      ASSERT_TRUE(IsOk(rt.allreduce(bufs[static_cast<size_t>(k)].view(),
                                    bufs[static_cast<size_t>(k)].view(), ordered(), &h)));
      handles.push_back(h);
    }
    for (Handle h : handles) {
      for (int spin = 0; spin < 20000 && !rt.poll(h); ++spin) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      EXPECT_TRUE(rt.poll(h));
      EXPECT_TRUE(IsOk(finishHandle(rt, h)));
    }
    for (int k = 0; k < 8; ++k) {
      EXPECT_TRUE(
          elementsMatch(bufs[static_cast<size_t>(k)], [&](int64_t i) { return 2.0 * (k + i); }));
    }
  });
}

}  // namespace
}  // namespace test
}  // namespace tutti
