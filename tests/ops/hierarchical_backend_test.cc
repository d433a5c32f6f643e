// TcpBackend's choice of the hierarchical allreduce (ops/algorithm_table.h,
// TUTTI_HIERARCHICAL_ALLREDUCE), allgather and broadcast: which algorithm ran
// is told by the messages it posted, compared with the same call made on the
// algorithm directly, and by the bytes it sent across hosts; results are
// checked against exact sums and the root's bytes. Process sets take their
// members' hosts.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "ops/algorithms/allgather_hierarchical.h"
#include "ops/algorithms/allgather_ring.h"
#include "ops/algorithms/allreduce_hierarchical.h"
#include "ops/algorithms/allreduce_recursive_doubling.h"
#include "ops/algorithms/allreduce_ring.h"
#include "ops/algorithms/broadcast_chain.h"
#include "ops/algorithms/broadcast_hierarchical.h"
#include "ops/host_groups.h"
#include "ops/subset_transport.h"
#include "ops/tcp/tcp_backend.h"
#include "tests/support/memory_transport.h"

namespace tutti {
namespace {

using testing::MemoryTransport;
using testing::MemoryWorld;

constexpr size_t kSegmentBytes = 4096;

enum class Ran { kHierarchical, kRing, kRecursiveDoubling };

// Messages `tr`'s rank posts for the allreduce of `count` int32 with `ran`.
size_t postedBy(Transport& tr, MemoryTransport& world, const std::vector<int>& hosts, Ran ran,
                size_t count) {
  std::vector<int32_t> buf(count, 1);
  std::vector<uint8_t> scratch, staging;
  HostGroups groups(tr, hosts);
  const size_t before = world.postedOps();
  Status st;
  if (ran == Ran::kHierarchical) {
    st = allreduceHierarchical(groups.local(), groups.cross(), buf.data(), buf.data(), count,
                               DataType::kInt32, ReduceOp::kSum, kSegmentBytes, &scratch, &staging);
  } else if (ran == Ran::kRing) {
    st = allreduceRing(tr, buf.data(), count, DataType::kInt32, ReduceOp::kSum, kSegmentBytes,
                       &scratch);
  } else {
    st = allreduceRecursiveDoubling(tr, buf.data(), buf.data(), count, DataType::kInt32,
                                    ReduceOp::kSum, &scratch);
  }
  EXPECT_TRUE(st.isOk()) << st.toString();
  return world.postedOps() - before;
}

// Runs the backend's allreduce on `tr`; checks the sum; returns the messages posted.
size_t postedByBackend(Transport& tr, MemoryTransport& world, const TcpHierarchy& hierarchy,
                       size_t count) {
  TcpBackend backend(tr, kSegmentBytes, {}, hierarchy);
  std::vector<int32_t> buf(count);
  for (size_t i = 0; i < count; ++i) buf[i] = static_cast<int32_t>(i % 1000) + tr.rank();
  const size_t before = world.postedOps();
  EXPECT_TRUE(backend.allreduce(buf.data(), count, DataType::kInt32, ReduceOp::kSum).isOk());
  const int n = tr.size();
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ(buf[i], static_cast<int32_t>(n * (i % 1000) + n * (n - 1) / 2)) << "element " << i;
    if (buf[i] != static_cast<int32_t>(n * (i % 1000) + n * (n - 1) / 2)) break;
  }
  return world.postedOps() - before;
}

struct Case {
  const char* mode;  // TUTTI_HIERARCHICAL_ALLREDUCE
  std::vector<int> hosts;
  size_t count;  // int32 elements
  Ran expected;
};

TEST(HierarchicalChoice, TheSettingAndThePlacementDecide) {
  const std::vector<int> h2x2 = {0, 0, 1, 1};
  const size_t large = 100000;  // 400 kB: above recursive doubling's default range
  const Case cases[] = {
      {"auto", h2x2, large, Ran::kHierarchical}, {"auto", h2x2, 1000, Ran::kRecursiveDoubling},
      {"1", h2x2, 1000, Ran::kHierarchical},     {"0", h2x2, large, Ran::kRing},
      {"auto", {0, 0, 0, 0}, large, Ran::kRing},  // one host
      {"1", {0, 1, 2, 3}, large, Ran::kRing},     // one rank per host
      {"1", {0, 0, 0, 1}, large, Ran::kRing},     // hosts of different sizes
  };
  for (const Case& c : cases) {
    MemoryWorld world(4);
    world.run([&](MemoryTransport& tr) {
      const size_t expected = postedBy(tr, tr, c.hosts, c.expected, c.count);
      const size_t got = postedByBackend(tr, tr, TcpHierarchy{c.mode, "auto", c.hosts}, c.count);
      EXPECT_EQ(got, expected) << "mode " << c.mode << " count " << c.count << " hosts "
                               << ::testing::PrintToString(c.hosts);
    });
  }
}

// The algorithms' message counts differ, so the comparison above can tell them apart.
TEST(HierarchicalChoice, TheAlgorithmsPostDifferentMessages) {
  MemoryWorld world(4);
  world.run([&](MemoryTransport& tr) {
    const std::vector<int> h2x2 = {0, 0, 1, 1};
    const size_t hier = postedBy(tr, tr, h2x2, Ran::kHierarchical, 100000);
    EXPECT_NE(hier, postedBy(tr, tr, h2x2, Ran::kRing, 100000));
    EXPECT_NE(postedBy(tr, tr, h2x2, Ran::kHierarchical, 1000),
              postedBy(tr, tr, h2x2, Ran::kRecursiveDoubling, 1000));
  });
}

// A process set's placement is its members': world 3 hosts x 2 ranks; the
// set {0, 1, 4, 5} is 2 hosts x 2, the set {1, 2, 3, 5} has hosts of 1, 2
// and 1 ranks (flat ring).
TEST(HierarchicalChoice, ProcessSetsUseTheirMembersPlacement) {
  const std::vector<int> world_hosts = {0, 0, 1, 1, 2, 2};
  struct SetCase {
    std::vector<int> ranks;
    Ran expected;
  };
  const SetCase sets[] = {{{0, 1, 4, 5}, Ran::kHierarchical}, {{1, 2, 3, 5}, Ran::kRing}};
  for (const SetCase& s : sets) {
    MemoryWorld world(6);
    world.run([&](MemoryTransport& tr) {
      if (std::find(s.ranks.begin(), s.ranks.end(), tr.rank()) == s.ranks.end()) return;
      SubsetTransport set(tr, s.ranks);
      const std::vector<int> hosts = hostIdsOf(world_hosts, s.ranks);
      const size_t expected = postedBy(set, tr, hosts, s.expected, 100000);
      EXPECT_EQ(postedByBackend(set, tr, TcpHierarchy{"auto", "auto", hosts}, 100000), expected)
          << "set " << ::testing::PrintToString(s.ranks);
    });
  }
}

// Counts the sends that cross hosts, forwarding everything to `inner`.
class CrossHostCounter : public Transport {
 public:
  CrossHostCounter(Transport& inner, std::vector<int> hosts)
      : inner_(inner), hosts_(std::move(hosts)) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  OpId postSend(int peer, const void* data, size_t bytes) override {
    if (hosts_[peer] != hosts_[rank()]) {
      ++cross_sends;
      cross_bytes += bytes;
    }
    return inner_.postSend(peer, data, bytes);
  }
  OpId postRecv(int peer, void* data, size_t bytes) override {
    return inner_.postRecv(peer, data, bytes);
  }
  Status wait(OpId id) override { return inner_.wait(id); }
  Status waitAll() override { return inner_.waitAll(); }
  Status sendControl(int peer, std::vector<uint8_t> bytes) override {
    return inner_.sendControl(peer, std::move(bytes));
  }
  Status pollControl(Clock::time_point deadline, std::vector<ControlMessage>* out) override {
    return inner_.pollControl(deadline, out);
  }
  void wake() override { inner_.wake(); }
  size_t cross_sends = 0;
  size_t cross_bytes = 0;

 private:
  Transport& inner_;
  const std::vector<int> hosts_;
};

// The flat ring follows the hosts: with hosts {0, 1, 0, 1} rank order would
// cross a link at every hop; host order (0, 2, 1, 3) at half of them.
TEST(HierarchicalChoice, TheFlatRingFollowsTheHosts) {
  const std::vector<int> interleaved = {0, 1, 0, 1};
  MemoryWorld world(4);
  world.run([&](MemoryTransport& tr) {
    const size_t count = 100000;  // the ring's range
    std::vector<int32_t> buf(count, tr.rank());
    std::vector<uint8_t> scratch;
    CrossHostCounter by_rank(tr, interleaved);
    ASSERT_TRUE(allreduceRing(by_rank, buf.data(), count, DataType::kInt32, ReduceOp::kSum,
                              kSegmentBytes, &scratch)
                    .isOk());
    CrossHostCounter counter(tr, interleaved);
    TcpBackend backend(counter, kSegmentBytes, {}, TcpHierarchy{"0", "0", interleaved});
    ASSERT_TRUE(backend.allreduce(buf.data(), count, DataType::kInt32, ReduceOp::kSum).isOk());
    EXPECT_EQ(buf, std::vector<int32_t>(count, 4 * 6));
    EXPECT_GT(by_rank.cross_sends, 0u);
    // In the ring 0 -> 2 -> 1 -> 3 -> 0 ranks 2 and 3 send to the other host.
    const bool sends_across = tr.rank() == 2 || tr.rank() == 3;
    EXPECT_EQ(counter.cross_sends, sends_across ? by_rank.cross_sends : 0u) << tr.rank();
  });
}

// Allgather and reduce-scatter rings follow the hosts too (ring 0 -> 2 -> 1
// -> 3: only ranks 2 and 3 send to the other host), with uneven blocks whose
// results stay in rank order, exact.
TEST(HierarchicalChoice, TheFlatAllgatherAndReducescatterFollowTheHosts) {
  const std::vector<int> interleaved = {0, 1, 0, 1};
  const std::vector<size_t> counts = {3000, 0, 7001, 2500};  // per rank, uneven and empty
  size_t total = 0;
  for (size_t c : counts) total += c;
  MemoryWorld world(4);
  world.run([&](MemoryTransport& tr) {
    const int r = tr.rank();
    const bool sends_across = r == 2 || r == 3;
    CrossHostCounter counter(tr, interleaved);
    TcpBackend backend(counter, kSegmentBytes, {}, TcpHierarchy{"0", "0", interleaved});
    std::vector<size_t> bytes(counts.size());
    for (size_t i = 0; i < counts.size(); ++i) bytes[i] = counts[i] * sizeof(int32_t);
    std::vector<int32_t> mine(counts[static_cast<size_t>(r)], 100 * r);
    std::vector<int32_t> gathered(total, -1);
    ASSERT_TRUE(backend.allgatherv(mine.data(), gathered.data(), bytes).isOk());
    size_t at = 0;
    for (size_t owner = 0; owner < counts.size(); ++owner) {
      for (size_t i = 0; i < counts[owner]; ++i, ++at) {
        ASSERT_EQ(gathered[at], static_cast<int32_t>(100 * owner)) << "element " << at;
      }
    }
    EXPECT_EQ(counter.cross_sends > 0, sends_across) << "allgather, rank " << r;

    const size_t before = counter.cross_sends;
    std::vector<int32_t> in(total);
    for (size_t i = 0; i < total; ++i) in[i] = static_cast<int32_t>(i % 977) * (r + 1);
    std::vector<int32_t> out(counts[static_cast<size_t>(r)], -1);
    ASSERT_TRUE(
        backend.reducescatter(in.data(), out.data(), counts, DataType::kInt32, ReduceOp::kSum)
            .isOk());
    size_t offset = 0;
    for (int q = 0; q < r; ++q) offset += counts[static_cast<size_t>(q)];
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(out[i], static_cast<int32_t>((offset + i) % 977) * 10) << "element " << i;
    }
    EXPECT_EQ(counter.cross_sends > before, sends_across) << "reducescatter, rank " << r;
  });
}

// Allgather: TUTTI_HIERARCHICAL_ALLGATHER decides (auto above 64 KiB of
// output, 1 for every size, 0 never), and the output is every rank's bytes.
TEST(HierarchicalChoice, AllgatherFollowsItsOwnSetting) {
  const std::vector<int> h2x2 = {0, 0, 1, 1};
  struct AllgatherCase {
    const char* mode;
    size_t bytes_each;
    bool hierarchical;
  };
  const AllgatherCase cases[] = {
      {"auto", 40000, true}, {"auto", 1000, false}, {"1", 1000, true}, {"0", 40000, false}};
  for (const AllgatherCase& c : cases) {
    MemoryWorld world(4);
    world.run([&](MemoryTransport& tr) {
      const std::vector<size_t> sizes(4, c.bytes_each);
      std::vector<uint8_t> in(c.bytes_each, static_cast<uint8_t>(tr.rank() + 1));
      std::vector<uint8_t> out(4 * c.bytes_each), direct(out.size());
      std::vector<uint8_t> work;
      HostGroups groups(tr, h2x2);
      size_t before = tr.postedOps();
      ASSERT_TRUE((c.hierarchical
                       ? allgatherHierarchical(groups.local(), groups.cross(), groups.layout(),
                                               in.data(), direct.data(), sizes, 0, &work)
                       : allgatherRing(tr, in.data(), direct.data(), sizes, 0))
                      .isOk());
      const size_t expected = tr.postedOps() - before;
      TcpBackend backend(tr, 0, {}, TcpHierarchy{"auto", c.mode, h2x2});
      before = tr.postedOps();
      ASSERT_TRUE(backend.allgatherv(in.data(), out.data(), sizes).isOk());
      EXPECT_EQ(tr.postedOps() - before, expected) << c.mode << " " << c.bytes_each;
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_EQ(out[i], static_cast<uint8_t>(i / c.bytes_each + 1)) << "byte " << i;
      }
    });
  }
}

// Autotune's switches (Backend::allowHierarchical) decline the hierarchical
// algorithms and let them back, call by call, with exact results.
TEST(HierarchicalChoice, AutotuneSwitchesTurnItOffAndOnAgain) {
  const std::vector<int> h2x2 = {0, 0, 1, 1};
  MemoryWorld world(4);
  world.run([&](MemoryTransport& tr) {
    const size_t count = 100000;
    const size_t hier = postedBy(tr, tr, h2x2, Ran::kHierarchical, count);
    const size_t ring = postedBy(tr, tr, h2x2, Ran::kRing, count);  // host order = rank order
    const std::vector<size_t> sizes(4, 40000);
    std::vector<uint8_t> in(40000, static_cast<uint8_t>(tr.rank() + 1)), out(4 * 40000), work;
    HostGroups groups(tr, h2x2);
    size_t before = tr.postedOps();
    ASSERT_TRUE(allgatherRing(tr, in.data(), out.data(), sizes, kSegmentBytes).isOk());
    const size_t gather_ring = tr.postedOps() - before;
    before = tr.postedOps();
    ASSERT_TRUE(allgatherHierarchical(groups.local(), groups.cross(), groups.layout(), in.data(),
                                      out.data(), sizes, kSegmentBytes, &work)
                    .isOk());
    const size_t gather_hier = tr.postedOps() - before;
    TcpBackend backend(tr, kSegmentBytes, {}, TcpHierarchy{"auto", "auto", h2x2});
    for (const bool on : {true, false, true}) {
      backend.allowHierarchical(on, on);
      std::vector<int32_t> buf(count, tr.rank());
      before = tr.postedOps();
      ASSERT_TRUE(backend.allreduce(buf.data(), count, DataType::kInt32, ReduceOp::kSum).isOk());
      EXPECT_EQ(tr.postedOps() - before, on ? hier : ring) << on;
      EXPECT_EQ(buf, std::vector<int32_t>(count, 6)) << on;
      std::fill(out.begin(), out.end(), 0);
      before = tr.postedOps();
      ASSERT_TRUE(backend.allgatherv(in.data(), out.data(), sizes).isOk());
      EXPECT_EQ(tr.postedOps() - before, on ? gather_hier : gather_ring) << on;
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_EQ(out[i], static_cast<uint8_t>(i / 40000 + 1)) << "byte " << i;
      }
    }
  });
}

// "fp16:cross_host" (TcpBackend::allreduceCastAcrossHosts): float32 within
// a host, float16 across: half the cross-host bytes of the float32
// hierarchical allreduce, sums within fp16 rounding of the exact ones (exact
// for small integers), the same bits on every rank; one host is a plain
// float32 allreduce; where the hierarchical allreduce does not run, nothing.
TEST(HierarchicalCast, OnlyWhatCrossesHostsIsSixteenBits) {
  const std::vector<int> h2x2 = {0, 0, 1, 1};
  const size_t count = 100000;  // hierarchical's range
  auto value = [](int rank, size_t i, bool integer) {
    return integer ? static_cast<float>((rank + 1) * (i % 11))
                   : 1.0f + 0.001f * rank + 1e-5f * static_cast<float>(i % 1000);
  };
  for (const bool integer : {true, false}) {
    std::mutex mu;
    std::vector<std::vector<float>> results(4);
    MemoryWorld world(4);
    world.run([&](MemoryTransport& tr) {
      std::vector<float> in(count), full(count), half(count);
      for (size_t i = 0; i < count; ++i) in[i] = value(tr.rank(), i, integer);
      CrossHostCounter counter(tr, h2x2);
      TcpBackend backend(counter, kSegmentBytes, {}, TcpHierarchy{"auto", "auto", h2x2});
      ASSERT_TRUE(backend
                      .allreduceOutOfPlace(in.data(), full.data(), count, DataType::kFloat32,
                                           ReduceOp::kSum)
                      .isOk());
      const size_t full_bytes = counter.cross_bytes;
      bool ran = false;
      ASSERT_TRUE(backend
                      .allreduceCastAcrossHosts(in.data(), half.data(), count, DataType::kFloat32,
                                                ReduceOp::kSum, DataType::kFloat16, &ran)
                      .isOk());
      ASSERT_TRUE(ran);
      EXPECT_EQ(2 * (counter.cross_bytes - full_bytes), full_bytes);
      size_t rounded = 0;
      for (size_t i = 0; i < count; ++i) {
        double exact = 0;
        for (int r = 0; r < 4; ++r) exact += value(r, i, integer);
        // Two host partial sums rounded to fp16, their sum rounded again.
        ASSERT_LE(std::fabs(half[i] - exact), 3 * std::ldexp(exact, -11)) << i;
        if (integer) ASSERT_EQ(half[i], exact) << i;
        rounded += half[i] != full[i];
      }
      if (!integer) EXPECT_GT(rounded, count / 2) << "the cast did not happen";
      std::lock_guard<std::mutex> lock(mu);
      results[static_cast<size_t>(tr.rank())] = half;
    });
    for (int r = 1; r < 4; ++r) EXPECT_EQ(results[r], results[0]) << "rank " << r;
  }
}

TEST(HierarchicalCast, OneHostIsFloat32AndElsewhereItDeclines) {
  struct Case {
    std::vector<int> hosts;
    size_t count;
    bool ran;
  };
  const Case cases[] = {{{0, 0, 0, 0}, 100000, true},    // one host: a float32 allreduce
                        {{0, 0, 1, 1}, 1000, false},     // recursive doubling's range
                        {{0, 1, 2, 3}, 100000, false},   // one rank per host: flat ring
                        {{0, 0, 0, 1}, 100000, false}};  // hosts of different sizes
  for (const Case& c : cases) {
    MemoryWorld world(4);
    world.run([&](MemoryTransport& tr) {
      std::vector<float> in(c.count, 1.0f + 1e-4f * tr.rank()), out(c.count, -1.0f);
      TcpBackend backend(tr, kSegmentBytes, {}, TcpHierarchy{"auto", "auto", c.hosts});
      bool ran = !c.ran;
      ASSERT_TRUE(backend
                      .allreduceCastAcrossHosts(in.data(), out.data(), c.count, DataType::kFloat32,
                                                ReduceOp::kSum, DataType::kFloat16, &ran)
                      .isOk());
      EXPECT_EQ(ran, c.ran) << ::testing::PrintToString(c.hosts) << " " << c.count;
      std::vector<float> want(c.count, -1.0f);
      if (c.ran) {
        ASSERT_TRUE(backend
                        .allreduceOutOfPlace(in.data(), want.data(), c.count, DataType::kFloat32,
                                             ReduceOp::kSum)
                        .isOk());
      }
      EXPECT_EQ(out, want);
    });
  }
}

// Broadcast through the backend on hosts {0, 1, 0, 1} (host order 0, 2, 1,
// 3), every root, a tree-sized and a chain-sized payload: by default the
// hierarchical broadcast runs (the messages of the direct call) and puts the
// buffer on the link once; the flat chain (TUTTI_ALGORITHMS) runs through the
// ranks host by host: once from a host's first rank (0, 1), twice from its
// second (2, 3), against three times in rank order; the binomial tree, too,
// is exact. Every rank ends with the root's bytes.
TEST(HierarchicalChoice, BroadcastCrossesTheLinkOnce) {
  const std::vector<int> interleaved = {0, 1, 0, 1};
  struct BroadcastCase {
    const char* algorithms;  // TUTTI_ALGORITHMS
    size_t bytes;
    std::vector<size_t> crossings;  // the buffer's crossings by root
  };
  const std::vector<size_t> once = {1, 1, 1, 1};
  const BroadcastCase cases[] = {
      {"", 1000, once},
      {"", 200000, once},
      {"broadcast:0-inf:chain", 200000, {1, 1, 2, 2}},
      {"broadcast:0-inf:binomial", 1000, {}},
  };
  for (const BroadcastCase& c : cases) {
    std::vector<AlgorithmOverride> overrides;
    ASSERT_TRUE(parseAlgorithmOverrides(c.algorithms, &overrides).isOk());
    for (int root = 0; root < 4; ++root) {
      const std::string what = std::string(c.algorithms) + " bytes " + std::to_string(c.bytes) +
                               " root " + std::to_string(root);
      std::vector<size_t> cross_bytes(4, 0), rank_order_bytes(4, 0);
      MemoryWorld world(4);
      world.run([&](MemoryTransport& tr) {
        auto fill = [&](std::vector<uint8_t>* buf) {
          for (size_t i = 0; i < c.bytes; ++i) {
            (*buf)[i] = tr.rank() == root ? static_cast<uint8_t>(i * 7 + root) : 0;
          }
        };
        std::vector<uint8_t> buf(c.bytes), direct(c.bytes);
        fill(&direct);
        HostGroups groups(tr, interleaved);
        size_t posted = tr.postedOps();
        ASSERT_TRUE(broadcastHierarchical(groups.local(), groups.cross(), groups.layout(),
                                          direct.data(), c.bytes, root, kSegmentBytes)
                        .isOk());
        const size_t hierarchical_ops = tr.postedOps() - posted;
        fill(&direct);
        CrossHostCounter by_rank(tr, interleaved);
        ASSERT_TRUE(broadcastChain(by_rank, direct.data(), c.bytes, root, kSegmentBytes).isOk());
        rank_order_bytes[tr.rank()] = by_rank.cross_bytes;
        fill(&buf);
        CrossHostCounter counter(tr, interleaved);
        TcpBackend backend(counter, kSegmentBytes, overrides,
                           TcpHierarchy{"auto", "auto", interleaved});
        posted = tr.postedOps();
        ASSERT_TRUE(backend.broadcast(buf.data(), c.bytes, root).isOk()) << what;
        if (c.algorithms[0] == '\0') {
          EXPECT_EQ(tr.postedOps() - posted, hierarchical_ops) << what;
        }
        cross_bytes[tr.rank()] = counter.cross_bytes;
        for (size_t i = 0; i < c.bytes; ++i) {
          ASSERT_EQ(buf[i], static_cast<uint8_t>(i * 7 + root)) << what << " byte " << i;
        }
      });
      size_t total = 0, rank_order = 0;
      for (int r = 0; r < 4; ++r) {
        total += cross_bytes[r];
        rank_order += rank_order_bytes[r];
      }
      EXPECT_EQ(rank_order, 3 * c.bytes) << what;
      if (!c.crossings.empty()) {
        EXPECT_EQ(total, c.crossings[root] * c.bytes) << what;
      }
    }
  }
}

}  // namespace
}  // namespace tutti
