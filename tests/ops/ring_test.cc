#include "ops/algorithms/ring.h"

#include <gtest/gtest.h>

namespace tutti::ring {
namespace {

TEST(RingTest, Neighbours) {
  EXPECT_EQ(rightOf(0, 1), 0);
  EXPECT_EQ(leftOf(0, 1), 0);
  EXPECT_EQ(rightOf(0, 4), 1);
  EXPECT_EQ(rightOf(3, 4), 0);
  EXPECT_EQ(leftOf(0, 4), 3);
  EXPECT_EQ(leftOf(2, 4), 1);
  EXPECT_EQ(mod(-1, 5), 4);
  EXPECT_EQ(mod(-11, 5), 4);
  EXPECT_EQ(mod(7, 5), 2);
  for (int n = 1; n <= 9; ++n) {
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(leftOf(rightOf(r, n), n), r);
    }
  }
}

TEST(RingTest, ChunksFirstRanksGetTheExtraElement) {
  // 10 over 4: 3 3 2 2 at 0 3 6 8.
  EXPECT_EQ(chunkSize(10, 4, 0), 3u);
  EXPECT_EQ(chunkSize(10, 4, 1), 3u);
  EXPECT_EQ(chunkSize(10, 4, 2), 2u);
  EXPECT_EQ(chunkSize(10, 4, 3), 2u);
  EXPECT_EQ(chunkOffset(10, 4, 0), 0u);
  EXPECT_EQ(chunkOffset(10, 4, 1), 3u);
  EXPECT_EQ(chunkOffset(10, 4, 2), 6u);
  EXPECT_EQ(chunkOffset(10, 4, 3), 8u);
  EXPECT_EQ(chunkOffset(10, 4, 4), 10u);
  // Fewer elements than ranks: trailing chunks are empty.
  EXPECT_EQ(chunkSize(2, 5, 1), 1u);
  EXPECT_EQ(chunkSize(2, 5, 2), 0u);
  EXPECT_EQ(chunkOffset(2, 5, 4), 2u);
}

TEST(RingTest, ChunksTileTheBuffer) {
  for (size_t count : {0u, 1u, 2u, 7u, 64u, 1009u}) {
    for (int n = 1; n <= 9; ++n) {
      size_t at = 0;
      for (int c = 0; c < n; ++c) {
        EXPECT_EQ(chunkOffset(count, n, c), at) << count << " over " << n;
        const size_t s = chunkSize(count, n, c);
        EXPECT_LE(s, count / n + 1);
        EXPECT_GE(s, count / n);
        at += s;
      }
      EXPECT_EQ(at, count);
      const Blocks b = evenBlocks(count, n);
      EXPECT_EQ(b.total(), count);
    }
  }
}

TEST(RingTest, BlocksFromSizesAndScaling) {
  const Blocks b = blocksFromSizes({3, 0, 5});
  EXPECT_EQ(b.offset, (std::vector<size_t>{0, 3, 3}));
  EXPECT_EQ(b.size, (std::vector<size_t>{3, 0, 5}));
  EXPECT_EQ(b.total(), 8u);
  const Blocks s = b.scaled(4);
  EXPECT_EQ(s.offset, (std::vector<size_t>{0, 12, 12}));
  EXPECT_EQ(s.size, (std::vector<size_t>{12, 0, 20}));
  EXPECT_EQ(blocksFromSizes({}).total(), 0u);
}

TEST(RingTest, ReorderedBlocksKeepTheirOffsets) {
  const Blocks b = blocksFromSizes({3, 0, 5, 2});
  const Blocks r = reordered(b, {0, 2, 1, 3});
  EXPECT_EQ(r.offset, (std::vector<size_t>{0, 3, 3, 8}));
  EXPECT_EQ(r.size, (std::vector<size_t>{3, 5, 0, 2}));
  const Blocks same = reordered(b, {});
  EXPECT_EQ(same.offset, b.offset);
  EXPECT_EQ(same.size, b.size);
}

TEST(RingTest, Segments) {
  EXPECT_EQ(segmentElements(64, 4), 16u);
  EXPECT_EQ(segmentElements(65, 4), 16u);
  EXPECT_EQ(segmentElements(3, 8), 1u);  // at least one element
  EXPECT_EQ(segmentElements(0, 1), kDefaultSegmentBytes);
  EXPECT_EQ(numSegments(0, 16), 0u);
  EXPECT_EQ(numSegments(1, 16), 1u);
  EXPECT_EQ(numSegments(16, 16), 1u);
  EXPECT_EQ(numSegments(17, 16), 2u);
  EXPECT_EQ(segmentSize(17, 16, 0), 16u);
  EXPECT_EQ(segmentSize(17, 16, 1), 1u);
  EXPECT_EQ(segmentSize(32, 16, 1), 16u);
}

}  // namespace
}  // namespace tutti::ring
