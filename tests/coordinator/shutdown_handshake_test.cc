// ShutdownHandshake's transitions (coordinator/shutdown_handshake.h), without
// a runtime: states, the deadline, the one announcement and rank 0's acks.

#include "coordinator/shutdown_handshake.h"

#include <gtest/gtest.h>

namespace tutti {
namespace {

using State = ShutdownHandshake::State;
using Clock = ShutdownHandshake::Clock;

TEST(ShutdownHandshakeTest, StartsRunningWithNoDeadline) {
  ShutdownHandshake h(3, 2.0);
  EXPECT_EQ(h.state(), State::kRunning);
  EXPECT_FALSE(h.started());
  EXPECT_FALSE(h.closing());
  EXPECT_FALSE(h.expired(Clock::now() + std::chrono::hours(24)));
  EXPECT_FALSE(h.takeAnnouncement());  // nothing to announce yet
  EXPECT_EQ(h.state(), State::kRunning);
}

TEST(ShutdownHandshakeTest, StartSetsTheDeadlineOnce) {
  ShutdownHandshake h(3, 2.5);
  const Clock::time_point t0 = Clock::now();
  h.start(t0);
  EXPECT_EQ(h.state(), State::kStarted);
  EXPECT_EQ(h.deadline(), t0 + std::chrono::milliseconds(2500));
  // A second start (shutdown() called again) keeps the first deadline.
  h.start(t0 + std::chrono::seconds(1));
  EXPECT_EQ(h.deadline(), t0 + std::chrono::milliseconds(2500));
  EXPECT_FALSE(h.expired(t0 + std::chrono::milliseconds(2499)));
  EXPECT_TRUE(h.expired(t0 + std::chrono::milliseconds(2500)));
}

TEST(ShutdownHandshakeTest, TheShutdownRequestIsAnnouncedOnce) {
  ShutdownHandshake h(2, 1.0);
  h.start(Clock::now());
  EXPECT_TRUE(h.takeAnnouncement());
  EXPECT_EQ(h.state(), State::kAnnounced);
  EXPECT_FALSE(h.takeAnnouncement());
  EXPECT_EQ(h.state(), State::kAnnounced);
}

TEST(ShutdownHandshakeTest, CloseFromRunningStartsTheClock) {
  // A worker told by rank 0 before its own shutdown(): the deadline counts
  // from the close, and nothing is left to announce.
  ShutdownHandshake h(2, 4.0);
  const Clock::time_point t0 = Clock::now();
  h.close(t0);
  EXPECT_EQ(h.state(), State::kClosing);
  EXPECT_TRUE(h.started());
  EXPECT_TRUE(h.closing());
  EXPECT_EQ(h.deadline(), t0 + std::chrono::seconds(4));
  EXPECT_FALSE(h.takeAnnouncement());
}

TEST(ShutdownHandshakeTest, CloseAfterStartKeepsTheStartDeadline) {
  ShutdownHandshake h(2, 4.0);
  const Clock::time_point t0 = Clock::now();
  h.start(t0);
  ASSERT_TRUE(h.takeAnnouncement());
  h.close(t0 + std::chrono::seconds(3));
  EXPECT_EQ(h.state(), State::kClosing);
  EXPECT_EQ(h.deadline(), t0 + std::chrono::seconds(4));
  // Closing is final.
  h.start(t0 + std::chrono::seconds(5));
  EXPECT_EQ(h.state(), State::kClosing);
}

TEST(ShutdownHandshakeTest, Rank0CountsEachWorkersAckOnceWhileClosing) {
  ShutdownHandshake h(4, 1.0);
  h.ack(1);  // before closing: not an ack of the shutdown list
  h.close(Clock::now());
  EXPECT_FALSE(h.allAcked());
  h.ack(1);
  h.ack(1);   // repeated
  h.ack(0);   // rank 0 does not ack itself
  h.ack(4);   // out of range
  h.ack(-1);  // out of range
  EXPECT_FALSE(h.allAcked());
  h.ack(3);
  EXPECT_FALSE(h.allAcked());
  h.ack(2);
  EXPECT_TRUE(h.allAcked());
}

TEST(ShutdownHandshakeTest, OneRankNeedsNoAcks) {
  ShutdownHandshake h(1, 1.0);
  h.close(Clock::now());
  EXPECT_TRUE(h.allAcked());
}

}  // namespace
}  // namespace tutti
