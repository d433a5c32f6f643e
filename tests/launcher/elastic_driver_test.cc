// The elastic driver's state machine (launcher/elastic_driver.h), driven by
// hand-made events and times; the actions are recorded, nothing is started.

#include "launcher/elastic_driver.h"

#include <gtest/gtest.h>

#include "launcher/cli.h"

namespace tutti {
namespace launcher {
namespace {

using Clock = std::chrono::steady_clock;

class Recorder : public ElasticActions {
 public:
  Status startWorker(int id, const std::string& host) override {
    // As the Job words it: the worker and its host first.
    if (host == refuse_host) {
      return Status::invalidArgument("worker " + std::to_string(id) + " on host " + host +
                                     ": cannot run 'agent'");
    }
    started.emplace_back(id, host);
    return Status::ok();
  }
  void stopWorker(int id) override { stopped.push_back(id); }
  void publish(const std::string& key, const std::string& value) override {
    published.emplace_back(key, value);
    store[key] = value;
  }
  void endJob(int code, const std::string& why) override {
    exit_code = code;
    end_why = why;
  }
  void log(const std::string& text) override { logs.push_back(text); }
  bool joined(int generation, int rank) override { return joins.count({generation, rank}) != 0; }

  bool logged(const std::string& part) const {
    for (const auto& l : logs) {
      if (l.find(part) != std::string::npos) return true;
    }
    return false;
  }
  std::string latestMembers() {
    return store["elastic/gen/" + store["elastic/latest"] + "/members"];
  }

  std::string refuse_host;
  std::vector<std::pair<int, std::string>> started;
  std::vector<int> stopped;
  std::vector<std::pair<std::string, std::string>> published;
  std::map<std::string, std::string> store;
  int exit_code = -1;
  std::string end_why;
  std::vector<std::string> logs;
  std::set<std::pair<int, int>> joins;  // (generation, rank) that joined
};

Clock::time_point at(double s) {
  static const Clock::time_point t0 = Clock::now();
  return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

ElasticOptions opts(int np, int min_np, int max_np) {
  ElasticOptions o;
  o.np = np;
  o.min_np = min_np;
  o.max_np = max_np;
  o.elastic_timeout_seconds = 10;
  return o;
}

using Started = std::vector<std::pair<int, std::string>>;

TEST(ElasticDriver, FirstGenerationPublishesMembersBeforeLatest) {
  Recorder r;
  ElasticDriver d(opts(4, 2, 0), r);
  d.start({{"h1", 2}, {"h2", 3}}, at(0));
  EXPECT_EQ(r.started, (Started{{0, "h1"}, {1, "h1"}, {2, "h2"}, {3, "h2"}}));
  ASSERT_EQ(r.published.size(), 2u);
  EXPECT_EQ(r.published[0].first, "elastic/gen/0/members");
  EXPECT_EQ(r.published[0].second,
            "0 0 4 0 2 0 2 h1\n1 1 4 1 2 0 2 h1\n2 2 4 0 2 1 2 h2\n3 3 4 1 2 1 2 h2\n");
  EXPECT_EQ(r.published[1], (std::pair<std::string, std::string>{"elastic/latest", "0"}));
  EXPECT_EQ(d.generation(), 0);
  EXPECT_TRUE(r.logged("elastic: generation 0: 4 workers (ids 0, 1, 2, 3 on h1:2,h2:2)"));
}

TEST(ElasticDriver, FailureBlacklistsTheHostAndFormsTheNextGenerationAtOnce) {
  Recorder r;
  ElasticDriver d(opts(4, 2, 4), r);
  d.start({{"h1", 2}, {"h2", 2}}, at(0));
  d.onWorkerExit(3, true, false, "exited with code 1", at(1));
  EXPECT_EQ(r.stopped, (std::vector<int>{2}));  // the host's other worker
  EXPECT_EQ(d.generation(), 1);
  EXPECT_EQ(r.latestMembers(), "0 0 2 0 2 0 1 h1\n1 1 2 1 2 0 1 h1\n");
  EXPECT_TRUE(r.logged("worker 3 (rank 3 of generation 0) on host h2 exited with code 1"));
  EXPECT_TRUE(
      r.logged("host h2 blacklisted for the rest of the job; stopping its workers (ids 2)"));
  // The stopped worker's exit changes nothing.
  d.onWorkerExit(2, true, true, "was killed by signal 15 (SIGTERM)", at(1.1));
  EXPECT_EQ(d.generation(), 1);
  EXPECT_EQ(r.exit_code, -1);
  // Nothing new runs on h2, even with free slots below --max-np.
  EXPECT_EQ(r.started.size(), 4u);
}

TEST(ElasticDriver, NewRankZeroIsTheLowestSurvivingRankAndNewcomersFollowById) {
  Recorder r;
  ElasticDriver d(opts(3, 1, 5), r);
  d.start({{"a", 1}, {"b", 1}, {"c", 1}, {"d", 2}}, at(0));
  EXPECT_EQ(r.started, (Started{{0, "a"}, {1, "b"}, {2, "c"}}));
  d.onWorkerExit(0, true, false, "exited with code 1", at(1));  // rank 0 dies
  // Topped up to 5 on d (ids 3, 4); survivors 1, 2 keep their order first.
  EXPECT_EQ(r.latestMembers(),
            "1 0 4 0 1 0 3 b\n2 1 4 0 1 1 3 c\n3 2 4 0 2 2 3 d\n4 3 4 1 2 2 3 d\n");
}

TEST(ElasticDriver, BelowMinNpWaitsThenFailsNamingTheMissingCapacity) {
  Recorder r;
  ElasticDriver d(opts(4, 3, 0), r);
  d.start({{"h1", 2}, {"h2", 2}}, at(0));
  d.onWorkerExit(2, true, false, "exited with code 1", at(1));
  EXPECT_EQ(d.generation(), 0);  // no generation of 2
  EXPECT_TRUE(
      r.logged("2 workers possible (hosts h1:2; blacklisted: h2), --min-np 3 needs 3; "
               "waiting up to 10 s (--elastic-timeout) for more"));
  d.onTick(at(10.9));
  EXPECT_EQ(r.exit_code, -1);
  d.onTick(at(11));
  const std::string why =
      "elastic: 2 workers possible (hosts h1:2; blacklisted: h2), --min-np 3 needs 3; gave up "
      "after 10 s (--elastic-timeout)";
  EXPECT_EQ(r.exit_code, kExitRankFailed);
  EXPECT_EQ(r.end_why, why);
  EXPECT_EQ(r.store["elastic/failed"], "tuttirun: " + why);
  EXPECT_TRUE(d.ended());
}

TEST(ElasticDriver, HostsAddedWhileWaitingEndTheWait) {
  Recorder r;
  ElasticDriver d(opts(2, 2, 0), r);
  d.start({{"h1", 1}, {"h2", 1}}, at(0));
  d.onWorkerExit(1, true, false, "exited with code 1", at(1));
  EXPECT_EQ(d.generation(), 0);
  d.onHosts({{"h1", 1}, {"h2", 1}, {"h3", 1}}, at(5));
  EXPECT_EQ(r.started.back(), (std::pair<int, std::string>{2, "h3"}));
  EXPECT_EQ(d.generation(), 1);
  EXPECT_EQ(r.latestMembers(), "0 0 2 0 1 0 2 h1\n2 1 2 0 1 1 2 h3\n");
  d.onTick(at(20));
  EXPECT_EQ(r.exit_code, -1);
}

TEST(ElasticDriver, ResetLimitFailsTheJob) {
  Recorder r;
  ElasticOptions o = opts(3, 1, 0);
  o.reset_limit = 1;
  ElasticDriver d(o, r);
  d.start({{"h1", 1}, {"h2", 1}, {"h3", 1}}, at(0));
  d.onWorkerExit(2, true, false, "exited with code 1", at(1));
  EXPECT_EQ(d.generation(), 1);
  d.onWorkerExit(1, true, false, "exited with code 4", at(2));
  EXPECT_EQ(d.generation(), 1);
  EXPECT_EQ(r.exit_code, kExitRankFailed);
  EXPECT_EQ(r.end_why,
            "elastic: --reset-limit 1 reached: 1 reset done, and another is needed (worker 1 "
            "(rank 1 of generation 1) on host h2 exited with code 4); giving up");
  EXPECT_EQ(r.store["elastic/failed"], "tuttirun: " + r.end_why);
}

TEST(ElasticDriver, ReportedRankIsStoppedAndItsHostBlacklisted) {
  Recorder r;
  ElasticDriver d(opts(4, 1, 0), r);
  d.start({{"h1", 2}, {"h2", 2}}, at(0));
  // Worker 3 and worker 0 name each other (a cut link): rank 0's view wins.
  d.onReports({{0, 3, 0}, {0, 0, 3}}, at(1));
  EXPECT_EQ(r.stopped, (std::vector<int>{3, 2}));
  EXPECT_EQ(d.generation(), 1);
  EXPECT_EQ(r.latestMembers(), "0 0 2 0 2 0 1 h1\n1 1 2 1 2 0 1 h1\n");
  EXPECT_TRUE(r.logged("worker 0 reports rank 3 of generation 0 (worker 3 on host h2) lost"));
  // Late reports about workers already gone, or from them, change nothing.
  d.onReports({{0, 1, 2}, {1, 3, 0}, {0, 0, 9}, {7, 0, 1}}, at(2));
  EXPECT_EQ(d.generation(), 1);
  EXPECT_EQ(r.stopped.size(), 2u);
}

TEST(ElasticDriver, HostsRemovedByDiscoveryAreStoppedNotBlacklisted) {
  Recorder r;
  ElasticDriver d(opts(4, 1, 0), r);
  d.start({{"h1", 2}, {"h2", 2}}, at(0));
  d.onHosts({{"h1", 2}}, at(1));
  EXPECT_EQ(r.stopped, (std::vector<int>{3, 2}));
  EXPECT_EQ(r.latestMembers(), "0 0 2 0 2 0 1 h1\n1 1 2 1 2 0 1 h1\n");
  d.onHosts({{"h1", 2}, {"h2", 1}}, at(2));  // back, with one slot
  EXPECT_EQ(r.started.back(), (std::pair<int, std::string>{4, "h2"}));
  EXPECT_EQ(d.generation(), 2);
  EXPECT_EQ(r.latestMembers(), "0 0 3 0 2 0 2 h1\n1 1 3 1 2 0 2 h1\n4 2 3 0 1 1 2 h2\n");
  d.onHosts({{"h1", 1}, {"h2", 1}}, at(3));  // h1 shrinks: its newest worker goes
  EXPECT_EQ(r.stopped.back(), 1);
  EXPECT_EQ(r.latestMembers(), "0 0 2 0 1 0 2 h1\n4 1 2 0 1 1 2 h2\n");
}

TEST(ElasticDriver, BlacklistCooldownLetsTheHostBackWithNewWorkers) {
  Recorder r;
  ElasticOptions o = opts(2, 1, 2);
  o.cooldown_min_seconds = 1;
  o.cooldown_max_seconds = 4;
  ElasticDriver d(o, r);
  d.start({{"h1", 1}, {"h2", 1}}, at(0));
  d.onWorkerExit(1, true, false, "exited with code 1", at(1));
  EXPECT_TRUE(r.logged("host h2 blacklisted for 1 s (failure 1)"));
  EXPECT_EQ(d.generation(), 1);
  d.onTick(at(1.5));
  EXPECT_EQ(r.started.size(), 2u);
  d.onTick(at(2));
  EXPECT_EQ(r.started.back(), (std::pair<int, std::string>{2, "h2"}));
  EXPECT_EQ(d.generation(), 2);
  EXPECT_EQ(r.latestMembers(), "0 0 2 0 1 0 2 h1\n2 1 2 0 1 1 2 h2\n");
  d.onWorkerExit(2, true, false, "exited with code 1", at(3));
  EXPECT_TRUE(r.logged("host h2 blacklisted for 2 s (failure 2)"));
}

TEST(ElasticDriver, JobEndsWithZeroWhenTheLastGenerationFinished) {
  Recorder r;
  ElasticDriver d(opts(2, 1, 0), r);
  d.start({{"h1", 2}}, at(0));
  d.onWorkerExit(1, false, false, "exited with code 0", at(1));
  EXPECT_TRUE(d.finishing());
  EXPECT_EQ(r.exit_code, -1);
  d.onHosts({{"h1", 2}, {"h2", 2}}, at(1.5));  // no new generation once finishing
  EXPECT_EQ(d.generation(), 0);
  d.onWorkerExit(0, false, false, "exited with code 0", at(2));
  EXPECT_EQ(r.exit_code, kExitOk);
}

// Discovery adds a host after the last commit: generation 1 is published,
// but worker 0 finishes in generation 0 and never joins 1. The newcomer
// waits for a generation that will never meet: it is stopped, and the job
// succeeds at once.
TEST(ElasticDriver, FinishingInAnOlderGenerationStopsTheNewcomersAndSucceeds) {
  Recorder r;
  ElasticDriver d(opts(0, 1, 0), r);
  d.start({{"a", 1}}, at(0));
  r.joins.insert({0, 0});
  d.onHosts({{"a", 1}, {"b", 1}}, at(1));
  ASSERT_EQ(d.generation(), 1);
  EXPECT_EQ(r.latestMembers(), "0 0 2 0 1 0 2 a\n1 1 2 0 1 1 2 b\n");
  d.onWorkerExit(0, false, false, "exited with code 0", at(2));
  EXPECT_EQ(r.stopped, (std::vector<int>{1}));
  EXPECT_EQ(r.exit_code, kExitOk);
  EXPECT_TRUE(r.logged(
      "elastic: worker 0 (rank 0 of generation 0) on host a exited with code 0: the job is "
      "finishing (no new generation); stopping the workers outside generation 0 (ids 1)"));
  // The stopped newcomer's exit changes nothing.
  d.onWorkerExit(1, true, true, "was killed by signal 15 (SIGTERM)", at(2.1));
  EXPECT_EQ(r.exit_code, kExitOk);
}

// The same when a blacklisted host comes back near the end.
TEST(ElasticDriver, FinishingBeforeAHostBackFromTheBlacklistJoinedSucceeds) {
  Recorder r;
  ElasticOptions o = opts(2, 1, 2);
  o.cooldown_min_seconds = 1;
  o.cooldown_max_seconds = 1;
  ElasticDriver d(o, r);
  d.start({{"h1", 1}, {"h2", 1}}, at(0));
  r.joins = {{0, 0}, {0, 1}};
  d.onWorkerExit(1, true, false, "exited with code 1", at(1));
  ASSERT_EQ(d.generation(), 1);
  r.joins.insert({1, 0});
  d.onTick(at(2));  // h2 back: worker 2, generation 2 = {0, 2}
  ASSERT_EQ(d.generation(), 2);
  d.onWorkerExit(0, false, false, "exited with code 0", at(2.5));
  EXPECT_EQ(r.stopped, (std::vector<int>{2}));
  EXPECT_EQ(r.exit_code, kExitOk);
  EXPECT_TRUE(r.logged("worker 0 (rank 0 of generation 1) on host h1 exited with code 0"));
}

// A worker that joined the newest generation finishes it with its members:
// the job waits for them, and one failing fails it.
TEST(ElasticDriver, FinishingInTheNewestGenerationWaitsForItsMembers) {
  Recorder r;
  ElasticDriver d(opts(0, 1, 0), r);
  d.start({{"a", 1}}, at(0));
  r.joins = {{0, 0}};
  d.onHosts({{"a", 1}, {"b", 1}}, at(1));
  r.joins.insert({1, 0});
  r.joins.insert({1, 1});
  d.onWorkerExit(0, false, false, "exited with code 0", at(2));
  EXPECT_TRUE(r.stopped.empty());
  EXPECT_EQ(r.exit_code, -1);
  EXPECT_TRUE(r.logged("worker 0 (rank 0 of generation 1) on host a exited with code 0"));
  d.onWorkerExit(1, true, false, "exited with code 3", at(3));
  EXPECT_EQ(r.exit_code, kExitRankFailed);
  EXPECT_NE(r.end_why.find("worker 1 (rank 1 of generation 1) on host b exited with code 3 while "
                           "the job was finishing"),
            std::string::npos)
      << r.end_why;
}

TEST(ElasticDriver, FailureWhileFinishingFailsTheJob) {
  Recorder r;
  ElasticDriver d(opts(3, 1, 0), r);
  d.start({{"h1", 3}}, at(0));
  d.onWorkerExit(0, false, false, "exited with code 0", at(1));
  d.onWorkerExit(2, true, false, "exited with code 5", at(2));
  EXPECT_EQ(d.generation(), 0);
  EXPECT_EQ(r.exit_code, kExitRankFailed);
  EXPECT_NE(r.end_why.find("worker 2 (rank 2 of generation 0) on host h1 exited with code 5"),
            std::string::npos);
}

TEST(ElasticDriver, FirstWorkerThatCannotStartEndsTheJob) {
  Recorder r;
  r.refuse_host = "h1";
  ElasticDriver d(opts(2, 1, 0), r);
  d.start({{"h1", 2}}, at(0));
  EXPECT_EQ(r.exit_code, kExitStartFailed);
  EXPECT_EQ(r.end_why, "elastic: worker 0 could not start on host h1: cannot run 'agent'");
  EXPECT_EQ(d.generation(), -1);
}

TEST(ElasticDriver, DefaultsFirstGenerationFillsTheSlotsAndMinNpIsOne) {
  Recorder r;
  ElasticDriver d(opts(0, 0, 0), r);
  d.start({{"h1", 2}, {"h2", 1}}, at(0));
  EXPECT_EQ(r.started.size(), 3u);
  d.onWorkerExit(0, true, false, "exited with code 1", at(1));  // h1 goes: 1 left
  EXPECT_EQ(d.generation(), 1);
  EXPECT_EQ(r.latestMembers(), "2 0 1 0 1 0 1 h2\n");
}

}  // namespace
}  // namespace launcher
}  // namespace tutti
