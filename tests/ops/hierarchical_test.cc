// Hierarchical allreduce (ops/algorithms/allreduce_hierarchical.h) over the
// in-memory transport, with hosts simulated by host-id lists: 2x2, 2x3, 3x2
// and hosts whose ranks are not contiguous; every dtype x op against exact
// references computed here and against the flat ring byte for byte, in one
// chunk and pipelined in many; random floats within rounding of the ring
// (min/max bit for bit); hierarchical allgather with uneven and empty blocks
// against the flat ring; hierarchical broadcast from every root against the
// root's bytes. The backend's choice: hierarchical_backend_test.cc.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/algorithms/allgather_hierarchical.h"
#include "ops/algorithms/allgather_ring.h"
#include "ops/algorithms/allreduce_hierarchical.h"
#include "ops/algorithms/allreduce_recursive_doubling.h"
#include "ops/algorithms/allreduce_ring.h"
#include "ops/algorithms/broadcast_hierarchical.h"
#include "ops/host_groups.h"
#include "ops/subset_transport.h"
#include "ops/tcp/tcp_backend.h"
#include "tests/ops/test_values.h"
#include "tests/support/memory_transport.h"

namespace tutti {
namespace {

using testing::MemoryTransport;
using testing::MemoryWorld;

constexpr size_t kSegmentBytes = 64;

struct Placement {
  const char* name;
  std::vector<int> hosts;  // host id of each rank
};

const Placement kPlacements[] = {
    {"h2x2", {0, 0, 1, 1}},
    {"h2x3", {0, 0, 0, 1, 1, 1}},
    {"h3x2", {0, 0, 1, 1, 2, 2}},
    {"h2x2_interleaved", {5, 2, 5, 2}},
    {"h3x2_scattered", {2, 0, 1, 0, 2, 1}},
};

// Counts below the local size (empty blocks), around a segment, uneven.
std::vector<size_t> counts(DataType t, int n) {
  const size_t seg = kSegmentBytes / dataTypeSize(t);
  return {0, 1, 2, 5, seg - 1, seg + 1, n * seg + 3, 1009};
}

std::vector<uint8_t> inputs(DataType t, ReduceOp op, int rank, size_t count) {
  std::vector<uint8_t> buf(count * dataTypeSize(t) + 1, 0xcd);
  for (size_t i = 0; i < count; ++i) {
    testing::setValue(buf.data(), t, i, testing::inputValue(t, op, rank, i));
  }
  return buf;
}

class HierarchicalAllreduceTest : public ::testing::TestWithParam<std::tuple<Placement, DataType>> {
};

TEST_P(HierarchicalAllreduceTest, EqualsTheReferenceAndTheFlatRing) {
  const std::vector<int>& hosts = std::get<0>(GetParam()).hosts;
  const DataType t = std::get<1>(GetParam());
  const int n = static_cast<int>(hosts.size());
  MemoryWorld world(n);
  world.run([&](MemoryTransport& tr) {
    HostGroups groups(tr, hosts);
    ASSERT_TRUE(groups.hierarchical());
    std::vector<uint8_t> scratch, staging;
    for (ReduceOp op : testing::allReduceOps()) {
      for (size_t count : counts(t, n)) {
        const std::string what = std::string(dataTypeName(t)) + " " + reduceOpName(op) + " count " +
                                 std::to_string(count) + " rank " + std::to_string(tr.rank());
        std::vector<uint8_t> in_place = inputs(t, op, tr.rank(), count);
        const std::vector<uint8_t> in = in_place;
        std::vector<uint8_t> out(in.size(), 0xcd), flat = in;
        ASSERT_TRUE(allreduceHierarchical(groups.local(), groups.cross(), in_place.data(),
                                          in_place.data(), count, t, op, kSegmentBytes, &scratch,
                                          &staging)
                        .isOk())
            << what;
        ASSERT_TRUE(allreduceHierarchical(groups.local(), groups.cross(), in.data(), out.data(),
                                          count, t, op, kSegmentBytes, &scratch, &staging)
                        .isOk())
            << what;
        // Pipelined: chunks of 61 elements, or of 2 (fewer than the ranks
        // per host) for small counts.
        const size_t chunk = (count < 16 ? 2 : 61) * dataTypeSize(t);
        std::vector<uint8_t> chunked(in.size(), 0xcd);
        ASSERT_TRUE(allreduceHierarchical(groups.local(), groups.cross(), in.data(), chunked.data(),
                                          count, t, op, kSegmentBytes, &scratch, &staging, chunk)
                        .isOk())
            << what;
        ASSERT_TRUE(allreduceRing(tr, flat.data(), count, t, op, kSegmentBytes, &scratch).isOk());
        ASSERT_EQ(chunked, flat) << what << " (chunks of " << chunk << " bytes)";
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(testing::getValue(out.data(), t, i), testing::expectedValue(t, op, n, i))
              << what << " element " << i;
        }
        ASSERT_EQ(out, flat) << what;
        ASSERT_EQ(in_place, flat) << what << " (in place)";
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Placements, HierarchicalAllreduceTest,
                         ::testing::Combine(::testing::ValuesIn(kPlacements),
                                            ::testing::ValuesIn(testing::allDataTypes())),
                         [](const ::testing::TestParamInfo<std::tuple<Placement, DataType>>& info) {
                           return std::string(std::get<0>(info.param).name) + "_" +
                                  dataTypeName(std::get<1>(info.param));
                         });

// Allgather: uneven and empty blocks, equal to the flat ring byte for byte
// and to every rank's pattern.
class HierarchicalAllgatherTest : public ::testing::TestWithParam<Placement> {};

TEST_P(HierarchicalAllgatherTest, EqualsTheFlatRing) {
  const std::vector<int>& hosts = GetParam().hosts;
  const int n = static_cast<int>(hosts.size());
  MemoryWorld world(n);
  world.run([&](MemoryTransport& tr) {
    HostGroups groups(tr, hosts);
    std::vector<uint8_t> work;
    for (size_t scale : {size_t{0}, size_t{1}, size_t{7}, size_t{300}}) {
      std::vector<size_t> sizes;
      size_t total = 0;
      for (int r = 0; r < n; ++r) {
        sizes.push_back(r % 3 == 1 ? 0 : scale * (r + 1));  // some ranks send nothing
        total += sizes.back();
      }
      std::vector<uint8_t> in(sizes[tr.rank()]);
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(tr.rank() * 31 + i);
      std::vector<uint8_t> out(total + 1, 0xcd), flat(total + 1, 0xcd);
      ASSERT_TRUE(allgatherHierarchical(groups.local(), groups.cross(), groups.layout(), in.data(),
                                        out.data(), sizes, 64, &work)
                      .isOk());
      ASSERT_TRUE(allgatherRing(tr, in.data(), flat.data(), sizes, 64).isOk());
      ASSERT_EQ(out, flat) << "scale " << scale;
      // Pipelined in chunks of 5 bytes of output: pieces of 0, 1 or more bytes.
      std::vector<uint8_t> chunked(total + 1, 0xcd);
      ASSERT_TRUE(allgatherHierarchical(groups.local(), groups.cross(), groups.layout(), in.data(),
                                        chunked.data(), sizes, 64, &work, 5)
                      .isOk());
      ASSERT_EQ(chunked, flat) << "scale " << scale << " in chunks of 5 bytes";
      size_t at = 0;
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < sizes[r]; ++i, ++at) {
          ASSERT_EQ(out[at], static_cast<uint8_t>(r * 31 + i)) << "rank " << r << " byte " << i;
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Placements, HierarchicalAllgatherTest, ::testing::ValuesIn(kPlacements),
                         [](const ::testing::TestParamInfo<Placement>& info) {
                           return std::string(info.param.name);
                         });

// Random floats: the sum is taken in another order than the ring's, so it
// agrees within rounding; min and max agree bit for bit.
TEST(HierarchicalAllreduce, RandomFloatsAgreeWithTheRing) {
  const std::vector<int> hosts = {0, 0, 0, 1, 1, 1};
  const size_t count = 4099;
  MemoryWorld world(6);
  world.run([&](MemoryTransport& tr) {
    HostGroups groups(tr, hosts);
    std::mt19937 gen(static_cast<unsigned>(17 + tr.rank()));
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<uint8_t> scratch, staging;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
      std::vector<float> a(count);
      for (float& v : a) v = dist(gen);
      std::vector<float> b = a;
      ASSERT_TRUE(allreduceHierarchical(groups.local(), groups.cross(), a.data(), a.data(), count,
                                        DataType::kFloat32, op, 256, &scratch, &staging, 1000)
                      .isOk());
      ASSERT_TRUE(allreduceRing(tr, b.data(), count, DataType::kFloat32, op, 256, &scratch).isOk());
      for (size_t i = 0; i < count; ++i) {
        if (op == ReduceOp::kSum) {
          ASSERT_NEAR(a[i], b[i], 1e-5f) << "element " << i;
        } else {
          ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0) << "element " << i;
        }
      }
    }
  });
}

// allreduceHierarchicalCast pipelined in many chunks (three in flight at
// once): small integers are exact in float16 and bfloat16, so every rank
// must get the exact sums; fractions within the 16-bit rounding.
TEST(HierarchicalAllreduce, CastAcrossHostsInManyChunks) {
  for (const Placement& p : {kPlacements[0], kPlacements[2], kPlacements[3]}) {
    const int n = static_cast<int>(p.hosts.size());
    MemoryWorld world(n);
    world.run([&](MemoryTransport& tr) {
      HostGroups groups(tr, p.hosts);
      std::vector<uint8_t> scratch, staging;
      const size_t count = 4099;
      for (DataType wire : {DataType::kFloat16, DataType::kBFloat16}) {
        for (const size_t chunk : {size_t{1000}, size_t{0}}) {
          std::vector<float> in(count), out(count, -1.0f), frac(count), frac_out(count);
          for (size_t i = 0; i < count; ++i) {
            in[i] = static_cast<float>((tr.rank() + 1) * (i % 5));
            frac[i] = 1.0f + 0.01f * static_cast<float>(tr.rank()) + 1e-4f * (i % 100);
          }
          ASSERT_TRUE(allreduceHierarchicalCast(
                          groups.local(), groups.cross(), in.data(), out.data(), count,
                          DataType::kFloat32, ReduceOp::kSum, wire, 256, &scratch, &staging, chunk)
                          .isOk());
          ASSERT_TRUE(allreduceHierarchicalCast(
                          groups.local(), groups.cross(), frac.data(), frac_out.data(), count,
                          DataType::kFloat32, ReduceOp::kSum, wire, 256, &scratch, &staging, chunk)
                          .isOk());
          const double rel =
              wire == DataType::kFloat16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(out[i], static_cast<float>(n * (n + 1) / 2 * (i % 5)))
                << p.name << " " << dataTypeName(wire) << " chunk " << chunk << " element " << i;
            double exact = 0;
            for (int r = 0; r < n; ++r) exact += 1.0 + 0.01 * r + 1e-4 * (i % 100);
            ASSERT_LE(std::fabs(frac_out[i] - exact), (n + 1) * rel * exact)
                << p.name << " " << dataTypeName(wire) << " chunk " << chunk << " element " << i;
          }
        }
      }
    });
  }
}

// ------------------------------------------------------------- broadcast
// Every root, 0 and 1 bytes, odd sizes, through the binomial tree and
// through the chain in one piece and in many: every rank's buffer equals the
// root's pattern, computed here, byte for byte, and the guard byte past it
// is untouched.

constexpr uint8_t kFill = 0xcd;

// Byte i of root `root`'s buffer (differs between roots).
uint8_t pattern(int root, size_t i) {
  return static_cast<uint8_t>(i * 131 + static_cast<size_t>(root) * 29 + 1);
}

// `bytes` bytes of the root's pattern on the root, kFill elsewhere, and one
// guard byte of kFill past the end.
std::vector<uint8_t> before(int rank, int root, size_t bytes) {
  std::vector<uint8_t> buf(bytes + 1, kFill);
  if (rank == root) {
    for (size_t i = 0; i < bytes; ++i) buf[i] = pattern(root, i);
  }
  return buf;
}

std::vector<uint8_t> expected(int root, size_t bytes) {
  std::vector<uint8_t> buf(bytes + 1, kFill);
  for (size_t i = 0; i < bytes; ++i) buf[i] = pattern(root, i);
  return buf;
}

struct BroadcastRun {
  const char* path;
  std::vector<size_t> sizes;
  size_t chunk_bytes;     // 0: 4 MiB
  size_t tree_max_bytes;  // above it: the chain
};

const BroadcastRun kRuns[] = {
    // Binomial trees across and within hosts, one piece.
    {"tree", {0, 1, 2, 7, 63, 65, 1009}, 0, kBinomialBroadcastMaxBytes},
    // Chains in pieces of 100 bytes (segments of 64): 1 to 11 pieces, the
    // last shorter.
    {"chain_pieces", {1, 2, 99, 100, 101, 1009}, 100, 0},
    // Above the tree's 64 KiB: the chain, in one piece of 4 MiB or in 8 (the
    // last of 1 byte).
    {"large_one_piece", {70001}, 0, kBinomialBroadcastMaxBytes},
    {"large_pieces", {70001}, 10000, kBinomialBroadcastMaxBytes},
};

class HierarchicalBroadcastTest : public ::testing::TestWithParam<Placement> {};

TEST_P(HierarchicalBroadcastTest, EveryRankGetsTheRootsBytes) {
  const std::vector<int>& hosts = GetParam().hosts;
  const int n = static_cast<int>(hosts.size());
  MemoryWorld world(n);
  world.run([&](MemoryTransport& tr) {
    HostGroups groups(tr, hosts);
    ASSERT_TRUE(groups.hierarchical());
    for (const BroadcastRun& run : kRuns) {
      for (size_t bytes : run.sizes) {
        for (int root = 0; root < n; ++root) {
          const std::string what = std::string(run.path) + " bytes " + std::to_string(bytes) +
                                   " root " + std::to_string(root) + " rank " +
                                   std::to_string(tr.rank());
          std::vector<uint8_t> buf = before(tr.rank(), root, bytes);
          ASSERT_TRUE(broadcastHierarchical(groups.local(), groups.cross(), groups.layout(),
                                            buf.data(), bytes, root, kSegmentBytes, run.chunk_bytes,
                                            run.tree_max_bytes)
                          .isOk())
              << what;
          ASSERT_EQ(buf, expected(root, bytes)) << what;
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Placements, HierarchicalBroadcastTest, ::testing::ValuesIn(kPlacements),
                         [](const ::testing::TestParamInfo<Placement>& info) {
                           return std::string(info.param.name);
                         });

TEST(HostGroups, HostOrderedRankIsThePositionInHostOrder) {
  MemoryWorld world(6);
  world.run([&](MemoryTransport& tr) {
    HostGroups groups(tr, {2, 0, 1, 0, 2, 1});
    // host_order: host 0 (1, 3), host 1 (2, 5), host 2 (0, 4).
    const std::vector<int> position = {4, 0, 2, 1, 5, 3};
    for (int r = 0; r < 6; ++r) EXPECT_EQ(groups.hostOrderedRank(r), position[r]) << r;
    EXPECT_EQ(groups.hostOrdered().rank(), position[tr.rank()]);
    HostGroups sorted(tr, {0, 0, 0, 1, 1, 1});
    for (int r = 0; r < 6; ++r) EXPECT_EQ(sorted.hostOrderedRank(r), r);
  });
}

TEST(HostLayout, GroupsRanksByHost) {
  const HostLayout scattered = hostLayout({5, 2, 5, 2}, 2);
  EXPECT_EQ(scattered.local_size, 2);
  EXPECT_EQ(scattered.cross_size, 2);
  EXPECT_EQ(scattered.local_ranks, (std::vector<int>{0, 2}));
  // Local index 1 on host 2 (ranks 1, 3) and host 5 (ranks 0, 2), by host id.
  EXPECT_EQ(scattered.cross_ranks, (std::vector<int>{3, 2}));
  EXPECT_EQ(scattered.host_order, (std::vector<int>{1, 3, 0, 2}));
  const HostLayout uneven = hostLayout({0, 0, 0, 1}, 3);
  EXPECT_EQ(uneven.local_size, 0);
  EXPECT_EQ(uneven.cross_size, 2);
  EXPECT_TRUE(uneven.cross_ranks.empty());
  EXPECT_EQ(uneven.host_order, (std::vector<int>{0, 1, 2, 3}));
  const HostLayout one = hostLayout({4, 4, 4}, 1);
  EXPECT_EQ(one.local_size, 3);
  EXPECT_EQ(one.cross_size, 1);
  EXPECT_EQ(hostIdsOf({0, 0, 1, 1, 2, 2}, {1, 2, 5}), (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(hostIdsOf({}, {0, 1}).empty());
}

TEST(HostLayout, ExchangeGivesEveryRankTheSameList) {
  MemoryWorld world(5);
  world.run([&](MemoryTransport& tr) {
    std::vector<int> ids;
    ASSERT_TRUE(exchangeHostIds(tr, 10 + tr.rank() / 2, &ids).isOk());
    EXPECT_EQ(ids, (std::vector<int>{10, 10, 11, 11, 12}));
  });
}

}  // namespace
}  // namespace tutti
