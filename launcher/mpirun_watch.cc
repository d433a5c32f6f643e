#include "launcher/mpirun_watch.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include "core/mpi_exit_notices.h"
#include "launcher/cli.h"
#include "launcher/output.h"
#include "launcher/spawn.h"

extern char** environ;

namespace tutti {
namespace launcher {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxLine = 64 * 1024;

void say(const std::string& text) {
  std::string line = "tuttirun: " + text + "\n";
  writeAll(2, line.data(), line.size());
}

Clock::time_point after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

int msUntil(const std::optional<Clock::time_point>& t) {
  if (!t) return -1;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*t - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(ms + 1, 0, 60000));
}

int exitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitRankFailed;
}

// The state of one mpirun.
class Watch {
 public:
  Watch(const MpirunWatch& config, ChildProcess child, int signal_fd)
      : config_(config), child_(child), signal_fd_(signal_fd) {}
  int run();

 private:
  void readStderr();
  void onSignals();
  void onDeadlines();

  const MpirunWatch config_;
  ChildProcess child_;
  int signal_fd_;
  FinalizeNoticeCounter notices_;
  std::optional<int> exit_code_;     // mpirun's, once reaped
  std::optional<int> stopped_with_;  // the ranks' status, when tuttirun stopped mpirun
  std::optional<Clock::time_point> term_at_, kill_at_;
  std::string term_why_;  // what term_at_ waits for
  int term_status_ = 0;   // tuttirun's exit code if it stops mpirun
  bool stopping_ = false;
};

int Watch::run() {
  while (!exit_code_) {
    pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {child_.stderr_fd, POLLIN, 0}};
    const int a = msUntil(term_at_), b = msUntil(kill_at_);
    const int timeout = a < 0 ? b : (b < 0 ? a : std::min(a, b));
    const int n = ::poll(fds, child_.stderr_fd >= 0 ? 2 : 1, timeout);
    if (n < 0 && errno != EINTR) {
      say(std::string("poll failed: ") + std::strerror(errno));
      break;
    }
    if (n > 0 && fds[1].revents != 0) readStderr();
    if (n > 0 && fds[0].revents != 0) onSignals();
    int status = 0;
    if (::waitpid(child_.pid, &status, WNOHANG) == child_.pid) exit_code_ = exitCodeOf(status);
    if (!exit_code_) onDeadlines();
  }
  // What mpirun wrote last (bounded: a daemon's ssh may still hold the pipe).
  const auto until = after(1);
  while (child_.stderr_fd >= 0 && Clock::now() < until) {
    pollfd fd = {child_.stderr_fd, POLLIN, 0};
    if (::poll(&fd, 1, msUntil(until)) <= 0) break;
    readStderr();
  }
  if (child_.stderr_fd >= 0) ::close(child_.stderr_fd);
  if (!exit_code_) {
    ::kill(child_.pid, SIGKILL);
    int status = 0;
    ::waitpid(child_.pid, &status, 0);
    return kExitRankFailed;
  }
  return stopped_with_ ? *stopped_with_ : *exit_code_;
}

void Watch::readStderr() {
  char buf[65536];
  const ssize_t n = ::read(child_.stderr_fd, buf, sizeof(buf));
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    ::close(child_.stderr_fd);
    child_.stderr_fd = -1;
    return;
  }
  if (n < 0) return;
  writeAll(2, buf, static_cast<size_t>(n));
  const int before = notices_.ranks();
  const bool aborting = notices_.abortSeen();
  notices_.feed(buf, static_cast<size_t>(n));
  if (stopping_) return;
  if (!aborting && notices_.abortSeen()) {
    term_at_ = after(notices_.abortGraceSeconds() + config_.abort_margin_seconds);
    term_why_ =
        "an MPI wait timed out and the job is ending with MPI_Abort (see the ranks' errors)";
    term_status_ = kExitRankFailed;
  } else if (config_.np > 0 && before < config_.np && notices_.ranks() >= config_.np &&
             !notices_.abortSeen()) {
    term_at_ = after(config_.exit_wait_seconds);
    term_why_ = "every rank left without finishing MPI_Finalize (see their warnings)";
    term_status_ = notices_.exitStatus();
  }
}

void Watch::onSignals() {
  signalfd_siginfo si;
  while (::read(signal_fd_, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
    const int sig = static_cast<int>(si.ssi_signo);
    if (sig == SIGCHLD) continue;
    // A terminal's signal reached mpirun too (same process group).
    if (si.ssi_code == SI_KERNEL) continue;
    ::kill(child_.pid, sig);
  }
}

void Watch::onDeadlines() {
  const auto now = Clock::now();
  if (term_at_ && now >= *term_at_) {
    term_at_.reset();
    say(term_why_ + ", and mpirun is still running: stopping it (SIGTERM, then SIGKILL after " +
        std::to_string(config_.grace_seconds).substr(0, 4) + " s)");
    stopping_ = true;
    stopped_with_ = term_status_;
    ::kill(child_.pid, SIGCONT);
    ::kill(child_.pid, SIGTERM);
    kill_at_ = after(config_.grace_seconds);
  }
  if (kill_at_ && now >= *kill_at_) {
    kill_at_.reset();
    say("mpirun still running: sending SIGKILL");
    ::kill(child_.pid, SIGKILL);
  }
}

}  // namespace

void FinalizeNoticeCounter::feed(const char* data, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      line(pending_);
      pending_.clear();
    } else if (pending_.size() < kMaxLine) {
      pending_.push_back(data[i]);
    }
  }
}

void FinalizeNoticeCounter::line(const std::string& text) {
  double grace = 0;
  if (!abort_seen_ && parseMpiAbortNotice(text, &grace)) {
    abort_seen_ = true;
    abort_grace_seconds_ = grace;
  }
  int rank = -1, status = 0;
  if (!parseFinalizeGiveUpNotice(text, &rank, &status)) return;
  if (std::find(ranks_.begin(), ranks_.end(), rank) != ranks_.end()) return;
  ranks_.push_back(rank);
  if (exit_status_ == 0) exit_status_ = status;
}

int runMpirun(const std::vector<std::string>& argv, const MpirunWatch& watch) {
  sigset_t set;
  jobSignalSet(&set);
  const int signal_fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd < 0) {
    say(std::string("--mpi: signalfd: ") + std::strerror(errno));
    return kExitStartFailed;
  }
  SpawnRequest request;
  request.argv = argv;
  for (char** e = environ; *e != nullptr; ++e) request.env.push_back(*e);
  request.mpirun = true;
  ChildProcess child;
  const Status st = spawnProcess(request, &child);
  if (!st.isOk()) {
    ::close(signal_fd);
    const bool missing = st.message().find(std::strerror(ENOENT)) != std::string::npos;
    say("--mpi: " + st.message() +
        (missing ? " (not in PATH; install Open MPI: apt-get install openmpi-bin)" : ""));
    return kExitStartFailed;
  }
  const int code = Watch(watch, child, signal_fd).run();
  ::close(signal_fd);
  return code;
}

}  // namespace launcher
}  // namespace tutti
