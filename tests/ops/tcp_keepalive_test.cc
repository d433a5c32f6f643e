// Silent host loss detection (ops/tcp/tcp_keepalive.h): the derived values,
// the options on every peer connection of a real TcpTransport (read back with
// getsockopt), healthy idle connections surviving them, and the network
// namespace in the shared-memory host identity.

#include "ops/tcp/tcp_keepalive.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "ops/tcp/shm_channel.h"
#include "ops/tcp/tcp_transport.h"
#include "rendezvous/rendezvous_client.h"
#include "rendezvous/rendezvous_server.h"

namespace tutti {
namespace {

using namespace std::chrono_literals;

TEST(TcpKeepalive, ValuesDerivedFromTheTimeout) {
  KeepaliveParams p = keepaliveFor(30);
  EXPECT_EQ(p.idle_seconds, 15);
  EXPECT_EQ(p.interval_seconds, 5);
  EXPECT_EQ(p.count, 3);
  EXPECT_EQ(p.user_timeout_ms, 30000u);
  // Silent for idle + count * interval = the timeout.
  EXPECT_EQ(p.idle_seconds + p.count * p.interval_seconds, 30);

  p = keepaliveFor(0.5);  // below the timers' one-second granularity
  EXPECT_EQ(p.idle_seconds, 1);
  EXPECT_EQ(p.interval_seconds, 1);
  EXPECT_EQ(p.user_timeout_ms, 500u);

  p = keepaliveFor(1e7);  // the setting's maximum: clamped to Linux's limits
  EXPECT_EQ(p.idle_seconds, 32767);
  EXPECT_EQ(p.interval_seconds, 32767);
  EXPECT_EQ(p.user_timeout_ms, 2147483647u);
}

int intOption(int fd, int level, int name) {
  int value = -1;
  socklen_t len = sizeof(value);
  if (getsockopt(fd, level, name, &value, &len) != 0) return -1;
  return value;
}

// This process's TCP sockets that have SO_KEEPALIVE on.
std::vector<int> keepaliveSockets() {
  std::vector<int> fds;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    int fd = std::stoi(entry.path().filename().string());
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (intOption(fd, SOL_SOCKET, SO_TYPE) != SOCK_STREAM) continue;
    if (intOption(fd, SOL_SOCKET, SO_KEEPALIVE) == 1) fds.push_back(fd);
  }
  return fds;
}

TEST(TcpKeepalive, EveryPeerConnectionHasTheOptionsAndIdleOnesSurvive) {
  const std::string secret = "keepalive-secret";
  std::unique_ptr<RendezvousServer> server;
  ASSERT_TRUE(RendezvousServer::start("127.0.0.1", 0, secret, &server).isOk());
  const std::vector<int> before = keepaliveSockets();
  constexpr double kTimeout = 1.0;
  std::unique_ptr<TcpTransport> transports[2];
  std::thread ranks[2];
  for (int r = 0; r < 2; ++r) {
    ranks[r] = std::thread([&, r] {
      Settings s;
      s.rank = r;
      s.size = 2;
      s.secret = secret;
      s.timeout_seconds = kTimeout;
      s.shm = "off";  // data over TCP too
      std::unique_ptr<RendezvousClient> client;
      Status st = RendezvousClient::connect("127.0.0.1", server->port(), secret, 5000ms, &client);
      ASSERT_TRUE(st.isOk()) << st.toString();
      st = TcpTransport::connect(s, *client, "127.0.0.1", &transports[r]);
      ASSERT_TRUE(st.isOk()) << st.toString();
    });
  }
  for (auto& t : ranks) t.join();
  ASSERT_TRUE(transports[0] && transports[1]);

  // Rank 0: accepted data + control; rank 1: connected data + control. The
  // rendezvous connections have no keepalive.
  std::vector<int> fds = keepaliveSockets();
  ASSERT_EQ(fds.size(), before.size() + 4);
  const KeepaliveParams want = keepaliveFor(kTimeout);
  for (int fd : fds) {
    if (std::find(before.begin(), before.end(), fd) != before.end()) continue;
    EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_KEEPIDLE), want.idle_seconds) << "fd " << fd;
    EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_KEEPINTVL), want.interval_seconds) << "fd " << fd;
    EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_KEEPCNT), want.count) << "fd " << fd;
    EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), 1000) << "fd " << fd;
  }

  // Idle for three timeouts (keepalive probes go out and are answered), then
  // the connections still carry data.
  std::this_thread::sleep_for(3s);
  std::vector<int32_t> sent(1000), got(1000, -1);
  for (int i = 0; i < 1000; ++i) sent[i] = i * 7 + 1;
  std::thread receiver([&] {
    auto id = transports[1]->postRecv(0, got.data(), got.size() * 4);
    Status st = transports[1]->wait(id);
    EXPECT_TRUE(st.isOk()) << st.toString();
  });
  auto id = transports[0]->postSend(1, sent.data(), sent.size() * 4);
  Status st = transports[0]->wait(id);
  EXPECT_TRUE(st.isOk()) << st.toString();
  receiver.join();
  EXPECT_EQ(got, sent);
}

TEST(ShmHostIdentity, IncludesTheNetworkNamespace) {
  const std::string mine = shmHostIdentity();
  ASSERT_FALSE(mine.empty());
  char ns[128] = {};
  ssize_t n = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
  ASSERT_GT(n, 0);
  const std::string suffix = "|" + std::string(ns, n);
  ASSERT_GE(mine.size(), suffix.size());
  EXPECT_EQ(mine.substr(mine.size() - suffix.size()), suffix) << mine;

  // A process in another network namespace (same host otherwise) has another
  // identity, so that it talks TCP, not shared memory. Needs CAP_SYS_ADMIN or
  // unprivileged user namespaces.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (unshare(CLONE_NEWNET) != 0 && unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) _exit(7);
    std::string other = shmHostIdentity();
    ssize_t w = write(fds[1], other.data(), other.size());
    _exit(w == static_cast<ssize_t>(other.size()) ? 0 : 1);
  }
  close(fds[1]);
  std::string other;
  char buf[256];
  for (ssize_t r; (r = read(fds[0], buf, sizeof(buf))) > 0;) other.append(buf, r);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 7) {
    GTEST_SKIP() << "cannot create a network namespace here";
  }
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_FALSE(other.empty());
  EXPECT_NE(other, mine);
  // The namespace part differs (the rest may too, e.g. the uid in a user
  // namespace).
  EXPECT_NE(other.substr(other.rfind('|')), mine.substr(mine.rfind('|')))
      << other << " vs " << mine;
}

}  // namespace
}  // namespace tutti
