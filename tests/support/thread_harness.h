#pragma once

// Runs the ranks of one tutti job as threads of the test process, over
// loopback TCP, with a RendezvousServer of the test's own (port 0, random
// secret). Each rank thread creates its Runtime, runs the test body, meets the
// other ranks, and shuts its Runtime down.
//
// Failures: gtest assertions work inside bodies; every failure is traced with
// "rank r of n". An exception escaping a body, a failed Runtime::create or a
// failed shutdown() is a test failure naming the rank.
//
// No hang: once a rank failed fatally, the others get 10 s to finish; after
// `watchdog_seconds` (or those 10 s) every Runtime is shut down, which
// completes pending handles with kShutdown and lets the bodies return; if
// threads are still stuck 20 s later the process aborts with the ranks named.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "coordinator/runtime.h"
#include "core/settings.h"

namespace tutti {
namespace test {

struct ClusterOptions {
  int64_t segment_bytes = 4096;         // small: multi-segment ring paths are cheap to reach
  int64_t fusion_threshold_bytes = -1;  // < 0: the documented default
  double cycle_time_ms = -1;            // < 0: the documented default
  double timeout_seconds = 20;
  double stall_check_time_seconds = -1;     // < 0: the documented default
  double stall_shutdown_time_seconds = -1;  // < 0: the documented default
  double watchdog_seconds = 100;
  bool require_clean_shutdown = true;  // shutdown() must return ok on every rank
  std::string backend;                 // TUTTI_BACKEND ("" = the registry default, tcp)
  // > 0: simulated hosts, rank r on host r / ranks_per_host (TUTTI_CROSS_RANK
  // and TUTTI_LOCAL_RANK/SIZE set to match; the last host may hold fewer);
  // 0: every rank on host 0.
  int ranks_per_host = 0;
  std::string hierarchical_allreduce;  // TUTTI_HIERARCHICAL_ALLREDUCE ("" = the default)
  std::string hierarchical_allgather;  // TUTTI_HIERARCHICAL_ALLGATHER ("" = the default)
  // Called last on each rank's Settings, for knobs not above (e.g. autotune).
  std::function<void(Settings*)> adjust;
};

// Settings of rank `rank` of a `size`-rank job on this host whose rendezvous
// server (not hosted by rank 0) listens on 127.0.0.1:`port`.
Settings makeRankSettings(int rank, int size, int port, const std::string& secret,
                          const ClusterOptions& options);
// 32 random hex digits.
std::string randomSecret();
// Applies the knobs of `options` (timeouts, segment size, fusion, cycle time,
// stalls, backend) to `settings`; shared by every harness
// (tests/support/cluster_settings.cc).
void applyClusterOptions(const ClusterOptions& options, Settings* settings);

// A reusable barrier for the rank threads of one job, independent of tutti,
// for ordering test steps. A wait longer than `timeout_seconds` (or a
// cancel()) is a test failure instead of a hang.
class RankSync {
 public:
  explicit RankSync(int size) : size_(size) {}
  void arriveAndWait(double timeout_seconds = 20);
  void cancel();

 private:
  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  bool cancelled_ = false;
};

using RankBody = std::function<void(Runtime& rt)>;

// Runs `body` on `size` rank threads; returns when all finished.
void runThreadRanks(int size, const RankBody& body, const ClusterOptions& options = {});

}  // namespace test
}  // namespace tutti
