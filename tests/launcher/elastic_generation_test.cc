// Pure parts of the elastic driver: store keys, rank order, placement of a
// generation, blacklist cooldown (launcher/elastic_generation.h).

#include "launcher/elastic_generation.h"

#include <gtest/gtest.h>

namespace tutti {
namespace launcher {
namespace {

using Clock = std::chrono::steady_clock;

TEST(ElasticKeys, MembersKeyAndReports) {
  EXPECT_EQ(elastic_keys::members(0), "elastic/gen/0/members");
  EXPECT_EQ(elastic_keys::members(12), "elastic/gen/12/members");
  int64_t g = -1;
  int w = -1;
  ASSERT_TRUE(elastic_keys::parseReport("elastic/report/3/17", &g, &w));
  EXPECT_EQ(g, 3);
  EXPECT_EQ(w, 17);
  for (const char* bad : {"elastic/report/3", "elastic/report/x/1", "elastic/report/1/",
                          "elastic/report/-1/2", "elastic/latest", "elastic/report/1/2/3"}) {
    EXPECT_FALSE(elastic_keys::parseReport(bad, &g, &w)) << bad;
  }
  int rank = -1;
  ASSERT_TRUE(elastic_keys::parseReportValue(" 5\n", &rank));
  EXPECT_EQ(rank, 5);
  for (const char* bad : {"", "x", "-1", "1 2", "99999999999"}) {
    EXPECT_FALSE(elastic_keys::parseReportValue(bad, &rank)) << bad;
  }
}

TEST(ElasticRankOrder, SurvivorsFirstInPreviousOrderThenNewcomersById) {
  // Previous generation: 4 (rank 0), 1, 7, 2. Worker 1 died; 9 and 5 are new.
  std::vector<int> order = nextRankOrder({4, 1, 7, 2}, {2, 4, 5, 7, 9});
  EXPECT_EQ(order, (std::vector<int>{4, 7, 2, 5, 9}));
  EXPECT_EQ(nextRankOrder({}, {3, 0, 1}), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(nextRankOrder({0, 1}, {}), (std::vector<int>{}));
}

TEST(ElasticPlacement, LocalAndCrossOverHostsInRankOrder) {
  // Rank order interleaves hosts: a, b, a, c.
  auto m = placeGeneration({{4, "a"}, {7, "b"}, {2, "a"}, {9, "c"}});
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0], (ElasticMember{4, 0, 4, 0, 2, 0, 3, "a"}));
  EXPECT_EQ(m[1], (ElasticMember{7, 1, 4, 0, 1, 1, 3, "b"}));
  EXPECT_EQ(m[2], (ElasticMember{2, 2, 4, 1, 2, 0, 3, "a"}));
  EXPECT_EQ(m[3], (ElasticMember{9, 3, 4, 0, 1, 2, 3, "c"}));
  EXPECT_EQ(formatMembers(m),
            "4 0 4 0 2 0 3 a\n"
            "7 1 4 0 1 1 3 b\n"
            "2 2 4 1 2 0 3 a\n"
            "9 3 4 0 1 2 3 c\n");
  EXPECT_EQ(formatMembers(placeGeneration({{0, "h1"}})), "0 0 1 0 1 0 1 h1\n");
}

TEST(ElasticBlacklist, CooldownDoublesUpToTheMaximum) {
  EXPECT_EQ(blacklistCooldownSeconds(1, 2, 30), 2);
  EXPECT_EQ(blacklistCooldownSeconds(2, 2, 30), 4);
  EXPECT_EQ(blacklistCooldownSeconds(3, 2, 30), 8);
  EXPECT_EQ(blacklistCooldownSeconds(4, 2, 30), 16);
  EXPECT_EQ(blacklistCooldownSeconds(5, 2, 30), 30);
  EXPECT_EQ(blacklistCooldownSeconds(500, 2, 30), 30);
  EXPECT_LT(blacklistCooldownSeconds(1, 0, 0), 0);  // no range: for good
}

TEST(ElasticBlacklist, HostsComeBackAfterTheirCooldown) {
  Blacklist b(1, 10);
  auto t0 = Clock::now();
  auto at = [&](double s) {
    return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  EXPECT_FALSE(b.contains("h1", t0));
  EXPECT_EQ(b.add("h1", t0), 1);
  EXPECT_TRUE(b.contains("h1", at(0.99)));
  EXPECT_FALSE(b.contains("h1", at(1.0)));
  EXPECT_EQ(b.add("h1", at(2)), 2);  // second failure: 2 s from t=2
  EXPECT_TRUE(b.contains("h1", at(3.9)));
  EXPECT_FALSE(b.contains("h1", at(4)));
  EXPECT_EQ(b.add("h2", at(4)), 1);
  EXPECT_EQ(b.hosts(at(4.5)), (std::vector<std::string>{"h2"}));
  EXPECT_EQ(b.failures("h1"), 2);
  EXPECT_EQ(b.failures("h3"), 0);

  Blacklist forever(0, 0);
  forever.add("h1", t0);
  EXPECT_TRUE(forever.contains("h1", at(1e6)));
}

}  // namespace
}  // namespace launcher
}  // namespace tutti
