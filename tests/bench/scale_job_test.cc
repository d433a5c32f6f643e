// The scale harness (bench/scale_job.h) on the real runtime at several N:
// what the star control plane costs per step, in counts that do not depend
// on timing, and that the harness's own pieces (the null backend's size
// check, heartbeats, the memory transport's close) do what bench/scale
// relies on.

#include "bench/scale_job.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

namespace tutti::bench {
namespace {

constexpr uint64_t kTensors = 161;

class ScaleJobTest : public ::testing::TestWithParam<int> {};

TEST_P(ScaleJobTest, EveryListGoesToEveryWorkerAndEveryTensorIsReducedOnce) {
  const int n = GetParam();
  for (bool cache : {true, false}) {
    ScaleOptions options;
    options.timeout_seconds = 60;
    ScaleJob job(n, cache, options);
    ASSERT_TRUE(job.start().isOk());
    std::mt19937 rng(7);
    for (int s = 0; s < 2; ++s) {
      StepFigures f;
      const uint64_t checked = job.collectivesChecked();
      const Status st = job.step(&rng, &f);
      ASSERT_TRUE(st.isOk()) << st.toString();
      ASSERT_GE(f.cycles, 1u);
      ASSERT_LE(f.cycles, kTensors);
      // The star: rank 0 sends each ResponseList to every worker, and hears
      // at least one RequestList from each; a worker sends at least one.
      EXPECT_EQ(f.rank0.sent_messages, f.cycles * static_cast<uint64_t>(n - 1));
      EXPECT_GE(f.rank0.received_messages, static_cast<uint64_t>(n - 1));
      EXPECT_EQ(f.worker.received_messages, f.cycles);
      EXPECT_GE(f.worker.sent_messages, 1u);
      EXPECT_GT(f.rank0.cpu_ns, 0);
      // Fusion: at least one collective, at most one per tensor, the same
      // sizes on every rank (else the step failed).
      const uint64_t collectives = job.collectivesChecked() - checked;
      EXPECT_GE(collectives, 1u);
      EXPECT_LE(collectives, kTensors);
    }
    ASSERT_TRUE(job.shutdown().isOk());
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, ScaleJobTest, ::testing::Values(2, 8, 64),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "n" + std::to_string(info.param);
                         });

TEST(ScaleJobTest, CachedStepsSendSlotIdsNotRequests) {
  // A cache hit goes as an 8-byte slot id instead of a Request with its
  // name: the same step's request bytes are several times smaller.
  ScaleOptions options;
  uint64_t request_bytes[2] = {0, 0};
  for (bool cache : {true, false}) {
    ScaleJob job(4, cache, options);
    ASSERT_TRUE(job.start().isOk());
    std::mt19937 rng(3);
    StepFigures warm, f;
    ASSERT_TRUE(job.step(&rng, &warm).isOk());
    ASSERT_TRUE(job.step(&rng, &f).isOk());
    request_bytes[cache ? 0 : 1] = f.rank0.received_bytes;
  }
  EXPECT_GT(request_bytes[0], 0u);
  EXPECT_LT(request_bytes[0] * 3, request_bytes[1])
      << "cached " << request_bytes[0] << " uncached " << request_bytes[1];
}

TEST(ScaleJobTest, IdleRanksExchangeHeartbeatsAndStayAlive) {
  ScaleOptions options;
  options.timeout_seconds = 1;  // a heartbeat per 0.25 s of silence
  ScaleJob job(4, true, options);
  ASSERT_TRUE(job.start().isOk());
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  // Rank 0 and each of its 3 workers: one heartbeat each way per 0.25 s
  // idle, about 24 at rank 0 in 1.2 s (counted sent and received).
  EXPECT_GE(job.counters(0).heartbeats.load(), 12u);
  EXPECT_GE(job.counters(3).heartbeats.load(), 4u);
  EXPECT_EQ(job.counters(0).sent_messages.load(), 0u);  // heartbeats are not messages
  std::mt19937 rng(1);
  StepFigures f;
  const Status st = job.step(&rng, &f);
  EXPECT_TRUE(st.isOk()) << st.toString();
  EXPECT_TRUE(job.shutdown().isOk());
}

TEST(SizeLedgerTest, ADifferentSizeOnOneRankIsAnErrorNamingBothRanks) {
  SizeLedger ledger(3);
  EXPECT_TRUE(ledger.check(0, "allreduce 4").isOk());
  EXPECT_TRUE(ledger.check(1, "allreduce 4").isOk());
  const Status st = ledger.check(2, "allreduce 5");
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("rank 2"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("rank 0"), std::string::npos) << st.message();
  EXPECT_EQ(ledger.completed(), 1u);
  EXPECT_TRUE(ledger.check(1, "barrier").isOk());  // the next call is its own
  EXPECT_EQ(ledger.completed(), 1u);
}

}  // namespace
}  // namespace tutti::bench
