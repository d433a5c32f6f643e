#include "launcher/placement.h"

#include <gtest/gtest.h>

namespace tutti {
namespace launcher {
namespace {

std::vector<RankPlacement> place(const std::vector<HostSlots>& hosts, int np) {
  std::vector<RankPlacement> out;
  Status st = assignRanks(hosts, np, &out);
  EXPECT_TRUE(st.isOk()) << st.toString();
  return out;
}

TEST(Placement, TwoHostsTwoSlots) {
  auto p = place({{"w0", 2}, {"w1", 2}}, 4);
  ASSERT_EQ(p.size(), 4u);
  std::vector<int> local, cross;
  for (const auto& r : p) {
    local.push_back(r.local_rank);
    cross.push_back(r.cross_rank);
    EXPECT_EQ(r.local_size, 2);
    EXPECT_EQ(r.cross_size, 2);
  }
  EXPECT_EQ(local, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(cross, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(p[0].host, "w0");
  EXPECT_EQ(p[3].host, "w1");
  EXPECT_EQ(p[3].rank, 3);
}

TEST(Placement, FillsHostsInOrderAndSkipsUnusedHosts) {
  auto p = place({{"a", 3}, {"b", 4}, {"c", 2}}, 5);
  ASSERT_EQ(p.size(), 5u);
  EXPECT_EQ(p[2].host, "a");
  EXPECT_EQ(p[2].local_rank, 2);
  EXPECT_EQ(p[2].local_size, 3);
  EXPECT_EQ(p[3].host, "b");
  EXPECT_EQ(p[3].local_rank, 0);
  EXPECT_EQ(p[4].local_size, 2);                       // b runs only 2 of its 4 slots
  for (const auto& r : p) EXPECT_EQ(r.cross_size, 2);  // c runs nothing
}

TEST(Placement, OneHost) {
  auto p = place({{"localhost", 4}}, 4);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(p[r].local_rank, r);
    EXPECT_EQ(p[r].cross_rank, 0);
    EXPECT_EQ(p[r].cross_size, 1);
  }
}

TEST(Placement, TooFewSlotsIsAnError) {
  std::vector<RankPlacement> out;
  Status st = assignRanks({{"a", 2}, {"b", 2}}, 5, &out);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("-np 5"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("a:2,b:2"), std::string::npos) << st.message();
  EXPECT_FALSE(assignRanks({{"a", 2}}, 0, &out).isOk());
}

}  // namespace
}  // namespace launcher
}  // namespace tutti
