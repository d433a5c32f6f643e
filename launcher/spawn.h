#pragma once

// Starting one child process: its own process group (so tuttirun can signal
// the rank and everything it started), stdout and stderr through pipes,
// stdin from /dev/null or from a pipe (the ssh control channel), a given
// environment. The child dies with tuttirun (PR_SET_PDEATHSIG), so even a
// SIGKILLed tuttirun leaves no rank behind.

#include <sys/types.h>

#include <string>
#include <vector>

#include "core/status.h"

namespace tutti {
namespace launcher {

struct SpawnRequest {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  std::vector<std::string> env;   // "KEY=value", the whole environment
  bool stdin_pipe = false;        // true: stdin is a pipe tuttirun writes to
  // mpirun (launcher/mpirun_watch.h): stdin and stdout stay tuttirun's own
  // (mpirun forwards stdin to rank 0), only stderr is a pipe; the child stays
  // in tuttirun's process group (a terminal's Ctrl-C reaches it, and it may
  // read the terminal); it gets SIGTERM, not SIGKILL, when tuttirun dies.
  bool mpirun = false;
};

struct ChildProcess {
  pid_t pid = -1;      // also the id of its process group (unless mpirun)
  int stdout_fd = -1;  // read ends: non-blocking, close-on-exec (-1: inherited)
  int stderr_fd = -1;
  int stdin_fd = -1;  // write end when stdin_pipe (non-blocking), else -1
};

// Starts the process. kInvalidArgument if the program cannot be executed
// ("cannot run 'foo': No such file or directory"), kIoError for pipe/fork
// failures. The caller reaps the child (waitpid) and closes the fds.
Status spawnProcess(const SpawnRequest& request, ChildProcess* child);

// Signals that tuttirun handles through its event loop: blocked in every
// thread (call before starting any thread) and unblocked again in children.
void blockJobSignals();
// The set blockJobSignals() blocks (SIGINT, SIGTERM, SIGHUP, SIGCHLD).
void jobSignalSet(sigset_t* set);

}  // namespace launcher
}  // namespace tutti
