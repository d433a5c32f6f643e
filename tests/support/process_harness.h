#pragma once

// Runs the ranks of one tutti job as forked processes, for fault tests: a rank
// can be SIGKILLed at a chosen moment, and each rank's stderr (tutti's log) is
// captured for the test to read.
//
// The parent starts the RendezvousServer, forks one child per rank and never
// runs tutti code itself afterwards. A child creates its Runtime from
// makeRankSettings(), runs the body, shuts down and _exit()s with
//   0 pass, 1 a check failed, 2 Runtime::create failed, 3 shutdown() failed,
//   4 the body threw.
// gtest assertions do not work in a child: bodies use ProcessRank::check().

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "coordinator/runtime.h"
#include "tests/support/thread_harness.h"

namespace tutti {
namespace test {

// What a child body sees of the harness.
class ProcessRank {
 public:
  ProcessRank(int rank, int size, int ready_fd) : rank_(rank), size_(size), ready_fd_(ready_fd) {}
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Tells the parent this rank reached its ready point (see ProcessPlan).
  void signalReady();
  // Prints "rank r: CHECK FAILED: what" to stderr and fails the rank when !ok.
  bool check(bool ok, const std::string& what);
  bool failed() const { return failed_; }

 private:
  int rank_;
  int size_;
  int ready_fd_;
  bool failed_ = false;
};

using ProcessBody = std::function<void(Runtime& rt, ProcessRank& self)>;

struct ProcessPlan {
  int kill_rank = -1;                  // SIGKILL this rank (-1: none) ...
  std::vector<int> kill_after_ready;   // ... once these ranks signalled ready (empty: all) ...
  double kill_delay_seconds = 0.2;     // ... and this much later.
  double deadline_seconds = 60;        // children still running then are killed
  bool require_clean_shutdown = true;  // a failing shutdown() is exit code 3
};

struct ProcessResult {
  int rank = -1;
  bool exited = false;  // exited normally with exit_code
  int exit_code = -1;
  int term_signal = 0;  // signal that ended it, if any
  bool timed_out = false;
  double seconds_after_kill = -1;  // when it ended, relative to the planned kill (-1: no kill)
  std::string stderr_text;
  std::string describe() const;  // "rank 1: exit 0", "rank 2: signal 9", ... + stderr
};

std::vector<ProcessResult> runProcessRanks(int size, const ProcessBody& body,
                                           const ClusterOptions& options, const ProcessPlan& plan);

}  // namespace test
}  // namespace tutti
