#pragma once

// Host discovery of elastic jobs (--host-discovery-script, docs/elastic.md):
// a program that prints the hosts available now, one "host" or "host:slots"
// per line ('#' starts a comment, blank lines are skipped). tuttirun runs it
// once before the job (a failure there is fatal) and then every second on a
// thread of its own (failures are logged and the last good list kept).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "launcher/hosts.h"

namespace tutti {
namespace launcher {

// Parses the script's output. A bare host gets `slots_per_host` slots; a host
// listed twice gets the sum, at its first position. No hosts is a valid
// answer (none available now). Error: "line 3: bad entry 'a:x': expected ...".
Status parseDiscoveryOutput(const std::string& text, int slots_per_host,
                            std::vector<HostSlots>* out);

// Runs `script` (no arguments, tuttirun's environment and working directory,
// stdin from /dev/null) and parses what it prints. `script` is a path, as
// Horovod's: a name without '/' that exists in the working directory runs as
// ./name (else it is looked up on PATH). A run is killed (its process group)
// after `timeout_seconds` (tuttirun: 30 s). Blocks at most
// `timeout_seconds`, less when `*cancel` becomes true (checked every 50 ms).
// Errors name the script and say what went wrong, with its stderr:
// "--host-discovery-script ./d.sh exited with code 2 (stderr: no cluster)".
Status runDiscoveryScript(const std::string& script, int slots_per_host, double timeout_seconds,
                          std::vector<HostSlots>* hosts, const std::atomic<bool>* cancel = nullptr);

// What to log about the results of the repeated discovery runs, so that a
// script that keeps failing is not logged every second: the first failure,
// a failure whose message changed, a reminder every `reminder_seconds` while
// it keeps failing, and the recovery. Not thread-safe.
class DiscoveryFailureLog {
 public:
  using Clock = std::chrono::steady_clock;
  explicit DiscoveryFailureLog(double reminder_seconds = 60)
      : reminder_seconds_(reminder_seconds) {}
  // The line to log for this result ("elastic: ..."), or "" for nothing.
  std::string onResult(const Status& st, Clock::time_point now);

 private:
  double reminder_seconds_;
  bool failing_ = false;
  std::string message_;         // of the failure logged last
  Clock::time_point since_{};   // first failure of this run of failures
  Clock::time_point logged_{};  // last line about it
};

// Runs the script every `interval_seconds` on its own thread (the first run
// one interval after start()). Thread-safe; take() never blocks on the script.
class DiscoveryPoller {
 public:
  DiscoveryPoller(std::string script, int slots_per_host, double interval_seconds,
                  double timeout_seconds);
  ~DiscoveryPoller();  // cancels a running script and joins the thread
  DiscoveryPoller(const DiscoveryPoller&) = delete;
  DiscoveryPoller& operator=(const DiscoveryPoller&) = delete;

  void start();
  // The newest result not taken yet: true with its status and (when ok) hosts.
  bool take(Status* status, std::vector<HostSlots>* hosts);

 private:
  void loop();

  const std::string script_;
  const int slots_per_host_;
  const double interval_seconds_;
  const double timeout_seconds_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool fresh_ = false;  // guarded by mu_, with the two below
  Status status_;
  std::vector<HostSlots> hosts_;
  std::thread thread_;
};

}  // namespace launcher
}  // namespace tutti
