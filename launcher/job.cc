#include "launcher/job.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "launcher/cli.h"

namespace tutti {
namespace launcher {

struct Job::Rank {
  RankLaunch launch;
  ChildProcess child;
  std::unique_ptr<OutputStream> out;
  std::unique_ptr<OutputStream> err;
  std::string control;         // bytes waiting to go to the ssh control channel
  bool close_control = false;  // close the channel once `control` is written
  bool running = false;
  bool reaped = false;
  bool stop_requested = false;                                   // stop(): its exit is no failure
  std::optional<std::chrono::steady_clock::time_point> kill_at;  // stop(): SIGKILL
  std::optional<std::chrono::steady_clock::time_point> client_kill_at;  // then ssh / agent
};

namespace {

std::string signalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

void closeFd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

int msUntil(std::chrono::steady_clock::time_point t) {
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(t - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<long long>(ms.count(), 0, 24 * 3600 * 1000));
}

std::string rankList(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

std::string secondsText(double s) {
  std::string t = std::to_string(s);
  t.erase(t.find_last_not_of('0') + 1);
  if (!t.empty() && t.back() == '.') t.pop_back();
  return t;
}

}  // namespace

std::string describeExit(bool by_signal, int value, bool remote) {
  if (by_signal) {
    return "was killed by signal " + std::to_string(value) + " (" + signalName(value) + ")";
  }
  std::string text = "exited with code " + std::to_string(value);
  if (remote && value == 255) text += " (ssh failed; see the rank's stderr)";
  if (remote && value > 128 && value <= 192) {
    text = "was killed by signal " + std::to_string(value - 128) + " (" + signalName(value - 128) +
           ") (remote exit code " + std::to_string(value) + ")";
  }
  return text;
}

Job::Job(JobConfig config) : config_(std::move(config)) {
  sigset_t set;
  jobSignalSet(&set);
  signal_fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (config_.on_tick) next_tick_ = Clock::now();
}

Job::~Job() {
  killAll();
  reapAll();
  for (auto& r : ranks_) {
    closeFd(&r->child.stdout_fd);
    closeFd(&r->child.stderr_fd);
    closeFd(&r->child.stdin_fd);
  }
  closeFd(&signal_fd_);
}

void Job::message(const std::string& text) {
  std::string line = "tuttirun: " + text + "\n";
  writeAll(config_.err_fd, line.data(), line.size());
}

Status Job::spawnRank(RankLaunch launch) {
  auto rank = std::make_unique<Rank>();
  rank->launch = std::move(launch);
  const RankLaunch& l = rank->launch;
  std::string r = std::to_string(l.placement.rank);
  Status st = spawnProcess(l.request, &rank->child);
  if (!st.isOk()) {
    if (l.stdout_file >= 0) ::close(l.stdout_file);
    if (l.stderr_file >= 0) ::close(l.stderr_file);
    return Status(st.code(),
                  config_.noun + " " + r + " on host " + l.placement.host + ": " + st.message());
  }
  rank->running = true;
  rank->out =
      std::make_unique<OutputStream>("[" + r + "]<stdout>: ", config_.out_fd, l.stdout_file);
  rank->err =
      std::make_unique<OutputStream>("[" + r + "]<stderr>: ", config_.err_fd, l.stderr_file);
  rank->control = l.stdin_script;
  if (config_.verbose) {
    const char* via = !l.remote ? ")" : l.rsh_agent ? ", through the rsh agent)" : ", through ssh)";
    message(config_.noun + " " + r + " on host " + l.placement.host + " started (pid " +
            std::to_string(rank->child.pid) + via);
  }
  ranks_.push_back(std::move(rank));
  return Status::ok();
}

Status Job::start(std::vector<RankLaunch> launches) {
  if (signal_fd_ < 0) return Status::ioError(std::string("signalfd: ") + std::strerror(errno));
  for (size_t i = 0; i < launches.size(); ++i) {
    Status st = spawnRank(std::move(launches[i]));
    if (!st.isOk()) {
      for (size_t j = i + 1; j < launches.size(); ++j) {
        if (launches[j].stdout_file >= 0) ::close(launches[j].stdout_file);
        if (launches[j].stderr_file >= 0) ::close(launches[j].stderr_file);
      }
      stopAll(SIGTERM, "");
      killAll();
      reapAll();
      return st;
    }
  }
  if (config_.start_timeout_seconds > 0 && config_.arrived_ranks) {
    start_deadline_ =
        Clock::now() +
        std::chrono::milliseconds(static_cast<long long>(config_.start_timeout_seconds * 1000));
  }
  return Status::ok();
}

Status Job::add(RankLaunch launch) {
  if (signal_fd_ < 0) return Status::ioError(std::string("signalfd: ") + std::strerror(errno));
  return spawnRank(std::move(launch));
}

void Job::stop(int id) {
  for (auto& r : ranks_) {
    if (!r->running || r->launch.placement.rank != id || r->stop_requested) continue;
    r->stop_requested = true;
    sendSignal(*r, SIGTERM);
    r->kill_at = Clock::now() +
                 std::chrono::milliseconds(static_cast<long long>(config_.grace_seconds * 1000));
  }
}

void Job::end(int exit_code, const std::string& why, double term_after_seconds) {
  if (exit_code_ < 0 && exit_code != kExitOk) exit_code_ = exit_code;
  if (stopping_) {
    if (!why.empty()) message(why);
  } else if (term_after_seconds > 0) {
    if (!why.empty()) message(why);
    stopping_ = true;
    term_deadline_ =
        Clock::now() + std::chrono::milliseconds(static_cast<long long>(term_after_seconds * 1000));
  } else {
    stopAll(SIGTERM, why);
  }
}

int Job::runningCount() const {
  return static_cast<int>(
      std::count_if(ranks_.begin(), ranks_.end(), [](const auto& r) { return r->running; }));
}

void Job::sendSignal(Rank& rank, int sig) {
  if (!rank.running) return;
  if (!rank.launch.remote) {
    ::kill(-rank.child.pid, sig);
    // A stopped rank (SIGSTOP, Ctrl-Z) would keep a SIGTERM or SIGINT pending
    // until the SIGKILL grace ran out: continue it so that it acts on it now.
    if (sig != SIGKILL) ::kill(-rank.child.pid, SIGCONT);
    return;
  }
  const char* abbrev = sigabbrev_np(sig);
  if (rank.child.stdin_fd >= 0 && abbrev != nullptr) {
    rank.control += std::string(abbrev) + "\n";
    if (sig == SIGKILL) rank.close_control = true;
    writeControl(rank);
  }
}

void Job::stopAll(int sig, const std::string& why) {
  if (!why.empty()) message(why);
  stopping_ = true;
  for (auto& r : ranks_) sendSignal(*r, sig);
  if (!kill_deadline_) {
    kill_deadline_ = Clock::now() + std::chrono::milliseconds(
                                        static_cast<long long>(config_.grace_seconds * 1000));
  }
}

void Job::killAll() {
  // Ranks started through an rsh agent: "KILL" on the control channel (the
  // bootstrap kills the rank and exits), then up to a second for the agents.
  bool agents = false;
  for (auto& r : ranks_) {
    if (r->reaped || !r->launch.rsh_agent || r->child.stdin_fd < 0) continue;
    (void)!::write(r->child.stdin_fd, "KILL\n", 5);
    closeFd(&r->child.stdin_fd);
    agents = true;
  }
  for (int i = 0; agents && i < 100; ++i) {
    agents = false;
    for (auto& r : ranks_) {
      if (r->reaped || !r->launch.rsh_agent) continue;
      int status = 0;
      if (::waitpid(r->child.pid, &status, WNOHANG) == r->child.pid) {
        r->reaped = true;
        r->running = false;
      } else {
        agents = true;
      }
    }
    if (agents) ::usleep(10000);
  }
  for (auto& r : ranks_) {
    if (r->reaped) continue;
    // Local: the rank's group, including what it left behind. Remote: the ssh
    // client; its bootstrap then kills the rank (end of the control channel).
    ::kill(-r->child.pid, SIGKILL);
  }
}

void Job::reapAll() {
  for (auto& r : ranks_) {
    if (r->reaped) continue;
    int status = 0;
    while (::waitpid(r->child.pid, &status, 0) < 0 && errno == EINTR) {
    }
    r->reaped = true;
    r->running = false;
  }
}

void Job::writeControl(Rank& rank) {
  int& fd = rank.child.stdin_fd;
  while (fd >= 0 && !rank.control.empty()) {
    ssize_t n = ::write(fd, rank.control.data(), rank.control.size());
    if (n > 0) {
      rank.control.erase(0, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;  // the event loop waits for POLLOUT
    } else {
      closeFd(&fd);  // ssh is gone
      rank.control.clear();
    }
  }
  if (rank.control.empty() && rank.close_control) closeFd(&fd);
}

void Job::readOutput(Rank& rank, bool drain) {
  char buf[65536];
  for (auto [fd, stream] : {std::pair<int*, OutputStream*>{&rank.child.stdout_fd, rank.out.get()},
                            {&rank.child.stderr_fd, rank.err.get()}}) {
    // A bounded number of reads per wake-up keeps one chatty rank from
    // starving the others; `drain` reads what is there now.
    for (int i = 0; *fd >= 0 && (drain || i < 4); ++i) {
      ssize_t n = ::read(*fd, buf, sizeof(buf));
      if (n > 0) {
        stream->append(buf, static_cast<size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        break;
      } else {
        closeFd(fd);
        stream->finish();
      }
    }
  }
}

void Job::onRankExit(Rank& rank) {
  // Print what the rank wrote before it exited, then why it exited.
  readOutput(rank, true);
  const RankPlacement& p = rank.launch.placement;
  // Exit status from waitid(WNOWAIT) in checkExits; kept in the zombie until
  // reaped, so the group id cannot be reused while we may still signal it.
  siginfo_t info{};
  ::waitid(P_PID, static_cast<id_t>(rank.child.pid), &info, WEXITED | WNOHANG | WNOWAIT);
  bool by_signal = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
  int value = info.si_status;
  bool failed = by_signal || value != 0;
  std::string text = "rank " + std::to_string(p.rank) + " on host " + p.host + " " +
                     describeExit(by_signal, value, rank.launch.remote);
  if (config_.on_exit) {
    // Elastic mode: the owner decides what an exit means.
  } else if (failed && !stopping_) {
    // Exit 255 through ssh before the rank reached the rendezvous: ssh's own
    // failure (unknown host, refused, authentication), so the job could not
    // start. (A remote command that exits 255 before tutti's init reads the
    // same.)
    const bool not_started = rank.launch.remote && !by_signal && value == 255 &&
                             config_.arrived_ranks && config_.arrived_ranks().count(p.rank) == 0;
    if (not_started) text += " before reaching the rendezvous: the job could not start";
    message(text);
    exit_code_ = not_started ? kExitStartFailed : kExitRankFailed;
    stopAll(SIGTERM, "stopping the other ranks (SIGTERM, then SIGKILL after " +
                         secondsText(config_.grace_seconds) + " s)");
  } else if (config_.verbose) {
    message(text);
  }
  // Leftovers of the rank's process group go with it.
  ::kill(-rank.child.pid, SIGKILL);
  int status = 0;
  while (::waitpid(rank.child.pid, &status, 0) < 0 && errno == EINTR) {
  }
  rank.reaped = true;
  closeFd(&rank.child.stdin_fd);
  if (config_.on_exit) {
    RankExit e;
    e.id = p.rank;
    e.host = p.host;
    e.failed = failed;
    e.stopped = rank.stop_requested || stopping_;
    e.description = describeExit(by_signal, value, rank.launch.remote);
    config_.on_exit(e);
  }
}

void Job::checkExits() {
  // By index: on_exit may add ranks.
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank* r = ranks_[i].get();
    if (!r->running) continue;
    siginfo_t info{};
    info.si_pid = 0;
    if (::waitid(P_PID, static_cast<id_t>(r->child.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
      continue;
    }
    if (info.si_pid == 0) continue;
    r->running = false;
    onRankExit(*r);
  }
}

void Job::onSignal(int sig) {
  if (exit_code_ < 0) exit_code_ = 128 + sig;
  if (!stopping_) {
    stopAll(sig, "received " + signalName(sig) + "; forwarding it to every rank");
  } else {
    message("received " + signalName(sig) + " while stopping; killing every rank");
    for (auto& r : ranks_) sendSignal(*r, SIGKILL);
  }
}

void Job::onStartDeadline() {
  start_deadline_.reset();
  if (stopping_) return;
  std::set<int> arrived = config_.arrived_ranks();
  std::vector<int> missing;
  std::set<std::string> hosts;
  for (auto& r : ranks_) {
    if (r->running && arrived.count(r->launch.placement.rank) == 0) {
      missing.push_back(r->launch.placement.rank);
      hosts.insert(r->launch.placement.host);
    }
  }
  if (missing.empty()) return;
  std::string on;
  for (const auto& h : hosts) on += (on.empty() ? "" : ", ") + h;
  message(rankList(missing) + " did not reach the rendezvous within " +
          secondsText(config_.start_timeout_seconds) + " s (--start-timeout; on host" +
          (hosts.size() > 1 ? "s " : " ") + on + "); do they call tutti's init?");
  exit_code_ = kExitStartTimeout;
  stopAll(SIGTERM, "stopping the job");
}

void Job::pollOnce() {
  std::vector<pollfd> fds;
  std::vector<std::pair<Rank*, int>> owners;  // (rank, 0 = output, 1 = control)
  fds.push_back({signal_fd_, POLLIN, 0});
  owners.push_back({nullptr, 0});
  for (auto& r : ranks_) {
    for (int fd : {r->child.stdout_fd, r->child.stderr_fd}) {
      if (fd < 0) continue;
      fds.push_back({fd, POLLIN, 0});
      owners.push_back({r.get(), 0});
    }
    if (r->child.stdin_fd >= 0 && !r->control.empty()) {
      fds.push_back({r->child.stdin_fd, POLLOUT, 0});
      owners.push_back({r.get(), 1});
    }
  }
  int timeout = -1;
  std::vector<std::optional<Clock::time_point>> deadlines = {start_deadline_,    kill_deadline_,
                                                             ssh_kill_deadline_, drain_deadline_,
                                                             term_deadline_,     next_tick_};
  for (auto& r : ranks_) {
    if (r->running) deadlines.insert(deadlines.end(), {r->kill_at, r->client_kill_at});
  }
  for (const auto& d : deadlines) {
    if (d) timeout = timeout < 0 ? msUntil(*d) : std::min(timeout, msUntil(*d));
  }
  int n = ::poll(fds.data(), fds.size(), timeout);
  if (n < 0 && errno != EINTR) {
    message(std::string("poll failed: ") + std::strerror(errno));
    return;
  }
  for (size_t i = 1; n > 0 && i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    if (owners[i].second == 0) readOutput(*owners[i].first, false);
    if (owners[i].second == 1) writeControl(*owners[i].first);
  }
  if (n > 0 && fds[0].revents != 0) {
    signalfd_siginfo si;
    while (::read(signal_fd_, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
      if (si.ssi_signo != SIGCHLD) onSignal(static_cast<int>(si.ssi_signo));
    }
  }
  // SIGCHLD coalesces: look at every running rank after any wake-up.
  checkExits();
  auto now = Clock::now();
  if (start_deadline_ && now >= *start_deadline_) onStartDeadline();
  if (kill_deadline_ && now >= *kill_deadline_) {
    kill_deadline_.reset();
    if (runningCount() > 0) {
      message("ranks still running after " + secondsText(config_.grace_seconds) +
              " s; sending SIGKILL");
    }
    for (auto& r : ranks_) sendSignal(*r, SIGKILL);
    ssh_kill_deadline_ = now + std::chrono::milliseconds(
                                   static_cast<long long>(config_.grace_seconds * 1000) + 2000);
  }
  if (ssh_kill_deadline_ && now >= *ssh_kill_deadline_) {
    ssh_kill_deadline_.reset();
    for (auto& r : ranks_) {
      if (r->running && r->launch.remote) ::kill(-r->child.pid, SIGKILL);
    }
  }
  if (term_deadline_ && now >= *term_deadline_) {
    term_deadline_.reset();
    stopAll(SIGTERM, "");
  }
  checkRankDeadlines(now);
  if (config_.on_tick && (!next_tick_ || now >= *next_tick_)) {
    next_tick_ = now + std::chrono::milliseconds(config_.tick_ms);
    config_.on_tick();
  }
}

void Job::checkRankDeadlines(Clock::time_point now) {
  for (auto& r : ranks_) {
    if (!r->running) continue;
    if (r->kill_at && now >= *r->kill_at) {
      r->kill_at.reset();
      sendSignal(*r, SIGKILL);
      if (r->launch.remote) {
        r->client_kill_at = now + std::chrono::milliseconds(
                                      static_cast<long long>(config_.grace_seconds * 1000) + 2000);
      }
    }
    if (r->client_kill_at && now >= *r->client_kill_at) {
      r->client_kill_at.reset();
      ::kill(-r->child.pid, SIGKILL);
    }
  }
}

int Job::wait() {
  while (true) {
    // Elastic mode: nothing running is a pause (waiting for hosts) until end().
    if (runningCount() == 0 && (!config_.on_exit || stopping_)) {
      kill_deadline_.reset();
      term_deadline_.reset();
      ssh_kill_deadline_.reset();
      start_deadline_.reset();
      // Output still buffered in the pipes; a process that escaped its group
      // and holds them open gets two seconds.
      if (!drain_deadline_) drain_deadline_ = Clock::now() + std::chrono::seconds(2);
      bool open = std::any_of(ranks_.begin(), ranks_.end(), [](const auto& r) {
        return r->child.stdout_fd >= 0 || r->child.stderr_fd >= 0;
      });
      if (!open || Clock::now() >= *drain_deadline_) break;
    }
    pollOnce();
  }
  for (auto& r : ranks_) {
    readOutput(*r, true);
    r->out->finish();
    r->err->finish();
  }
  return exit_code_ < 0 ? kExitOk : exit_code_;
}

}  // namespace launcher
}  // namespace tutti
