// Host-side arithmetic of the CUDA kernels (ops/cuda/copy_plan.h): runs on
// any machine, no GPU or toolkit needed.

#include "ops/cuda/copy_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace tutti {
namespace cuda {
namespace {

const char* at(uintptr_t address) {
  return reinterpret_cast<const char*>(address);
}
char* mutableAt(uintptr_t address) {
  return reinterpret_cast<char*>(address);
}

// Every virtual block maps, through findCopy, to the copy and chunk the plan
// says; together the chunks cover each copy exactly once.
void expectCovers(const CopyLaunch& launch, size_t chunk_bytes) {
  ASSERT_FALSE(launch.descriptors.empty());
  const uint32_t count = static_cast<uint32_t>(launch.descriptors.size());
  std::vector<uint64_t> covered(count, 0);
  for (uint64_t b = 0; b < launch.virtual_blocks; ++b) {
    const uint32_t i = findCopy(launch.descriptors.data(), count, b);
    ASSERT_LT(i, count);
    const CopyDescriptor& d = launch.descriptors[i];
    ASSERT_LE(d.first_block, b);
    const uint64_t offset = (b - d.first_block) * chunk_bytes;
    ASSERT_LT(offset, d.bytes) << "block " << b << " past the end of copy " << i;
    covered[i] += std::min<uint64_t>(chunk_bytes, d.bytes - offset);
  }
  for (uint32_t i = 0; i < count; ++i) {
    EXPECT_EQ(covered[i], launch.descriptors[i].bytes) << "copy " << i;
  }
}

TEST(CopyPlanTest, EmptyAndZeroByteCopiesPlanNoLaunch) {
  EXPECT_TRUE(planCopyLaunches({}).empty());
  EXPECT_TRUE(planCopyLaunches({{at(16), mutableAt(32), 0}, {at(48), mutableAt(64), 0}}).empty());
}

TEST(CopyPlanTest, ChunkBoundariesPlusMinusOne) {
  constexpr size_t kChunk = 1024;
  const std::vector<size_t> sizes = {1, kChunk - 1, kChunk, kChunk + 1, 3 * kChunk, 0, 7};
  std::vector<DeviceCopy> copies;
  uintptr_t base = 1 << 20;
  for (size_t s : sizes) {
    copies.push_back({at(base), mutableAt(base + (64 << 20)), s});
    base += s + 13;
  }
  const std::vector<CopyLaunch> launches = planCopyLaunches(copies, kChunk, 1000, 100);
  ASSERT_EQ(launches.size(), 1u);
  const CopyLaunch& l = launches[0];
  ASSERT_EQ(l.descriptors.size(), sizes.size() - 1);  // the zero-byte copy is dropped
  // Chunks: 1 + 1 + 1 + 2 + 3 + 1.
  const std::vector<uint64_t> first = {0, 1, 2, 3, 5, 8};
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(l.descriptors[i].first_block, first[i]);
  EXPECT_EQ(l.virtual_blocks, 9u);
  EXPECT_EQ(l.grid, 9u);
  expectCovers(l, kChunk);
}

TEST(CopyPlanTest, GridIsCappedAndBlocksLoop) {
  const std::vector<CopyLaunch> launches =
      planCopyLaunches({{at(0), mutableAt(size_t{1} << 40), size_t{1} << 30}}, 4096, 65535, 16);
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].virtual_blocks, (size_t{1} << 30) / 4096);
  EXPECT_EQ(launches[0].grid, 65535u);
}

TEST(CopyPlanTest, ManyCopiesSplitIntoLaunchesOfAtMostMaxDescriptors) {
  std::vector<DeviceCopy> copies;
  for (size_t i = 0; i < 1001; ++i) {
    copies.push_back({at(i * 64), mutableAt((1 << 24) + i * 64), 1 + i % 50});
  }
  const std::vector<CopyLaunch> launches = planCopyLaunches(copies, 16, 7, 400);
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_EQ(launches[0].descriptors.size(), 400u);
  EXPECT_EQ(launches[1].descriptors.size(), 400u);
  EXPECT_EQ(launches[2].descriptors.size(), 201u);
  size_t seen = 0;
  for (const CopyLaunch& l : launches) {
    EXPECT_EQ(l.descriptors[0].first_block, 0u) << "each launch counts its own blocks";
    EXPECT_EQ(l.grid, 7u);
    for (const CopyDescriptor& d : l.descriptors) {
      EXPECT_EQ(d.src, copies[seen].src) << "order kept";
      ++seen;
    }
    expectCovers(l, 16);
  }
  EXPECT_EQ(seen, copies.size());
}

TEST(CopyPlanTest, FindCopyWithOneDescriptor) {
  const CopyDescriptor one{at(0), mutableAt(64), 5000, 0};
  for (uint64_t b = 0; b < 10; ++b) EXPECT_EQ(findCopy(&one, 1, b), 0u);
}

TEST(CopyPlanTest, CopyWidthIsTheWidestCommonAlignment) {
  EXPECT_EQ(copyWidth(0, 0), 16u);
  EXPECT_EQ(copyWidth(256, 4096 + 16), 16u);
  EXPECT_EQ(copyWidth(8, 16), 8u);
  EXPECT_EQ(copyWidth(4, 16), 4u);
  EXPECT_EQ(copyWidth(16, 2), 2u);
  EXPECT_EQ(copyWidth(1, 16), 1u);
  EXPECT_EQ(copyWidth(16, 3), 1u);
}

TEST(CopyPlanTest, ElementwiseGrid) {
  EXPECT_EQ(elementwiseGrid(0, 256, 4), 0u);
  EXPECT_EQ(elementwiseGrid(1, 256, 4), 1u);
  EXPECT_EQ(elementwiseGrid(1024, 256, 4), 1u);
  EXPECT_EQ(elementwiseGrid(1025, 256, 4), 2u);
  EXPECT_EQ(elementwiseGrid(size_t{1} << 40, 256, 4), kDefaultMaxGrid);
  EXPECT_EQ(elementwiseGrid(size_t{1} << 40, 256, 4, 10), 10u);
}

TEST(CopyPlanTest, ScaleIsNoopFollowsReduceRules) {
  EXPECT_TRUE(scaleIsNoop(0, DataType::kFloat32, 2.0));
  EXPECT_TRUE(scaleIsNoop(10, DataType::kFloat32, 1.0));
  EXPECT_TRUE(scaleIsNoop(10, DataType::kBool, 0.5));
  EXPECT_FALSE(scaleIsNoop(10, DataType::kInt32, 0.5));
  EXPECT_FALSE(scaleIsNoop(10, DataType::kInt32, 1.0, 2));  // an average's divisor
  EXPECT_TRUE(scaleIsNoop(10, DataType::kInt32, 1.0, 1));
  EXPECT_FALSE(scaleIsNoop(1, DataType::kBFloat16, -1.0));
}

TEST(CopyPlanTest, CastPairsAreWideToSixteenBitsAndBack) {
  for (DataType wide : {DataType::kFloat32, DataType::kFloat64}) {
    for (DataType narrow : {DataType::kFloat16, DataType::kBFloat16}) {
      EXPECT_TRUE(isCastPair(wide, narrow));
      EXPECT_TRUE(isCastPair(narrow, wide));
    }
  }
  EXPECT_FALSE(isCastPair(DataType::kFloat32, DataType::kFloat32));
  EXPECT_FALSE(isCastPair(DataType::kFloat32, DataType::kFloat64));
  EXPECT_FALSE(isCastPair(DataType::kFloat16, DataType::kBFloat16));
  EXPECT_FALSE(isCastPair(DataType::kFloat32, DataType::kInt32));
  EXPECT_FALSE(isCastPair(DataType::kInt8, DataType::kFloat16));
}

}  // namespace
}  // namespace cuda
}  // namespace tutti
