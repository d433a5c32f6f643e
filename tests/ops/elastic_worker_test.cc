// ElasticWorker (coordinator/elastic_worker.h) with real runtimes: workers
// run as threads of the test (one forked process where a worker must die), the
// test plays the driver through its own store client.

#include "coordinator/elastic_worker.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <numeric>
#include <thread>

#include "tests/ops/elastic_test_driver.h"

namespace tutti {
namespace {

using namespace std::chrono_literals;
using test::ElasticTestDriver;

std::unique_ptr<ElasticWorker> makeWorker(const ElasticTestDriver& driver, int id,
                                          double elastic_timeout_seconds = 20) {
  std::unique_ptr<ElasticWorker> worker;
  Status st =
      ElasticWorker::create(driver.workerSettings(id, 10, elastic_timeout_seconds), &worker);
  EXPECT_TRUE(st.isOk()) << st.toString();
  return worker;
}

// Allreduce (sum) of x_r[i] = (worker_id + 1) * (i + 1) over the runtime's
// ranks; checks every element against sum(worker ids + 1) * (i + 1).
void checkAllreduce(Runtime& rt, int worker_id, int total_ids_plus_one, const std::string& name) {
  constexpr int kCount = 3001;  // several 4 KiB segments, not a multiple of the size
  std::vector<float> data(kCount), out(kCount, -1.f);
  for (int i = 0; i < kCount; ++i) data[i] = static_cast<float>((worker_id + 1) * (i + 1));
  TensorView in{data.data(), DataType::kFloat32, {kCount}};
  TensorView res{out.data(), DataType::kFloat32, {kCount}};
  OpOptions options;
  options.name = name;
  Handle h = 0;
  ASSERT_TRUE(rt.allreduce(in, res, options, &h).isOk());
  Status st = rt.wait(h, 30);
  ASSERT_TRUE(st.isOk()) << "worker " << worker_id << ": " << st.toString();
  ASSERT_TRUE(rt.release(h).isOk());
  for (int i = 0; i < kCount; ++i) {
    ASSERT_EQ(out[i], static_cast<float>(total_ids_plus_one * (i + 1)))
        << "worker " << worker_id << " element " << i;
  }
}

// Runs body(worker id) on one thread per id; returns when all finished.
void runWorkers(const std::vector<int>& ids, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int id : ids) threads.emplace_back([&body, id] { body(id); });
  for (auto& t : threads) t.join();
}

TEST(ElasticWorker, JoinAllreduceThenShrinkOnHostsUpdate) {
  ElasticTestDriver driver;
  driver.publish(0, ElasticTestDriver::oneHost({0, 1, 2}));
  std::promise<void> checked_before;  // every worker saw hostsUpdated == false
  std::shared_future<void> bumped;
  std::promise<void> bump;
  bumped = bump.get_future().share();
  std::atomic<int> before{0};
  std::thread driver_thread([&] {
    while (before.load() < 3) std::this_thread::sleep_for(5ms);
    // Generation 1 without worker 1: 2 keeps its relative order.
    driver.publish(1, ElasticTestDriver::oneHost({0, 2}));
    bump.set_value();
  });
  runWorkers({0, 1, 2}, [&](int id) {
    auto worker = makeWorker(driver, id);
    ASSERT_TRUE(worker);
    EXPECT_EQ(worker->generation(), -1);
    std::unique_ptr<Runtime> rt;
    Status st = worker->join(&rt);
    ASSERT_TRUE(st.isOk()) << "worker " << id << ": " << st.toString();
    EXPECT_EQ(worker->generation(), 0);
    EXPECT_EQ(rt->rank(), id);
    EXPECT_EQ(rt->size(), 3);
    EXPECT_EQ(rt->settings().elastic_generation, 0);
    checkAllreduce(*rt, id, 1 + 2 + 3, "g0");
    bool updated = true;
    ASSERT_TRUE(worker->hostsUpdated(*rt, &updated).isOk());
    EXPECT_FALSE(updated) << "worker " << id;
    ++before;
    bumped.wait();
    ASSERT_TRUE(worker->hostsUpdated(*rt, &updated).isOk());
    EXPECT_TRUE(updated) << "worker " << id;
    EXPECT_EQ(rt->lostRank(), -1);
    ASSERT_TRUE(worker->reportLoss(*rt).isOk());  // nothing lost: nothing written
    ASSERT_TRUE(rt->shutdown().isOk());
    rt.reset();
    if (id == 1) return;  // left out of generation 1: leaves
    st = worker->join(&rt);
    ASSERT_TRUE(st.isOk()) << "worker " << id << ": " << st.toString();
    EXPECT_EQ(worker->generation(), 1);
    EXPECT_EQ(rt->size(), 2);
    EXPECT_EQ(rt->rank(), id == 0 ? 0 : 1);
    checkAllreduce(*rt, id, 1 + 3, "g1");
    ASSERT_TRUE(worker->hostsUpdated(*rt, &updated).isOk());
    EXPECT_FALSE(updated);
    ASSERT_TRUE(rt->shutdown().isOk());
  });
  driver_thread.join();
  EXPECT_EQ(driver.value("elastic/report/0/0"), "<unset>");
}

TEST(ElasticWorker, ASupersededGenerationMovesToTheNewerOne) {
  ElasticTestDriver driver;
  // Worker 2 never arrives in generation 0: 0 and 1 wait for it.
  driver.publish(0, ElasticTestDriver::oneHost({0, 1, 2}));
  std::thread driver_thread([&] {
    // Both have published their generation-0 addresses, then the driver
    // gives up on worker 2.
    for (int i = 0; i < 1000 && (driver.value("elastic/gen/0/rank/0/addr") == "<unset>" ||
                                 driver.value("elastic/gen/0/rank/1/addr") == "<unset>");
         ++i) {
      std::this_thread::sleep_for(10ms);
    }
    std::this_thread::sleep_for(300ms);
    driver.publish(1, ElasticTestDriver::oneHost({1, 0}));
  });
  const auto start = std::chrono::steady_clock::now();
  runWorkers({0, 1}, [&](int id) {
    auto worker = makeWorker(driver, id);
    ASSERT_TRUE(worker);
    std::unique_ptr<Runtime> rt;
    Status st = worker->join(&rt);
    ASSERT_TRUE(st.isOk()) << "worker " << id << ": " << st.toString();
    EXPECT_EQ(worker->generation(), 1);
    EXPECT_EQ(rt->size(), 2);
    EXPECT_EQ(rt->rank(), id == 1 ? 0 : 1);
    checkAllreduce(*rt, id, 1 + 2, "after-superseded");
    ASSERT_TRUE(rt->shutdown().isOk());
  });
  driver_thread.join();
  // Well before the 20 s elastic timeout of generation 0's rendezvous.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(ElasticWorker, AJoinTimesOutNamingTheWorker) {
  ElasticTestDriver driver;
  driver.publish(0, ElasticTestDriver::oneHost({0}));
  auto worker = makeWorker(driver, 4, 0.3);
  ASSERT_TRUE(worker);
  std::unique_ptr<Runtime> rt;
  Status st = worker->join(&rt);
  EXPECT_EQ(st.code(), StatusCode::kTimeout);
  EXPECT_NE(st.message().find("elastic worker 4"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("0.3 s"), std::string::npos) << st.message();
  EXPECT_EQ(rt, nullptr);
}

// Written once every survivor has the first allreduce's result.
const char* const kSurvivorsDone = "test/survivors_done";

// A forked worker that joins generation 0, takes part in one allreduce and
// dies once the survivors finished it (_exit without shutdown: its peers see
// the connection close).
pid_t forkDyingWorker(const ElasticTestDriver& driver, int id, int total_ids_plus_one) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  std::unique_ptr<ElasticWorker> worker;
  std::unique_ptr<Runtime> rt;
  if (!ElasticWorker::create(driver.workerSettings(id), &worker).isOk()) _exit(2);
  if (!worker->join(&rt).isOk()) _exit(3);
  std::vector<float> x(10, static_cast<float>(id + 1)), y(10);
  TensorView in{x.data(), DataType::kFloat32, {10}}, out{y.data(), DataType::kFloat32, {10}};
  OpOptions options;
  options.name = "before-loss";
  Handle h = 0;
  if (!rt->allreduce(in, out, options, &h).isOk() || !rt->wait(h, 30).isOk()) _exit(4);
  if (y[0] != static_cast<float>(total_ids_plus_one)) _exit(5);
  // Dies only once the survivors have the same allreduce's result: exiting
  // before they finish it makes them fail it with peer lost (seen under
  // scripts/sanitize ubsan, where this worker was the faster one).
  std::unique_ptr<RendezvousClient> sync;
  std::vector<uint8_t> done;
  if (!RendezvousClient::connect("127.0.0.1", driver.port(), driver.secret(),
                                 std::chrono::milliseconds(5000), &sync)
           .isOk() ||
      !sync->get(kSurvivorsDone, std::chrono::milliseconds(30000), &done).isOk()) {
    _exit(6);
  }
  _exit(0);
}

TEST(ElasticWorker, LeavingAfterPeerLostReportsTheLostRank) {
  ElasticTestDriver driver;
  driver.publish(0, ElasticTestDriver::oneHost({0, 1, 2}));
  const pid_t dying = forkDyingWorker(driver, 2, 1 + 2 + 3);
  ASSERT_GT(dying, 0);
  std::atomic<int> finished{0};
  runWorkers({0, 1}, [&](int id) {
    auto worker = makeWorker(driver, id);
    ASSERT_TRUE(worker);
    std::unique_ptr<Runtime> rt;
    Status st = worker->join(&rt);
    ASSERT_TRUE(st.isOk()) << "worker " << id << ": " << st.toString();
    std::vector<float> x(10, static_cast<float>(id + 1)), y(10);
    TensorView in{x.data(), DataType::kFloat32, {10}}, out{y.data(), DataType::kFloat32, {10}};
    OpOptions options;
    options.name = "before-loss";
    Handle h = 0;
    ASSERT_TRUE(rt->allreduce(in, out, options, &h).isOk());
    ASSERT_TRUE(rt->wait(h, 30).isOk());
    EXPECT_EQ(y[0], 6.f);
    if (++finished == 2) driver.set(kSurvivorsDone, "1");  // rank 2 may exit now
    // Rank 2 is gone by now or soon: the next op fails with peer lost.
    options.name = "after-loss";
    st = rt->allreduce(in, out, options, &h);
    if (st.isOk()) st = rt->wait(h, 30);
    EXPECT_EQ(st.code(), StatusCode::kPeerLost) << st.toString();
    EXPECT_EQ(rt->lostRank(), 2) << st.toString();
    ASSERT_TRUE(worker->reportLoss(*rt).isOk());
    rt->shutdown();
  });
  int status = 0;
  ASSERT_EQ(waitpid(dying, &status, 0), dying);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "dying worker status " << status;
  EXPECT_EQ(driver.value("elastic/report/0/0"), "2");
  EXPECT_EQ(driver.value("elastic/report/0/1"), "2");
}

}  // namespace
}  // namespace tutti
