// tests/support/thread_harness.h, implemented for MPI processes: the docs/cases.md
// suites of tests/cases link this file instead of thread_harness.cc and run
// under `mpirun -np N`. Each process is one rank: runThreadRanks(size, body)
// creates this process's Runtime on the mpi backend (rank and size from
// mpirun), runs the body once and shuts the Runtime down. A job of another
// size than the MPI world is skipped (the world is fixed by mpirun), so each
// `mpirun -np N` runs the size-N instances of every parametrised test.
//
// RankSync waits in a tutti barrier of the current Runtime (the ranks are
// processes, so there is no shared memory to meet in).
//
// No hang: a body that runs longer than options.watchdog_seconds aborts the
// process (mpirun then stops the whole job), naming the test and the rank.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <random>
#include <thread>

#include "tests/support/op_checks.h"
#include "tests/support/thread_harness.h"

namespace tutti {
namespace test {
namespace {

Runtime* g_current = nullptr;  // the Runtime of the running body (main thread only)

// Aborts the process unless disarmed within `seconds`.
class Watchdog {
 public:
  Watchdog(double seconds, std::string what) : what_(std::move(what)) {
    thread_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; })) {
        std::fprintf(stderr, "mpi harness: %s still running after %.0f s: aborting the job\n",
                     what_.c_str(), seconds);
        std::fflush(stderr);
        std::abort();
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

std::string currentTestName() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (info == nullptr) return "(no test)";
  return std::string(info->test_suite_name()) + "." + info->name();
}

}  // namespace

Settings makeRankSettings(int rank, int size, int port, const std::string& secret,
                          const ClusterOptions& options) {
  Settings settings;
  Status loaded = loadSettings(processEnv(), &settings);
  EXPECT_TRUE(IsOk(loaded)) << "loadSettings under mpirun";
  settings.rank = rank;
  settings.size = size;
  settings.rendezvous_port = port;
  settings.secret = secret;
  applyClusterOptions(options, &settings);
  settings.backend = "mpi";
  return settings;
}

void RankSync::arriveAndWait(double timeout_seconds) {
  if (g_current == nullptr) {
    ADD_FAILURE() << "RankSync used outside a rank body";
    return;
  }
  Runtime& rt = *g_current;
  Handle handle = -1;
  Status st = rt.barrier(&handle);
  if (st.isOk()) st = rt.wait(handle, timeout_seconds);
  if (st.isOk()) st = rt.release(handle);
  EXPECT_TRUE(IsOk(st)) << "RankSync: the tutti barrier it waits in (size " << size_ << ")";
}

void RankSync::cancel() {}

void runThreadRanks(int size, const RankBody& body, const ClusterOptions& options) {
  Settings settings;
  Status loaded = loadSettings(processEnv(), &settings);
  ASSERT_TRUE(IsOk(loaded)) << "loadSettings under mpirun";
  if (size != settings.size) {
    GTEST_SKIP() << "a job of " << size << " ranks; this MPI world has " << settings.size;
  }
  const int rank = settings.rank;
  settings = makeRankSettings(rank, size, settings.rendezvous_port, "", options);
  SCOPED_TRACE("rank " + std::to_string(rank) + " of " + std::to_string(size));
  Watchdog watchdog(options.watchdog_seconds,
                    currentTestName() + " on rank " + std::to_string(rank));

  std::unique_ptr<Runtime> rt;
  Status created = Runtime::create(settings, &rt);
  ASSERT_TRUE(IsOk(created)) << "Runtime::create on the mpi backend";
  g_current = rt.get();
  try {
    body(*rt);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank " << rank << " threw: " << e.what();
  } catch (...) {
    ADD_FAILURE() << "rank " << rank << " threw a non-standard exception";
  }
  g_current = nullptr;
  Status down = rt->shutdown();
  if (options.require_clean_shutdown) {
    EXPECT_TRUE(IsOk(down)) << "shutdown() on rank " << rank;
  }
  rt.reset();
}

}  // namespace test
}  // namespace tutti
