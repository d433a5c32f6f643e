#pragma once

// Job control: one event loop (poll on the ranks' pipes and a signalfd) that
// multiplexes output, notices ranks that exit, forwards signals, enforces the
// start timeout, and stops the job when one rank fails.
//
// Elastic mode (JobConfig::on_exit set; launcher/elastic_job.h): a rank that
// exits does not stop the job; the owner hears of it, can start (add) and stop
// single ranks while the job runs, and ends the job itself (end).
//
// Threading: everything runs on the thread that calls wait(). SIGINT,
// SIGTERM, SIGHUP and SIGCHLD must be blocked in every thread of the process
// before it starts threads (blockJobSignals() in launcher/spawn.h).
//
// Stopping: the rank's process group gets SIGTERM (remote ranks: "TERM" on
// the ssh control channel, see launcher/remote.h), and SIGKILL after the
// grace period; ssh clients still alive after a second grace period are
// killed, which makes the remote bootstrap kill what is left there.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "launcher/output.h"
#include "launcher/placement.h"
#include "launcher/spawn.h"

namespace tutti {
namespace launcher {

struct RankLaunch {
  RankPlacement placement;
  bool remote = false;
  SpawnRequest request;      // the rank's command, or ssh / the rsh agent for a remote rank
  std::string stdin_script;  // remote: written to ssh's stdin at start
  // Remote through --rsh-agent: the agent may run the bootstrap in its own
  // process group (a local one does), so killing that group would orphan the
  // rank; the job stops it through the control channel first.
  bool rsh_agent = false;
  int stdout_file = -1;  // --output-filename files (the job owns them), or -1
  int stderr_file = -1;
};

// How a rank ended (elastic mode).
struct RankExit {
  int id = 0;  // RankLaunch::placement.rank (the elastic worker id)
  std::string host;
  bool failed = false;      // exited non-zero or killed by a signal
  bool stopped = false;     // stop() or the end of the job stopped it
  std::string description;  // "exited with code 3" (describeExit)
};

struct JobConfig {
  double start_timeout_seconds = 60;  // 0: no start timeout
  double grace_seconds = 5;           // SIGTERM → SIGKILL
  bool verbose = false;
  // Ranks that reached the rendezvous (set "rank/<r>/generation"); asked once, at
  // the start deadline. Null: no start timeout check.
  std::function<std::set<int>()> arrived_ranks;
  int out_fd = 1;             // where the ranks' stdout lines go
  int err_fd = 2;             // where their stderr lines and tuttirun's messages go
  std::string noun = "rank";  // how messages name a process ("worker" in elastic mode)
  // Elastic mode when set: a rank's exit does not stop the job; once the rank
  // is reaped, on_exit is called (from the event loop) with how it ended. The
  // job runs until end() is called (or tuttirun gets a signal) and nothing
  // runs any more.
  std::function<void(const RankExit&)> on_exit;
  // Called from the event loop every tick_ms (elastic mode: watching the
  // store and host discovery).
  std::function<void()> on_tick;
  int tick_ms = 50;
};

class Job {
 public:
  explicit Job(JobConfig config);
  ~Job();  // SIGKILLs and reaps whatever still runs
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Starts every rank in order. If one cannot start, the started ones are
  // stopped and the error returned.
  Status start(std::vector<RankLaunch> launches);

  // Runs the event loop until every rank has exited and its output is read
  // (elastic mode: and end() was called). Returns tuttirun's exit code (kExit*
  // in launcher/cli.h, or 128+signal).
  int wait();

  // Elastic mode, from the event loop's callbacks (or before wait()):
  // Starts one more rank. On error nothing was started (its files closed).
  Status add(RankLaunch launch);
  // Stops rank `id` (RankLaunch::placement.rank): SIGTERM (remote: "TERM" on
  // the control channel), SIGKILL after the grace period, then its ssh / agent
  // client. Its exit is reported with stopped = true.
  void stop(int id);
  // Ends the job: prints `why` (unless empty), stops every rank (after
  // `term_after_seconds`: time for them to exit by themselves); wait()
  // returns `exit_code` unless a signal or an earlier failure came first.
  void end(int exit_code, const std::string& why, double term_after_seconds = 0);
  // True once the job is ending (end(), a signal): start nothing more.
  bool stopping() const { return stopping_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Rank;

  void message(const std::string& text);
  Status spawnRank(RankLaunch launch);
  void checkRankDeadlines(Clock::time_point now);
  void pollOnce();
  void readOutput(Rank& rank, bool drain);
  void writeControl(Rank& rank);
  void checkExits();
  void onRankExit(Rank& rank);
  void onSignal(int sig);
  void onStartDeadline();
  void stopAll(int sig, const std::string& why);
  void sendSignal(Rank& rank, int sig);
  void killAll();
  void reapAll();
  int runningCount() const;

  JobConfig config_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  int signal_fd_ = -1;
  int exit_code_ = -1;  // first reason the job ends; -1: none yet (success)
  bool stopping_ = false;
  std::optional<Clock::time_point> start_deadline_;
  std::optional<Clock::time_point> kill_deadline_;
  std::optional<Clock::time_point> ssh_kill_deadline_;
  std::optional<Clock::time_point> drain_deadline_;
  std::optional<Clock::time_point> next_tick_;
  std::optional<Clock::time_point> term_deadline_;  // end() with a delay
};

// "exited with code 3", "was killed by signal 9 (SIGKILL)". For a remote
// rank, codes 129..192 are the remote shell's way to say signal code-128.
std::string describeExit(bool by_signal, int value, bool remote);

}  // namespace launcher
}  // namespace tutti
