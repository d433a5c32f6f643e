#include "tests/support/thread_harness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "rendezvous/rendezvous_server.h"
#include "tests/support/op_checks.h"

namespace tutti {
namespace test {

using Clock = std::chrono::steady_clock;

Settings makeRankSettings(int rank, int size, int port, const std::string& secret,
                          const ClusterOptions& options) {
  Settings settings;
  // Documented defaults first (the registry), then this job's placement.
  Status loaded = loadSettings([](const std::string&) { return std::nullopt; }, &settings);
  EXPECT_TRUE(IsOk(loaded)) << "loadSettings with an empty environment";
  // The suites run both ways: TUTTI_SHM=off forces TCP between these
  // same-host ranks (default auto: shared memory).
  if (const char* shm = std::getenv("TUTTI_SHM")) settings.shm = shm;
  settings.rank = rank;
  settings.size = size;
  settings.local_rank = rank;
  settings.local_size = size;
  settings.cross_rank = 0;
  settings.cross_size = 1;
  if (options.ranks_per_host > 0) {
    const int per = options.ranks_per_host;
    settings.cross_rank = rank / per;
    settings.cross_size = (size + per - 1) / per;
    settings.local_rank = rank % per;
    settings.local_size = std::min(per, size - settings.cross_rank * per);
  }
  if (!options.hierarchical_allreduce.empty()) {
    settings.hierarchical_allreduce = options.hierarchical_allreduce;
  }
  if (!options.hierarchical_allgather.empty()) {
    settings.hierarchical_allgather = options.hierarchical_allgather;
  }
  settings.rendezvous_addr = "127.0.0.1";
  settings.rendezvous_port = port;
  settings.rank0_hosts_rendezvous = false;
  settings.secret = secret;
  applyClusterOptions(options, &settings);
  return settings;
}

void RankSync::arriveAndWait(double timeout_seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t generation = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  const bool released = cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds),
                                     [&] { return generation_ != generation || cancelled_; });
  if (!released) {
    ADD_FAILURE() << "RankSync: only " << arrived_ << " of " << size_ << " ranks arrived within "
                  << timeout_seconds << " s";
  } else if (generation_ == generation) {
    ADD_FAILURE() << "RankSync: cancelled by the watchdog";
  }
}

void RankSync::cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  cv_.notify_all();
}

namespace {

// State the rank threads share with the watchdog (the calling thread).
struct Job {
  explicit Job(int size) : runtimes(size), finished(size, false), end_sync(size) {}
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::unique_ptr<Runtime>> runtimes;  // destroyed after every thread joined
  std::vector<bool> finished;
  int finished_count = 0;
  bool failed_fatally = false;
  Clock::time_point failed_at;
  RankSync end_sync;

  void markFatal() {
    std::lock_guard<std::mutex> lock(mu);
    if (!failed_fatally) failed_at = Clock::now();
    failed_fatally = true;
    cv.notify_all();
  }
};

void rankThread(Job& job, int rank, int size, int port, const std::string& secret,
                const RankBody& body, const ClusterOptions& options) {
  SCOPED_TRACE("rank " + std::to_string(rank) + " of " + std::to_string(size));
  std::unique_ptr<Runtime> rt;
  Status created = Runtime::create(makeRankSettings(rank, size, port, secret, options), &rt);
  if (!created.isOk() || rt == nullptr) {
    ADD_FAILURE() << "rank " << rank << ": Runtime::create failed: " << created.toString();
    job.markFatal();
  } else {
    Runtime* raw = rt.get();
    {
      std::lock_guard<std::mutex> lock(job.mu);
      job.runtimes[rank] = std::move(rt);
    }
    try {
      body(*raw);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << rank << " threw: " << e.what();
      job.markFatal();
    } catch (...) {
      ADD_FAILURE() << "rank " << rank << " threw a non-std exception";
      job.markFatal();
    }
    if (::testing::Test::HasFatalFailure()) job.markFatal();
    // Every rank finishes its body before any shuts down: a shutdown must not
    // race with a peer's last collective.
    job.end_sync.arriveAndWait(options.watchdog_seconds);
    Status shut = raw->shutdown();
    if (options.require_clean_shutdown) {
      EXPECT_TRUE(IsOk(shut)) << "rank " << rank << ": shutdown()";
    }
  }
  std::lock_guard<std::mutex> lock(job.mu);
  job.finished[rank] = true;
  ++job.finished_count;
  job.cv.notify_all();
}

std::string unfinishedRanks(const Job& job) {
  std::string out;
  for (size_t r = 0; r < job.finished.size(); ++r) {
    if (!job.finished[r]) out += (out.empty() ? "" : ", ") + std::to_string(r);
  }
  return out;
}

}  // namespace

void runThreadRanks(int size, const RankBody& body, const ClusterOptions& options) {
  const std::string secret = randomSecret();
  std::unique_ptr<RendezvousServer> server;
  Status started = RendezvousServer::start("127.0.0.1", 0, secret, &server);
  ASSERT_TRUE(IsOk(started)) << "RendezvousServer::start";
  const int port = server->port();

  Job job(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back(rankThread, std::ref(job), r, size, port, std::cref(secret),
                         std::cref(body), std::cref(options));
  }

  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(options.watchdog_seconds));
  constexpr auto kGraceAfterFailure = std::chrono::seconds(10);
  constexpr auto kGraceAfterShutdown = std::chrono::seconds(20);
  bool forced = false;
  Clock::time_point forced_at;
  std::unique_lock<std::mutex> lock(job.mu);
  while (job.finished_count < size) {
    auto wake = forced ? forced_at + kGraceAfterShutdown : deadline;
    if (!forced && job.failed_fatally) wake = std::min(wake, job.failed_at + kGraceAfterFailure);
    job.cv.wait_until(lock, wake);
    if (job.finished_count == size) break;
    const auto now = Clock::now();
    if (forced && now >= forced_at + kGraceAfterShutdown) {
      std::fprintf(stderr, "thread harness: ranks %s still stuck %d s after shutdown; aborting\n",
                   unfinishedRanks(job).c_str(), 20);
      std::fflush(stderr);
      std::abort();
    }
    if (!forced && now >= wake) {
      ADD_FAILURE() << "thread harness: ranks " << unfinishedRanks(job) << " of " << size
                    << (job.failed_fatally ? " still running 10 s after a rank failed"
                                           : " still running after the watchdog's ")
                    << (job.failed_fatally ? "" : std::to_string(options.watchdog_seconds) + " s")
                    << "; shutting every runtime down";
      forced = true;
      forced_at = now;
      std::vector<Runtime*> live;
      for (auto& rt : job.runtimes) {
        if (rt) live.push_back(rt.get());
      }
      lock.unlock();
      job.end_sync.cancel();
      for (Runtime* rt : live) rt->shutdown();
      lock.lock();
    }
  }
  lock.unlock();
  for (auto& t : threads) t.join();
  job.runtimes.clear();
  server->stop();
}

}  // namespace test
}  // namespace tutti
