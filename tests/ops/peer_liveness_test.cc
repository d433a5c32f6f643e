// PeerLiveness (ops/peer_liveness.h): which heartbeats fall due, which control
// peer counts as silent, and how this rank's own gaps restart the timeout.

#include "ops/peer_liveness.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

namespace tutti {
namespace {

using Clock = PeerLiveness::Clock;
using std::chrono::milliseconds;

const PeerLiveness::IsOpen kAllOpen = [](int) { return true; };

// This rank waits without gaps (a wait every 0.4 s, under interval / 2) from
// `from` to `to` ms after t0.
void waitSteadily(PeerLiveness& liveness, Clock::time_point t0, int from, int to) {
  for (int ms = from; ms <= to; ms += 400) liveness.enterWait(t0 + milliseconds(ms));
  liveness.enterWait(t0 + milliseconds(to));
}

TEST(PeerLivenessTest, RankZeroBeatsToEveryWorkerAndAWorkerToRankZero) {
  const auto t0 = Clock::now();
  PeerLiveness zero(0, 3, 4.0, 4.0);  // interval 1 s
  zero.start(t0);
  EXPECT_EQ(zero.interval(), milliseconds(1000));
  EXPECT_TRUE(zero.heartbeatsDue(t0 + milliseconds(999), kAllOpen).empty());
  EXPECT_EQ(zero.heartbeatsDue(t0 + milliseconds(1000), kAllOpen), (std::vector<int>{1, 2}));
  zero.sent(1, t0 + milliseconds(500));  // any frame counts as a heartbeat
  EXPECT_EQ(zero.heartbeatsDue(t0 + milliseconds(1000), kAllOpen), (std::vector<int>{2}));
  EXPECT_EQ(zero.nextHeartbeat(kAllOpen), t0 + milliseconds(1000));

  PeerLiveness worker(2, 3, 4.0, 4.0);
  worker.start(t0);
  EXPECT_EQ(worker.heartbeatsDue(t0 + milliseconds(1000), kAllOpen), (std::vector<int>{0}));
  EXPECT_FALSE(worker.isControlPeer(1));  // workers never talk to each other
  EXPECT_FALSE(worker.isControlPeer(2));
}

TEST(PeerLivenessTest, APeerNotHeardForTheTimeoutIsSilent) {
  const auto t0 = Clock::now();
  PeerLiveness zero(0, 3, 4.0, 4.0);
  zero.start(t0);
  zero.heard(1, t0 + milliseconds(3000));
  Clock::time_point until{};
  waitSteadily(zero, t0, 0, 3999);
  EXPECT_EQ(zero.silentPeer(t0 + milliseconds(3999), kAllOpen, &until), -1);
  EXPECT_EQ(until, t0 + milliseconds(4000));  // rank 2's deadline comes first
  waitSteadily(zero, t0, 3999, 4000);
  EXPECT_EQ(zero.silentPeer(t0 + milliseconds(4000), kAllOpen, &until), 2);
  // A closed connection is not watched (its loss is reported by the transport).
  EXPECT_EQ(zero.silentPeer(
                t0 + milliseconds(4000), [](int p) { return p != 2; }, &until),
            -1);
  EXPECT_EQ(until, t0 + milliseconds(7000));
  EXPECT_NE(zero.silenceMessage(2).find("rank 2: nothing heard for 4 s (TUTTI_TIMEOUT_SECONDS)"),
            std::string::npos);
}

TEST(PeerLivenessTest, ThisRanksOwnGapGivesEveryPeerAWholeTimeout) {
  const auto t0 = Clock::now();
  PeerLiveness worker(1, 2, 4.0, 4.0);
  worker.start(t0);
  // Busy outside any wait for 10 s: rank 0's heartbeats may wait unread.
  worker.enterWait(t0 + milliseconds(10000));
  Clock::time_point until{};
  EXPECT_EQ(worker.silentPeer(t0 + milliseconds(10000), kAllOpen, &until), -1);
  EXPECT_EQ(until, t0 + milliseconds(14000));
  // Waiting steadily (gaps under interval/2) does not restart it.
  waitSteadily(worker, t0, 10000, 14000);
  EXPECT_EQ(worker.silentPeer(t0 + milliseconds(14000), kAllOpen, &until), 0);
  // Time spent inside a wait is not a gap.
  PeerLiveness zero(0, 2, 4.0, 4.0);
  zero.start(t0);
  zero.enterWait(t0 + milliseconds(100));
  zero.leftWait(t0 + milliseconds(4100));  // slept in one wait for 4 s
  zero.enterWait(t0 + milliseconds(4150));
  EXPECT_EQ(zero.silentPeer(t0 + milliseconds(4150), kAllOpen, &until), 1);
}

TEST(PeerLivenessTest, BeforeItsFirstFrameAPeerHasTheFirstTimeout) {
  const auto t0 = Clock::now();
  PeerLiveness zero(0, 3, 4.0, 10.0);  // a peer may still be connecting to others for 10 s
  zero.start(t0);
  zero.heard(1, t0 + milliseconds(100));
  Clock::time_point until{};
  waitSteadily(zero, t0, 0, 4100);
  EXPECT_EQ(zero.silentPeer(t0 + milliseconds(4100), kAllOpen, &until), 1);
  EXPECT_EQ(zero.silentPeer(
                t0 + milliseconds(4100), [](int p) { return p != 1; }, &until),
            -1);
  EXPECT_EQ(until, t0 + milliseconds(10000));  // rank 2 never sent anything yet
  waitSteadily(zero, t0, 4100, 10000);
  EXPECT_EQ(zero.silentPeer(
                t0 + milliseconds(10000), [](int p) { return p != 1; }, &until),
            2);
}

}  // namespace
}  // namespace tutti
