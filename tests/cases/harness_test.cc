// The harnesses themselves: a failure on any rank reaches the test.

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "tests/support/process_harness.h"
#include "tests/support/thread_harness.h"

namespace tutti {
namespace test {
namespace {

// ---- the process harness itself reports a failing child ------------------------------
TEST(ProcessHarnessTest, ReportsAFailedCheckAsExitCodeOne) {
  auto body = [](Runtime& rt, ProcessRank& self) {
    self.check(rt.size() == 2, "world size");
    self.check(rt.rank() != 1, "rank 1 fails on purpose");
  };
  const auto results = runProcessRanks(2, body, ClusterOptions{}, ProcessPlan{});
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].exit_code, 0) << results[0].describe();
  EXPECT_EQ(results[1].exit_code, 1) << results[1].describe();
  EXPECT_NE(results[1].stderr_text.find("rank 1 fails on purpose"), std::string::npos);
}

// ---- the thread harness reports a failure or an exception on any rank -------------------
TEST(ThreadHarnessTest, ReportsAFailureOnOneRank) {
  EXPECT_NONFATAL_FAILURE_ON_ALL_THREADS(
      runThreadRanks(3, [](Runtime& rt) { EXPECT_NE(rt.rank(), 1) << "deliberate failure"; }),
      "deliberate failure");
}

TEST(ThreadHarnessTest, ReportsAnExceptionWithTheRank) {
  EXPECT_NONFATAL_FAILURE_ON_ALL_THREADS(
      runThreadRanks(3,
                     [](Runtime& rt) {
                       if (rt.rank() == 2) throw std::runtime_error("deliberate exception");
                     }),
      "rank 2 threw: deliberate exception");
}

}  // namespace
}  // namespace test
}  // namespace tutti
