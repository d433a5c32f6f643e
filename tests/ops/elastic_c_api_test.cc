// The elastic functions of the C API (bindings/c/tutti.h) as built into
// libtutti: each worker is a forked process (the C API has one runtime per
// process) with the environment tuttirun's elastic driver would give it; the
// test plays the driver.

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bindings/c/tutti.h"
#include "tests/ops/elastic_test_driver.h"

namespace tutti {
namespace {

using test::ElasticTestDriver;

// In a child: prints what failed and exits 1.
#define CHILD_CHECK(cond)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::fprintf(stderr, "worker: CHECK FAILED line %d: %s (last error: %s)\n", __LINE__, #cond, \
                   tutti_last_error());                                                            \
      _exit(1);                                                                                    \
    }                                                                                              \
  } while (0)

void setWorkerEnv(const ElasticTestDriver& driver, int worker_id) {
  setenv("TUTTI_ELASTIC_WORKER_ID", std::to_string(worker_id).c_str(), 1);
  setenv("TUTTI_RENDEZVOUS_ADDR", "127.0.0.1", 1);
  setenv("TUTTI_RENDEZVOUS_PORT", std::to_string(driver.port()).c_str(), 1);
  setenv("TUTTI_RENDEZVOUS_SERVER", "external", 1);
  setenv("TUTTI_SECRET", driver.secret().c_str(), 1);
  setenv("TUTTI_TIMEOUT_SECONDS", "10", 1);
  setenv("TUTTI_ELASTIC_TIMEOUT_SECONDS", "20", 1);
}

// Allreduce (sum) of int64 x[i] = (worker_id + 1) * i; checks the sum.
void childAllreduce(int worker_id, int64_t total_ids_plus_one) {
  constexpr int64_t kCount = 777;
  std::vector<int64_t> x(kCount), y(kCount, -1);
  for (int64_t i = 0; i < kCount; ++i) x[i] = (worker_id + 1) * i;
  const int64_t shape[] = {kCount};
  tutti_tensor in{x.data(), TUTTI_INT64, 1, shape, TUTTI_DEVICE_CPU, -1};
  tutti_tensor out{y.data(), TUTTI_INT64, 1, shape, TUTTI_DEVICE_CPU, -1};
  tutti_handle h = 0;
  CHILD_CHECK(tutti_allreduce_async(&in, &out, "x", TUTTI_SUM, 1.0, 1.0, &h) == TUTTI_OK);
  CHILD_CHECK(tutti_wait(h, 30) == TUTTI_OK);
  CHILD_CHECK(tutti_release(h) == TUTTI_OK);
  for (int64_t i = 0; i < kCount; ++i) CHILD_CHECK(y[i] == total_ids_plus_one * i);
}

int hostsUpdated() {
  int updated = -1;
  CHILD_CHECK(tutti_elastic_hosts_updated(&updated) == TUTTI_OK);
  return updated;
}

// Generation 0: workers {0, 1}; generation 1: the same workers, ranks swapped.
[[noreturn]] void childLifecycle(const ElasticTestDriver& driver, int worker_id, int to_parent,
                                 int from_parent) {
  setWorkerEnv(driver, worker_id);
  CHILD_CHECK(tutti_elastic_enabled() == 1);
  CHILD_CHECK(tutti_elastic_generation() == -1);
  CHILD_CHECK(tutti_init() == TUTTI_OK);
  CHILD_CHECK(tutti_elastic_generation() == 0);
  CHILD_CHECK(tutti_rank() == worker_id);
  CHILD_CHECK(tutti_size() == 2);
  childAllreduce(worker_id, 1 + 2);
  CHILD_CHECK(hostsUpdated() == 0);
  CHILD_CHECK(tutti_elastic_join() == TUTTI_ERR_INVALID_ARGUMENT);
  char byte = 'x';
  CHILD_CHECK(write(to_parent, &byte, 1) == 1);
  CHILD_CHECK(read(from_parent, &byte, 1) == 1);  // the driver formed generation 1
  CHILD_CHECK(hostsUpdated() == 1);
  CHILD_CHECK(tutti_elastic_leave() == TUTTI_OK);
  CHILD_CHECK(tutti_is_initialized() == 0);
  CHILD_CHECK(tutti_elastic_generation() == -1);
  CHILD_CHECK(tutti_elastic_join() == TUTTI_OK);
  CHILD_CHECK(tutti_elastic_generation() == 1);
  CHILD_CHECK(tutti_rank() == 1 - worker_id);
  childAllreduce(worker_id, 1 + 2);
  CHILD_CHECK(hostsUpdated() == 0);
  CHILD_CHECK(tutti_elastic_leave() == TUTTI_OK);
  _exit(0);
}

// One byte from fd within timeout_ms (a child that died never writes it).
bool readByte(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  char byte = 0;
  return poll(&p, 1, timeout_ms) == 1 && read(fd, &byte, 1) == 1;
}

int waitChild(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(ElasticCApi, InitJoinsHostsUpdatedLeaveJoin) {
  ElasticTestDriver driver;
  driver.publish(0, ElasticTestDriver::oneHost({0, 1}));
  pid_t pids[2];
  int up[2][2], down[2][2];
  for (int w = 0; w < 2; ++w) {
    ASSERT_EQ(pipe(up[w]), 0);
    ASSERT_EQ(pipe(down[w]), 0);
    pids[w] = fork();
    ASSERT_GE(pids[w], 0);
    if (pids[w] == 0) childLifecycle(driver, w, up[w][1], down[w][0]);
  }
  char byte = 0;
  for (int w = 0; w < 2; ++w) {
    EXPECT_TRUE(readByte(up[w][0], 60000)) << "worker " << w << " did not reach generation 0";
  }
  driver.publish(1, ElasticTestDriver::oneHost({1, 0}));
  for (int w = 0; w < 2; ++w) EXPECT_EQ(write(down[w][1], &byte, 1), 1);
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(waitChild(pids[w]), 0) << "worker " << w;
    for (int fd : {up[w][0], up[w][1], down[w][0], down[w][1]}) close(fd);
  }
}

TEST(ElasticCApi, InitEndsWithTheDriversMessageWhenItGivesUp) {
  ElasticTestDriver driver;
  driver.fail("reset limit 3 reached");
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setWorkerEnv(driver, 0);
    CHILD_CHECK(tutti_init() == TUTTI_ERR_SHUTDOWN);
    CHILD_CHECK(std::string(tutti_last_error()).find("reset limit 3 reached") != std::string::npos);
    CHILD_CHECK(tutti_is_initialized() == 0);
    _exit(0);
  }
  EXPECT_EQ(waitChild(pid), 0);
}

TEST(ElasticCApi, NotElastic) {
  unsetenv("TUTTI_ELASTIC_WORKER_ID");
  EXPECT_EQ(tutti_elastic_enabled(), 0);
  EXPECT_EQ(tutti_elastic_generation(), -1);
  EXPECT_EQ(tutti_elastic_join(), TUTTI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tutti_last_error()).find("TUTTI_ELASTIC_WORKER_ID"), std::string::npos);
  int updated = -1;
  EXPECT_EQ(tutti_elastic_hosts_updated(&updated), TUTTI_ERR_NOT_INITIALIZED);
  EXPECT_EQ(tutti_elastic_hosts_updated(nullptr), TUTTI_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tutti_elastic_leave(), TUTTI_OK);  // not initialised: nothing to do
  setenv("TUTTI_ELASTIC_WORKER_ID", "bad", 1);
  EXPECT_EQ(tutti_elastic_enabled(), 0);
  unsetenv("TUTTI_ELASTIC_WORKER_ID");
}

}  // namespace
}  // namespace tutti
