// Process set mistakes are errors on every rank that would otherwise wait,
// never a hang; later ops still work (coordinator/process_sets.h).

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/host_tensor.h"
#include "tests/support/op_checks.h"
#include "tests/support/thread_harness.h"

namespace tutti {
namespace test {
namespace {

OpOptions inSet(const std::string& name, int32_t set) {
  OpOptions o = named(name);
  o.process_set = set;
  return o;
}

// A global allreduce of ones that must give size(): the job goes on.
void expectJobWorks(Runtime& rt, const std::string& name) {
  HostTensor in(DataType::kInt32, {3});
  HostTensor out(DataType::kInt32, {3});
  in.fill([](int64_t) { return 1; });
  ASSERT_TRUE(IsOk(runOpStatus(
      rt, [&](Handle* h) { return rt.allreduce(in.view(), out.view(), named(name), h); })));
  EXPECT_TRUE(elementsMatch(out, [&](int64_t) { return rt.size(); }));
}

TEST(ProcessSetErrorsTest, DifferentListsAreAMismatchOnEveryRank) {
  runThreadRanks(3, [](Runtime& rt) {
    int32_t id = -1;
    const std::vector<int> mine = rt.rank() == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 2};
    Status st = rt.addProcessSet(mine, &id);
    EXPECT_TRUE(HasCode(st, StatusCode::kMismatch));
    EXPECT_TRUE(
        ContainsAll(st.message(), {"process set ranks", "rank 0 [0, 1]", "ranks [1, 2] [0, 2]"}));
    expectJobWorks(rt, "after.mismatch");
    // The failed registration took no id: the next set is 1.
    ASSERT_TRUE(IsOk(rt.addProcessSet({1, 2}, &id)));
    EXPECT_EQ(id, 1);
  });
}

TEST(ProcessSetErrorsTest, BadRanksOnOneRankFailEveryRank) {
  runThreadRanks(3, [](Runtime& rt) {
    int32_t id = -1;
    const std::vector<int> mine = rt.rank() == 1 ? std::vector<int>{0, 7} : std::vector<int>{0, 2};
    Status st = rt.addProcessSet(mine, &id);
    EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument));
    EXPECT_TRUE(ContainsAll(st.message(), {"rank 1", "7 is out of range", "[0, 2]"}));
    st = rt.addProcessSet({1, 1}, &id);
    EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument));
    EXPECT_TRUE(ContainsAll(st.message(), {"listed twice"}));
    expectJobWorks(rt, "after.bad");
  });
}

TEST(ProcessSetErrorsTest, ExistingSetsAndTheGlobalSetCannotBeAddedAgain) {
  runThreadRanks(3, [](Runtime& rt) {
    int32_t id = -1;
    ASSERT_TRUE(IsOk(rt.addProcessSet({2, 0}, &id)));
    EXPECT_EQ(id, 1);
    Status st = rt.addProcessSet({0, 2}, &id);
    EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument));
    EXPECT_TRUE(ContainsAll(st.message(), {"[0, 2] exists already (id 1)"}));
    st = rt.addProcessSet({0, 1, 2}, &id);
    EXPECT_TRUE(ContainsAll(st.message(), {"exists already (id 0)"}));
    ProcessSetInfo info;
    ASSERT_TRUE(IsOk(rt.processSet(1, &info)));
    EXPECT_EQ(info.ranks, (std::vector<int>{0, 2}));
    EXPECT_EQ(rt.processSets().size(), 2u);
  });
}

TEST(ProcessSetErrorsTest, OpsOnAForeignOrUnknownSetFailAtOnce) {
  runThreadRanks(3, [](Runtime& rt) {
    int32_t id = -1;
    ASSERT_TRUE(IsOk(rt.addProcessSet({0, 1}, &id)));
    HostTensor in(DataType::kFloat32, {4});
    HostTensor out(DataType::kFloat32, {4});
    Handle h = 0;
    if (rt.rank() == 2) {
      Status st = rt.allreduce(in.view(), out.view(), inSet("x", id), &h);
      EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument));
      EXPECT_TRUE(ContainsAll(st.message(), {"rank 2 is not in process set 1", "[0, 1]"}));
    }
    Status st = rt.allreduce(in.view(), out.view(), inSet("y", 42), &h);
    EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument));
    EXPECT_TRUE(ContainsAll(st.message(), {"unknown process set id 42", "registered: 0, 1"}));
    expectJobWorks(rt, "after.foreign");
  });
}

TEST(ProcessSetErrorsTest, RootOutsideTheSetAndShapeMismatchNameGlobalRanks) {
  runThreadRanks(4, [](Runtime& rt) {
    int32_t id = -1;
    ASSERT_TRUE(IsOk(rt.addProcessSet({1, 3}, &id)));
    if (rt.rank() % 2 == 1) {
      HostTensor in(DataType::kFloat32, {4});
      HostTensor out(DataType::kFloat32, {4});
      OpOptions o = inSet("bc", id);
      o.root = rt.rank() == 1 ? 2 : 3;  // rank 1 names a non-member
      Status st =
          runOpStatus(rt, [&](Handle* h) { return rt.broadcast(in.view(), out.view(), o, h); });
      EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument));
      EXPECT_TRUE(ContainsAll(st.message(), {"rank 1", "root rank 2 is not in process set 1"}));
      HostTensor shaped(DataType::kFloat32, {17 + rt.rank()});
      st = runOpStatus(rt, [&](Handle* h) {
        return rt.allreduce(shaped.view(), shaped.view(), inSet("shape", id), h);
      });
      EXPECT_TRUE(HasCode(st, StatusCode::kMismatch));
      EXPECT_TRUE(ContainsAll(st.message(), {"in process set 1", "rank 1 [18]", "rank 3 [20]"}));
    }
    expectJobWorks(rt, "after.root");
  });
}

TEST(ProcessSetErrorsTest, RemovalFailsPendingOpsAndLaterUse) {
  runThreadRanks(3, [](Runtime& rt) {
    int32_t id = -1;
    ASSERT_TRUE(IsOk(rt.addProcessSet({0, 1}, &id)));
    HostTensor in(DataType::kFloat32, {4});
    HostTensor out(DataType::kFloat32, {4});
    Handle pending = 0;
    // Only rank 0 submits: the op waits for rank 1 until the set goes.
    if (rt.rank() == 0) {
      ASSERT_TRUE(IsOk(rt.allreduce(in.view(), out.view(), inSet("p", id), &pending)));
    }
    ASSERT_TRUE(IsOk(rt.removeProcessSet(id)));
    if (rt.rank() == 0) {
      Status st = finishHandle(rt, pending);
      EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument));
      EXPECT_TRUE(ContainsAll(st.message(), {"'p'", "process set 1 was removed"}));
    }
    Handle h = 0;
    EXPECT_TRUE(HasCode(rt.allreduce(in.view(), out.view(), inSet("q", id), &h),
                        StatusCode::kInvalidArgument));
    EXPECT_TRUE(HasCode(rt.removeProcessSet(id), StatusCode::kInvalidArgument));
    Status st = rt.removeProcessSet(kGlobalProcessSet);
    EXPECT_TRUE(ContainsAll(st.message(), {"global process set (id 0) cannot be removed"}));
    // Ids are not reused.
    ASSERT_TRUE(IsOk(rt.addProcessSet({0, 1}, &id)));
    EXPECT_EQ(id, 2);
    expectJobWorks(rt, "after.remove");
  });
}

TEST(ProcessSetErrorsTest, StalledOpInASetFailsNamingTheSetAndMissingRank) {
  ClusterOptions options;
  options.stall_check_time_seconds = 0.2;
  options.stall_shutdown_time_seconds = 0.5;
  RankSync sync(3);
  runThreadRanks(
      3,
      [&sync](Runtime& rt) {
        int32_t id = -1;
        ASSERT_TRUE(IsOk(rt.addProcessSet({1, 2}, &id)));
        if (rt.rank() == 1) {
          HostTensor in(DataType::kFloat32, {4});
          Status st = runOpStatus(rt, [&](Handle* h) {
            return rt.allreduce(in.view(), in.view(), inSet("lonely", id), h);
          });
          EXPECT_TRUE(HasCode(st, StatusCode::kStalled));
          EXPECT_TRUE(ContainsAll(st.message(), {"'lonely' in process set 1", "ranks [2]"}));
        }
        sync.arriveAndWait();  // rank 1's op failed; the job goes on
        expectJobWorks(rt, "after.stall");
      },
      options);
}

// Sets live as long as their runtime: init after shutdown (and so every
// elastic generation, which re-initialises) starts with the global set only.
TEST(ProcessSetErrorsTest, ANewRuntimeStartsWithTheGlobalSetOnly) {
  for (int round = 0; round < 2; ++round) {
    runThreadRanks(2, [](Runtime& rt) {
      ASSERT_EQ(rt.processSets().size(), 1u);
      int32_t id = -1;
      ASSERT_TRUE(IsOk(rt.addProcessSet({1}, &id)));
      EXPECT_EQ(id, 1);
      EXPECT_EQ(rt.processSets().size(), 2u);
    });
  }
}

}  // namespace
}  // namespace test
}  // namespace tutti
