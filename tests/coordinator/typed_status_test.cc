// Typed facts on Status (core/status.h): the lost rank and a superseded
// generation are values set where the fault is seen, survive copies and rank
// 0's abort notice on the wire, and are never read out of the message text.

#include <gtest/gtest.h>

#include <vector>

#include "core/message.h"
#include "core/status.h"

namespace tutti {
namespace {

TEST(TypedStatusTest, LostRankIsAValueNotText) {
  // A message naming other ranks first: only the typed value counts.
  const Status st = Status::peerLost(3, "rank 0 saw rank 1 hang up after rank 3 died");
  EXPECT_EQ(st.code(), StatusCode::kPeerLost);
  EXPECT_EQ(st.lostRank(), 3);
  const Status copy = st;
  EXPECT_EQ(copy.lostRank(), 3);
  EXPECT_EQ(Status::peerLost("rank 2 closed its connection").lostRank(), -1);
  EXPECT_EQ(Status::ok().lostRank(), -1);
  EXPECT_FALSE(st.generationSuperseded());
}

TEST(TypedStatusTest, GenerationSupersededIsAValue) {
  const Status st = Status::shutdown("generation 4 was superseded by 5").asGenerationSuperseded();
  EXPECT_EQ(st.code(), StatusCode::kShutdown);
  EXPECT_TRUE(st.generationSuperseded());
  EXPECT_FALSE(Status::shutdown("runtime shut down").generationSuperseded());
  EXPECT_EQ(st.lostRank(), -1);
}

TEST(TypedStatusTest, AbortNoticeCarriesTheLostRankOverTheWire) {
  ResponseList list;
  list.shutdown = true;
  list.abort_code = StatusCode::kPeerLost;
  list.abort_message = "rank 5 closed its connection";
  list.abort_lost_rank = 5;
  ResponseList back;
  ASSERT_TRUE(deserialize(serialize(list), &back).isOk());
  const Status st = abortStatus(back);
  EXPECT_EQ(st.code(), StatusCode::kPeerLost);
  EXPECT_EQ(st.message(), "rank 5 closed its connection");
  EXPECT_EQ(st.lostRank(), 5);
  EXPECT_TRUE(abortStatus(ResponseList{}).isOk());
  // A list cut short before the lost rank is malformed, not a guess.
  std::vector<uint8_t> bytes = serialize(list);
  bytes.resize(bytes.size() - 4);
  EXPECT_FALSE(deserialize(bytes, &back).isOk());
}

}  // namespace
}  // namespace tutti
