// docs/cases.md 23 (init -> shutdown -> init; handles pending at shutdown) and the
// settings registry's rejection of bad values.

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include "core/settings.h"
#include "tests/support/host_tensor.h"
#include "tests/support/op_checks.h"
#include "tests/support/thread_harness.h"

namespace tutti {
namespace test {
namespace {

void allreduceAndCheck(Runtime& rt, const std::string& name) {
  HostTensor in(DataType::kInt64, {300});
  HostTensor out(DataType::kInt64, {300});
  in.fill([&](int64_t i) { return i + rt.rank(); });
  OpOptions opts;
  opts.name = name;
  ASSERT_TRUE(IsOk(
      runOpStatus(rt, [&](Handle* h) { return rt.allreduce(in.view(), out.view(), opts, h); })));
  const int size = rt.size();
  EXPECT_TRUE(elementsMatch(out, [&](int64_t i) { return size * i + size * (size - 1) / 2.0; }));
}

bool isShutdownOrNotInitialized(const Status& st) {
  return st.code() == StatusCode::kShutdown || st.code() == StatusCode::kNotInitialized;
}

// ---- 23. init -> shutdown -> init in one process, with another world size -----------
TEST(LifecycleTest, InitShutdownInitWithAnotherWorldSize) {
  for (int size : {2, 3, 1, 2}) {
    SCOPED_TRACE("job of size " + std::to_string(size));
    runThreadRanks(size, [size](Runtime& rt) {
      EXPECT_EQ(rt.size(), size);
      EXPECT_EQ(rt.localSize(), size);
      EXPECT_EQ(rt.localRank(), rt.rank());
      allreduceAndCheck(rt, "lifecycle");
    });
  }
}

TEST(LifecycleTest, OpsAfterShutdownFailAndShutdownIsIdempotent) {
  runThreadRanks(2, [](Runtime& rt) {
    allreduceAndCheck(rt, "before_shutdown");
    ASSERT_TRUE(IsOk(rt.shutdown()));
    EXPECT_TRUE(IsOk(rt.shutdown())) << "a second shutdown()";
    HostTensor t(DataType::kFloat32, {4});
    Handle h = -1;
    Status st = rt.allreduce(t.view(), t.view(), named("after_shutdown"), &h);
    EXPECT_TRUE(isShutdownOrNotInitialized(st)) << "enqueue after shutdown: " << st.toString();
  });
}

// ---- 23. handles pending at shutdown complete with kShutdown --------------------------
class PendingAtShutdownTest : public ::testing::TestWithParam<int> {};

TEST_P(PendingAtShutdownTest, PendingHandlesCompleteWithShutdown) {
  const int size = GetParam();
  RankSync sync(size);
  runThreadRanks(size, [&sync](Runtime& rt) {
    const int rank = rt.rank();
    // A name no other rank submits: the op cannot complete.
    HostTensor in(DataType::kFloat32, {32});
    HostTensor out(DataType::kFloat32, {32});
    Handle pending = -1;
    ASSERT_TRUE(IsOk(
        rt.allreduce(in.view(), out.view(), named("pending." + std::to_string(rank)), &pending)));
    EXPECT_FALSE(rt.poll(pending));
    // Every rank has its op pending; then all shut down together (shutdown
    // is a handshake between the ranks).
    sync.arriveAndWait();
    EXPECT_TRUE(IsOk(rt.shutdown()));
    EXPECT_TRUE(rt.poll(pending)) << "a pending handle is still pending after shutdown()";
    EXPECT_TRUE(HasCode(rt.wait(pending, 5), StatusCode::kShutdown));
    EXPECT_TRUE(IsOk(rt.release(pending)));
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, PendingAtShutdownTest, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "size" + std::to_string(info.param);
                         });

// ---- bad settings are rejected, naming the variable and the range --------------------
EnvLookup envOf(std::map<std::string, std::string> values) {
  return mapEnv(std::move(values));
}

TEST(SettingsTest, GoodValuesAreRead) {
  Settings s;
  ASSERT_TRUE(IsOk(loadSettings(
      envOf({{"TUTTI_FUSION_THRESHOLD_BYTES", "1024"}, {"TUTTI_CYCLE_TIME_MS", "2.5"}}), &s)));
  EXPECT_EQ(s.fusion_threshold_bytes, 1024);
  EXPECT_EQ(s.cycle_time_ms, 2.5);
}

// No hang forever by default: a stalled op fails after torch.distributed's
// 30 minutes; 0 stays "never".
TEST(SettingsTest, StallShutdownDefaultsTo1800SecondsAndZeroMeansNever) {
  Settings s;
  ASSERT_TRUE(IsOk(loadSettings(envOf({}), &s)));
  EXPECT_EQ(s.stall_shutdown_time_seconds, 1800);
  Settings never;
  ASSERT_TRUE(IsOk(loadSettings(envOf({{"TUTTI_STALL_SHUTDOWN_TIME_SECONDS", "0"}}), &never)));
  EXPECT_EQ(never.stall_shutdown_time_seconds, 0);
}

TEST(SettingsTest, NonNumericFusionThresholdIsRejected) {
  Settings s;
  Status st = loadSettings(envOf({{"TUTTI_FUSION_THRESHOLD_BYTES", "abc"}}), &s);
  EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument));
  EXPECT_TRUE(ContainsAll(st.message(), {"TUTTI_FUSION_THRESHOLD_BYTES", "abc"}));
  EXPECT_TRUE(std::regex_search(st.message(), std::regex("\\[0, [0-9e+.]+\\]")))
      << "no range in: " << st.message();
}

TEST(SettingsTest, NegativeCycleTimeIsRejected) {
  Settings s;
  Status st = loadSettings(envOf({{"TUTTI_CYCLE_TIME_MS", "-1"}}), &s);
  EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument));
  EXPECT_TRUE(ContainsAll(st.message(), {"TUTTI_CYCLE_TIME_MS", "-1", "[0, 10000]"}));
}

}  // namespace
}  // namespace test
}  // namespace tutti
