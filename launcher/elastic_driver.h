#pragma once

// The elastic driver's state machine (docs/elastic.md, "Driver"): which
// workers run where, when a new generation is formed, which hosts are
// blacklisted, when the job gives up. It starts and stops nothing itself: it
// asks an ElasticActions (launcher/elastic_job.h: the Job and the rendezvous
// server; tests: a recorder) and is fed events with the time they happened,
// so it is unit-tested without processes or sleeping
// (tests/launcher/elastic_driver_test.cc).
//
// Threading: none; the owner calls everything from one thread (tuttirun's
// event loop).
//
// Generations: whenever the set of live workers differs from the current
// generation's members (a worker failed, was stopped, or was started), the
// next generation is published at once (members, then elastic/latest), unless
// fewer than --min-np workers are possible (then it waits, and fails after
// --elastic-timeout) or the reset limit is reached (it fails). Workers are
// started ("topped up") at the start, after a failure, and when discovery
// adds a host or a host's blacklist cooldown ends: up to -np for the first
// generation, --max-np afterwards, on hosts in discovery order with free
// slots that are not blacklisted.

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "launcher/elastic_generation.h"
#include "launcher/hosts.h"

namespace tutti {
namespace launcher {

struct ElasticOptions {
  int np = 0;      // workers of the first generation; 0: max_np, else every slot
  int min_np = 0;  // 0: np when given, else 1
  int max_np = 0;  // 0: no limit
  double elastic_timeout_seconds = 600;
  int reset_limit = -1;             // -1: none
  double cooldown_min_seconds = 0;  // 0: a failed host stays blacklisted
  double cooldown_max_seconds = 0;
};

// What the driver asks of the world.
class ElasticActions {
 public:
  virtual ~ElasticActions() = default;
  // Starts worker `id` on `host`. An error counts as a failure of the host.
  virtual Status startWorker(int id, const std::string& host) = 0;
  // Stops worker `id` (SIGTERM, then SIGKILL); its exit is no failure.
  virtual void stopWorker(int id) = 0;
  // Sets a key of the rendezvous store; visible to workers in call order.
  virtual void publish(const std::string& key, const std::string& value) = 0;
  // Ends the job: stops every worker (a failed job after a moment, for them
  // to read elastic/failed); tuttirun exits with `exit_code`.
  // `why` ("elastic: ...") is printed unless empty.
  virtual void endJob(int exit_code, const std::string& why) = 0;
  // One line for the user ("elastic: ...").
  virtual void log(const std::string& text) = 0;
  // Whether rank `rank` of `generation` joined it: a worker that joins
  // publishes its address under the generation's rendezvous
  // (elastic/gen/<g>/rank/<r>/addr, ops/tcp/tcp_connect.cc). A worker that
  // exits 0 finished training in the last generation it joined.
  virtual bool joined(int generation, int rank) = 0;
};

// A lost-rank report read from the store (docs/elastic.md).
struct ElasticReport {
  int generation = 0;
  int reporter = 0;   // worker id
  int lost_rank = 0;  // rank in `generation`
};

class ElasticDriver {
 public:
  using Clock = std::chrono::steady_clock;

  ElasticDriver(ElasticOptions options, ElasticActions& actions);

  // Starts the first workers on `hosts` and publishes generation 0 if at
  // least min-np could start.
  void start(const std::vector<HostSlots>& hosts, Clock::time_point now);
  // A new list from host discovery.
  void onHosts(const std::vector<HostSlots>& hosts, Clock::time_point now);
  // Worker `id` exited. `failed`: non-zero code or signal; `stopped`: the
  // driver (or the end of the job) stopped it; `how`: "exited with code 3".
  // The first exit 0 finishes the job: no new generation; the generation
  // that worker last joined (the current one when no join was seen) finishes
  // it, workers outside it are stopped (newcomers waiting for members that
  // will never come), and the job succeeds once its live members exit 0.
  void onWorkerExit(int id, bool failed, bool stopped, const std::string& how,
                    Clock::time_point now);
  // New lost-rank reports; handled in generation order, then by the
  // reporter's rank (rank 0's view first), ignoring those of workers already
  // failed or stopped.
  void onReports(std::vector<ElasticReport> reports, Clock::time_point now);
  // Deadlines: the --min-np wait, blacklist cooldowns that ended.
  void onTick(Clock::time_point now);

  int generation() const { return generation_; }                // -1: none yet
  const std::vector<int>& members() const { return members_; }  // worker ids, rank order
  bool ended() const { return ended_; }
  bool finishing() const { return finishing_; }
  // Workers started and not yet exited, failed or stopped.
  std::set<int> liveWorkers() const;

 private:
  enum class State { kLive, kStopping, kFailed, kExitedOk, kExited };
  struct Worker {
    std::string host;
    State state = State::kLive;
  };

  void reconcile(Clock::time_point now);
  void topUp(Clock::time_point now);
  void hostFailed(const std::string& host, Clock::time_point now);
  void stopOnHost(const std::string& host, int keep);
  void fail(const std::string& why);
  // The first exit 0 (`what` describes it): see onWorkerExit.
  void startFinishing(int id, const std::string& what);
  int liveOn(const std::string& host) const;
  // The last generation worker `id` was seen to join; -1: none.
  int lastJoined(int id) const;
  int minNp() const;
  std::string describe(int id) const;
  std::string capacityText(Clock::time_point now) const;

  ElasticOptions options_;
  ElasticActions& actions_;
  Blacklist blacklist_;
  std::vector<HostSlots> hosts_;
  std::set<std::string> blacklisted_;  // at the last tick: to notice cooldowns that ended
  std::map<int, Worker> workers_;
  int next_id_ = 0;
  int generation_ = -1;
  std::vector<int> members_;
  std::map<int, std::vector<int>> history_;  // generation -> members
  bool top_up_ = true;
  std::optional<Clock::time_point> waiting_since_;  // below min-np since
  std::string last_event_;                          // why the next generation is needed
  bool finishing_ = false;                          // a worker exited 0
  std::vector<int> finish_members_;                 // the generation that finishes the job
  bool ended_ = false;
};

}  // namespace launcher
}  // namespace tutti
