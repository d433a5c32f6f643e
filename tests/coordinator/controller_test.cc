// Controller, validation, fusion planner, response cache and stall inspector
// without any network: requests in, responses out.

#include "coordinator/controller.h"

#include <gtest/gtest.h>

#include "coordinator/fusion.h"
#include "coordinator/request_validation.h"
#include "coordinator/response_cache.h"
#include "coordinator/stall_inspector.h"

namespace tutti {
namespace {

using Clock = Controller::Clock;

Request allreduce(int rank, const std::string& name, Shape shape,
                  DataType dtype = DataType::kFloat32) {
  Request r;
  r.rank = rank;
  r.type = OpType::kAllreduce;
  r.name = name;
  r.dtype = dtype;
  r.shape = std::move(shape);
  return r;
}

TEST(ControllerTest, ReadyOnlyWhenEveryRankSubmitted) {
  Controller ctl(3, nullptr, false);
  auto now = Clock::now();
  ctl.addRequest(allreduce(0, "a", {4}), -1, now);
  ctl.addRequest(allreduce(2, "a", {4}), -1, now);
  EXPECT_TRUE(ctl.takeReady().empty());
  ASSERT_EQ(ctl.pending().size(), 1u);
  EXPECT_EQ(ctl.pending()[0].missing, std::vector<int>{1});
  ctl.addRequest(allreduce(1, "a", {4}), -1, now);
  std::vector<Response> ready = ctl.takeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].kind, Response::Kind::kOp);
  EXPECT_EQ(ready[0].names, std::vector<std::string>{"a"});
  EXPECT_EQ(ready[0].sizes, std::vector<int64_t>{4});
  EXPECT_TRUE(ctl.pending().empty());
}

TEST(ControllerTest, ReadinessOrderIsArrivalOfLastRequest) {
  Controller ctl(2, nullptr, false);
  auto now = Clock::now();
  ctl.addRequest(allreduce(0, "first", {1}), -1, now);
  ctl.addRequest(allreduce(0, "second", {1}), -1, now);
  ctl.addRequest(allreduce(1, "second", {1}), -1, now);
  ctl.addRequest(allreduce(1, "first", {1}), -1, now);
  std::vector<Response> ready = ctl.takeReady();
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].names[0], "second");
  EXPECT_EQ(ready[1].names[0], "first");
}

TEST(ControllerTest, ShapeMismatchNamesTensorRanksAndShapes) {
  Controller ctl(2, nullptr, false);
  auto now = Clock::now();
  ctl.addRequest(allreduce(0, "grad.fc1", {17}), -1, now);
  ctl.addRequest(allreduce(1, "grad.fc1", {18}), -1, now);
  std::vector<Response> ready = ctl.takeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].kind, Response::Kind::kError);
  EXPECT_EQ(ready[0].error_code, StatusCode::kMismatch);
  EXPECT_EQ(ready[0].error_message,
            "allreduce 'grad.fc1': shapes differ across ranks: rank 0 [17], rank 1 [18]");
}

TEST(ControllerTest, DtypeMismatchGroupsRanks) {
  Controller ctl(4, nullptr, false);
  for (int r = 0; r < 4; ++r) {
    ctl.addRequest(allreduce(r, "x", {2}, r % 2 ? DataType::kFloat32 : DataType::kInt32), -1,
                   Clock::now());
  }
  std::vector<Response> ready = ctl.takeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error_message,
            "allreduce 'x': dtypes differ across ranks: ranks [0, 2] int32; ranks [1, 3] float32");
}

TEST(ControllerTest, OpScaleRootAndCollectiveMismatches) {
  auto run = [](std::vector<Request> reqs) {
    Controller ctl(static_cast<int>(reqs.size()), nullptr, false);
    for (const Request& r : reqs) ctl.addRequest(r, -1, Clock::now());
    std::vector<Response> ready = ctl.takeReady();
    EXPECT_EQ(ready.size(), 1u);
    return ready.empty() ? std::string() : ready[0].error_message;
  };
  Request a = allreduce(0, "t", {3});
  Request b = allreduce(1, "t", {3});
  b.reduce_op = ReduceOp::kMax;
  EXPECT_EQ(run({a, b}), "allreduce 't': reduce ops differ across ranks: rank 0 sum, rank 1 max");
  b = allreduce(1, "t", {3});
  b.prescale = 0.5;
  EXPECT_EQ(run({a, b}),
            "allreduce 't': prescale factors differ across ranks: rank 0 1, rank 1 0.5");
  b = allreduce(1, "t", {3});
  b.type = OpType::kAllgather;
  EXPECT_EQ(run({a, b}),
            "allreduce 't': collectives differ across ranks: rank 0 allreduce, rank 1 allgather");
  Request c = a, d = b;
  c.type = d.type = OpType::kBroadcast;
  d.root = 1;
  EXPECT_EQ(run({c, d}), "broadcast 't': roots differ across ranks: rank 0 0, rank 1 1");
}

TEST(ControllerTest, AllgatherAndAlltoallSizes) {
  Controller ctl(3, nullptr, false);
  for (int r = 0; r < 3; ++r) {
    Request g = allreduce(r, "g", {r + 1, 2, 5});
    g.type = OpType::kAllgather;
    ctl.addRequest(g, -1, Clock::now());
    Request t = allreduce(r, "t", {6, 2});
    t.type = OpType::kAlltoall;
    if (r == 1) t.splits = {1, 2, 3};
    ctl.addRequest(t, -1, Clock::now());
  }
  std::vector<Response> ready = ctl.takeReady();
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].sizes, (std::vector<int64_t>{1, 2, 3, 10}));
  EXPECT_EQ(ready[1].sizes, (std::vector<int64_t>{2, 2, 2, 1, 2, 3, 2, 2, 2, 2}));

  Controller bad(2, nullptr, false);
  Request g0 = allreduce(0, "g", {1, 2});
  Request g1 = allreduce(1, "g", {1, 3});
  g0.type = g1.type = OpType::kAllgather;
  bad.addRequest(g0, -1, Clock::now());
  bad.addRequest(g1, -1, Clock::now());
  EXPECT_EQ(bad.takeReady()[0].error_message,
            "allgather 'g': dimensions after the first differ across ranks: rank 0 [2], rank 1 "
            "[3]");
}

TEST(ControllerTest, JoinedRanksAreNotWaitedForAndJoinCompletes) {
  Controller ctl(3, nullptr, false);
  Request join;
  join.type = OpType::kJoin;
  join.name = "__join";
  join.rank = 1;
  ctl.addRequest(join, -1, Clock::now());
  ctl.addRequest(allreduce(0, "a", {4}), -1, Clock::now());
  EXPECT_TRUE(ctl.takeReady().empty());
  ctl.addRequest(allreduce(2, "a", {4}), -1, Clock::now());
  std::vector<Response> ready = ctl.takeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].kind, Response::Kind::kOp);
  EXPECT_EQ(ready[0].joined_ranks, std::vector<int64_t>{1});
  // An allgather cannot include a joined rank: an error naming it.
  Request g0 = allreduce(0, "g", {1});
  Request g2 = allreduce(2, "g", {1});
  g0.type = g2.type = OpType::kAllgather;
  ctl.addRequest(g0, -1, Clock::now());
  ctl.addRequest(g2, -1, Clock::now());
  ready = ctl.takeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].kind, Response::Kind::kError);
  EXPECT_NE(ready[0].error_message.find("ranks [1] have joined"), std::string::npos);
  EXPECT_EQ(ready[0].error_code, StatusCode::kMismatch);
  join.rank = 2;
  ctl.addRequest(join, -1, Clock::now());
  join.rank = 0;
  ctl.addRequest(join, -1, Clock::now());
  ready = ctl.takeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].type, OpType::kJoin);
  EXPECT_EQ(ready[0].last_joined_rank, 0);
}

TEST(ControllerTest, GroupMembersAreReleasedTogether) {
  Controller ctl(2, nullptr, false);
  for (int i = 0; i < 3; ++i) {
    Request r0 = allreduce(0, "g." + std::to_string(i), {i + 1});
    r0.group_id = 7;
    r0.group_size = 3;
    Request r1 = r0;
    r1.rank = 1;
    ctl.addRequest(r0, -1, Clock::now());
    ctl.addRequest(r1, -1, Clock::now());
    EXPECT_EQ(ctl.takeReady().size(), i < 2 ? 0u : 3u) << i;
  }
}

TEST(ControllerTest, ShutdownFailsPendingAndLaterRequests) {
  Controller ctl(2, nullptr, false);
  ctl.addRequest(allreduce(0, "p", {1}), -1, Clock::now());
  ctl.addShutdown(1);
  EXPECT_TRUE(ctl.shutdownRequested());
  std::vector<Response> ready = ctl.takeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error_code, StatusCode::kShutdown);
  ctl.addRequest(allreduce(0, "q", {1}), -1, Clock::now());
  ready = ctl.takeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error_code, StatusCode::kShutdown);
}

TEST(ControllerTest, StallInspectorFailsAfterShutdownTime) {
  Controller ctl(3, nullptr, false);
  auto t0 = Clock::now();
  StallInspector stall(1.0, 2.0, t0);
  EXPECT_EQ(stall.nextDeadline(ctl), Clock::time_point::max());  // idle: no wake-ups
  ctl.addRequest(allreduce(0, "s", {1}), -1, t0);
  EXPECT_LE(stall.nextDeadline(ctl), t0 + std::chrono::seconds(2));
  stall.check(ctl, t0 + std::chrono::milliseconds(1500));  // warns only
  EXPECT_TRUE(ctl.takeReady().empty());
  stall.check(ctl, t0 + std::chrono::seconds(3));
  std::vector<Response> ready = ctl.takeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error_code, StatusCode::kStalled);
  EXPECT_NE(ready[0].error_message.find("ranks [1, 2] never submitted it"), std::string::npos)
      << ready[0].error_message;
}

TEST(FusionTest, MergesCompatibleAllreducesUnderThreshold) {
  auto resp = [](const std::string& name, int64_t count, DataType dtype) {
    Response r;
    r.names = {name};
    r.sizes = {count};
    r.dtype = dtype;
    return r;
  };
  std::vector<Response> ready = {
      resp("a", 10, DataType::kFloat32), resp("b", 10, DataType::kFloat64),
      resp("c", 10, DataType::kFloat32), resp("big", 1000, DataType::kFloat32),
      resp("d", 5, DataType::kFloat32)};
  std::vector<Response> out = planFusion(ready, 100);
  // a + c + d = 100 bytes: exactly the threshold.
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].names, (std::vector<std::string>{"a", "c", "d"}));
  EXPECT_EQ(out[0].sizes, (std::vector<int64_t>{10, 10, 5}));
  EXPECT_EQ(out[1].names, (std::vector<std::string>{"b"}));
  EXPECT_EQ(out[2].names, (std::vector<std::string>{"big"}));
  EXPECT_EQ(planFusion(ready, 99).size(), 4u);
  EXPECT_EQ(planFusion(ready, 0).size(), 5u);
}

TEST(ResponseCacheTest, SlotsAgreeAndRank0ExpandsHits) {
  ResponseCache worker(2), rank0(2);
  Request w = allreduce(1, "a", {4});
  Request z = allreduce(0, "a", {4});
  Response resp;
  resp.names = {"a"};
  resp.sizes = {4};
  worker.insert(resp, w, {});
  rank0.insert(resp, z, {z, w});
  int64_t slot = worker.slotFor(w);
  ASSERT_GE(slot, 0);
  EXPECT_EQ(rank0.slotFor(z), slot);
  ASSERT_TRUE(rank0.requestOf(slot, 1).has_value());
  EXPECT_TRUE(sameSignature(*rank0.requestOf(slot, 1), w));
  Request changed = w;
  changed.shape = {5};
  EXPECT_EQ(worker.slotFor(changed), -1);

  // The controller reuses the cached response when every rank hit the slot.
  Controller ctl(2, &rank0, true);
  ctl.addRequest(z, slot, Clock::now());
  ctl.addRequest(w, slot, Clock::now());
  std::vector<Response> ready = ctl.takeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].sizes, std::vector<int64_t>{4});
  EXPECT_EQ(ctl.takeDecidedRequests("a").size(), 2u);

  // Eviction keeps the slot readable on rank 0 as a tombstone.
  for (const char* name : {"b", "c"}) {
    Response other = resp;
    other.names = {name};
    Request rq = allreduce(0, name, {4});
    rank0.insert(other, rq, {rq, rq});
  }
  EXPECT_EQ(rank0.response(slot), nullptr);
  EXPECT_TRUE(rank0.requestOf(slot, 1).has_value());
}

TEST(LocalValidationTest, ActionableErrors) {
  float data[8] = {};
  TensorView in{data, DataType::kFloat32, {8}};
  Request r = allreduce(0, "v", {8});
  r.type = OpType::kAlltoall;
  r.splits = {3, 6};
  Status st = validateLocalRequest(r, in, nullptr, 2);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "alltoall 'v': splits sum to 9 rows, more than the first dimension 8");
  r.splits = {1, -1};
  EXPECT_NE(validateLocalRequest(r, in, nullptr, 2).message().find("negative"), std::string::npos);
  r.splits = {};
  EXPECT_NE(validateLocalRequest(r, in, nullptr, 3).message().find("not divisible"),
            std::string::npos);
  r.splits = {2, 2};
  EXPECT_TRUE(validateLocalRequest(r, in, nullptr, 2).isOk());  // sends only 4 rows
  TensorView null_in{nullptr, DataType::kFloat32, {8}};
  r = allreduce(0, "v", {8});
  EXPECT_NE(validateLocalRequest(r, null_in, &in, 2).message().find("data is null"),
            std::string::npos);
  TensorView wrong_out{data, DataType::kFloat32, {4}};
  EXPECT_NE(validateLocalRequest(r, in, &wrong_out, 2).message().find("output [4] float32"),
            std::string::npos);
  TensorView scalar{data, DataType::kFloat32, {}};
  r.type = OpType::kAllgather;
  EXPECT_FALSE(validateLocalRequest(r, scalar, nullptr, 2).isOk());
  r.type = OpType::kBroadcast;
  r.root = 2;
  EXPECT_NE(validateLocalRequest(r, in, &in, 2).message().find("root 2 is out of range"),
            std::string::npos);
  EXPECT_EQ(reducescatterRows(10, 0, 4), 3);
  EXPECT_EQ(reducescatterRows(10, 2, 4), 2);
}

TEST(ValidationTest, AdasumLimitsAreNamed) {
  float data[8] = {};
  TensorView in{data, DataType::kFloat32, {8}};
  Request r = allreduce(0, "a", {8});
  r.reduce_op = ReduceOp::kAdasum;
  EXPECT_TRUE(validateLocalRequest(r, in, &in, 4).isOk());
  EXPECT_TRUE(validateLocalRequest(r, in, &in, 1).isOk());
  Status st = validateLocalRequest(r, in, &in, 6);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "allreduce 'a': Adasum runs on a power-of-two number of ranks (1, 2, 4, 8, ...), as "
            "Horovod's; this one has 6");
  TensorView ints{data, DataType::kInt32, {8}};
  r.dtype = DataType::kInt32;
  EXPECT_NE(validateLocalRequest(r, ints, &ints, 4).message().find("float16, float32 and float64"),
            std::string::npos);
  TensorView cuda = in;
  cuda.device = DeviceType::kCuda;
  r.dtype = DataType::kFloat32;
  r.device = DeviceType::kCuda;
  // CUDA tensors are accepted (staged through the host, device_executor.h);
  // the size rule still applies to them.
  EXPECT_TRUE(validateLocalRequest(r, cuda, &cuda, 4).isOk());
  EXPECT_NE(validateLocalRequest(r, cuda, &cuda, 6).message().find("power-of-two"),
            std::string::npos);
  r.device = DeviceType::kCpu;
  r.type = OpType::kReducescatter;
  EXPECT_NE(validateLocalRequest(r, in, nullptr, 4).message().find("reducescatter accepts"),
            std::string::npos);
}

}  // namespace
}  // namespace tutti
