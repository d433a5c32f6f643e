// The small-message algorithms (recursive-doubling allreduce, binomial-tree
// broadcast) over the strict in-memory transport, at world sizes
// 1,2,3,4,5,7,8 (powers of two and the fold-in of the extra ranks) and counts
// 0, 1, a prime and a large one; their pure peer arithmetic; and the
// TcpBackend's dispatch with TUTTI_ALGORITHMS-style overrides forcing each
// algorithm. Expected values are computed without tutti (test_values.h).

#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ops/algorithm_table.h"
#include "ops/algorithms/allreduce_recursive_doubling.h"
#include "ops/algorithms/allreduce_ring.h"
#include "ops/algorithms/broadcast_binomial.h"
#include "ops/tcp/tcp_backend.h"
#include "tests/ops/test_values.h"
#include "tests/support/memory_transport.h"

namespace tutti {
namespace {

using testing::MemoryTransport;
using testing::MemoryWorld;

const int kWorldSizes[] = {1, 2, 3, 4, 5, 7, 8};
const size_t kCounts[] = {0, 1, 1009, 40009};

std::string worldName(const ::testing::TestParamInfo<int>& info) {
  return "n" + std::to_string(info.param);
}

// ------------------------------------------------------------ peer arithmetic

TEST(RecursiveDoublingPeers, PowerOfTwoBelow) {
  const int expected[] = {1, 2, 2, 4, 4, 4, 4, 8, 8};  // n = 1..9
  for (int n = 1; n <= 9; ++n) EXPECT_EQ(recursive_doubling::powerOfTwoBelow(n), expected[n - 1]);
  EXPECT_EQ(recursive_doubling::powerOfTwoBelow(1 << 20), 1 << 20);
  EXPECT_EQ(recursive_doubling::powerOfTwoBelow((1 << 20) - 1), 1 << 19);
}

TEST(RecursiveDoublingPeers, FoldInOfFiveRanks) {
  // n = 5: p = 4, one extra rank. Rank 0 folds into rank 1; ranks 1..4 run
  // the rounds as virtual ranks 0..3.
  const int vranks[] = {-1, 0, 1, 2, 3};
  for (int r = 0; r < 5; ++r) EXPECT_EQ(recursive_doubling::virtualRank(r, 5), vranks[r]);
  EXPECT_EQ(recursive_doubling::partner(1, 5, 1), 2);
  EXPECT_EQ(recursive_doubling::partner(1, 5, 2), 3);
  EXPECT_EQ(recursive_doubling::partner(4, 5, 1), 3);
  EXPECT_EQ(recursive_doubling::partner(4, 5, 2), 2);
  EXPECT_EQ(recursive_doubling::partner(0, 5, 1), -1);
}

TEST(RecursiveDoublingPeers, EveryWorldPairsUpConsistently) {
  for (int n = 1; n <= 33; ++n) {
    const int p = recursive_doubling::powerOfTwoBelow(n);
    std::set<int> seen;
    for (int r = 0; r < n; ++r) {
      const int v = recursive_doubling::virtualRank(r, n);
      if (v < 0) {
        // Only even ranks below 2(n - p) sit out, each beside a participant.
        EXPECT_TRUE(r % 2 == 0 && r < 2 * (n - p)) << "n " << n << " rank " << r;
        EXPECT_GE(recursive_doubling::virtualRank(r + 1, n), 0);
        continue;
      }
      EXPECT_LT(v, p);
      EXPECT_TRUE(seen.insert(v).second) << "n " << n << " vrank " << v << " twice";
      EXPECT_EQ(recursive_doubling::realRank(v, n), r);
      for (int mask = 1; mask < p; mask <<= 1) {
        const int q = recursive_doubling::partner(r, n, mask);
        ASSERT_GE(q, 0);
        ASSERT_NE(q, r);
        EXPECT_EQ(recursive_doubling::partner(q, n, mask), r) << "n " << n << " mask " << mask;
      }
    }
    EXPECT_EQ(static_cast<int>(seen.size()), p) << "n " << n;
  }
}

// ---------------------------------------------------- recursive doubling

class RecursiveDoublingTest : public ::testing::TestWithParam<int> {};

TEST_P(RecursiveDoublingTest, EveryDtypeOpAndCountIsExact) {
  const int n = GetParam();
  MemoryWorld world(n);
  world.run([&](MemoryTransport& tr) {
    const int r = tr.rank();
    std::vector<uint8_t> scratch;
    for (DataType t : testing::allDataTypes()) {
      const size_t esize = dataTypeSize(t);
      for (ReduceOp op : testing::allReduceOps()) {
        for (size_t count : kCounts) {
          if (count > 1009 && op != ReduceOp::kSum) continue;  // the large count: sum only
          std::vector<uint8_t> buf(count * esize + 1, 0);
          buf.back() = 0xcd;
          for (size_t i = 0; i < count; ++i) {
            testing::setValue(buf.data(), t, i, testing::inputValue(t, op, r, i));
          }
          const size_t posted_before = tr.postedOps();
          const Status st =
              allreduceRecursiveDoubling(tr, buf.data(), buf.data(), count, t, op, &scratch);
          ASSERT_TRUE(st.isOk()) << st.toString();
          if (count == 0 || n == 1) {
            EXPECT_EQ(tr.postedOps(), posted_before);
          }
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(testing::getValue(buf.data(), t, i), testing::expectedValue(t, op, n, i))
                << dataTypeName(t) << " " << reduceOpName(op) << " count " << count << " rank " << r
                << " element " << i;
          }
          ASSERT_EQ(buf.back(), 0xcd) << "wrote past the end";
        }
      }
    }
  });
}

TEST_P(RecursiveDoublingTest, OutOfPlaceLeavesTheInputAlone) {
  const int n = GetParam();
  MemoryWorld world(n);
  world.run([&](MemoryTransport& tr) {
    std::vector<uint8_t> scratch;
    std::vector<int32_t> in(1009), out(1009, -7);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(tr.rank() * 1000 + i);
    const std::vector<int32_t> copy = in;
    ASSERT_TRUE(allreduceRecursiveDoubling(tr, in.data(), out.data(), in.size(), DataType::kInt32,
                                           ReduceOp::kSum, &scratch)
                    .isOk());
    EXPECT_EQ(in, copy);
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(out[i], static_cast<int32_t>(1000 * n * (n - 1) / 2 + n * i)) << "element " << i;
    }
  });
}

// Integers that wrap, and floats whose sum depends on the order of the adds:
// integer results equal the ring's exactly; float results are the same bits on
// every rank.
TEST_P(RecursiveDoublingTest, IntegersMatchTheRingFloatsAgreeBitForBit) {
  const int n = GetParam();
  const size_t count = 1009;
  std::vector<std::vector<int32_t>> ints(n, std::vector<int32_t>(count));
  std::vector<std::vector<float>> floats(n, std::vector<float>(count));
  std::mt19937 gen(n);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) {
      ints[r][i] = static_cast<int32_t>(gen());
      floats[r][i] = std::ldexp(static_cast<float>(gen() % 100000) - 50000.f, gen() % 40 - 20);
    }
  }
  std::vector<std::vector<float>> results(n);
  MemoryWorld world(n);
  world.run([&](MemoryTransport& tr) {
    const int r = tr.rank();
    std::vector<uint8_t> scratch;
    std::vector<int32_t> rd = ints[r], ring = ints[r];
    ASSERT_TRUE(allreduceRecursiveDoubling(tr, rd.data(), rd.data(), count, DataType::kInt32,
                                           ReduceOp::kSum, &scratch)
                    .isOk());
    ASSERT_TRUE(
        allreduceRing(tr, ring.data(), count, DataType::kInt32, ReduceOp::kSum, 64, &scratch)
            .isOk());
    EXPECT_EQ(rd, ring) << "rank " << r;
    std::vector<float> f = floats[r];
    ASSERT_TRUE(allreduceRecursiveDoubling(tr, f.data(), f.data(), count, DataType::kFloat32,
                                           ReduceOp::kSum, &scratch)
                    .isOk());
    results[r] = f;
  });
  for (int r = 1; r < n; ++r) {
    ASSERT_EQ(std::memcmp(results[r].data(), results[0].data(), count * sizeof(float)), 0)
        << "rank " << r << " differs from rank 0";
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, RecursiveDoublingTest, ::testing::ValuesIn(kWorldSizes),
                         worldName);

// ------------------------------------------------------- binomial broadcast

class BinomialBroadcastTest : public ::testing::TestWithParam<int> {};

TEST_P(BinomialBroadcastTest, EveryRootAndCount) {
  const int n = GetParam();
  MemoryWorld world(n);
  world.run([&](MemoryTransport& tr) {
    const int r = tr.rank();
    for (int root = 0; root < n; ++root) {
      for (size_t bytes : kCounts) {
        std::vector<uint8_t> buf(bytes + 1, 0);
        for (size_t i = 0; i < bytes; ++i) {
          buf[i] = r == root ? static_cast<uint8_t>(root * 31 + i * 7 + 1) : 0;
        }
        buf.back() = 0xcd;
        ASSERT_TRUE(broadcastBinomial(tr, buf.data(), bytes, root).isOk());
        for (size_t i = 0; i < bytes; ++i) {
          ASSERT_EQ(buf[i], static_cast<uint8_t>(root * 31 + i * 7 + 1))
              << "root " << root << " rank " << r << " bytes " << bytes << " byte " << i;
        }
        ASSERT_EQ(buf.back(), 0xcd);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, BinomialBroadcastTest, ::testing::ValuesIn(kWorldSizes),
                         worldName);

// --------------------------------------------- TcpBackend with an override

struct Forced {
  const char* algorithms;  // TUTTI_ALGORITHMS
  const char* label;
};

class ForcedAlgorithmTest : public ::testing::TestWithParam<std::tuple<int, Forced>> {};

// Each algorithm forced over every size (and the defaults) through the
// backend: allreduce (in and out of place) and broadcast stay exact.
TEST_P(ForcedAlgorithmTest, BackendResultsAreExact) {
  const int n = std::get<0>(GetParam());
  std::vector<AlgorithmOverride> overrides;
  ASSERT_TRUE(parseAlgorithmOverrides(std::get<1>(GetParam()).algorithms, &overrides).isOk());
  MemoryWorld world(n);
  world.run([&](MemoryTransport& tr) {
    TcpBackend backend(tr, 64, overrides);
    const int r = tr.rank();
    for (size_t count : kCounts) {
      std::vector<int64_t> buf(count), out(count);
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<int64_t>(r * 100003 + i);
      ASSERT_TRUE(
          backend
              .allreduceOutOfPlace(buf.data(), out.data(), count, DataType::kInt64, ReduceOp::kSum)
              .isOk());
      ASSERT_TRUE(backend.allreduce(buf.data(), count, DataType::kInt64, ReduceOp::kMax).isOk());
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[i], static_cast<int64_t>(100003LL * n * (n - 1) / 2 + n * i));
        ASSERT_EQ(buf[i], static_cast<int64_t>(100003LL * (n - 1) + i));
      }
      std::vector<uint8_t> bytes(count, r == n - 1 ? 0x5a : 0);
      ASSERT_TRUE(backend.broadcast(bytes.data(), bytes.size(), n - 1).isOk());
      ASSERT_EQ(bytes, std::vector<uint8_t>(count, 0x5a));
    }
  });
}

// The choice reaches the wire: on 4 ranks recursive doubling posts one send
// and one receive in each of its 2 rounds; the ring posts more.
TEST(ForcedAlgorithm, TheOverrideDecidesWhatIsSent) {
  for (const char* forced : {"", "allreduce:0-:ring"}) {
    std::vector<AlgorithmOverride> overrides;
    ASSERT_TRUE(parseAlgorithmOverrides(forced, &overrides).isOk());
    MemoryWorld world(4);
    world.run([&](MemoryTransport& tr) {
      TcpBackend backend(tr, 0, overrides);
      std::vector<int32_t> buf(1009, 1);
      const size_t before = tr.postedOps();
      ASSERT_TRUE(
          backend.allreduce(buf.data(), buf.size(), DataType::kInt32, ReduceOp::kSum).isOk());
      if (*forced == '\0') {
        EXPECT_EQ(tr.postedOps() - before, 4u) << "default (recursive doubling)";
      } else {
        EXPECT_GT(tr.postedOps() - before, 4u) << forced;
      }
      EXPECT_EQ(buf, std::vector<int32_t>(1009, 4));
    });
  }
}

const Forced kForced[] = {
    {"", "defaults"},
    {"allreduce:0-:recursive_doubling,broadcast:0-inf:binomial", "small_algorithms"},
    {"allreduce:0-:ring,broadcast:0-:chain", "large_algorithms"},
};

INSTANTIATE_TEST_SUITE_P(Worlds, ForcedAlgorithmTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5, 8),
                                            ::testing::ValuesIn(kForced)),
                         [](const ::testing::TestParamInfo<std::tuple<int, Forced>>& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_" +
                                  std::get<1>(info.param).label;
                         });

}  // namespace
}  // namespace tutti
