#include "launcher/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

namespace tutti {
namespace launcher {
namespace {

void closeFd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

// In the child, between fork and exec: only async-signal-safe calls.
// in_fd/out_fd < 0: inherited. mpirun: see SpawnRequest::mpirun.
[[noreturn]] void childExec(char* const* argv, char* const* envp, int in_fd, int out_fd, int err_fd,
                            int report_fd, pid_t parent, bool mpirun) {
  if (!mpirun) ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, mpirun ? SIGTERM : SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // tuttirun died before prctl
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGQUIT}) ::signal(sig, SIG_DFL);
  if ((in_fd >= 0 && ::dup2(in_fd, 0) < 0) || (out_fd >= 0 && ::dup2(out_fd, 1) < 0) ||
      ::dup2(err_fd, 2) < 0) {
    int e = errno;
    (void)!::write(report_fd, &e, sizeof(e));
    ::_exit(127);
  }
  // Sockets of tuttirun's rendezvous server and other ranks' pipes must not
  // leak into the rank.
  if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    long max = ::sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536) max = 65536;
    for (int fd = 3; fd < max; ++fd) {
      if (fd != report_fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
  }
  ::execvpe(argv[0], argv, envp);
  int e = errno;
  (void)!::write(report_fd, &e, sizeof(e));
  ::_exit(127);
}

}  // namespace

void jobSignalSet(sigset_t* set) {
  sigemptyset(set);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
  sigaddset(set, SIGHUP);
  sigaddset(set, SIGCHLD);
}

void blockJobSignals() {
  sigset_t set;
  jobSignalSet(&set);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

Status spawnProcess(const SpawnRequest& request, ChildProcess* child) {
  if (request.argv.empty()) return Status::invalidArgument("no command to run");
  std::vector<char*> argv;
  for (const auto& a : request.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : request.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int out[2] = {-1, -1}, err[2] = {-1, -1}, in[2] = {-1, -1}, report[2] = {-1, -1};
  auto closeAll = [&] {
    for (int* p : {out, err, in, report}) {
      closeFd(&p[0]);
      closeFd(&p[1]);
    }
  };
  bool ok = (request.mpirun || ::pipe2(out, O_CLOEXEC) == 0) && ::pipe2(err, O_CLOEXEC) == 0 &&
            ::pipe2(report, O_CLOEXEC) == 0;
  if (request.mpirun) {
    // stdin and stdout inherited
  } else if (ok && request.stdin_pipe) {
    ok = ::pipe2(in, O_CLOEXEC) == 0;
  } else if (ok) {
    in[0] = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ok = in[0] >= 0;
  }
  if (!ok) {
    int e = errno;
    closeAll();
    return Status::ioError(std::string("cannot create pipes for a rank: ") + std::strerror(e));
  }
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    closeAll();
    return Status::ioError(std::string("fork failed: ") + std::strerror(e));
  }
  if (pid == 0) {
    childExec(argv.data(), envp.data(), in[0], out[1], err[1], report[1], parent, request.mpirun);
  }

  // Parent. Set the group here too, so it exists before we ever signal it.
  if (!request.mpirun) ::setpgid(pid, pid);
  closeFd(&out[1]);
  closeFd(&err[1]);
  closeFd(&in[0]);
  closeFd(&report[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(report[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  closeFd(&report[0]);
  if (n == static_cast<ssize_t>(sizeof(child_errno))) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    closeAll();
    return Status::invalidArgument("cannot run '" + request.argv[0] +
                                   "': " + std::strerror(child_errno));
  }
  for (int fd : {out[0], err[0], in[1]}) {
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  child->pid = pid;
  child->stdout_fd = out[0];
  child->stderr_fd = err[0];
  child->stdin_fd = in[1];
  return Status::ok();
}

}  // namespace launcher
}  // namespace tutti
