// pollUntilIdle (ops/poll_deadline.h): the bound counts time without
// progress, progress restarts it, done and failed end the wait at once.

#include "ops/poll_deadline.h"

#include <gtest/gtest.h>

#include <chrono>

namespace tutti {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST(PollDeadlineTest, WorkThatNeverProgressesEndsIdleAfterTheTimeout) {
  int polls = 0;
  const auto start = Clock::now();
  const PollOutcome outcome = pollUntilIdle(
      [&] {
        ++polls;
        return PollStep{};
      },
      milliseconds(50));
  const auto waited = Clock::now() - start;
  EXPECT_EQ(outcome, PollOutcome::kIdle);
  EXPECT_GE(waited, milliseconds(50));
  EXPECT_GT(polls, 1) << "it polls until the deadline, not once";
}

TEST(PollDeadlineTest, ProgressRestartsTheTimeoutSoSlowWorkFinishes) {
  // Ten parts, one every 20 ms: 200 ms in all, four times the 50 ms bound,
  // but never 50 ms without progress.
  int parts = 0;
  auto next = Clock::now() + milliseconds(20);
  const auto start = Clock::now();
  const PollOutcome outcome = pollUntilIdle(
      [&] {
        PollStep step;
        if (Clock::now() >= next) {
          ++parts;
          next = Clock::now() + milliseconds(20);
          step.progressed = true;
          step.done = parts == 10;
        }
        return step;
      },
      milliseconds(50));
  EXPECT_EQ(outcome, PollOutcome::kDone);
  EXPECT_EQ(parts, 10);
  EXPECT_GE(Clock::now() - start, milliseconds(200));
}

TEST(PollDeadlineTest, ProgressThatStopsEndsIdleOneTimeoutAfterTheLastPart) {
  int parts = 0;
  Clock::time_point last_part;
  auto next = Clock::now() + milliseconds(10);
  const PollOutcome outcome = pollUntilIdle(
      [&] {
        PollStep step;
        if (parts < 3 && Clock::now() >= next) {
          ++parts;
          last_part = Clock::now();
          next = last_part + milliseconds(10);
          step.progressed = true;
        }
        return step;
      },
      milliseconds(40));
  EXPECT_EQ(outcome, PollOutcome::kIdle);
  EXPECT_EQ(parts, 3);
  EXPECT_GE(Clock::now() - last_part, milliseconds(40));
}

TEST(PollDeadlineTest, DoneAndFailedEndTheWaitAtOnce) {
  int polls = 0;
  EXPECT_EQ(pollUntilIdle(
                [&] {
                  PollStep step;
                  step.done = ++polls == 3;
                  return step;
                },
                std::chrono::hours(1)),
            PollOutcome::kDone);
  EXPECT_EQ(polls, 3);
  polls = 0;
  EXPECT_EQ(pollUntilIdle(
                [&] {
                  ++polls;
                  PollStep step;
                  step.done = true;  // a failure wins over done
                  step.failed = true;
                  return step;
                },
                std::chrono::hours(1)),
            PollOutcome::kFailed);
  EXPECT_EQ(polls, 1);
}

TEST(PollDeadlineTest, SecondsToDuration) {
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(secondsToDuration(2.5)), milliseconds(2500));
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(secondsToDuration(0.001)), milliseconds(1));
}

}  // namespace
}  // namespace tutti
