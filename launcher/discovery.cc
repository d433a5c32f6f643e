#include "launcher/discovery.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <sstream>

#include "launcher/cli.h"
#include "launcher/job.h"
#include "launcher/rank_env.h"
#include "launcher/spawn.h"

namespace tutti {
namespace launcher {
namespace {

constexpr size_t kMaxOutputBytes = 1 << 20;

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace

Status parseDiscoveryOutput(const std::string& text, int slots_per_host,
                            std::vector<HostSlots>* out) {
  std::vector<HostSlots> hosts;
  std::stringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::string entry = trim(line.substr(0, line.find('#')));
    if (entry.empty()) continue;
    HostSlots h;
    Status st = parseHostEntry(entry, slots_per_host, &h);
    if (!st.isOk()) {
      // parseHostEntry's example is -H syntax; say what a discovery line is.
      std::string why = st.message();
      const std::string list_syntax = ": expected host:slots (for example a:2,b:2)";
      size_t at = why.find(list_syntax);
      if (at != std::string::npos) {
        why.replace(at, list_syntax.size(),
                    ": expected 'host' or 'host:slots', one per line (for example h1 or h1:4)");
      }
      return Status::invalidArgument("line " + std::to_string(number) + ": " + why);
    }
    addHostSlots(&hosts, h);
  }
  *out = hosts;
  return Status::ok();
}

Status runDiscoveryScript(const std::string& script, int slots_per_host, double timeout_seconds,
                          std::vector<HostSlots>* hosts, const std::atomic<bool>* cancel) {
  const std::string name = "--host-discovery-script " + script;
  SpawnRequest request;
  // A path, as Horovod's: "d.sh" in the working directory is ./d.sh (spawn
  // would look a name without '/' up on PATH).
  bool here = script.find('/') == std::string::npos && ::access(script.c_str(), F_OK) == 0;
  request.argv = {here ? "./" + script : script};
  request.env = envStrings(currentEnvironment());
  ChildProcess child;
  Status st = spawnProcess(request, &child);
  if (!st.isOk()) return Status(st.code(), name + ": " + st.message());

  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<long long>(timeout_seconds * 1000));
  std::string out, err;
  bool timed_out = false;
  while (child.stdout_fd >= 0 || child.stderr_fd >= 0) {
    if ((cancel != nullptr && cancel->load()) || std::chrono::steady_clock::now() >= deadline) {
      timed_out = true;
      break;
    }
    pollfd fds[2] = {{child.stdout_fd, POLLIN, 0}, {child.stderr_fd, POLLIN, 0}};
    if (::poll(fds, 2, 50) < 0 && errno != EINTR) break;
    for (auto [fd, text] :
         {std::pair<int*, std::string*>{&child.stdout_fd, &out}, {&child.stderr_fd, &err}}) {
      if (*fd < 0) continue;
      char buf[4096];
      ssize_t n = ::read(*fd, buf, sizeof(buf));
      if (n > 0 && text->size() < kMaxOutputBytes) text->append(buf, static_cast<size_t>(n));
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        ::close(*fd);
        *fd = -1;
      }
    }
  }
  // The script and whatever it started (its process group).
  if (timed_out) ::kill(-child.pid, SIGKILL);
  for (int fd : {child.stdout_fd, child.stderr_fd}) {
    if (fd >= 0) ::close(fd);
  }
  int status = 0;
  while (::waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string stderr_text = trim(err);
  if (stderr_text.size() > 2000) stderr_text = stderr_text.substr(0, 2000) + "...";
  std::string tail = stderr_text.empty() ? "" : " (stderr: " + stderr_text + ")";
  if (timed_out) {
    return Status::timeout(name + " did not finish within " + formatNumber(timeout_seconds) +
                           " s and was killed" + tail);
  }
  bool by_signal = WIFSIGNALED(status);
  int value = by_signal ? WTERMSIG(status) : WEXITSTATUS(status);
  if (by_signal || value != 0) {
    return Status::ioError(name + " " + describeExit(by_signal, value, false) + tail);
  }
  st = parseDiscoveryOutput(out, slots_per_host, hosts);
  if (!st.isOk()) return Status::invalidArgument(name + " printed " + st.message());
  return Status::ok();
}

std::string DiscoveryFailureLog::onResult(const Status& st, Clock::time_point now) {
  auto seconds = [&](Clock::time_point t) {
    return formatNumber(std::round(std::chrono::duration<double>(now - t).count()));
  };
  if (st.isOk()) {
    if (!failing_) return "";
    failing_ = false;
    return "elastic: host discovery works again (it failed for " + seconds(since_) + " s)";
  }
  if (failing_ && st.message() == message_) {
    if (now - logged_ < std::chrono::duration<double>(reminder_seconds_)) return "";
    logged_ = now;
    return "elastic: host discovery still failing (for " + seconds(since_) +
           " s), keeping the last list: " + message_;
  }
  if (!failing_) since_ = now;
  failing_ = true;
  message_ = st.message();
  logged_ = now;
  return "elastic: host discovery failed, keeping the last list: " + message_;
}

DiscoveryPoller::DiscoveryPoller(std::string script, int slots_per_host, double interval_seconds,
                                 double timeout_seconds)
    : script_(std::move(script)),
      slots_per_host_(slots_per_host),
      interval_seconds_(interval_seconds),
      timeout_seconds_(timeout_seconds) {}

DiscoveryPoller::~DiscoveryPoller() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DiscoveryPoller::start() {
  thread_ = std::thread([this] { loop(); });
}

bool DiscoveryPoller::take(Status* status, std::vector<HostSlots>* hosts) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!fresh_) return false;
  fresh_ = false;
  *status = status_;
  *hosts = hosts_;
  return true;
}

void DiscoveryPoller::loop() {
  auto interval = std::chrono::milliseconds(static_cast<long long>(interval_seconds_ * 1000));
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, interval, [this] { return stop_.load(); })) return;
    }
    std::vector<HostSlots> hosts;
    Status st = runDiscoveryScript(script_, slots_per_host_, timeout_seconds_, &hosts, &stop_);
    if (stop_) return;
    std::lock_guard<std::mutex> lock(mu_);
    fresh_ = true;
    status_ = st;
    hosts_ = hosts;
  }
}

}  // namespace launcher
}  // namespace tutti
