// Quick end-to-end checks of tutti::Runtime: N ranks as threads of this
// process over loopback TCP, with the test's own rendezvous server. The full
// behaviour suite is tests/cases (docs/cases.md).

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "coordinator/runtime.h"
#include "ops/tcp/rendezvous_server.h"

namespace tutti {
namespace {

constexpr const char* kSecret = "coordinator-smoke-secret-0123456789";

OpOptions named(const std::string& name) {
  OpOptions o;
  o.name = name;
  return o;
}

Settings rankSettings(int rank, int size, int port) {
  Settings s;
  s.rank = rank;
  s.size = size;
  s.local_rank = rank;
  s.local_size = size;
  s.secret = kSecret;
  s.rendezvous_port = port;
  s.rank0_hosts_rendezvous = false;
  s.fusion_threshold_bytes = 64 << 10;
  s.segment_bytes = 4096;
  s.timeout_seconds = 20;
  // TUTTI_SHM=off runs the suite over TCP (default auto: shared memory).
  if (const char* shm = std::getenv("TUTTI_SHM")) s.shm = shm;
  return s;
}

// Runs body(runtime) on `size` rank threads, then shuts every runtime down.
void runRanks(int size, const std::function<void(Runtime&)>& body,
              const std::function<void(Settings&)>& tweak = {}) {
  std::unique_ptr<RendezvousServer> server;
  ASSERT_TRUE(RendezvousServer::start("127.0.0.1", 0, kSecret, &server).isOk());
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      Settings s = rankSettings(r, size, server->port());
      if (tweak) tweak(s);
      std::unique_ptr<Runtime> rt;
      Status st = Runtime::create(s, &rt);
      ASSERT_TRUE(st.isOk()) << "rank " << r << ": " << st.toString();
      body(*rt);
      EXPECT_TRUE(rt->shutdown().isOk()) << "rank " << r;
    });
  }
  for (auto& t : threads) t.join();
}

TEST(RuntimeSmokeTest, AllreduceSumAndAverage) {
  const int n = 3;
  runRanks(n, [&](Runtime& rt) {
    const int r = rt.rank();
    std::vector<float> x(7), y(7);
    for (int i = 0; i < 7; ++i) x[i] = static_cast<float>(i + r);
    Handle h;
    ASSERT_TRUE(rt.allreduce({x.data(), DataType::kFloat32, {7}},
                             {y.data(), DataType::kFloat32, {7}}, named("sum"), &h)
                    .isOk());
    ASSERT_TRUE(rt.wait(h).isOk());
    for (int i = 0; i < 7; ++i) EXPECT_EQ(y[i], static_cast<float>(n * i + n * (n - 1) / 2));
    EXPECT_TRUE(rt.release(h).isOk());
    // In place, average, int32: the sum divided by 3, truncated (61 / 3 -> 20).
    std::vector<int32_t> v = {10 * (r + 1) + (r == 0 ? 1 : 0), 3};
    OpOptions avg;
    avg.name = "avg";
    avg.reduce_op = ReduceOp::kAverage;
    TensorView tv{v.data(), DataType::kInt32, {2}};
    ASSERT_TRUE(rt.allreduce(tv, tv, avg, &h).isOk());
    ASSERT_TRUE(rt.wait(h, 20).isOk());
    EXPECT_EQ(v, (std::vector<int32_t>{20, 3}));
    // The same name again after completion works.
    ASSERT_TRUE(rt.allreduce(tv, tv, avg, &h).isOk());
    ASSERT_TRUE(rt.wait(h, 20).isOk());
    EXPECT_EQ(v, (std::vector<int32_t>{20, 3}));
  });
}

TEST(RuntimeSmokeTest, ShapeMismatchIsAnErrorOnEveryRank) {
  runRanks(2, [&](Runtime& rt) {
    const int r = rt.rank();
    std::vector<float> x(17 + r);
    TensorView tv{x.data(), DataType::kFloat32, {17 + r}};
    Handle h;
    ASSERT_TRUE(rt.allreduce(tv, tv, named("grad.fc1"), &h).isOk());
    Status st = rt.wait(h, 20);
    EXPECT_EQ(st.code(), StatusCode::kMismatch) << st.toString();
    EXPECT_EQ(st.message(),
              "allreduce 'grad.fc1': shapes differ across ranks: rank 0 [17], rank 1 [18]");
    // A duplicate in-flight name is refused at once; later ops still work.
    // (The name is this rank's own, so the first op stays pending.)
    Handle a, b;
    std::vector<float> z(4, 1.0f);
    TensorView zv{z.data(), DataType::kFloat32, {4}};
    const std::string dup = "dup." + std::to_string(r);
    ASSERT_TRUE(rt.allreduce(zv, zv, named(dup), &a).isOk());
    Status again = rt.allreduce(zv, zv, named(dup), &b);
    EXPECT_EQ(again.code(), StatusCode::kDuplicateName) << again.toString();
    ASSERT_TRUE(rt.allreduce(zv, zv, named("after"), &b).isOk());
    ASSERT_TRUE(rt.wait(b, 20).isOk());
    EXPECT_EQ(z[0], 2.0f);
  });
}

TEST(RuntimeSmokeTest, FiftyAsyncTensorsAreFusedAndCorrect) {
  const int n = 3;
  runRanks(n, [&](Runtime& rt) {
    const int r = rt.rank();
    std::vector<std::vector<double>> bufs(50);
    std::vector<Handle> handles(50);
    for (int t = 0; t < 50; ++t) {
      bufs[t].assign(1 + t * 7, static_cast<double>(t + r));
      TensorView tv{bufs[t].data(), DataType::kFloat64, {static_cast<int64_t>(bufs[t].size())}};
      ASSERT_TRUE(rt.allreduce(tv, tv, named("t." + std::to_string(t)), &handles[t]).isOk());
    }
    for (int t = 0; t < 50; ++t) {
      ASSERT_TRUE(rt.wait(handles[t], 20).isOk()) << t;
      for (double v : bufs[t]) ASSERT_EQ(v, static_cast<double>(n * t + n * (n - 1) / 2)) << t;
    }
  });
}

TEST(RuntimeSmokeTest, OtherCollectives) {
  const int n = 3;
  runRanks(n, [&](Runtime& rt) {
    const int r = rt.rank();
    Handle h;
    // Allgather: rank r contributes r + 1 rows of [2] filled with r.
    std::vector<int32_t> g(2 * (r + 1), r);
    ASSERT_TRUE(rt.allgather({g.data(), DataType::kInt32, {r + 1, 2}}, named("ag"), &h).isOk());
    ASSERT_TRUE(rt.wait(h, 20).isOk());
    OwnedTensor* out = rt.output(h);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->shape, (Shape{6, 2}));
    const auto* gv = reinterpret_cast<const int32_t*>(out->bytes.data());
    EXPECT_EQ(std::vector<int32_t>(gv, gv + 12),
              (std::vector<int32_t>{0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2}));
    // Broadcast from root 1.
    std::vector<float> b(3, static_cast<float>(r));
    OpOptions bo = named("bc");
    bo.root = 1;
    TensorView bv{b.data(), DataType::kFloat32, {3}};
    ASSERT_TRUE(rt.broadcast(bv, bv, bo, &h).isOk());
    ASSERT_TRUE(rt.wait(h, 20).isOk());
    EXPECT_EQ(b, std::vector<float>(3, 1.0f));
    // Alltoall: rank r sends r + 1 rows to every peer.
    std::vector<int64_t> a(3 * (r + 1), r);
    OpOptions ao = named("a2a");
    ao.splits = {r + 1, r + 1, r + 1};
    ASSERT_TRUE(rt.alltoall({a.data(), DataType::kInt64, {3 * (r + 1)}}, ao, &h).isOk());
    ASSERT_TRUE(rt.wait(h, 20).isOk());
    EXPECT_EQ(rt.receivedSplits(h), (std::vector<int64_t>{1, 2, 3}));
    ASSERT_NE(rt.output(h), nullptr);
    const auto* av = reinterpret_cast<const int64_t*>(rt.output(h)->bytes.data());
    EXPECT_EQ(std::vector<int64_t>(av, av + 6), (std::vector<int64_t>{0, 1, 1, 2, 2, 2}));
    // Reducescatter of 4 * size rows: rank r gets rows [4r, 4r + 4) of the sum.
    std::vector<float> rs(12);
    for (int i = 0; i < 12; ++i) rs[i] = static_cast<float>(i);
    ASSERT_TRUE(rt.reducescatter({rs.data(), DataType::kFloat32, {12}}, named("rs"), &h).isOk());
    ASSERT_TRUE(rt.wait(h, 20).isOk());
    ASSERT_NE(rt.output(h), nullptr);
    const auto* rv = reinterpret_cast<const float*>(rt.output(h)->bytes.data());
    for (int i = 0; i < 4; ++i) EXPECT_EQ(rv[i], 3.0f * (4 * r + i));
    ASSERT_TRUE(rt.barrier(&h).isOk());
    ASSERT_TRUE(rt.wait(h, 20).isOk());
  });
}

TEST(RuntimeSmokeTest, JoinContributesZeros) {
  const int n = 3;
  runRanks(n, [&](Runtime& rt) {
    const int r = rt.rank();
    Handle jh;
    if (r == 1) {
      ASSERT_TRUE(rt.join(&jh).isOk());
    } else {
      for (const char* name : {"j.a", "j.b"}) {
        std::vector<float> x(5, 3.0f);
        OpOptions o = named(name);
        o.reduce_op = ReduceOp::kAverage;
        TensorView tv{x.data(), DataType::kFloat32, {5}};
        Handle h;
        ASSERT_TRUE(rt.allreduce(tv, tv, o, &h).isOk());
        ASSERT_TRUE(rt.wait(h, 20).isOk());
        EXPECT_FLOAT_EQ(x[0], 3.0f * (n - 1) / n);
      }
      ASSERT_TRUE(rt.join(&jh).isOk());
    }
    ASSERT_TRUE(rt.wait(jh, 20).isOk());
    int last = rt.joinResult(jh);
    EXPECT_TRUE(last == 0 || last == 2) << last;
  });
}

TEST(RuntimeSmokeTest, ShutdownCompletesPendingHandleThenReinitWithAnotherSize) {
  std::atomic<bool> enqueued{false};
  runRanks(2, [&](Runtime& rt) {
    if (rt.rank() != 0) {
      // Shut down only after rank 0's op is pending (else it fails at once).
      while (!enqueued) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    std::vector<float> x(4);
    TensorView tv{x.data(), DataType::kFloat32, {4}};
    Handle h;
    ASSERT_TRUE(rt.allreduce(tv, tv, named("never.matched"), &h).isOk());
    EXPECT_FALSE(rt.poll(h));
    enqueued = true;
    ASSERT_TRUE(rt.shutdown().isOk());
    EXPECT_TRUE(rt.poll(h));
    EXPECT_EQ(rt.wait(h, 1).code(), StatusCode::kShutdown);
    EXPECT_EQ(rt.allreduce(tv, tv, named("late"), &h).code(), StatusCode::kShutdown);
  });
  // A new job of another size in the same process.
  runRanks(3, [&](Runtime& rt) {
    std::vector<int64_t> x(2, 1);
    TensorView tv{x.data(), DataType::kInt64, {2}};
    Handle h;
    ASSERT_TRUE(rt.allreduce(tv, tv, OpOptions{}, &h).isOk());
    ASSERT_TRUE(rt.wait(h, 20).isOk());
    EXPECT_EQ(x[0], 3);
  });
}

TEST(RuntimeSmokeTest, StallShutdownFailsOnEveryRank) {
  std::atomic<bool> stalled{false};
  runRanks(
      2,
      [&](Runtime& rt) {
        std::vector<float> x(1);
        TensorView tv{x.data(), DataType::kFloat32, {1}};
        Handle h;
        if (rt.rank() == 0) {
          ASSERT_TRUE(rt.allreduce(tv, tv, named("stalled"), &h).isOk());
          Status st = rt.wait(h, 10);
          EXPECT_EQ(st.code(), StatusCode::kStalled) << st.toString();
          stalled = true;
        } else {
          // Stay up (a shutdown would cancel the op with kShutdown instead).
          while (!stalled) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      },
      [](Settings& s) {
        s.stall_check_time_seconds = 0.2;
        s.stall_shutdown_time_seconds = 0.5;
      });
}

}  // namespace
}  // namespace tutti
