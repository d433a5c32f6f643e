// Tagged point-to-point messages (Runtime::send / Runtime::recv,
// coordinator/point_to_point.h): every pair at 2, 3 and 5 ranks, posting
// order within a tag, tags out of order, uninvolved ranks that call nothing,
// empty and large messages, mismatches on both sides, bad peers, a recv that
// is never sent (stall). A peer that dies: fault_test.cc.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/host_tensor.h"
#include "tests/support/op_checks.h"
#include "tests/support/thread_harness.h"

namespace tutti {
namespace test {
namespace {

// The value of element i of message `k` from rank src to rank dst: distinct
// per message and exact in float32.
double messageValue(int src, int dst, int64_t k, int64_t i) {
  return static_cast<double>(src * 1000 + dst * 100 + k * 7 + i % 50);
}

Status sendNow(Runtime& rt, HostTensor& t, int dst, int tag, int32_t set = kGlobalProcessSet) {
  return runOpStatus(rt, [&](Handle* h) { return rt.send(t.view(), dst, tag, set, h); });
}

Status recvNow(Runtime& rt, HostTensor& t, int src, int tag, int32_t set = kGlobalProcessSet) {
  return runOpStatus(rt, [&](Handle* h) { return rt.recv(t.view(), src, tag, set, h); });
}

std::string sizeName(const ::testing::TestParamInfo<int>& info) {
  return "size" + std::to_string(info.param);
}

class PointToPointPairsTest : public ::testing::TestWithParam<int> {};

// Every rank sends one message to every other rank and receives one from
// each, all posted at once (sends and recvs interleaved), then waits.
TEST_P(PointToPointPairsTest, EveryOrderedPairExchangesItsMessage) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    const int rank = rt.rank();
    const int64_t n = 3000;  // several 4096-byte segments
    std::vector<std::unique_ptr<HostTensor>> out, in;
    std::vector<Handle> handles;
    for (int step = 1; step < size; ++step) {
      const int dst = (rank + step) % size;
      const int src = (rank - step + size) % size;
      out.push_back(std::make_unique<HostTensor>(DataType::kFloat32, Shape{n}));
      out.back()->fill([&](int64_t i) { return messageValue(rank, dst, 0, i); });
      in.push_back(std::make_unique<HostTensor>(DataType::kFloat32, Shape{n}));
      Handle hs = -1, hr = -1;
      ASSERT_TRUE(IsOk(rt.send(out.back()->view(), dst, 0, kGlobalProcessSet, &hs)));
      ASSERT_TRUE(IsOk(rt.recv(in.back()->view(), src, 0, kGlobalProcessSet, &hr)));
      handles.push_back(hs);
      handles.push_back(hr);
    }
    for (Handle h : handles) EXPECT_TRUE(IsOk(finishHandle(rt, h)));
    for (int step = 1; step < size; ++step) {
      const int src = (rank - step + size) % size;
      EXPECT_TRUE(elementsMatch(*in[static_cast<size_t>(step - 1)],
                                [&](int64_t i) { return messageValue(src, rank, 0, i); }))
          << "message from rank " << src;
    }
  });
}

// Rank 0 posts 40 sends with one tag before rank 1 posts a single recv, and
// another rank pair runs its own stream meanwhile: each recv gets the
// message of its posting order.
TEST_P(PointToPointPairsTest, MessagesWithOneTagArriveInPostingOrder) {
  const int size = GetParam();
  RankSync sync(size);
  runThreadRanks(size, [&sync, size](Runtime& rt) {
    const int rank = rt.rank();
    const int64_t kMessages = 40;
    const int sender = rank % 2 == 0 ? rank : rank - 1;
    const int receiver = sender + 1;
    if (receiver >= size) {  // the odd one out calls nothing
      sync.arriveAndWait();
      sync.arriveAndWait();  // under mpi a rank that shuts down ends the job
      return;
    }
    std::vector<std::unique_ptr<HostTensor>> tensors;
    std::vector<Handle> handles;
    if (rank == receiver) sync.arriveAndWait();  // every send is posted first
    for (int64_t k = 0; k < kMessages; ++k) {
      tensors.push_back(std::make_unique<HostTensor>(DataType::kInt64, Shape{17 + k}));
      Handle h = -1;
      if (rank == sender) {
        tensors.back()->fill([&](int64_t i) { return messageValue(sender, receiver, k, i); });
        ASSERT_TRUE(IsOk(rt.send(tensors.back()->view(), receiver, 9, kGlobalProcessSet, &h)));
      } else {
        ASSERT_TRUE(IsOk(rt.recv(tensors.back()->view(), sender, 9, kGlobalProcessSet, &h)));
      }
      handles.push_back(h);
    }
    if (rank == sender) sync.arriveAndWait();
    for (Handle h : handles) EXPECT_TRUE(IsOk(finishHandle(rt, h)));
    sync.arriveAndWait();
    if (rank != receiver) return;
    for (int64_t k = 0; k < kMessages; ++k) {
      EXPECT_TRUE(elementsMatch(*tensors[static_cast<size_t>(k)],
                                [&](int64_t i) { return messageValue(sender, receiver, k, i); }))
          << "message " << k;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, PointToPointPairsTest, ::testing::Values(2, 3, 5), sizeName);

// Tags are independent: rank 1 waits for tag 2's message before it even
// posts the recv of tag 1, which rank 0 sent first.
TEST(PointToPointTest, DifferentTagsCompleteOutOfOrder) {
  runThreadRanks(2, [](Runtime& rt) {
    HostTensor a(DataType::kFloat64, {100}), b(DataType::kFloat64, {50});
    if (rt.rank() == 0) {
      a.fill([](int64_t i) { return messageValue(0, 1, 1, i); });
      b.fill([](int64_t i) { return messageValue(0, 1, 2, i); });
      Handle h1 = -1, h2 = -1;
      ASSERT_TRUE(IsOk(rt.send(a.view(), 1, 1, kGlobalProcessSet, &h1)));
      ASSERT_TRUE(IsOk(rt.send(b.view(), 1, 2, kGlobalProcessSet, &h2)));
      EXPECT_TRUE(IsOk(finishHandle(rt, h2)));
      EXPECT_TRUE(IsOk(finishHandle(rt, h1)));
      return;
    }
    ASSERT_TRUE(IsOk(recvNow(rt, b, 0, 2)));
    EXPECT_TRUE(elementsMatch(b, [](int64_t i) { return messageValue(0, 1, 2, i); }));
    ASSERT_TRUE(IsOk(recvNow(rt, a, 0, 1)));
    EXPECT_TRUE(elementsMatch(a, [](int64_t i) { return messageValue(0, 1, 1, i); }));
  });
}

// Rank 0, the coordinator, takes no part: ranks 1 and 2 run a two-stage
// pipeline (activations forward, gradients back) inside process set {1, 2}
// and in the global set, interleaved with an allreduce of every rank.
TEST(PointToPointTest, PipelineBetweenTwoRanksWhileTheOthersCallNothing) {
  RankSync sync(3);
  runThreadRanks(3, [&sync](Runtime& rt) {
    int32_t set = -1;
    ASSERT_TRUE(IsOk(rt.addProcessSet({1, 2}, &set)));
    if (rt.rank() == 0) {
      sync.arriveAndWait();
    } else {
      for (int32_t where : {kGlobalProcessSet, set}) {
        for (int64_t step = 0; step < 5; ++step) {
          HostTensor act(DataType::kFloat32, {64}), grad(DataType::kFloat32, {64});
          if (rt.rank() == 1) {
            act.fill([&](int64_t i) { return messageValue(1, 2, step, i); });
            ASSERT_TRUE(IsOk(sendNow(rt, act, 2, 0, where)));
            ASSERT_TRUE(IsOk(recvNow(rt, grad, 2, 1, where)));
            EXPECT_TRUE(
                elementsMatch(grad, [&](int64_t i) { return 2 * messageValue(1, 2, step, i); }));
          } else {
            ASSERT_TRUE(IsOk(recvNow(rt, act, 1, 0, where)));
            EXPECT_TRUE(elementsMatch(act, [&](int64_t i) { return messageValue(1, 2, step, i); }));
            grad.fill([&](int64_t i) { return 2 * act.get(i); });
            ASSERT_TRUE(IsOk(sendNow(rt, grad, 1, 1, where)));
          }
        }
      }
      sync.arriveAndWait();
    }
    HostTensor x(DataType::kFloat32, {8}), sum(DataType::kFloat32, {8});
    x.fill([&](int64_t i) { return rt.rank() + i; });
    ASSERT_TRUE(IsOk(runOpStatus(
        rt, [&](Handle* h) { return rt.allreduce(x.view(), sum.view(), named("after"), h); })));
    EXPECT_TRUE(elementsMatch(sum, [](int64_t i) { return 3 + 3 * i; }));
  });
}

TEST(PointToPointTest, EmptyAndLargeMessages) {
  runThreadRanks(2, [](Runtime& rt) {
    HostTensor empty(DataType::kFloat32, {0, 5});
    // 80 MiB: more than 64 MiB (the shared-memory ring yields per 64 MiB),
    // thousands of 4096-byte segments.
    const int64_t big = (int64_t{80} << 20) / 4;
    HostTensor large(DataType::kFloat32, {big});
    if (rt.rank() == 0) {
      ASSERT_TRUE(IsOk(sendNow(rt, empty, 1, 0)));
      large.fill([](int64_t i) { return static_cast<double>(i % 1000003); });
      ASSERT_TRUE(IsOk(sendNow(rt, large, 1, 0)));
      return;
    }
    ASSERT_TRUE(IsOk(recvNow(rt, empty, 0, 0)));
    ASSERT_TRUE(IsOk(recvNow(rt, large, 0, 0)));
    EXPECT_TRUE(elementsMatch(large, [](int64_t i) { return static_cast<double>(i % 1000003); }));
  });
}

// A dtype or count mismatch fails both handles with one message naming the
// message, both ranks, both dtypes and counts; the pair goes on afterwards.
TEST(PointToPointTest, MismatchFailsBothSidesThenThePairGoesOn) {
  runThreadRanks(2, [](Runtime& rt) {
    const bool sender = rt.rank() == 0;
    HostTensor f(DataType::kFloat32, {3, 4}), i32(DataType::kInt32, {12}),
        f10(DataType::kFloat32, {10});
    Status st = sender ? sendNow(rt, f, 1, 5) : recvNow(rt, i32, 0, 5);
    EXPECT_TRUE(HasCode(st, StatusCode::kMismatch));
    EXPECT_TRUE(ContainsAll(st.message(), {"p2p 0->1 tag 5 #0", "rank 0 sends 12 float32",
                                           "rank 1 receives into 12 int32"}));
    st = sender ? sendNow(rt, f, 1, 5) : recvNow(rt, f10, 0, 5);
    EXPECT_TRUE(HasCode(st, StatusCode::kMismatch));
    EXPECT_TRUE(ContainsAll(st.message(), {"p2p 0->1 tag 5 #1", "12 float32", "10 float32"}));
    HostTensor ok(DataType::kFloat32, {12});  // shape [12] receives [3, 4]
    if (sender) f.fill([](int64_t i) { return i; });
    st = sender ? sendNow(rt, f, 1, 5) : recvNow(rt, ok, 0, 5);
    EXPECT_TRUE(IsOk(st));
    if (!sender) {
      EXPECT_TRUE(elementsMatch(ok, [](int64_t i) { return i; }));
    }
  });
}

TEST(PointToPointTest, BadPeersAndCudaTensorsFailAtEnqueue) {
  runThreadRanks(2, [](Runtime& rt) {
    HostTensor t(DataType::kFloat32, {4});
    Handle h = -1;
    Status st = rt.send(t.view(), rt.rank(), 0, kGlobalProcessSet, &h);
    EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument));
    EXPECT_TRUE(ContainsAll(st.message(), {"cannot send a message to itself"}));
    st = rt.recv(t.view(), 2, 0, kGlobalProcessSet, &h);
    EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument));
    EXPECT_TRUE(ContainsAll(st.message(), {"rank 2 is not in process set 0"}));
    // A CUDA tensor fails here and, announced, the peer's matching message.
    TensorView cuda = t.view();
    cuda.device = DeviceType::kCuda;
    st = rt.rank() == 0 ? rt.send(cuda, 1, 3, kGlobalProcessSet, &h) : recvNow(rt, t, 0, 3);
    EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument));
    EXPECT_TRUE(ContainsAll(st.message(), {"p2p 0->1 tag 3 #0", "CPU tensors"}));
    // Rank 0 failed at once; it must not shut down (under mpi the first
    // shutdown ends the job) before rank 1 has the announced error.
    EXPECT_TRUE(IsOk(runOpStatus(rt, [&](Handle* b) { return rt.barrier(b); })));
  });
}

// A recv whose sender never sends fails with kStalled naming the sender.
TEST(PointToPointTest, RecvNeverSentStallsThenFails) {
  ClusterOptions options;
  options.stall_check_time_seconds = 1;
  options.stall_shutdown_time_seconds = 2;
  RankSync sync(2);
  runThreadRanks(
      2,
      [&sync](Runtime& rt) {
        if (rt.rank() == 1) {
          HostTensor t(DataType::kFloat32, {4});
          Status st = recvNow(rt, t, 0, 4);
          EXPECT_TRUE(HasCode(st, StatusCode::kStalled));
          EXPECT_TRUE(ContainsAll(st.message(), {"p2p 0->1 tag 4 #0", "[0]"}));
        }
        sync.arriveAndWait();
      },
      options);
}

}  // namespace
}  // namespace test
}  // namespace tutti
