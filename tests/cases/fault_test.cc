// docs/cases.md 21-22: a SIGKILLed rank and a rank that never submits, with ranks
// as forked processes (support/process_harness).

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/support/host_tensor.h"
#include "tests/support/op_checks.h"
#include "tests/support/process_harness.h"

namespace tutti {
namespace test {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// An allreduce of x + r checked in the child; false (and a failed check) on error.
bool warmupAllreduce(Runtime& rt, ProcessRank& self) {
  HostTensor in(DataType::kFloat32, {100});
  HostTensor out(DataType::kFloat32, {100});
  in.fill([&](int64_t i) { return i + rt.rank(); });
  OpOptions opts;
  opts.name = "warmup";
  Status st =
      runOpStatus(rt, [&](Handle* h) { return rt.allreduce(in.view(), out.view(), opts, h); });
  if (!self.check(st.isOk(), "warmup allreduce: " + st.toString())) return false;
  const double size = rt.size();
  return self.check(elementsMatch(out, [&](int64_t i) { return size * i + size * (size - 1) / 2; }),
                    "warmup allreduce result");
}

std::string describeAll(const std::vector<ProcessResult>& results) {
  std::string out;
  for (const auto& r : results) out += r.describe() + "\n";
  return out;
}

// "rank 2", "ranks 2", "rank(s): 2", ...
bool namesRank(const std::string& text, int rank) {
  return std::regex_search(text, std::regex("rank[^0-9]{0,12}\\b" + std::to_string(rank) + "\\b"));
}

// ---- 21. a rank is SIGKILLed while the others wait in an allreduce -------------------
constexpr double kPeerTimeoutSeconds = 5;

using KillParam = std::tuple<int, int>;  // world size, killed rank

class PeerLostTest : public ::testing::TestWithParam<KillParam> {};

TEST_P(PeerLostTest, SurvivorsFailWithPeerLostNamingTheRankAndExitCleanly) {
  const auto [size, victim] = GetParam();
  ClusterOptions options;
  options.timeout_seconds = kPeerTimeoutSeconds;
  ProcessPlan plan;
  plan.kill_rank = victim;
  plan.kill_delay_seconds = 0.3;  // the survivors are inside wait() by then
  plan.deadline_seconds = 60;
  plan.require_clean_shutdown = false;  // shutdown after a lost peer may report it
  auto body = [victim = victim](Runtime& rt, ProcessRank& self) {
    if (!warmupAllreduce(rt, self)) return;
    if (rt.rank() == victim) {
      self.signalReady();
      std::this_thread::sleep_for(std::chrono::seconds(120));  // SIGKILLed here
      return;
    }
    HostTensor in(DataType::kFloat32, {4096});
    HostTensor out(DataType::kFloat32, {4096});
    OpOptions opts;
    opts.name = "doomed";
    Handle h = -1;
    Status st = rt.allreduce(in.view(), out.view(), opts, &h);
    if (!self.check(st.isOk(), "enqueue of doomed: " + st.toString())) return;
    self.signalReady();
    const auto start = Clock::now();
    st = rt.wait(h, 4 * kPeerTimeoutSeconds);
    const double waited = secondsSince(start);
    self.check(st.code() == StatusCode::kPeerLost,
               "doomed: expected 'peer lost', got " + st.toString());
    self.check(namesRank(st.message(), victim), "doomed: message does not name rank " +
                                                    std::to_string(victim) + ": " + st.message());
    self.check(waited <= 2 * kPeerTimeoutSeconds + 1,
               "doomed failed after " + std::to_string(waited) + " s, more than twice the " +
                   std::to_string(kPeerTimeoutSeconds) + " s timeout");
    if (rt.poll(h)) rt.release(h);
    // Once a peer is lost, new ops fail too (at enqueue or on their handle).
    Handle later = -1;
    Status enq = rt.allreduce(in.view(), out.view(), named("after_loss"), &later);
    Status later_status = enq.isOk() ? rt.wait(later, 4 * kPeerTimeoutSeconds) : enq;
    self.check(
        later_status.code() == StatusCode::kPeerLost,
        "an op enqueued after the loss: expected 'peer lost', got " + later_status.toString());
  };
  const auto results = runProcessRanks(size, body, options, plan);
  ASSERT_EQ(static_cast<int>(results.size()), size);
  for (const auto& r : results) {
    SCOPED_TRACE(r.describe());
    EXPECT_FALSE(r.timed_out);
    if (r.rank == victim) {
      EXPECT_EQ(r.term_signal, 9) << "the victim was not the one killed";
      continue;
    }
    EXPECT_TRUE(r.exited) << "a survivor did not exit normally";
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_GE(r.seconds_after_kill, 0);
    EXPECT_LE(r.seconds_after_kill, 2 * kPeerTimeoutSeconds + 5)
        << "a survivor took too long to fail and exit after the kill";
  }
}

// Every rank but `victim` exited 0 within twice the peer timeout of the kill.
void expectSurvivorsExitCleanly(const std::vector<ProcessResult>& results, int victim) {
  for (const auto& r : results) {
    SCOPED_TRACE(r.describe());
    EXPECT_FALSE(r.timed_out);
    if (r.rank == victim) continue;
    EXPECT_TRUE(r.exited);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_LE(r.seconds_after_kill, 2 * kPeerTimeoutSeconds + 5);
  }
}

// A member of a process set is SIGKILLed while the other members wait in the
// set's allreduce: they fail with peer lost naming it, as does the rank
// outside the set (a lost peer ends the job's every set).
TEST(PeerLostTest, SetMembersFailWithPeerLostNamingTheRank) {
  constexpr int kSize = 4, kVictim = 2;
  ClusterOptions options;
  options.timeout_seconds = kPeerTimeoutSeconds;
  ProcessPlan plan;
  plan.kill_rank = kVictim;
  plan.kill_delay_seconds = 0.3;
  plan.deadline_seconds = 60;
  plan.require_clean_shutdown = false;
  auto body = [](Runtime& rt, ProcessRank& self) {
    int32_t set = -1;
    Status st = rt.addProcessSet({1, 2, 3}, &set);
    if (!self.check(st.isOk(), "add_process_set: " + st.toString())) return;
    if (!warmupAllreduce(rt, self)) return;
    if (rt.rank() == kVictim) {
      self.signalReady();
      std::this_thread::sleep_for(std::chrono::seconds(120));  // SIGKILLed here
      return;
    }
    HostTensor in(DataType::kFloat32, {4096});
    HostTensor out(DataType::kFloat32, {4096});
    OpOptions opts = named(rt.rank() == 0 ? "outside" : "in_set");
    if (rt.rank() != 0) opts.process_set = set;
    Handle h = -1;
    st = rt.allreduce(in.view(), out.view(), opts, &h);
    if (!self.check(st.isOk(), "enqueue: " + st.toString())) return;
    self.signalReady();
    st = rt.wait(h, 4 * kPeerTimeoutSeconds);
    self.check(st.code() == StatusCode::kPeerLost, "expected 'peer lost', got " + st.toString());
    self.check(namesRank(st.message(), kVictim), "message does not name rank 2: " + st.message());
  };
  expectSurvivorsExitCleanly(runProcessRanks(kSize, body, options, plan), kVictim);
}

// A point-to-point message (coordinator/point_to_point.h) whose sender dies.
TEST(PeerLostTest, PointToPointRecvFromADeadSender) {
  constexpr double kTimeout = 5;
  ClusterOptions options;
  options.timeout_seconds = kTimeout;
  ProcessPlan plan;
  plan.kill_rank = 1;
  plan.kill_delay_seconds = 0.3;
  plan.require_clean_shutdown = false;
  auto body = [](Runtime& rt, ProcessRank& self) {
    HostTensor t(DataType::kFloat32, {1024});
    if (rt.rank() == 1) {
      self.check(IsOk(runOpStatus(
                     rt, [&](Handle* h) { return rt.send(t.view(), 0, 0, kGlobalProcessSet, h); })),
                 "first message");
      self.signalReady();
      std::this_thread::sleep_for(std::chrono::seconds(60));  // SIGKILLed here
      return;
    }
    self.check(IsOk(runOpStatus(
                   rt, [&](Handle* h) { return rt.recv(t.view(), 1, 0, kGlobalProcessSet, h); })),
               "first message");
    Handle h = -1;
    if (!self.check(rt.recv(t.view(), 1, 0, kGlobalProcessSet, &h).isOk(), "enqueue")) return;
    self.signalReady();
    const auto start = std::chrono::steady_clock::now();
    Status st = rt.wait(h, 4 * kTimeout);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    self.check(st.code() == StatusCode::kPeerLost, "expected peer lost, got " + st.toString());
    self.check(namesRank(st.message(), 1), "does not name rank 1: " + st.message());
    self.check(waited <= 2 * kTimeout + 1, "took " + std::to_string(waited) + " s");
  };
  const auto results = runProcessRanks(2, body, options, plan);
  ASSERT_EQ(results.size(), size_t{2});
  EXPECT_EQ(results[1].term_signal, 9) << results[1].describe();
  EXPECT_TRUE(results[0].exited) << results[0].describe();
  EXPECT_EQ(results[0].exit_code, 0) << results[0].describe();
}

// The ordered lane (coordinator/ordered_lane.h): a rank is SIGKILLed while
// the others wait in an ordered allreduce: every survivor's op fails with
// peer lost naming it, within the timeout, and the survivors exit cleanly.
TEST(PeerLostTest, OrderedOpsFailWithPeerLostNamingTheRank) {
  constexpr int kSize = 3, kVictim = 1;
  ClusterOptions options;
  options.timeout_seconds = kPeerTimeoutSeconds;
  ProcessPlan plan;
  plan.kill_rank = kVictim;
  plan.kill_delay_seconds = 0.3;
  plan.deadline_seconds = 60;
  plan.require_clean_shutdown = false;
  auto body = [](Runtime& rt, ProcessRank& self) {
    OpOptions opts;
    opts.ordered = true;
    HostTensor in(DataType::kFloat32, {100000});  // not inline: the ring's data path
    HostTensor out(DataType::kFloat32, {100000});
    Status st =
        runOpStatus(rt, [&](Handle* h) { return rt.allreduce(in.view(), out.view(), opts, h); });
    if (!self.check(st.isOk(), "first ordered allreduce: " + st.toString())) return;
    if (rt.rank() == kVictim) {
      self.signalReady();
      std::this_thread::sleep_for(std::chrono::seconds(120));  // SIGKILLed here
      return;
    }
    Handle h = -1;
    st = rt.allreduce(in.view(), out.view(), opts, &h);
    if (!self.check(st.isOk(), "enqueue: " + st.toString())) return;
    self.signalReady();
    st = rt.wait(h, 4 * kPeerTimeoutSeconds);
    self.check(st.code() == StatusCode::kPeerLost, "expected 'peer lost', got " + st.toString());
    self.check(namesRank(st.message(), kVictim), "message does not name rank 1: " + st.message());
  };
  expectSurvivorsExitCleanly(runProcessRanks(kSize, body, options, plan), kVictim);
}

std::string killName(const ::testing::TestParamInfo<KillParam>& info) {
  return "size" + std::to_string(std::get<0>(info.param)) + "_kill" +
         std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Cases, PeerLostTest,
                         ::testing::Values(KillParam{3, 2}, KillParam{3, 0}, KillParam{2, 1},
                                           KillParam{4, 2}, KillParam{5, 1}),
                         killName);

// 21 again, with the victim leaving in the middle of a stream of large
// allreduces (collectives in flight on every rank): every survivor still
// names the victim, not a survivor that hung up after noticing the loss.
class PeerLostMidCollectiveTest : public ::testing::TestWithParam<KillParam> {};

TEST_P(PeerLostMidCollectiveTest, SurvivorsNameTheRankThatLeft) {
  const auto [size, victim] = GetParam();
  ClusterOptions options;
  options.timeout_seconds = kPeerTimeoutSeconds;
  ProcessPlan plan;
  plan.deadline_seconds = 60;
  plan.require_clean_shutdown = false;
  auto body = [victim = victim](Runtime& rt, ProcessRank& self) {
    HostTensor in(DataType::kFloat32, {1 << 20});
    HostTensor out(DataType::kFloat32, {1 << 20});
    Status st;
    for (int step = 0; step < 40 && st.isOk(); ++step) {
      Handle h = -1;
      st = rt.allreduce(in.view(), out.view(), named("stream." + std::to_string(step)), &h);
      if (rt.rank() == victim && step == 5) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        _exit(0);  // leaves while the collective runs
      }
      if (st.isOk()) st = rt.wait(h, 4 * kPeerTimeoutSeconds);
    }
    self.check(st.code() == StatusCode::kPeerLost, "expected 'peer lost', got " + st.toString());
    self.check(namesRank(st.message(), victim),
               "message does not name rank " + std::to_string(victim) + ": " + st.message());
  };
  for (int attempt = 0; attempt < 3; ++attempt) {  // the race this guards is timing-dependent
    const auto results = runProcessRanks(size, body, options, plan);
    ASSERT_EQ(static_cast<int>(results.size()), size);
    for (const auto& r : results) {
      SCOPED_TRACE(r.describe());
      EXPECT_FALSE(r.timed_out);
      if (r.rank != victim) {
        EXPECT_EQ(r.exit_code, 0);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, PeerLostMidCollectiveTest,
                         ::testing::Values(KillParam{4, 1}, KillParam{4, 2}, KillParam{5, 3}),
                         killName);

// ---- 21 between collectives: a rank stops while the others negotiate -----------------
// Heartbeats on the control channel (ops/tcp/tcp_mesh.h): a rank SIGSTOPped
// between collectives, whose request the others then wait for, is lost after
// TUTTI_TIMEOUT_SECONDS, not after the stall shutdown (1800 s).
constexpr double kLivenessTimeoutSeconds = 2;

class StoppedBetweenCollectivesTest : public ::testing::TestWithParam<KillParam> {};

TEST_P(StoppedBetweenCollectivesTest, OthersFailWithPeerLostNamingTheStoppedRank) {
  const auto [size, victim] = GetParam();
  ClusterOptions options;
  options.timeout_seconds = kLivenessTimeoutSeconds;
  ProcessPlan plan;
  plan.kill_rank = victim;  // once the others have failed (SIGKILL ends a stopped process)
  for (int r = 0; r < size; ++r) {
    if (r != victim) plan.kill_after_ready.push_back(r);
  }
  plan.kill_delay_seconds = 0.1;
  plan.deadline_seconds = 60;
  plan.require_clean_shutdown = false;
  auto body = [victim = victim](Runtime& rt, ProcessRank& self) {
    if (!warmupAllreduce(rt, self)) return;
    if (rt.rank() == victim) {
      ::raise(SIGSTOP);  // every thread stops, the background thread too
      return;
    }
    HostTensor in(DataType::kFloat32, {64});
    HostTensor out(DataType::kFloat32, {64});
    Handle h = -1;
    Status st = rt.allreduce(in.view(), out.view(), named("after_stop"), &h);
    if (!self.check(st.isOk(), "enqueue: " + st.toString())) return;
    const auto start = Clock::now();
    st = rt.wait(h, 30);
    const double waited = secondsSince(start);
    self.signalReady();
    self.check(st.code() == StatusCode::kPeerLost, "expected 'peer lost', got " + st.toString());
    self.check(namesRank(st.message(), victim),
               "message does not name rank " + std::to_string(victim) + ": " + st.message());
    // The timeout counts from the last message heard from the victim, which
    // may come a heartbeat interval (timeout / 4) and this rank's own
    // scheduling delays before this wait began: half the timeout at least.
    self.check(waited >= 0.5 * kLivenessTimeoutSeconds,
               "failed after " + std::to_string(waited) + " s, before the timeout");
    self.check(waited <= 3 * kLivenessTimeoutSeconds + 3,
               "failed only after " + std::to_string(waited) + " s (timeout " +
                   std::to_string(kLivenessTimeoutSeconds) + " s)");
  };
  const auto results = runProcessRanks(size, body, options, plan);
  ASSERT_EQ(static_cast<int>(results.size()), size);
  for (const auto& r : results) {
    SCOPED_TRACE(r.describe());
    if (r.rank == victim) continue;
    EXPECT_FALSE(r.timed_out);
    EXPECT_TRUE(r.exited);
    EXPECT_EQ(r.exit_code, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, StoppedBetweenCollectivesTest,
                         ::testing::Values(KillParam{3, 2}, KillParam{3, 0}, KillParam{2, 1}),
                         killName);

// The other side of the heartbeats: ranks that are alive but busy for several
// timeouts are not taken for lost. Rank 1's program computes for 3 timeouts
// before it submits; ranks 1 and 2 run a stream of set allreduces for as long
// while rank 0, outside the set, waits in the negotiation for all three.
TEST(LivenessTest, BusyRanksAreNotLost) {
  constexpr double kTimeout = kLivenessTimeoutSeconds;
  ClusterOptions options;
  options.timeout_seconds = kTimeout;
  ProcessPlan plan;
  plan.deadline_seconds = 90;
  auto body = [](Runtime& rt, ProcessRank& self) {
    int32_t set = -1;
    Status st = rt.addProcessSet({1, 2}, &set);
    if (!self.check(st.isOk(), "add_process_set: " + st.toString())) return;
    if (!warmupAllreduce(rt, self)) return;
    if (rt.rank() == 1) std::this_thread::sleep_for(std::chrono::duration<double>(3 * kTimeout));
    if (rt.rank() != 0) {
      HostTensor big(DataType::kFloat32, {1 << 20});
      HostTensor big_out(DataType::kFloat32, {1 << 20});
      // Rank 1's clock decides when the stream ends: element 0 is 1 while it
      // runs, and both members stop at the first sum of 0.
      const auto until = Clock::now() + std::chrono::duration<double>(3 * kTimeout);
      OpOptions opts = named("set_stream");
      opts.process_set = set;
      for (bool more = true; more;) {
        big.fill([&](int64_t i) { return i == 0 && rt.rank() == 1 && Clock::now() < until; });
        st = runOpStatus(
            rt, [&](Handle* h) { return rt.allreduce(big.view(), big_out.view(), opts, h); });
        if (!self.check(st.isOk(), "set allreduce: " + st.toString())) return;
        more = static_cast<const float*>(big_out.data())[0] > 0.5f;
      }
    }
    HostTensor in(DataType::kFloat32, {64});
    HostTensor out(DataType::kFloat32, {64});
    in.fill([&](int64_t i) { return i * (rt.rank() + 1); });
    st = runOpStatus(
        rt, [&](Handle* h) { return rt.allreduce(in.view(), out.view(), named("late"), h); });
    if (!self.check(st.isOk(), "late allreduce: " + st.toString())) return;
    self.check(elementsMatch(out, [](int64_t i) { return 6.0 * i; }), "late allreduce result");
  };
  const auto results = runProcessRanks(3, body, options, plan);
  for (const auto& r : results) {
    SCOPED_TRACE(r.describe());
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.exit_code, 0);
  }
}

// ---- 22. a rank never submits a tensor the others submitted ----------------------------
using StallParam = std::tuple<int, int>;  // world size, rank that never submits

class StallTest : public ::testing::TestWithParam<StallParam> {};

// The message part of tutti log lines ("[tutti WARNING rank 0 file.cc:12] msg")
// of level `level` that contain `needle`.
std::vector<std::string> logMessages(const std::string& log, const std::string& level,
                                     const std::string& needle) {
  std::vector<std::string> found;
  std::istringstream lines(log);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("[tutti " + level, 0) != 0) continue;
    const size_t end = line.find("] ");
    if (end == std::string::npos) continue;
    const std::string message = line.substr(end + 2);
    if (message.find(needle) != std::string::npos) found.push_back(message);
  }
  return found;
}

TEST_P(StallTest, WarningNamesTensorAndMissingRanksThenOpFailsOnSubmitters) {
  const auto [size, missing] = GetParam();
  ClusterOptions options;
  options.stall_check_time_seconds = 1;
  options.stall_shutdown_time_seconds = 2;
  ProcessPlan plan;
  plan.deadline_seconds = 60;
  plan.require_clean_shutdown = false;
  auto body = [missing = missing](Runtime& rt, ProcessRank& self) {
    if (!warmupAllreduce(rt, self)) return;
    if (rt.rank() == missing) {
      // Never submits; stays alive until the submitters have failed.
      std::this_thread::sleep_for(std::chrono::seconds(6));
      return;
    }
    HostTensor in(DataType::kFloat32, {64});
    HostTensor out(DataType::kFloat32, {64});
    OpOptions opts;
    opts.name = "stalled_grad";
    Handle h = -1;
    Status st = rt.allreduce(in.view(), out.view(), opts, &h);
    if (!self.check(st.isOk(), "enqueue: " + st.toString())) return;
    const auto start = Clock::now();
    st = rt.wait(h, 20);
    const double waited = secondsSince(start);
    self.check(st.code() == StatusCode::kStalled, "expected 'stalled', got " + st.toString());
    self.check(st.message().find("stalled_grad") != std::string::npos,
               "the stalled error does not name the tensor: " + st.message());
    self.check(namesRank(st.message(), missing), "the stalled error does not name missing rank " +
                                                     std::to_string(missing) + ": " + st.message());
    self.check(waited >= 1.5,
               "failed after " + std::to_string(waited) + " s, before the 2 s stall shutdown time");
    self.check(waited <= 10, "failed only after " + std::to_string(waited) + " s");
  };
  const auto results = runProcessRanks(size, body, options, plan);
  ASSERT_EQ(static_cast<int>(results.size()), size);
  // The warning may come from any rank (the coordinator, most likely); the
  // log prefix, which names the logging rank, is not searched.
  std::string all_logs;
  for (const auto& r : results) {
    SCOPED_TRACE(r.describe());
    EXPECT_FALSE(r.timed_out);
    EXPECT_TRUE(r.exited);
    EXPECT_EQ(r.exit_code, 0);
    all_logs += r.stderr_text;
  }
  const auto warnings = logMessages(all_logs, "WARNING", "stalled_grad");
  ASSERT_FALSE(warnings.empty()) << "no WARNING naming stalled_grad in any rank's log:\n"
                                 << describeAll(results);
  bool names_missing = false;
  for (const auto& w : warnings) names_missing = names_missing || namesRank(w, missing);
  EXPECT_TRUE(names_missing) << "no stall warning names missing rank " << missing << ":\n"
                             << describeAll(results);
  bool says_deadline = false;
  for (const auto& w : warnings) {
    says_deadline = says_deadline || w.find("this op fails in ") != std::string::npos;
  }
  EXPECT_TRUE(says_deadline) << "no stall warning says when the op fails:\n"
                             << describeAll(results);
}

std::string stallName(const ::testing::TestParamInfo<StallParam>& info) {
  return "size" + std::to_string(std::get<0>(info.param)) + "_missing" +
         std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Cases, StallTest, ::testing::Values(StallParam{3, 2}, StallParam{3, 0}),
                         stallName);

}  // namespace
}  // namespace test
}  // namespace tutti
