// Process sets (coordinator/process_sets.h, docs/process-sets.md): every
// collective over even/odd sets, overlapping sets, a set of one rank, the
// same name in two sets at once, idle non-members. Expected values are
// computed here from the members' global ranks.

#include <gtest/gtest.h>

#include <numeric>
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

// Ranks r with r % 2 == parity.
std::vector<int> byParity(int size, int parity) {
  std::vector<int> ranks;
  for (int r = parity; r < size; r += 2) ranks.push_back(r);
  return ranks;
}

int32_t addSet(Runtime& rt, const std::vector<int>& ranks) {
  int32_t id = -1;
  Status st = rt.addProcessSet(ranks, &id);
  EXPECT_TRUE(IsOk(st));
  return id;
}

OpOptions inSet(const std::string& name, int32_t set) {
  OpOptions o = named(name);
  o.process_set = set;
  return o;
}

// The even and odd sets (the odd one is empty at size 1, so not registered);
// returns the set of this rank and its members.
int32_t evenOddSet(Runtime& rt, std::vector<int>* members) {
  const int size = rt.size();
  // At size 1 the even set is every rank: the global set already.
  const int32_t even = size == 1 ? kGlobalProcessSet : addSet(rt, byParity(size, 0));
  const int32_t odd = size > 1 ? addSet(rt, byParity(size, 1)) : -1;
  *members = byParity(size, rt.rank() % 2);
  return rt.rank() % 2 == 0 ? even : odd;
}

// Ranks leave together: a rank whose set finished early must not shut down
// (which stops the whole job, as in Horovod) while another set still runs.
void leaveTogether(Runtime& rt) {
  EXPECT_TRUE(IsOk(runOpStatus(rt, [&](Handle* h) { return rt.barrier(h); })));
}

class ProcessSetTest : public ::testing::TestWithParam<int> {};

TEST_P(ProcessSetTest, AllreduceOverEvenAndOddSetsSumsTheMembersOnly) {
  runThreadRanks(GetParam(), [](Runtime& rt) {
    std::vector<int> members;
    const int32_t set = evenOddSet(rt, &members);
    const double n = members.size();
    const double rank_sum = std::accumulate(members.begin(), members.end(), 0.0);
    for (DataType dtype : allDataTypes()) {
      if (dtype == DataType::kBool) continue;
      SCOPED_TRACE(dataTypeName(dtype));
      HostTensor in(dtype, {17, 3});
      HostTensor out(dtype, {17, 3});
      in.fill([&](int64_t i) { return (i % 7) + rt.rank(); });
      OpOptions o = inSet(std::string("ar.") + dataTypeName(dtype), set);
      ASSERT_TRUE(IsOk(
          runOpStatus(rt, [&](Handle* h) { return rt.allreduce(in.view(), out.view(), o, h); })));
      EXPECT_TRUE(elementsMatch(out, [&](int64_t i) { return n * (i % 7) + rank_sum; }));
    }
    // Average over the set divides by the set's size.
    HostTensor in(DataType::kFloat64, {5});
    HostTensor out(DataType::kFloat64, {5});
    in.fill([&](int64_t) { return rt.rank(); });
    OpOptions o = inSet("ar.avg", set);
    o.reduce_op = ReduceOp::kAverage;
    ASSERT_TRUE(IsOk(
        runOpStatus(rt, [&](Handle* h) { return rt.allreduce(in.view(), out.view(), o, h); })));
    EXPECT_TRUE(elementsMatch(
        out, [&](int64_t) { return rank_sum / n; }, 1e-12));
    leaveTogether(rt);
  });
}

TEST_P(ProcessSetTest, AllgatherConcatenatesTheMembersInTheirOrder) {
  runThreadRanks(GetParam(), [](Runtime& rt) {
    std::vector<int> members;
    const int32_t set = evenOddSet(rt, &members);
    // Rank r contributes r + 1 rows of 3, filled with r.
    HostTensor in(DataType::kInt32, {rt.rank() + 1, 3});
    in.fill([&](int64_t) { return rt.rank(); });
    OpResult res =
        runOp(rt, [&](Handle* h) { return rt.allgather(in.view(), inSet("ag", set), h); });
    ASSERT_TRUE(IsOk(res.status));
    std::vector<double> expected;
    for (int m : members) expected.insert(expected.end(), (m + 1) * 3, m);
    ASSERT_EQ(res.output.view().shape[0], static_cast<int64_t>(expected.size() / 3));
    EXPECT_TRUE(elementsMatch(res.output, [&](int64_t i) { return expected[i]; }));
    leaveTogether(rt);
  });
}

TEST_P(ProcessSetTest, BroadcastFromEveryMemberNamedByGlobalRank) {
  runThreadRanks(GetParam(), [](Runtime& rt) {
    std::vector<int> members;
    const int32_t set = evenOddSet(rt, &members);
    for (int root : members) {
      HostTensor in(DataType::kFloat32, {1025});
      HostTensor out(DataType::kFloat32, {1025});
      in.fill([&](int64_t i) { return rt.rank() * 1000 + i % 100; });
      OpOptions o = inSet("bc." + std::to_string(root), set);
      o.root = root;
      ASSERT_TRUE(IsOk(
          runOpStatus(rt, [&](Handle* h) { return rt.broadcast(in.view(), out.view(), o, h); })));
      EXPECT_TRUE(elementsMatch(out, [&](int64_t i) { return root * 1000 + i % 100; }));
    }
    leaveTogether(rt);
  });
}

TEST_P(ProcessSetTest, AlltoallWithSplitsWithinTheSet) {
  runThreadRanks(GetParam(), [](Runtime& rt) {
    std::vector<int> members;
    const int32_t set = evenOddSet(rt, &members);
    const int n = static_cast<int>(members.size());
    int me = 0;
    while (members[me] != rt.rank()) ++me;
    // Member k sends k + 1 rows (filled with its global rank) to each member.
    HostTensor in(DataType::kInt64, {(me + 1) * n, 2});
    in.fill([&](int64_t) { return rt.rank(); });
    OpOptions o = inSet("a2a", set);
    o.splits.assign(n, me + 1);
    OpResult res = runOp(
        rt, [&](Handle* h) { return rt.alltoall(in.view(), o, h); }, kFetchSplits);
    ASSERT_TRUE(IsOk(res.status));
    std::vector<double> expected;
    std::vector<int64_t> splits;
    for (int k = 0; k < n; ++k) {
      expected.insert(expected.end(), (k + 1) * 2, members[k]);
      splits.push_back(k + 1);
    }
    EXPECT_EQ(res.received_splits, splits);
    EXPECT_TRUE(elementsMatch(res.output, [&](int64_t i) { return expected[i]; }));
    leaveTogether(rt);
  });
}

TEST_P(ProcessSetTest, ReducescatterGivesEachMemberItsRows) {
  runThreadRanks(GetParam(), [](Runtime& rt) {
    std::vector<int> members;
    const int32_t set = evenOddSet(rt, &members);
    const int n = static_cast<int>(members.size());
    int me = 0;
    while (members[me] != rt.rank()) ++me;
    const double rank_sum = std::accumulate(members.begin(), members.end(), 0.0);
    HostTensor in(DataType::kFloat64, {4 * n, 2});
    in.fill([&](int64_t i) { return i + rt.rank(); });
    OpResult res =
        runOp(rt, [&](Handle* h) { return rt.reducescatter(in.view(), inSet("rs", set), h); });
    ASSERT_TRUE(IsOk(res.status));
    ASSERT_EQ(res.output.view().shape[0], 4);
    const int64_t first = static_cast<int64_t>(me) * 4 * 2;
    EXPECT_TRUE(elementsMatch(res.output, [&](int64_t i) { return n * (first + i) + rank_sum; }));
    leaveTogether(rt);
  });
}

TEST_P(ProcessSetTest, GroupedAllreduceAndBarrierInASet) {
  runThreadRanks(GetParam(), [](Runtime& rt) {
    std::vector<int> members;
    const int32_t set = evenOddSet(rt, &members);
    const double n = members.size();
    const double rank_sum = std::accumulate(members.begin(), members.end(), 0.0);
    std::vector<HostTensor> ins, outs;
    for (int64_t k = 1; k <= 5; ++k) {
      ins.emplace_back(DataType::kFloat32, Shape{k * 7});
      outs.emplace_back(DataType::kFloat32, Shape{k * 7});
      ins.back().fill([&](int64_t i) { return i + rt.rank(); });
    }
    std::vector<TensorView> in_views, out_views;
    for (size_t k = 0; k < ins.size(); ++k) {
      in_views.push_back(ins[k].view());
      out_views.push_back(outs[k].view());
    }
    std::vector<Handle> handles;
    ASSERT_TRUE(IsOk(rt.groupedAllreduce(in_views, out_views, inSet("group", set), &handles)));
    for (Handle h : handles) ASSERT_TRUE(IsOk(finishHandle(rt, h)));
    for (const HostTensor& out : outs) {
      EXPECT_TRUE(elementsMatch(out, [&](int64_t i) { return n * i + rank_sum; }));
    }
    EXPECT_TRUE(IsOk(runOpStatus(rt, [&](Handle* h) { return rt.barrier(h, set); })));
    leaveTogether(rt);
  });
}

TEST_P(ProcessSetTest, SameNameInTwoSetsAtOnceAndRepeatedSteps) {
  runThreadRanks(GetParam(), [](Runtime& rt) {
    std::vector<int> members;
    const int32_t set = evenOddSet(rt, &members);
    if (set == kGlobalProcessSet) return;  // size 1: no second set, nothing else runs
    const double rank_sum = std::accumulate(members.begin(), members.end(), 0.0);
    const double world_sum = rt.size() * (rt.size() - 1) / 2.0;
    // Steady state (the response cache serves later steps): the same name in
    // this rank's set and in the global set, both in flight at once.
    for (int step = 0; step < 4; ++step) {
      HostTensor in(DataType::kFloat32, {64});
      HostTensor out_set(DataType::kFloat32, {64});
      HostTensor out_world(DataType::kFloat32, {64});
      in.fill([&](int64_t i) { return i + rt.rank() + step; });
      Handle a = 0, b = 0;
      ASSERT_TRUE(IsOk(rt.allreduce(in.view(), out_set.view(), inSet("grad", set), &a)));
      ASSERT_TRUE(IsOk(rt.allreduce(in.view(), out_world.view(), named("grad"), &b)));
      ASSERT_TRUE(IsOk(finishHandle(rt, a)));
      ASSERT_TRUE(IsOk(finishHandle(rt, b)));
      const double n = members.size(), w = rt.size();
      EXPECT_TRUE(elementsMatch(out_set, [&](int64_t i) { return n * (i + step) + rank_sum; }));
      EXPECT_TRUE(elementsMatch(out_world, [&](int64_t i) { return w * (i + step) + world_sum; }));
    }
    leaveTogether(rt);
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, ProcessSetTest, ::testing::Values(1, 2, 3, 4, 5, 8), sizeName);

class OverlappingSetTest : public ::testing::TestWithParam<int> {};

TEST_P(OverlappingSetTest, ChainOfPairsAndASingletonNeverDeadlock) {
  runThreadRanks(GetParam(), [](Runtime& rt) {
    const int size = rt.size();
    // Pairs {r, r + 1}: every rank but the ends is in two overlapping sets.
    std::vector<int32_t> pairs;
    for (int r = 0; r + 1 < size; ++r) pairs.push_back(addSet(rt, {r, r + 1}));
    const int32_t alone = addSet(rt, {size - 1});
    for (int step = 0; step < 3; ++step) {
      std::vector<Handle> handles;
      std::vector<HostTensor> outs;
      std::vector<int> lows;
      HostTensor in(DataType::kInt32, {1000});
      in.fill([&](int64_t i) { return i % 10 + rt.rank(); });
      outs.reserve(2);
      for (int r = 0; r + 1 < size; ++r) {
        if (rt.rank() != r && rt.rank() != r + 1) continue;
        outs.emplace_back(DataType::kInt32, Shape{1000});
        Handle h = 0;
        // The higher pair first on purpose: ranks enqueue in different orders.
        ASSERT_TRUE(IsOk(rt.allreduce(in.view(), outs.back().view(), inSet("pair", pairs[r]), &h)));
        handles.push_back(h);
        lows.push_back(r);
      }
      for (Handle h : handles) ASSERT_TRUE(IsOk(finishHandle(rt, h)));
      for (size_t k = 0; k < outs.size(); ++k) {
        const int r = lows[k];
        EXPECT_TRUE(elementsMatch(outs[k], [&](int64_t i) { return 2 * (i % 10) + 2 * r + 1; }));
      }
      if (rt.rank() == size - 1) {
        HostTensor out(DataType::kInt32, {1000});
        ASSERT_TRUE(IsOk(runOpStatus(rt, [&](Handle* h) {
          return rt.allreduce(in.view(), out.view(), inSet("alone", alone), h);
        })));
        EXPECT_TRUE(elementsMatch(out, [&](int64_t i) { return i % 10 + rt.rank(); }));
      }
    }
    leaveTogether(rt);
  });
}

TEST_P(OverlappingSetTest, NonMembersStayIdleWhileASetRuns) {
  runThreadRanks(GetParam(), [](Runtime& rt) {
    const int32_t set = addSet(rt, {0, 1});
    if (rt.rank() <= 1) {
      for (int step = 0; step < 20; ++step) {
        HostTensor in(DataType::kFloat64, {33});
        HostTensor out(DataType::kFloat64, {33});
        in.fill([&](int64_t i) { return i * (rt.rank() + 1); });
        ASSERT_TRUE(IsOk(runOpStatus(rt, [&](Handle* h) {
          return rt.allreduce(in.view(), out.view(), inSet("w" + std::to_string(step), set), h);
        })));
        EXPECT_TRUE(elementsMatch(out, [&](int64_t i) { return 3.0 * i; }));
      }
    }
    // Everyone meets again in the global set.
    EXPECT_TRUE(IsOk(runOpStatus(rt, [&](Handle* h) { return rt.barrier(h); })));
  });
}

// Not 2: {0, 1} would be the global set, which cannot be registered again.
INSTANTIATE_TEST_SUITE_P(Sizes, OverlappingSetTest, ::testing::Values(3, 5), sizeName);

}  // namespace
}  // namespace test
}  // namespace tutti
