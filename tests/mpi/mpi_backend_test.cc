// The mpi backend's own tests, run in every process of `mpirun -np N`:
// placement from MPI, backend selection, the barrier's ordering (docs/cases.md 15,
// measured in time since the ranks share no memory), the chunked paths for
// counts beyond one MPI call (reached with a tiny chunk size), the control
// channel and the close notice.

#include "ops/mpi/mpi_backend.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "ops/mpi/mpi_transport.h"
#include "tests/support/host_tensor.h"
#include "tests/support/op_checks.h"
#include "tests/support/reduce_values.h"
#include "tests/support/thread_harness.h"

namespace tutti {
namespace test {
namespace {

using Clock = std::chrono::steady_clock;

Settings mpiSettings() {
  Settings s;
  EXPECT_TRUE(IsOk(loadSettings(processEnv(), &s)));
  return s;
}

TEST(MpiSettingsTest, AutoPicksMpiUnderMpirunAndTakesItsPlacement) {
  Settings s;
  ASSERT_TRUE(IsOk(loadSettings(mapEnv({{"OMPI_COMM_WORLD_SIZE", "4"},
                                        {"OMPI_COMM_WORLD_RANK", "2"},
                                        {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}),
                                &s)));
  EXPECT_EQ(s.backend, "mpi");
  EXPECT_EQ(s.rank, 2);
  EXPECT_EQ(s.size, 4);
  EXPECT_EQ(s.local_rank, 0);
  EXPECT_EQ(s.local_size, 2);  // and no secret needed
  ASSERT_TRUE(IsOk(loadSettings(mapEnv({}), &s)));
  EXPECT_EQ(s.backend, "tcp");
  ASSERT_TRUE(
      IsOk(loadSettings(mapEnv({{"OMPI_COMM_WORLD_SIZE", "1"}, {"TUTTI_BACKEND", "tcp"}}), &s)));
  EXPECT_EQ(s.backend, "tcp") << "an explicit TUTTI_BACKEND wins";
  Status st = loadSettings(mapEnv({{"TUTTI_BACKEND", "gloo"}}), &s);
  EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument));
  EXPECT_TRUE(ContainsAll(st.message(), {"TUTTI_BACKEND=gloo", "auto,tcp,mpi,nccl"}));
}

TEST(MpiPlacementTest, RankSizeLocalAndCrossComeFromMpi) {
  const Settings s = mpiSettings();
  std::unique_ptr<MpiTransport> t;
  ASSERT_TRUE(IsOk(MpiTransport::connect(s, &t)));
  const JobPlacement& p = t->placement();
  EXPECT_EQ(p.rank, s.rank);
  EXPECT_EQ(p.size, s.size);
  // mpirun started every rank of this test on this host.
  EXPECT_EQ(p.local_rank, p.rank);
  EXPECT_EQ(p.local_size, p.size);
  EXPECT_EQ(p.cross_rank, 0);
  EXPECT_EQ(p.cross_size, 1);
  std::unique_ptr<MpiTransport> second;
  Status st = MpiTransport::connect(s, &second);
  EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument));
  EXPECT_TRUE(ContainsAll(st.message(), {"one at a time"}));
}

TEST(MpiPlacementTest, SettingsThatContradictMpiFailOnEveryRank) {
  Settings s = mpiSettings();
  if (s.size == 1) GTEST_SKIP() << "needs two ranks";
  s.rank = (s.rank + 1) % s.size;
  std::unique_ptr<MpiTransport> t;
  Status st = MpiTransport::connect(s, &t);
  EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument));
  EXPECT_TRUE(ContainsAll(st.message(), {"MPI_COMM_WORLD says rank"}));
}

TEST(MpiTransportTest, ControlChannelDataAndCloseNotice) {
  const Settings s = mpiSettings();
  std::unique_ptr<MpiTransport> t;
  ASSERT_TRUE(IsOk(MpiTransport::connect(s, &t)));
  const int rank = t->rank(), size = t->size();
  // Data: a ring exchange of 100,003 bytes.
  if (size > 1) {
    std::vector<uint8_t> out(100003), in(out.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7 + rank);
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    auto r = t->postRecv(prev, in.data(), in.size());
    t->postSend(next, out.data(), out.size());
    ASSERT_TRUE(IsOk(t->wait(r)));
    ASSERT_TRUE(IsOk(t->waitAll()));
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(in[i], static_cast<uint8_t>(i * 7 + prev)) << "byte " << i;
    }
  }
  // Control: every worker says hello to rank 0, rank 0 answers each.
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  std::vector<ControlMessage> got;
  if (rank == 0) {
    std::vector<bool> seen(size, false);
    int count = 0;
    while (count < size - 1 && Clock::now() < deadline) {
      ASSERT_TRUE(IsOk(t->pollControl(deadline, &got)));
      for (const ControlMessage& m : got) {
        EXPECT_EQ(m.bytes, std::vector<uint8_t>(1000 * m.from_rank, uint8_t(m.from_rank)));
        if (!seen[m.from_rank]) ++count;
        seen[m.from_rank] = true;
        ASSERT_TRUE(IsOk(t->sendControl(m.from_rank, {42})));
      }
    }
    EXPECT_EQ(count, size - 1);
    // A wake from another thread ends a wait at once.
    std::thread waker([&] { t->wake(); });
    const auto before = Clock::now();
    EXPECT_TRUE(IsOk(t->pollControl(Clock::now() + std::chrono::seconds(10), &got)));
    EXPECT_LT(Clock::now() - before, std::chrono::seconds(5));
    waker.join();
    t.reset();  // sends the close notices
  } else {
    ASSERT_TRUE(IsOk(t->sendControl(0, std::vector<uint8_t>(1000 * rank, uint8_t(rank)))));
    while (got.empty() && Clock::now() < deadline)
      ASSERT_TRUE(IsOk(t->pollControl(deadline, &got)));
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].from_rank, 0);
    EXPECT_EQ(got[0].bytes, std::vector<uint8_t>{42});
    // Rank 0 hangs up: the next polls fail with kPeerLost naming it.
    Status st;
    while (st.isOk() && Clock::now() < deadline) st = t->pollControl(deadline, &got);
    EXPECT_TRUE(HasCode(st, StatusCode::kPeerLost));
    EXPECT_TRUE(ContainsAll(st.message(), {"rank 0 closed"}));
    EXPECT_TRUE(HasCode(t->sendControl(0, {1}), StatusCode::kPeerLost)) << "broken stays broken";
  }
}

// Every collective with a 24-byte chunk: the chunked and the fallback paths
// of counts beyond one MPI call.
TEST(MpiBackendTest, ChunkedPathsGiveTheSameResults) {
  const Settings s = mpiSettings();
  std::unique_ptr<MpiTransport> t;
  ASSERT_TRUE(IsOk(MpiTransport::connect(s, &t)));
  MpiBackend backend(*t, 24);
  const int rank = t->rank(), size = t->size();
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                         DataType::kInt64, DataType::kBool}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kProduct}) {
      SCOPED_TRACE(std::string(dataTypeName(dtype)) + " " + reduceOpName(op));
      HostTensor buf(dtype, {101});
      buf.fill([&](int64_t i) { return reduceInput(dtype, op, i, rank, size); });
      ASSERT_TRUE(IsOk(backend.allreduce(buf.data(), 101, dtype, op)));
      EXPECT_TRUE(
          elementsMatch(buf, [&](int64_t i) { return reduceExpected(dtype, op, i, size); }));
      // Reducescatter: rank r gets elements [offset_r, offset_r + r + 3).
      std::vector<size_t> counts(size);
      size_t total = 0, offset = 0;
      for (int r = 0; r < size; ++r) {
        counts[r] = static_cast<size_t>(r + 3);
        if (r < rank) offset += counts[r];
        total += counts[r];
      }
      HostTensor in(dtype, {static_cast<int64_t>(total)});
      HostTensor out(dtype, {static_cast<int64_t>(counts[rank])});
      in.fill([&](int64_t i) { return reduceInput(dtype, op, i, rank, size); });
      ASSERT_TRUE(IsOk(backend.reducescatter(in.data(), out.data(), counts, dtype, op)));
      EXPECT_TRUE(elementsMatch(
          out, [&](int64_t i) { return reduceExpected(dtype, op, i + int64_t(offset), size); }));
    }
  }
  // Allgatherv and alltoallv: rank r's bytes are r + 10·k.
  std::vector<size_t> bytes(size);
  for (int r = 0; r < size; ++r) bytes[r] = static_cast<size_t>(37 * r + 5);
  std::vector<uint8_t> mine(bytes[rank], uint8_t(rank)), all;
  for (int r = 0; r < size; ++r) all.insert(all.end(), bytes[r], uint8_t(r));
  std::vector<uint8_t> gathered(all.size());
  ASSERT_TRUE(IsOk(backend.allgatherv(mine.data(), gathered.data(), bytes)));
  EXPECT_EQ(gathered, all);
  std::vector<size_t> send(size), recv(size);
  std::vector<uint8_t> send_buf, expected;
  for (int p = 0; p < size; ++p) {
    send[p] = static_cast<size_t>(30 + rank + p);
    recv[p] = static_cast<size_t>(30 + p + rank);
    send_buf.insert(send_buf.end(), send[p], uint8_t(rank * 16 + p));
    expected.insert(expected.end(), recv[p], uint8_t(p * 16 + rank));
  }
  std::vector<uint8_t> received(expected.size());
  ASSERT_TRUE(IsOk(backend.alltoallv(send_buf.data(), send, received.data(), recv)));
  EXPECT_EQ(received, expected);
  for (int root = 0; root < size; ++root) {
    std::vector<uint8_t> b(1000, uint8_t(rank == root ? 200 + root : 0));
    ASSERT_TRUE(IsOk(backend.broadcast(b.data(), b.size(), root)));
    EXPECT_EQ(b, std::vector<uint8_t>(1000, uint8_t(200 + root))) << "root " << root;
  }
  ASSERT_TRUE(IsOk(backend.barrier()));
}

// docs/cases.md 15 without shared memory: rank r enters the barrier 40·r ms
// late; no rank may leave it before the last one entered. The ranks are
// processes of one host, so steady_clock (CLOCK_MONOTONIC) is one clock for
// all of them: each rank's exit is compared with the latest entry (an int64
// max allreduce of the entry times), not with an assumed start skew.
TEST(MpiBarrierTest, ReturnsOnlyAfterEveryRankEntered) {
  const int size = mpiSettings().size;
  runThreadRanks(size, [size](Runtime& rt) {
    auto barrier = [&] { return runOpStatus(rt, [&](Handle* h) { return rt.barrier(h); }); };
    auto nanos = [] {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count();
    };
    for (int round = 0; round < 2; ++round) {
      ASSERT_TRUE(IsOk(barrier()));
      const int late = round == 0 ? rt.rank() : size - 1 - rt.rank();
      std::this_thread::sleep_for(std::chrono::milliseconds(40 * late));
      const int64_t entered = nanos();
      ASSERT_TRUE(IsOk(barrier()));
      const int64_t left = nanos();
      HostTensor last_entry(DataType::kInt64, {1});
      std::memcpy(last_entry.data(), &entered, sizeof(entered));
      OpOptions opts = named("last_entry");
      opts.reduce_op = ReduceOp::kMax;
      ASSERT_TRUE(IsOk(runOpStatus(rt, [&](Handle* h) {
        return rt.allreduce(last_entry.view(), last_entry.view(), opts, h);
      })));
      int64_t latest = 0;
      std::memcpy(&latest, last_entry.data(), sizeof(latest));
      EXPECT_GE(left, latest) << "round " << round << ": left the barrier "
                              << (latest - left) / 1000 << " us before the last rank entered";
    }
  });
}

// docs/cases.md 23 on a fixed MPI world: the same process creates and shuts down a
// Runtime three times (MPI is initialised once and finalised at exit).
TEST(MpiLifecycleTest, InitShutdownInitThreeTimes) {
  const int size = mpiSettings().size;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("runtime " + std::to_string(round));
    runThreadRanks(size, [size, round](Runtime& rt) {
      EXPECT_EQ(rt.size(), size);
      HostTensor t(DataType::kInt32, {17});
      t.fill([&](int64_t i) { return i + rt.rank() + round; });
      ASSERT_TRUE(IsOk(runOpStatus(
          rt, [&](Handle* h) { return rt.allreduce(t.view(), t.view(), named("cycle"), h); })));
      EXPECT_TRUE(elementsMatch(
          t, [&](int64_t i) { return size * (i + round) + size * (size - 1) / 2.0; }));
    });
  }
}

}  // namespace
}  // namespace test
}  // namespace tutti
