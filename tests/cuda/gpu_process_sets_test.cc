// CUDA tensors over process sets through tutti::Runtime, ranks as threads
// (tests/support/thread_harness) on the one GPU: staged through pinned
// memory and the sets' tcp sub-rings (4 ranks), and per-set NCCL
// communicators (TUTTI_BACKEND=nccl) on sets of one rank each (two ranks of
// one NCCL communicator cannot share a GPU; the two-member NCCL set runs as
// processes in tests/cuda/gpu_set_job.cc). Adasum on CUDA tensors against
// the CPU Adasum on both. Needs a GPU (skips without one): runs under
// scripts/device-check.

#include <gtest/gtest.h>

#include <vector>

#include "coordinator/runtime.h"
#include "tests/cuda/gpu_set_checks.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/support/op_checks.h"
#include "tests/support/thread_harness.h"
#include "tutti/config.h"

namespace tutti {
namespace {

using test::IsOk;

// Registers `ranks` on every rank and returns the set.
ProcessSetInfo addSet(Runtime& rt, const std::vector<int>& ranks) {
  int32_t id = -1;
  EXPECT_TRUE(IsOk(rt.addProcessSet(ranks, &id)));
  ProcessSetInfo set;
  EXPECT_TRUE(IsOk(rt.processSet(id, &set)));
  return set;
}

TEST(GpuProcessSetsTest, SetsOfCudaTensorsThroughTcpStaging) {
  TUTTI_REQUIRE_GPU();
  test::ClusterOptions options;
  options.backend = "tcp";
  test::runThreadRanks(
      4,
      [](Runtime& rt) {
        const int g = rt.rank();
        const std::vector<ProcessSetInfo> sets = {addSet(rt, {0, 2}), addSet(rt, {1, 3}),
                                                  addSet(rt, {1, 2, 3})};
        for (const ProcessSetInfo& set : sets) {
          if (set.rankOf(g) < 0) continue;
          EXPECT_EQ(test::checkSetCollectivesOnCuda(rt, set), "") << "set " << set.id;
          if (set.size() == 2) {
            EXPECT_EQ(test::checkAdasumOnCuda(rt, set), "") << "set " << set.id;
          }
        }
        ProcessSetInfo global;
        ASSERT_TRUE(IsOk(rt.processSet(kGlobalProcessSet, &global)));
        EXPECT_EQ(test::checkAdasumOnCuda(rt, global), "");
        for (const ProcessSetInfo& set : sets) EXPECT_TRUE(IsOk(rt.removeProcessSet(set.id)));
      },
      options);
}

TEST(GpuProcessSetsTest, NcclCommunicatorPerSetOfOneRank) {
  TUTTI_REQUIRE_GPU();
  if (!TUTTI_BUILT_NCCL) GTEST_SKIP() << "this build has no NCCL";
  test::ClusterOptions options;
  options.backend = "nccl";
  test::runThreadRanks(
      2,
      [](Runtime& rt) {
        const int g = rt.rank();
        // Twice: the second registration gets a new id and a new communicator
        // (the first was freed with its set).
        for (int round = 0; round < 2; ++round) {
          const std::vector<ProcessSetInfo> sets = {addSet(rt, {0}), addSet(rt, {1})};
          const ProcessSetInfo& mine = sets[static_cast<size_t>(g)];
          EXPECT_EQ(test::checkSetCollectivesOnCuda(rt, mine), "") << "round " << round;
          EXPECT_EQ(test::checkAdasumOnCuda(rt, mine), "") << "round " << round;
          for (const ProcessSetInfo& set : sets) EXPECT_TRUE(IsOk(rt.removeProcessSet(set.id)));
        }
        // Adasum over the job's two ranks stays on the host path (tcp): it
        // opens no NCCL communicator, so two ranks on one GPU are fine.
        ProcessSetInfo global;
        ASSERT_TRUE(IsOk(rt.processSet(kGlobalProcessSet, &global)));
        EXPECT_EQ(test::checkAdasumOnCuda(rt, global), "");
      },
      options);
}

}  // namespace
}  // namespace tutti
