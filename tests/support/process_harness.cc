#include "tests/support/process_harness.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "rendezvous/rendezvous_server.h"
#include "tests/support/op_checks.h"

namespace tutti {
namespace test {

using Clock = std::chrono::steady_clock;

void ProcessRank::signalReady() {
  const unsigned char byte = static_cast<unsigned char>(rank_);
  ssize_t written;
  do {
    written = ::write(ready_fd_, &byte, 1);
  } while (written < 0 && errno == EINTR);
}

bool ProcessRank::check(bool ok, const std::string& what) {
  if (!ok) {
    failed_ = true;
    std::fprintf(stderr, "rank %d: CHECK FAILED: %s\n", rank_, what.c_str());
    std::fflush(stderr);
  }
  return ok;
}

std::string ProcessResult::describe() const {
  std::ostringstream out;
  out << "rank " << rank << ": ";
  if (timed_out) out << "did not exit before the deadline; ";
  if (exited) {
    out << "exit " << exit_code;
  } else if (term_signal != 0) {
    out << "signal " << term_signal;
  } else {
    out << "no status";
  }
  if (seconds_after_kill >= 0) out << " (" << seconds_after_kill << " s after the kill)";
  out << "\n--- stderr of rank " << rank << " ---\n" << stderr_text << "--- end ---";
  return out.str();
}

namespace {

// The rendezvous port the parent writes to `port_fd` once its server runs;
// -1 if the parent closed the pipe first.
int readPort(int port_fd) {
  int port = -1;
  size_t got = 0;
  auto* bytes = reinterpret_cast<unsigned char*>(&port);
  while (got < sizeof(port)) {
    const ssize_t n = ::read(port_fd, bytes + got, sizeof(port) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    got += static_cast<size_t>(n);
  }
  return port;
}

[[noreturn]] void childMain(int rank, int size, int port_fd, const std::string& secret,
                            const std::string& stderr_path, int ready_fd, const ProcessBody& body,
                            const ClusterOptions& options, const ProcessPlan& plan) {
  const int fd = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd >= 0) {
    ::dup2(fd, STDERR_FILENO);
    ::close(fd);
  }
  const int port = readPort(port_fd);
  ::close(port_fd);
  if (port <= 0) {
    std::fprintf(stderr, "rank %d: no rendezvous port from the test process\n", rank);
    std::fflush(stderr);
    ::_exit(5);
  }
  int code = 0;
  try {
    ProcessRank self(rank, size, ready_fd);
    std::unique_ptr<Runtime> rt;
    Status created = Runtime::create(makeRankSettings(rank, size, port, secret, options), &rt);
    if (!created.isOk() || rt == nullptr) {
      std::fprintf(stderr, "rank %d: Runtime::create failed: %s\n", rank,
                   created.toString().c_str());
      code = 2;
    } else {
      body(*rt, self);
      Status shut = rt->shutdown();
      if (!shut.isOk()) {
        std::fprintf(stderr, "rank %d: shutdown() returned %s\n", rank, shut.toString().c_str());
        if (plan.require_clean_shutdown) code = 3;
      }
      rt.reset();
      if (self.failed()) code = 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d threw: %s\n", rank, e.what());
    code = 4;
  } catch (...) {
    std::fprintf(stderr, "rank %d threw a non-std exception\n", rank);
    code = 4;
  }
  std::fflush(stderr);
  // _exit: the parent's objects (gtest, the rendezvous server) were copied by
  // fork() and must not be destroyed here.
  ::_exit(code);
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

double secondsBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// Reaps the ranks that exited into `results`; pids[r] = -1 once reaped.
// Returns how many were reaped. `killed_at`: when the plan's kill happened
// (nullptr: not yet).
int reapExited(std::vector<pid_t>& pids, const Clock::time_point* killed_at,
               std::vector<ProcessResult>& results) {
  int reaped = 0;
  for (size_t r = 0; r < pids.size(); ++r) {
    if (pids[r] <= 0) continue;
    int status = 0;
    if (::waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
    results[r].exited = WIFEXITED(status);
    results[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    results[r].term_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    if (killed_at != nullptr)
      results[r].seconds_after_kill = secondsBetween(*killed_at, Clock::now());
    pids[r] = -1;
    ++reaped;
  }
  return reaped;
}

// Past the plan's deadline: SIGKILLs and reaps every rank still running.
int killAll(std::vector<pid_t>& pids, std::vector<ProcessResult>& results) {
  int killed = 0;
  for (size_t r = 0; r < pids.size(); ++r) {
    if (pids[r] <= 0) continue;
    ::kill(pids[r], SIGKILL);
    int status = 0;
    ::waitpid(pids[r], &status, 0);
    results[r].timed_out = true;
    results[r].term_signal = SIGKILL;
    pids[r] = -1;
    ++killed;
  }
  return killed;
}

// Watches the ranks until every one has exited: reads their ready bytes from
// `ready_fd`, kills plan.kill_rank once the awaited ranks are ready (after
// plan.kill_delay_seconds), and kills everything past plan.deadline_seconds.
void superviseRanks(std::vector<pid_t>& pids, int ready_fd, const ProcessPlan& plan,
                    std::vector<ProcessResult>& results) {
  const int size = static_cast<int>(pids.size());
  std::vector<int> awaited = plan.kill_after_ready;
  if (awaited.empty()) {
    for (int r = 0; r < size; ++r) awaited.push_back(r);
  }
  std::vector<bool> ready(size, false);
  bool all_ready = false;
  bool killed = false;
  Clock::time_point ready_at, killed_at;
  const auto start = Clock::now();
  int running = 0;
  for (pid_t pid : pids) running += pid > 0 ? 1 : 0;

  while (running > 0) {
    unsigned char buffer[64];
    ssize_t n;
    while ((n = ::read(ready_fd, buffer, sizeof(buffer))) > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        if (buffer[i] < size) ready[buffer[i]] = true;
      }
    }
    const auto now = Clock::now();
    if (!all_ready &&
        std::all_of(awaited.begin(), awaited.end(), [&](int r) { return ready[r]; })) {
      all_ready = true;
      ready_at = now;
    }
    if (plan.kill_rank >= 0 && !killed && all_ready &&
        secondsBetween(ready_at, now) >= plan.kill_delay_seconds) {
      ::kill(pids[plan.kill_rank], SIGKILL);
      killed = true;
      killed_at = now;
    }
    running -= reapExited(pids, killed ? &killed_at : nullptr, results);
    if (running > 0 && secondsBetween(start, now) > plan.deadline_seconds) {
      running -= killAll(pids, results);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

std::vector<ProcessResult> runProcessRanks(int size, const ProcessBody& body,
                                           const ClusterOptions& options, const ProcessPlan& plan) {
  std::vector<ProcessResult> results(size);
  const std::string secret = randomSecret();
  char dir_template[] = "/tmp/tutti_cases_XXXXXX";
  const char* dir = ::mkdtemp(dir_template);
  EXPECT_NE(dir, nullptr) << "mkdtemp";
  if (dir == nullptr) return results;
  int ready_pipe[2];
  EXPECT_EQ(::pipe(ready_pipe), 0) << "pipe";
  ::fcntl(ready_pipe[0], F_SETFL, O_NONBLOCK);

  // The ranks are forked before the rendezvous server starts its thread: a
  // child of a multi-threaded process may inherit a lock (the sanitizers'
  // allocators, Asio's) that another thread held at the fork and hang on it
  // for good. Each child waits for the server's port on a pipe of its own.
  std::vector<pid_t> pids(size, -1);
  std::vector<int> port_fds(size, -1);
  std::vector<std::string> stderr_paths(size);
  std::fflush(stdout);
  std::fflush(stderr);
  for (int r = 0; r < size; ++r) {
    results[r].rank = r;
    stderr_paths[r] = std::string(dir) + "/rank" + std::to_string(r) + ".stderr";
    int port_pipe[2];
    EXPECT_EQ(::pipe(port_pipe), 0) << "pipe";
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(ready_pipe[0]);
      ::close(port_pipe[1]);
      for (int fd : port_fds) {
        if (fd >= 0) ::close(fd);
      }
      childMain(r, size, port_pipe[0], secret, stderr_paths[r], ready_pipe[1], body, options, plan);
    }
    EXPECT_GT(pid, 0) << "fork of rank " << r;
    ::close(port_pipe[0]);
    port_fds[r] = port_pipe[1];
    pids[r] = pid;
  }
  std::unique_ptr<RendezvousServer> server;
  Status started = RendezvousServer::start("127.0.0.1", 0, secret, &server);
  EXPECT_TRUE(IsOk(started)) << "RendezvousServer::start";
  const int port = started.isOk() ? server->port() : -1;
  for (int r = 0; r < size; ++r) {
    if (started.isOk() && pids[r] > 0 &&
        ::write(port_fds[r], &port, sizeof(port)) != static_cast<ssize_t>(sizeof(port))) {
      ADD_FAILURE() << "could not pass the rendezvous port to rank " << r;
    }
    ::close(port_fds[r]);  // a rank that got no port exits with code 5
  }
  ::close(ready_pipe[1]);
  superviseRanks(pids, ready_pipe[0], plan, results);
  ::close(ready_pipe[0]);
  for (int r = 0; r < size; ++r) {
    results[r].stderr_text = readFile(stderr_paths[r]);
    ::unlink(stderr_paths[r].c_str());
  }
  ::rmdir(dir);
  if (server) server->stop();
  return results;
}

}  // namespace test
}  // namespace tutti
