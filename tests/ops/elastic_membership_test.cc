// The elastic store protocol (rendezvous/elastic_membership.h): members text
// round trip and bad input, the elastic settings, and the worker's waits
// against an in-process RendezvousServer where the test plays the driver.

#include "rendezvous/elastic_membership.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "core/settings.h"
#include "tests/ops/elastic_test_driver.h"

namespace tutti {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::ElasticTestDriver;

// ---- members text ------------------------------------------------------------

TEST(ElasticMembers, FormatThenParseRoundTrips) {
  // Two hosts: worker 7 survived as rank 0, newcomers 9 and 12 follow.
  const std::vector<ElasticMember> members = {
      {7, 0, 3, 0, 2, 0, 2, "node-a"},
      {9, 1, 3, 1, 2, 0, 2, "node-a"},
      {12, 2, 3, 0, 1, 1, 2, "10.0.0.2"},
  };
  const std::string text = formatMembers(members);
  EXPECT_EQ(text, "7 0 3 0 2 0 2 node-a\n9 1 3 1 2 0 2 node-a\n12 2 3 0 1 1 2 10.0.0.2\n");
  std::vector<ElasticMember> parsed;
  Status st = parseMembers(text, &parsed);
  ASSERT_TRUE(st.isOk()) << st.toString();
  EXPECT_EQ(parsed, members);
  ASSERT_NE(findMember(parsed, 12), nullptr);
  EXPECT_EQ(findMember(parsed, 12)->rank, 2);
  EXPECT_EQ(findMember(parsed, 8), nullptr);
  // Blank lines and missing final newline are accepted.
  ASSERT_TRUE(parseMembers("\n5 0 1 0 1 0 1 h", &parsed).isOk());
  ASSERT_EQ(parsed.size(), 1u);
  EXPECT_EQ(parsed[0], (ElasticMember{5, 0, 1, 0, 1, 0, 1, "h"}));
}

TEST(ElasticMembers, BadInputIsAnErrorNamingTheProblem) {
  struct Case {
    const char* text;
    const char* says;
  };
  const Case cases[] = {
      {"", "no member"},
      {"0 0 1 0 1 0 1\n", "expected 8 fields"},
      {"0 0 1 0 1 0 1 h extra\n", "got 9"},
      {"0 0 1 x 1 0 1 h\n", "local_rank 'x'"},
      {"-1 0 1 0 1 0 1 h\n", "worker_id '-1'"},
      {"0 1 1 0 1 0 1 h\n", "rank 1 vs 0"},
      {"0 0 2 0 1 0 1 h\n", "says size 2 vs 1"},
      {"0 0 2 0 1 0 1 h\n1 1 2 0 1 0 1 h\n", ""},  // valid: two hosts of one rank
      {"3 0 2 0 1 0 1 h\n3 1 2 0 1 0 1 g\n", "worker id 3 is listed twice"},
      {"0 0 1 1 1 0 1 h\n", "below local_size"},
      {"0 0 1 0 1 2 2 h\n", "below local_size/cross_size"},
      {"0 0 1 0 1 0 99999999999999999999 h\n", "cross_size"},
  };
  for (const Case& c : cases) {
    std::vector<ElasticMember> parsed;
    Status st = parseMembers(c.text, &parsed);
    if (std::string(c.says).empty()) {
      EXPECT_TRUE(st.isOk()) << c.text << ": " << st.toString();
      continue;
    }
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(st.message().find(c.says), std::string::npos)
        << "'" << c.text << "' -> " << st.message() << " (expected to mention '" << c.says << "')";
  }
}

TEST(ElasticMembers, GenerationNumbers) {
  int64_t g = -1;
  ASSERT_TRUE(parseGeneration("0", &g).isOk());
  EXPECT_EQ(g, 0);
  ASSERT_TRUE(parseGeneration("42", &g).isOk());
  EXPECT_EQ(g, 42);
  for (const char* bad : {"", "-1", "1x", " 1", "1.0"}) {
    EXPECT_EQ(parseGeneration(bad, &g).code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(elastic_keys::members(3), "elastic/gen/3/members");
  EXPECT_EQ(elastic_keys::report(3, 17), "elastic/report/3/17");
  EXPECT_EQ(elastic_keys::latest(), "elastic/latest");
  EXPECT_EQ(elastic_keys::failed(), "elastic/failed");
}

// ---- settings ------------------------------------------------------------------

Status load(std::map<std::string, std::string> env, Settings* out) {
  return loadSettings(
      [env](const std::string& name) -> std::optional<std::string> {
        auto it = env.find(name);
        if (it == env.end()) return std::nullopt;
        return it->second;
      },
      out);
}

TEST(ElasticSettings, DefaultsAndChecks) {
  Settings s;
  ASSERT_TRUE(load({}, &s).isOk());
  EXPECT_EQ(s.elastic_worker_id, -1);
  EXPECT_EQ(s.elastic_timeout_seconds, 600);
  EXPECT_EQ(s.elastic_generation, -1);

  ASSERT_TRUE(load({{"TUTTI_ELASTIC_WORKER_ID", "5"},
                    {"TUTTI_ELASTIC_TIMEOUT_SECONDS", "2.5"},
                    {"TUTTI_SECRET", "s"}},
                   &s)
                  .isOk());
  EXPECT_EQ(s.elastic_worker_id, 5);
  EXPECT_EQ(s.elastic_timeout_seconds, 2.5);

  Status st =
      load({{"TUTTI_ELASTIC_WORKER_ID", "5"}, {"TUTTI_SECRET", "s"}, {"TUTTI_BACKEND", "mpi"}}, &s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("TUTTI_BACKEND=mpi"), std::string::npos) << st.message();
  st = load({{"TUTTI_ELASTIC_WORKER_ID", "5"}}, &s);
  EXPECT_NE(st.message().find("TUTTI_SECRET"), std::string::npos) << st.message();
  st = load({{"TUTTI_ELASTIC_WORKER_ID", "-2"}}, &s);
  EXPECT_NE(st.message().find("TUTTI_ELASTIC_WORKER_ID=-2"), std::string::npos) << st.message();
  st = load({{"TUTTI_ELASTIC_TIMEOUT_SECONDS", "0"}}, &s);
  EXPECT_NE(st.message().find("TUTTI_ELASTIC_TIMEOUT_SECONDS=0"), std::string::npos)
      << st.message();
}

// ---- the worker's waits against the store ------------------------------------

std::unique_ptr<RendezvousClient> workerClient(const ElasticTestDriver& driver) {
  std::unique_ptr<RendezvousClient> client;
  Status st =
      RendezvousClient::connect("127.0.0.1", driver.port(), driver.secret(), 5000ms, &client);
  EXPECT_TRUE(st.isOk()) << st.toString();
  return client;
}

TEST(ElasticStore, AWorkerWaitsForAGenerationThatIncludesIt) {
  ElasticTestDriver driver;
  auto client = workerClient(driver);
  auto waiting = std::async(std::launch::async, [&] {
    ElasticAssignment a;
    Status st = waitForGeneration(*client, 2, -1, Clock::now() + 20s, 20, &a);
    return std::make_pair(st, a);
  });
  driver.publish(0, ElasticTestDriver::oneHost({0, 1}));  // without worker 2
  EXPECT_EQ(waiting.wait_for(300ms), std::future_status::timeout)
      << "joined a generation without it";
  driver.publish(1, ElasticTestDriver::oneHost({1, 2, 0}));
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  auto [st, a] = waiting.get();
  ASSERT_TRUE(st.isOk()) << st.toString();
  EXPECT_EQ(a.generation, 1);
  EXPECT_EQ(a.member, (ElasticMember{2, 1, 3, 1, 3, 0, 1, "localhost"}));

  // Already joined generation 1: waits for a later one.
  Status later = waitForGeneration(*client, 2, 1, Clock::now() + 200ms, 0.2, &a);
  EXPECT_EQ(later.code(), StatusCode::kTimeout);
  EXPECT_NE(later.message().find("elastic worker 2"), std::string::npos) << later.message();
  EXPECT_NE(later.message().find("TUTTI_ELASTIC_TIMEOUT_SECONDS=0.2"), std::string::npos)
      << later.message();
}

TEST(ElasticStore, TheDriverGivingUpEndsTheWaitWithItsMessage) {
  ElasticTestDriver driver;
  auto client = workerClient(driver);
  auto waiting = std::async(std::launch::async, [&] {
    ElasticAssignment a;
    return waitForGeneration(*client, 0, -1, Clock::now() + 20s, 20, &a);
  });
  std::this_thread::sleep_for(100ms);
  driver.fail("fewer than --min-np=2 workers for 600 s: 1 slot on hosts a");
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  Status st = waiting.get();
  EXPECT_EQ(st.code(), StatusCode::kShutdown);
  EXPECT_NE(st.message().find("fewer than --min-np=2 workers for 600 s: 1 slot on hosts a"),
            std::string::npos)
      << st.message();
}

TEST(ElasticStore, AGenerationStoreGivesUpWhenSuperseded) {
  ElasticTestDriver driver;
  driver.publish(0, ElasticTestDriver::oneHost({0, 1}));
  auto client = workerClient(driver);
  ElasticGenerationStore store(*client, 0);
  ASSERT_TRUE(store.set("rank/0/addr", {'a', ':', '1'}).isOk());
  EXPECT_EQ(driver.value("elastic/gen/0/rank/0/addr"), "a:1");
  std::vector<uint8_t> v;
  ASSERT_TRUE(store.get("rank/0/addr", 1000ms, &v).isOk());
  EXPECT_EQ(std::string(v.begin(), v.end()), "a:1");
  EXPECT_EQ(store.get("rank/1/addr", 100ms, &v).code(), StatusCode::kTimeout);

  const auto start = Clock::now();
  auto waiting =
      std::async(std::launch::async, [&] { return store.get("rank/1/addr", 20000ms, &v); });
  std::this_thread::sleep_for(200ms);
  driver.publish(1, ElasticTestDriver::oneHost({0}));
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  Status st = waiting.get();
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_EQ(st.code(), StatusCode::kShutdown);
  EXPECT_NE(st.message().find("generation 0 was superseded by generation 1"), std::string::npos)
      << st.message();
}

TEST(ElasticStore, ReportAndLatest) {
  ElasticTestDriver driver;
  auto client = workerClient(driver);
  int64_t latest = 7;
  ASSERT_TRUE(latestGeneration(*client, &latest).isOk());
  EXPECT_EQ(latest, -1);
  driver.publish(4, ElasticTestDriver::oneHost({3}));
  ASSERT_TRUE(latestGeneration(*client, &latest).isOk());
  EXPECT_EQ(latest, 4);
  ASSERT_TRUE(reportLostRank(*client, 4, 3, 1).isOk());
  EXPECT_EQ(driver.value("elastic/report/4/3"), "1");
  driver.set("elastic/latest", "four");
  EXPECT_EQ(latestGeneration(*client, &latest).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tutti
