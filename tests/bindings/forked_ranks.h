#pragma once

// Helpers of the C API tests whose ranks are forked processes (the C API has
// one runtime per process): a free loopback port for the rendezvous (rank 0
// serves it), the environment tutti_init() reads, a child's check, and the
// parent's wait.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tutti.h"

// In a child: prints what failed and exits 1.
#define CHILD_CHECK(cond)                                                                        \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      std::fprintf(stderr, "rank: CHECK FAILED line %d: %s (last error: %s)\n", __LINE__, #cond, \
                   tutti_last_error());                                                          \
      _exit(1);                                                                                  \
    }                                                                                            \
  } while (0)

inline int freePort() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(s);
    return -1;
  }
  close(s);
  return ntohs(addr.sin_port);
}

// Rank `rank` of a `size`-rank job on this host, rank 0 serving the
// rendezvous on 127.0.0.1:`port`, tcp, a 10 s timeout.
inline void setForkedRankEnv(int rank, int size, int port, const char* secret) {
  unsetenv("TUTTI_ELASTIC_WORKER_ID");
  setenv("TUTTI_RANK", std::to_string(rank).c_str(), 1);
  setenv("TUTTI_SIZE", std::to_string(size).c_str(), 1);
  setenv("TUTTI_LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("TUTTI_LOCAL_SIZE", std::to_string(size).c_str(), 1);
  setenv("TUTTI_BACKEND", "tcp", 1);
  setenv("TUTTI_RENDEZVOUS_ADDR", "127.0.0.1", 1);
  setenv("TUTTI_RENDEZVOUS_PORT", std::to_string(port).c_str(), 1);
  setenv("TUTTI_RENDEZVOUS_SERVER", "rank0", 1);
  setenv("TUTTI_SECRET", secret, 1);
  setenv("TUTTI_TIMEOUT_SECONDS", "10", 1);
}

// The child's exit code, or 128 + the signal that ended it.
inline int waitChild(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Forks `size` children, each running child(rank, port) (which must _exit),
// rank 0 serving the rendezvous on a free port; returns their exit codes
// (waitChild), empty when no port or fork was to be had.
inline std::vector<int> runForkedRanks(int size, void (*child)(int rank, int port)) {
  const int port = freePort();
  if (port <= 0) return {};
  std::vector<pid_t> pids;
  for (int rank = 0; rank < size; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) child(rank, port);
    if (pid < 0) break;
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) codes.push_back(waitChild(pid));
  if (static_cast<int>(codes.size()) != size) return {};
  return codes;
}

// The completed op's message (tutti_handle_message), "" on success.
inline std::string handleMessage(tutti_handle h) {
  int status = 0;
  const size_t n = tutti_handle_message(h, &status, nullptr, 0);
  std::string text(n + 1, '\0');
  tutti_handle_message(h, &status, &text[0], text.size());
  text.resize(n);
  return text;
}
