// Every collective algorithm over the in-memory transport: world sizes
// 1,2,3,4,5,8; counts 0, 1, a prime, and one segment -1/0/+1 elements (64-byte
// segments make multi-segment paths cheap); every dtype x op for the
// reducing collectives, with exact expected values.

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "ops/algorithms/allgather_ring.h"
#include "ops/algorithms/allreduce_ring.h"
#include "ops/algorithms/alltoall_pairwise.h"
#include "ops/algorithms/barrier_dissemination.h"
#include "ops/algorithms/broadcast_binomial.h"
#include "ops/algorithms/broadcast_chain.h"
#include "ops/algorithms/reducescatter_ring.h"
#include "ops/tcp/tcp_backend.h"
#include "tests/ops/test_values.h"
#include "tests/support/memory_transport.h"

namespace tutti {
namespace {

using testing::MemoryTransport;
using testing::MemoryWorld;

constexpr size_t kSegmentBytes = 64;
const int kWorldSizes[] = {1, 2, 3, 4, 5, 8};

std::vector<size_t> elementCounts(DataType t, int n) {
  const size_t seg = kSegmentBytes / dataTypeSize(t);
  return {0, 1, 1009, seg - 1, seg, seg + 1, n * seg + 1};
}

std::vector<size_t> byteCounts() {
  return {0, 1, 63, 64, 65, 1009};
}

uint8_t patternByte(int rank, size_t i) {
  return static_cast<uint8_t>(rank * 31 + i * 7 + 1);
}

std::string label(DataType t, ReduceOp op, size_t count) {
  return std::string(dataTypeName(t)) + " " + reduceOpName(op) + " count " + std::to_string(count);
}

// ---------------------------------------------------------------- allreduce

class AllreduceTest : public ::testing::TestWithParam<std::tuple<int, DataType>> {};

TEST_P(AllreduceTest, EveryOpAndCountIsExact) {
  const int n = std::get<0>(GetParam());
  const DataType t = std::get<1>(GetParam());
  const size_t esize = dataTypeSize(t);
  MemoryWorld world(n);
  world.run([&](MemoryTransport& tr) {
    const int r = tr.rank();
    std::vector<uint8_t> scratch;
    for (ReduceOp op : testing::allReduceOps()) {
      for (size_t count : elementCounts(t, n)) {
        std::vector<uint8_t> buf(count * esize + 1, 0);
        buf.back() = 0xcd;
        for (size_t i = 0; i < count; ++i) {
          testing::setValue(buf.data(), t, i, testing::inputValue(t, op, r, i));
        }
        const size_t posted_before = tr.postedOps();
        const Status st = allreduceRing(tr, buf.data(), count, t, op, kSegmentBytes, &scratch);
        ASSERT_TRUE(st.isOk()) << st.toString();
        if (count == 0 || n == 1) {
          EXPECT_EQ(tr.postedOps(), posted_before);
        }
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(testing::getValue(buf.data(), t, i), testing::expectedValue(t, op, n, i))
              << label(t, op, count) << " rank " << r << " element " << i;
        }
        ASSERT_EQ(buf.back(), 0xcd) << "wrote past the end: " << label(t, op, count);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, AllreduceTest,
                         ::testing::Combine(::testing::ValuesIn(kWorldSizes),
                                            ::testing::ValuesIn(testing::allDataTypes())),
                         [](const ::testing::TestParamInfo<std::tuple<int, DataType>>& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_" +
                                  dataTypeName(std::get<1>(info.param));
                         });

// The out-of-place ring (Executor's unfused path): `in` is the first
// contribution and is never written; the result lands in `out`.
class AllreduceOutOfPlaceTest : public ::testing::TestWithParam<std::tuple<int, DataType>> {};

TEST_P(AllreduceOutOfPlaceTest, InputUntouchedOutputExact) {
  const int n = std::get<0>(GetParam());
  const DataType t = std::get<1>(GetParam());
  const size_t esize = dataTypeSize(t);
  MemoryWorld world(n);
  world.run([&](MemoryTransport& tr) {
    const int r = tr.rank();
    std::vector<uint8_t> scratch;
    for (ReduceOp op : testing::allReduceOps()) {
      for (size_t count : elementCounts(t, n)) {
        std::vector<uint8_t> in(count * esize);
        for (size_t i = 0; i < count; ++i) {
          testing::setValue(in.data(), t, i, testing::inputValue(t, op, r, i));
        }
        const std::vector<uint8_t> in_copy = in;
        std::vector<uint8_t> out(count * esize + 1, 0xab);
        out.back() = 0xcd;
        const Status st =
            allreduceRing(tr, in.data(), out.data(), count, t, op, kSegmentBytes, &scratch);
        ASSERT_TRUE(st.isOk()) << st.toString();
        ASSERT_EQ(in, in_copy) << "input modified: " << label(t, op, count) << " rank " << r;
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(testing::getValue(out.data(), t, i), testing::expectedValue(t, op, n, i))
              << label(t, op, count) << " rank " << r << " element " << i;
        }
        ASSERT_EQ(out.back(), 0xcd) << "wrote past the end: " << label(t, op, count);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, AllreduceOutOfPlaceTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5),
                                            ::testing::ValuesIn(testing::allDataTypes())),
                         [](const ::testing::TestParamInfo<std::tuple<int, DataType>>& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_" +
                                  dataTypeName(std::get<1>(info.param));
                         });

// ------------------------------------------------------------ reducescatter

class ReducescatterTest : public ::testing::TestWithParam<std::tuple<int, DataType>> {};

TEST_P(ReducescatterTest, UnevenCountsEveryOpIsExact) {
  const int n = std::get<0>(GetParam());
  const DataType t = std::get<1>(GetParam());
  const size_t esize = dataTypeSize(t);
  const size_t seg = kSegmentBytes / esize;
  std::vector<std::vector<size_t>> patterns = {
      std::vector<size_t>(n, 0), std::vector<size_t>(n, 1), std::vector<size_t>(n, seg + 1), {}};
  for (int r = 0; r < n; ++r) patterns.back().push_back(r % 3 == 1 ? 0 : 17 * r + seg - 1);
  MemoryWorld world(n);
  world.run([&](MemoryTransport& tr) {
    const int r = tr.rank();
    std::vector<uint8_t> work;
    for (ReduceOp op : testing::allReduceOps()) {
      for (const std::vector<size_t>& counts : patterns) {
        const ring::Blocks blocks = ring::blocksFromSizes(counts);
        std::vector<uint8_t> in(blocks.total() * esize);
        for (size_t i = 0; i < blocks.total(); ++i) {
          testing::setValue(in.data(), t, i, testing::inputValue(t, op, r, i));
        }
        const std::vector<uint8_t> in_copy = in;
        std::vector<uint8_t> out(counts[r] * esize + 1, 0);
        out.back() = 0xcd;
        const Status st =
            reducescatterRing(tr, in.data(), out.data(), counts, t, op, kSegmentBytes, &work);
        ASSERT_TRUE(st.isOk()) << st.toString();
        ASSERT_EQ(in, in_copy) << "input modified";
        for (size_t i = 0; i < counts[r]; ++i) {
          ASSERT_EQ(testing::getValue(out.data(), t, i),
                    testing::expectedValue(t, op, n, blocks.offset[r] + i))
              << label(t, op, blocks.total()) << " rank " << r << " element " << i;
        }
        ASSERT_EQ(out.back(), 0xcd);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, ReducescatterTest,
                         ::testing::Combine(::testing::ValuesIn(kWorldSizes),
                                            ::testing::ValuesIn(testing::allDataTypes())),
                         [](const ::testing::TestParamInfo<std::tuple<int, DataType>>& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_" +
                                  dataTypeName(std::get<1>(info.param));
                         });

// --------------------------------------------------- per-world-size suites

class WorldTest : public ::testing::TestWithParam<int> {};

TEST_P(WorldTest, AllgathervUnevenAndEmpty) {
  const int n = GetParam();
  std::vector<std::vector<size_t>> patterns;
  for (size_t b : byteCounts()) patterns.push_back(std::vector<size_t>(n, b));
  patterns.emplace_back();
  for (int r = 0; r < n; ++r) patterns.back().push_back(r % 3 == 1 ? 0 : 37 * r + 5);
  MemoryWorld world(n);
  world.run([&](MemoryTransport& tr) {
    const int r = tr.rank();
    for (const std::vector<size_t>& sizes : patterns) {
      const ring::Blocks blocks = ring::blocksFromSizes(sizes);
      std::vector<uint8_t> in(sizes[r]);
      for (size_t i = 0; i < in.size(); ++i) in[i] = patternByte(r, i);
      std::vector<uint8_t> out(blocks.total() + 1, 0);
      out.back() = 0xcd;
      const size_t posted_before = tr.postedOps();
      const Status st = allgatherRing(tr, in.data(), out.data(), sizes, kSegmentBytes);
      ASSERT_TRUE(st.isOk()) << st.toString();
      if (blocks.total() == 0) {
        EXPECT_EQ(tr.postedOps(), posted_before);
      }
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < sizes[p]; ++i) {
          ASSERT_EQ(out[blocks.offset[p] + i], patternByte(p, i))
              << "rank " << r << " block " << p << " byte " << i;
        }
      }
      ASSERT_EQ(out.back(), 0xcd);
    }
  });
}

TEST_P(WorldTest, BroadcastChainAndBinomialFromEveryRoot) {
  const int n = GetParam();
  MemoryWorld world(n);
  world.run([&](MemoryTransport& tr) {
    const int r = tr.rank();
    for (int algo = 0; algo < 2; ++algo) {
      for (int root = 0; root < n; ++root) {
        for (size_t bytes : byteCounts()) {
          std::vector<uint8_t> buf(bytes + 1, 0);
          for (size_t i = 0; i < bytes; ++i) buf[i] = r == root ? patternByte(root, i) : 0;
          buf.back() = 0xcd;
          const Status st = algo == 0 ? broadcastChain(tr, buf.data(), bytes, root, kSegmentBytes)
                                      : broadcastBinomial(tr, buf.data(), bytes, root);
          ASSERT_TRUE(st.isOk()) << st.toString();
          for (size_t i = 0; i < bytes; ++i) {
            ASSERT_EQ(buf[i], patternByte(root, i))
                << (algo == 0 ? "chain" : "binomial") << " root " << root << " rank " << r
                << " bytes " << bytes << " byte " << i;
          }
          ASSERT_EQ(buf.back(), 0xcd);
        }
      }
    }
  });
}

TEST_P(WorldTest, AlltoallvPairwiseWithZeroParts) {
  const int n = GetParam();
  // matrix[s][d]: bytes rank s sends to rank d.
  std::vector<std::vector<std::vector<size_t>>> matrices;
  matrices.push_back(std::vector<std::vector<size_t>>(n, std::vector<size_t>(n, 0)));
  matrices.push_back(std::vector<std::vector<size_t>>(n, std::vector<size_t>(n, 65)));
  matrices.emplace_back(n, std::vector<size_t>(n));
  for (int s = 0; s < n; ++s) {
    for (int d = 0; d < n; ++d) matrices.back()[s][d] = ((s * 5 + d * 3) % 7) * 13;
  }
  auto byteFor = [](int s, int d, size_t i) { return static_cast<uint8_t>(s * 17 + d * 5 + i); };
  MemoryWorld world(n);
  world.run([&](MemoryTransport& tr) {
    const int r = tr.rank();
    for (const auto& m : matrices) {
      std::vector<size_t> send(n), recv(n);
      for (int p = 0; p < n; ++p) {
        send[p] = m[r][p];
        recv[p] = m[p][r];
      }
      const ring::Blocks sb = ring::blocksFromSizes(send);
      const ring::Blocks rb = ring::blocksFromSizes(recv);
      std::vector<uint8_t> in(sb.total());
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < send[p]; ++i) in[sb.offset[p] + i] = byteFor(r, p, i);
      }
      std::vector<uint8_t> out(rb.total() + 1, 0);
      out.back() = 0xcd;
      const Status st = alltoallPairwise(tr, in.data(), send, out.data(), recv);
      ASSERT_TRUE(st.isOk()) << st.toString();
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < recv[p]; ++i) {
          ASSERT_EQ(out[rb.offset[p] + i], byteFor(p, r, i)) << "rank " << r << " from " << p;
        }
      }
      ASSERT_EQ(out.back(), 0xcd);
    }
  });
}

TEST_P(WorldTest, BarrierReleasesOnlyWhenEveryoneEntered) {
  const int n = GetParam();
  std::atomic<int> entered{0};
  MemoryWorld world(n);
  world.run([&](MemoryTransport& tr) {
    for (int round = 1; round <= 20; ++round) {
      entered.fetch_add(1);
      const Status st = barrierDissemination(tr);
      ASSERT_TRUE(st.isOk()) << st.toString();
      ASSERT_GE(entered.load(), n * round) << "rank " << tr.rank() << " round " << round;
    }
  });
}

// The backend glue: every collective once through TcpBackend, including the
// default segment size and the broadcast above the binomial threshold.
TEST_P(WorldTest, TcpBackendRunsEveryCollective) {
  const int n = GetParam();
  MemoryWorld world(n);
  world.run([&](MemoryTransport& tr) {
    const int r = tr.rank();
    TcpBackend backend(tr, 0);
    EXPECT_EQ(backend.rank(), r);
    EXPECT_EQ(backend.size(), n);
    EXPECT_STREQ(backend.name(), "tcp");

    std::vector<float> x(100003);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(r + i % 100);
    ASSERT_TRUE(backend.allreduce(x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum).isOk());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(x[i], static_cast<float>(n * (n - 1) / 2 + n * (i % 100))) << i;
    }
    std::vector<float> y(x.size());
    const std::vector<float> x_copy = x;
    ASSERT_TRUE(
        backend
            .allreduceOutOfPlace(x.data(), y.data(), x.size(), DataType::kFloat32, ReduceOp::kSum)
            .isOk());
    EXPECT_EQ(x, x_copy);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], static_cast<float>(n) * x[i]) << i;

    std::vector<uint8_t> big(300001);
    for (size_t i = 0; i < big.size(); ++i) big[i] = r == n - 1 ? patternByte(7, i) : 0;
    ASSERT_TRUE(backend.broadcast(big.data(), big.size(), n - 1).isOk());
    for (size_t i = 0; i < big.size(); ++i) ASSERT_EQ(big[i], patternByte(7, i)) << i;

    std::vector<size_t> bytes(n);
    for (int p = 0; p < n; ++p) bytes[p] = 10 * p + 1;
    std::vector<uint8_t> in(bytes[r], static_cast<uint8_t>(r + 1));
    std::vector<uint8_t> out(ring::blocksFromSizes(bytes).total());
    ASSERT_TRUE(backend.allgatherv(in.data(), out.data(), bytes).isOk());
    size_t at = 0;
    for (int p = 0; p < n; ++p) {
      for (size_t i = 0; i < bytes[p]; ++i) ASSERT_EQ(out[at++], p + 1);
    }

    std::vector<size_t> parts(n, 3);
    std::vector<uint8_t> a2a_in(3 * n), a2a_out(3 * n);
    for (int p = 0; p < n; ++p) {
      for (int i = 0; i < 3; ++i) a2a_in[3 * p + i] = static_cast<uint8_t>(10 * r + p);
    }
    ASSERT_TRUE(backend.alltoallv(a2a_in.data(), parts, a2a_out.data(), parts).isOk());
    for (int p = 0; p < n; ++p) ASSERT_EQ(a2a_out[3 * p], 10 * p + r);

    std::vector<size_t> counts(n, 2);
    std::vector<int32_t> rs_in(2 * n), rs_out(2);
    for (int i = 0; i < 2 * n; ++i) rs_in[i] = i * (r + 1);
    ASSERT_TRUE(
        backend.reducescatter(rs_in.data(), rs_out.data(), counts, DataType::kInt32, ReduceOp::kSum)
            .isOk());
    EXPECT_EQ(rs_out[0], 2 * r * n * (n + 1) / 2);
    EXPECT_EQ(rs_out[1], (2 * r + 1) * n * (n + 1) / 2);

    ASSERT_TRUE(backend.barrier().isOk());

    // Invalid arguments are errors, not crashes, and send nothing.
    EXPECT_EQ(backend.broadcast(big.data(), 1, n).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(backend.allgatherv(in.data(), out.data(), std::vector<size_t>(n + 1, 0)).code(),
              StatusCode::kInvalidArgument);
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, WorldTest, ::testing::ValuesIn(kWorldSizes),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "n" + std::to_string(info.param);
                         });

// ------------------------------------------------------- memory transport

TEST(MemoryTransportTest, AMissingSendTimesOutInsteadOfHanging) {
  MemoryWorld world(2, std::chrono::milliseconds(100));
  world.run([&](MemoryTransport& tr) {
    if (tr.rank() != 0) return;
    uint8_t b = 0;
    const Status st = tr.wait(tr.postRecv(1, &b, 1));
    EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.toString();
    // Broken from now on.
    EXPECT_EQ(tr.wait(tr.postSend(1, &b, 1)).code(), StatusCode::kTimeout);
  });
}

TEST(MemoryTransportTest, SizeMismatchIsAnError) {
  MemoryWorld world(2, std::chrono::milliseconds(2000));
  world.run([&](MemoryTransport& tr) {
    uint8_t b[2] = {0, 0};
    const Status st =
        tr.rank() == 0 ? tr.wait(tr.postSend(1, b, 2)) : tr.wait(tr.postRecv(0, b, 1));
    EXPECT_EQ(st.code(), StatusCode::kInternal) << st.toString();
  });
}

TEST(MemoryTransportTest, ControlChannelDeliversAndWakes) {
  MemoryWorld world(3);
  world.run([&](MemoryTransport& tr) {
    if (tr.rank() != 0) {
      ASSERT_TRUE(tr.sendControl(0, {static_cast<uint8_t>(tr.rank())}).isOk());
      return;
    }
    std::vector<ControlMessage> got;
    const auto deadline = Transport::Clock::now() + std::chrono::seconds(10);
    while (got.size() < 2 && Transport::Clock::now() < deadline) {
      ASSERT_TRUE(tr.pollControl(deadline, &got).isOk());
    }
    ASSERT_EQ(got.size(), 2u);
    for (const ControlMessage& m : got) EXPECT_EQ(m.bytes.at(0), m.from_rank);
    tr.wake();
    std::vector<ControlMessage> none;
    ASSERT_TRUE(tr.pollControl(Transport::Clock::now() + std::chrono::seconds(10), &none).isOk());
    EXPECT_TRUE(none.empty());
  });
}

TEST(MemoryTransportTest, AClosedControlPeerIsLostAfterItsLastMessage) {
  MemoryWorld world(3);
  world.run([&](MemoryTransport& tr) {
    if (tr.rank() == 2) {
      ASSERT_TRUE(tr.sendControl(0, {7}).isOk());
      tr.close();
      return;
    }
    if (tr.rank() == 1) return;  // rank 1 stays open
    const auto deadline = Transport::Clock::now() + std::chrono::seconds(10);
    std::vector<ControlMessage> got;
    ASSERT_TRUE(tr.pollControl(deadline, &got).isOk());
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].from_rank, 2);
    const Status st = tr.pollControl(deadline, &got);
    EXPECT_EQ(st.code(), StatusCode::kPeerLost) << st.toString();
    EXPECT_EQ(st.lostRank(), 2);
  });
}

}  // namespace
}  // namespace tutti
