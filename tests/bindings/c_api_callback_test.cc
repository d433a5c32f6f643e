// tutti_handle_on_complete() and tutti_completion_write_fd() (bindings/c/tutti.h)
// as built into libtutti: the callback runs once per handle with the op's
// status, on success, on an op error and on shutdown. One-rank cases run in
// the test process; two-rank cases fork both ranks (the C API has one runtime
// per process), rank 0 serving the rendezvous.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "forked_ranks.h"
#include "single_rank_fixture.h"
#include "tutti.h"

namespace {

// What one callback saw; the test passes its address as user_data.
struct Seen {
  std::atomic<int> calls{0};
  std::atomic<int64_t> handle{-1};
  std::atomic<int> status{-1};
  std::thread::id thread;
};

void record(tutti_handle handle, int status, void* user_data) {
  Seen* seen = static_cast<Seen*>(user_data);
  seen->handle = handle;
  seen->status = status;
  seen->thread = std::this_thread::get_id();
  seen->calls.fetch_add(1);
}

// True once seen->calls reaches `calls` (the callback runs just after the
// waiters are woken, so a wait may return first), within 10 s.
bool awaitCalls(const Seen& seen, int calls) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (seen.calls.load() < calls && std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return seen.calls.load() >= calls;
}

struct Buffers {
  std::vector<float> x{1.5f, -2.0f, 3.0f};
  std::vector<float> y = std::vector<float>(3, 0.0f);
  int64_t shape[1] = {3};
  tutti_tensor in{x.data(), TUTTI_FLOAT32, 1, shape, TUTTI_DEVICE_CPU, -1};
  tutti_tensor out{y.data(), TUTTI_FLOAT32, 1, shape, TUTTI_DEVICE_CPU, -1};
};

class CApiCallback : public SingleRankCApiTest {};

TEST_F(CApiCallback, RunsOnceWithOkAndASecondCallbackIsRefused) {
  ASSERT_EQ(tutti_init(), TUTTI_OK);
  Buffers b;
  tutti_handle h = 0;
  ASSERT_EQ(tutti_allreduce_async(&b.in, &b.out, "cb.ok", TUTTI_SUM, 1.0, 1.0, &h), TUTTI_OK);
  Seen seen;
  ASSERT_EQ(tutti_handle_on_complete(h, record, &seen), TUTTI_OK);
  EXPECT_EQ(tutti_handle_on_complete(h, record, &seen), TUTTI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tutti_last_error()).find("already has a completion callback"),
            std::string::npos)
      << tutti_last_error();
  ASSERT_EQ(tutti_wait(h, 30), TUTTI_OK);
  ASSERT_TRUE(awaitCalls(seen, 1));
  EXPECT_EQ(seen.handle.load(), h);
  EXPECT_EQ(seen.status.load(), TUTTI_OK);
  EXPECT_EQ(b.y, b.x);  // one rank: the sum is the input
  EXPECT_EQ(tutti_release(h), TUTTI_OK);
  EXPECT_EQ(tutti_shutdown(), TUTTI_OK);
  EXPECT_EQ(seen.calls.load(), 1);  // not again at shutdown
}

TEST_F(CApiCallback, OnACompletedHandleRunsAtOnceOnTheCallingThread) {
  ASSERT_EQ(tutti_init(), TUTTI_OK);
  Buffers b;
  tutti_handle h = 0;
  ASSERT_EQ(tutti_allreduce_async(&b.in, &b.out, "cb.done", TUTTI_MAX, 1.0, 1.0, &h), TUTTI_OK);
  ASSERT_EQ(tutti_wait(h, 30), TUTTI_OK);
  Seen seen;
  ASSERT_EQ(tutti_handle_on_complete(h, record, &seen), TUTTI_OK);
  EXPECT_EQ(seen.calls.load(), 1);
  EXPECT_EQ(seen.thread, std::this_thread::get_id());
  EXPECT_EQ(seen.status.load(), TUTTI_OK);
  EXPECT_EQ(tutti_release(h), TUTTI_OK);
}

TEST_F(CApiCallback, WriteFdWritesOneRecordPerHandle) {
  ASSERT_EQ(tutti_init(), TUTTI_OK);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  Buffers b1, b2;
  tutti_handle h1 = 0, h2 = 0;
  ASSERT_EQ(tutti_allreduce_async(&b1.in, &b1.out, "cb.fd1", TUTTI_SUM, 1.0, 1.0, &h1), TUTTI_OK);
  ASSERT_EQ(tutti_allreduce_async(&b2.in, &b2.out, "cb.fd2", TUTTI_SUM, 2.0, 1.0, &h2), TUTTI_OK);
  void* fd = reinterpret_cast<void*>(static_cast<intptr_t>(fds[1]));
  ASSERT_EQ(tutti_handle_on_complete(h1, tutti_completion_write_fd, fd), TUTTI_OK);
  ASSERT_EQ(tutti_handle_on_complete(h2, tutti_completion_write_fd, fd), TUTTI_OK);
  std::vector<int64_t> got;
  for (int i = 0; i < 2; ++i) {
    tutti_completion_record r{};
    ASSERT_EQ(read(fds[0], &r, sizeof(r)), static_cast<ssize_t>(sizeof(r)));
    EXPECT_EQ(r.status, TUTTI_OK);
    EXPECT_EQ(r.reserved, 0);
    got.push_back(r.handle);
  }
  EXPECT_TRUE((got == std::vector<int64_t>{h1, h2}) || (got == std::vector<int64_t>{h2, h1}));
  EXPECT_EQ(b2.y, (std::vector<float>{3.0f, -4.0f, 6.0f}));  // prescale 2
  EXPECT_EQ(tutti_wait(h1, 30), TUTTI_OK);
  EXPECT_EQ(tutti_wait(h2, 30), TUTTI_OK);
  EXPECT_EQ(tutti_shutdown(), TUTTI_OK);
  ASSERT_EQ(fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
  tutti_completion_record extra{};
  EXPECT_EQ(read(fds[0], &extra, sizeof(extra)), -1);  // nothing more was written
  close(fds[0]);
  close(fds[1]);
}

TEST_F(CApiCallback, BadArgumentsAreRefused) {
  EXPECT_EQ(tutti_handle_on_complete(1, record, nullptr), TUTTI_ERR_NOT_INITIALIZED);
  ASSERT_EQ(tutti_init(), TUTTI_OK);
  EXPECT_EQ(tutti_handle_on_complete(12345, record, nullptr), TUTTI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tutti_last_error()).find("unknown handle 12345"), std::string::npos);
  Buffers b;
  tutti_handle h = 0;
  ASSERT_EQ(tutti_allreduce_async(&b.in, &b.out, "cb.null", TUTTI_SUM, 1.0, 1.0, &h), TUTTI_OK);
  EXPECT_EQ(tutti_handle_on_complete(h, nullptr, nullptr), TUTTI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tutti_last_error()).find("fn is NULL"), std::string::npos);
  ASSERT_EQ(tutti_wait(h, 30), TUTTI_OK);
  ASSERT_EQ(tutti_release(h), TUTTI_OK);
  EXPECT_EQ(tutti_handle_on_complete(h, record, nullptr), TUTTI_ERR_INVALID_ARGUMENT);
}

// ---- two ranks, forked ------------------------------------------------------------

// Reads one record within 10 s (the pipe is non-blocking); false on timeout.
bool readRecord(int fd, tutti_completion_record* r) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < limit) {
    if (read(fd, r, sizeof(*r)) == static_cast<ssize_t>(sizeof(*r))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// Rank `rank` of 2: a reduce-op mismatch fails both ranks' callbacks with
// TUTTI_ERR_MISMATCH; then rank 0 alone enqueues an op that rank 1 never
// submits, and shutdown (of either rank) runs its callback once with
// TUTTI_ERR_SHUTDOWN.
void childRank(int rank, int port) {
  setForkedRankEnv(rank, 2, port, "c-api-callback-test");
  CHILD_CHECK(tutti_init() == TUTTI_OK);
  int fds[2];
  CHILD_CHECK(pipe(fds) == 0);
  CHILD_CHECK(fcntl(fds[0], F_SETFL, O_NONBLOCK) == 0);
  void* fd = reinterpret_cast<void*>(static_cast<intptr_t>(fds[1]));
  Buffers b;
  tutti_handle h = 0;
  const int op = rank == 0 ? TUTTI_SUM : TUTTI_MAX;
  CHILD_CHECK(tutti_allreduce_async(&b.in, &b.out, "cb.mismatch", op, 1.0, 1.0, &h) == TUTTI_OK);
  CHILD_CHECK(tutti_handle_on_complete(h, tutti_completion_write_fd, fd) == TUTTI_OK);
  tutti_completion_record r{};
  CHILD_CHECK(readRecord(fds[0], &r));
  CHILD_CHECK(r.handle == h && r.status == TUTTI_ERR_MISMATCH);
  CHILD_CHECK(tutti_wait(h, 30) == TUTTI_ERR_MISMATCH);
  CHILD_CHECK(tutti_release(h) == TUTTI_OK);
  CHILD_CHECK(tutti_barrier_async(&h) == TUTTI_OK);  // both ranks past the mismatch
  CHILD_CHECK(tutti_wait(h, 30) == TUTTI_OK);
  tutti_handle pending = 0;
  if (rank == 0) {
    CHILD_CHECK(tutti_allreduce_async(&b.in, &b.out, "cb.pending", TUTTI_SUM, 1.0, 1.0, &pending) ==
                TUTTI_OK);
    CHILD_CHECK(tutti_handle_on_complete(pending, tutti_completion_write_fd, fd) == TUTTI_OK);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHILD_CHECK(read(fds[0], &r, sizeof(r)) == -1);  // still pending: nothing written
  }
  // Rank 1 shutting down would fail rank 0's pending op: wait until rank 0 looked.
  CHILD_CHECK(tutti_barrier_async(&h) == TUTTI_OK);
  CHILD_CHECK(tutti_wait(h, 30) == TUTTI_OK);
  CHILD_CHECK(tutti_shutdown() == TUTTI_OK);
  if (rank == 0) {
    CHILD_CHECK(readRecord(fds[0], &r));
    CHILD_CHECK(r.handle == pending && r.status == TUTTI_ERR_SHUTDOWN);
    CHILD_CHECK(read(fds[0], &r, sizeof(r)) == -1);  // once
  }
  _exit(0);
}

TEST(CApiCallbackTwoRanks, ErrorAndShutdownReachTheCallbackOnce) {
  EXPECT_EQ(runForkedRanks(2, childRank), (std::vector<int>{0, 0})) << "exit codes of ranks 0, 1";
}

}  // namespace
