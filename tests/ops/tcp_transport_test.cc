// TcpTransport with N ranks as threads in one process over loopback, plus
// connectBackend. A RendezvousServer on port 0 serves the store.

#include "ops/tcp/tcp_transport.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "ops/backend_registry.h"
#include "rendezvous/rendezvous_client.h"
#include "rendezvous/rendezvous_server.h"
#include "tests/support/memory_store.h"

namespace tutti {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Settings makeSettings(int rank, int size, int port, double timeout_s = 10) {
  Settings s;
  s.rank = rank;
  s.size = size;
  s.rendezvous_addr = "127.0.0.1";
  s.rendezvous_port = port;
  s.rank0_hosts_rendezvous = false;
  s.secret = "job-secret";
  s.timeout_seconds = timeout_s;
  // The suite runs both ways: TUTTI_SHM=off forces TCP between these
  // same-host ranks (default auto: shared memory).
  if (const char* shm = std::getenv("TUTTI_SHM")) s.shm = shm;
  // And with zstd frames on the TCP wire (TUTTI_COMPRESSION_ZSTD_LEVEL=1).
  if (const char* zstd = std::getenv("TUTTI_COMPRESSION_ZSTD_LEVEL")) {
    s.compression_zstd_level = std::atoi(zstd);
  }
  return s;
}

// Connects `settings.size()` ranks concurrently; returns each rank's status.
std::vector<Status> connectRanks(const std::vector<Settings>& settings,
                                 std::vector<std::unique_ptr<TcpTransport>>* out) {
  const size_t n = settings.size();
  out->clear();
  out->resize(n);
  std::vector<Status> st(n);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<RendezvousClient> client;
      st[r] = RendezvousClient::connect(settings[r].rendezvous_addr, settings[r].rendezvous_port,
                                        settings[r].secret, 5000ms, &client);
      if (!st[r].isOk()) return;
      st[r] = TcpTransport::connect(settings[r], *client, client->localAddress(), &(*out)[r]);
    });
  }
  for (auto& t : threads) t.join();
  return st;
}

class TcpTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RendezvousServer::start("127.0.0.1", 0, "job-secret", &server_).isOk());
  }

  // Connects n ranks with the default settings; fails the test on error.
  void connect(int n, double timeout_s = 10) {
    std::vector<Settings> s;
    for (int r = 0; r < n; ++r) s.push_back(makeSettings(r, n, server_->port(), timeout_s));
    auto st = connectRanks(s, &t_);
    for (int r = 0; r < n; ++r)
      ASSERT_TRUE(st[r].isOk()) << "rank " << r << ": " << st[r].toString();
  }

  // Runs fn(rank, transport) on one thread per rank.
  template <typename Fn>
  void runRanks(Fn fn) {
    std::vector<std::thread> threads;
    for (int r = 0; r < static_cast<int>(t_.size()); ++r) {
      threads.emplace_back([&, r] { fn(r, *t_[r]); });
    }
    for (auto& t : threads) t.join();
  }

  std::unique_ptr<RendezvousServer> server_;
  std::vector<std::unique_ptr<TcpTransport>> t_;
};

uint8_t pattern(int from, int to, size_t i, int msg) {
  return static_cast<uint8_t>(from * 31 + to * 7 + msg * 13 + i * 101 + (i >> 8));
}

class TcpTransportSizes : public TcpTransportTest, public ::testing::WithParamInterface<int> {};

TEST_P(TcpTransportSizes, AllPairsExchangeInPostingOrder) {
  const int n = GetParam();
  connect(n);
  const std::vector<size_t> sizes = {1, 0, 1000, 100003, 3};
  runRanks([&](int me, TcpTransport& t) {
    EXPECT_EQ(t.rank(), me);
    EXPECT_EQ(t.size(), n);
    std::map<std::pair<int, int>, std::vector<uint8_t>> out, in;
    std::vector<Transport::OpId> ids;
    for (int m = 0; m < static_cast<int>(sizes.size()); ++m) {
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        auto& o = out[{p, m}];
        o.resize(sizes[m]);
        for (size_t i = 0; i < o.size(); ++i) o[i] = pattern(me, p, i, m);
        in[{p, m}].assign(sizes[m], 0);
        ids.push_back(t.postSend(p, o.data(), o.size()));
        ids.push_back(t.postRecv(p, in[{p, m}].data(), sizes[m]));
      }
    }
    // Wait on a few individually (last first), then the rest.
    EXPECT_TRUE(t.wait(ids.back()).isOk());
    EXPECT_TRUE(t.wait(ids.front()).isOk());
    Status st = t.waitAll();
    ASSERT_TRUE(st.isOk()) << st.toString();
    for (auto& [key, buf] : in) {
      for (size_t i = 0; i < buf.size(); ++i) {
        ASSERT_EQ(buf[i], pattern(key.first, me, i, key.second))
            << "rank " << me << " from " << key.first << " msg " << key.second << " byte " << i;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, TcpTransportSizes, ::testing::Values(2, 3, 4));

TEST_F(TcpTransportTest, LargeTransfersBothWaysAtOnce) {
  connect(2);
  const size_t kBytes = 64u << 20;
  runRanks([&](int me, TcpTransport& t) {
    int peer = 1 - me;
    std::vector<uint8_t> out(kBytes), in(kBytes, 0);
    for (size_t i = 0; i < kBytes; i += 4096) out[i] = static_cast<uint8_t>(me + i / 4096);
    out[kBytes - 1] = static_cast<uint8_t>(0x5A + me);
    auto s = t.postSend(peer, out.data(), kBytes);
    auto r = t.postRecv(peer, in.data(), kBytes);
    ASSERT_TRUE(t.wait(r).isOk());
    ASSERT_TRUE(t.wait(s).isOk());
    for (size_t i = 0; i < kBytes; i += 4096) {
      ASSERT_EQ(in[i], static_cast<uint8_t>(peer + i / 4096)) << i;
    }
    EXPECT_EQ(in[kBytes - 1], static_cast<uint8_t>(0x5A + peer));
  });
}

TEST_F(TcpTransportTest, ZeroByteOpsCompleteAtOnce) {
  connect(2);
  auto id = t_[0]->postRecv(1, nullptr, 0);
  EXPECT_TRUE(t_[0]->wait(id).isOk());
  id = t_[1]->postSend(0, nullptr, 0);
  EXPECT_TRUE(t_[1]->wait(id).isOk());
  EXPECT_TRUE(t_[0]->waitAll().isOk());
}

TEST_F(TcpTransportTest, BadPeerIsAnError) {
  connect(2);
  char c = 0;
  EXPECT_EQ(t_[0]->wait(t_[0]->postSend(0, &c, 1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t_[0]->wait(t_[0]->postRecv(7, &c, 1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t_[0]->wait(12345).code(), StatusCode::kInvalidArgument);
}

TEST_F(TcpTransportTest, ControlMessagesBothWays) {
  const int n = 4;
  connect(n);
  runRanks([&](int me, TcpTransport& t) {
    if (me == 0) {
      std::map<int, std::vector<uint8_t>> got;
      auto deadline = Clock::now() + 10s;
      while (got.size() < static_cast<size_t>(2 * (n - 1)) && Clock::now() < deadline) {
        std::vector<ControlMessage> msgs;
        ASSERT_TRUE(t.pollControl(deadline, &msgs).isOk());
        for (auto& m : msgs) {
          // Two messages per worker, in order: "w<r>a", then "w<r>b".
          int key = m.from_rank * 2 + (got.count(m.from_rank * 2) ? 1 : 0);
          got[key] = m.bytes;
        }
      }
      ASSERT_EQ(got.size(), static_cast<size_t>(2 * (n - 1)));
      for (int r = 1; r < n; ++r) {
        EXPECT_EQ(got[2 * r], std::vector<uint8_t>({'w', static_cast<uint8_t>('0' + r), 'a'}));
        EXPECT_EQ(got[2 * r + 1], std::vector<uint8_t>({'w', static_cast<uint8_t>('0' + r), 'b'}));
        ASSERT_TRUE(t.sendControl(r, std::vector<uint8_t>(100000, static_cast<uint8_t>(r))).isOk());
      }
      EXPECT_EQ(t.sendControl(0, {1}).code(), StatusCode::kInvalidArgument);
      // Keep driving until the replies are out (rank 0 must not exit early).
      ASSERT_TRUE(t.waitAll().isOk());
      std::vector<ControlMessage> msgs;
      ASSERT_TRUE(t.pollControl(Clock::now() + 10s, &msgs).isOk());  // the "done" messages
    } else {
      ASSERT_TRUE(t.sendControl(0, {'w', static_cast<uint8_t>('0' + me), 'a'}).isOk());
      // An empty message is a heartbeat (ops/peer_liveness.h): refused.
      EXPECT_EQ(t.sendControl(0, {}).code(), StatusCode::kInvalidArgument);
      ASSERT_TRUE(t.sendControl(0, {'w', static_cast<uint8_t>('0' + me), 'b'}).isOk());
      EXPECT_EQ(t.sendControl(n - me, {1}).code(),
                StatusCode::kInvalidArgument);  // worker to worker
      std::vector<ControlMessage> msgs;
      auto deadline = Clock::now() + 10s;
      while (msgs.empty() && Clock::now() < deadline)
        ASSERT_TRUE(t.pollControl(deadline, &msgs).isOk());
      ASSERT_EQ(msgs.size(), 1u);
      EXPECT_EQ(msgs[0].from_rank, 0);
      EXPECT_EQ(msgs[0].bytes, std::vector<uint8_t>(100000, static_cast<uint8_t>(me)));
      ASSERT_TRUE(t.sendControl(0, {'d'}).isOk());
      ASSERT_TRUE(t.pollControl(Clock::now() + 50ms, &msgs).isOk());  // flushes the write
    }
  });
}

TEST_F(TcpTransportTest, PollControlHonoursDeadlineAndWake) {
  connect(2);
  std::vector<ControlMessage> msgs;
  auto t0 = Clock::now();
  ASSERT_TRUE(t_[0]->pollControl(t0 + 100ms, &msgs).isOk());
  EXPECT_TRUE(msgs.empty());
  EXPECT_GE(Clock::now() - t0, 90ms);
  // wake() from another thread ends a long poll at once.
  std::thread waker([&] {
    std::this_thread::sleep_for(100ms);
    t_[0]->wake();
  });
  t0 = Clock::now();
  ASSERT_TRUE(t_[0]->pollControl(t0 + 20s, &msgs).isOk());
  waker.join();
  EXPECT_LT(Clock::now() - t0, 5s);
  // A wake() before the poll makes the next poll return at once.
  t_[1]->wake();
  t0 = Clock::now();
  ASSERT_TRUE(t_[1]->pollControl(t0 + 20s, &msgs).isOk());
  EXPECT_LT(Clock::now() - t0, 1s);
}

// A deadline under a millisecond away (TUTTI_CYCLE_TIME_MS=0.1 holds
// responses that long) is kept, not rounded up to asio's whole-millisecond
// epoll timeout: without the timer every poll below sleeps at least 1 ms.
// The fastest of 30 polls is compared, so one slow wake-up under load does not
// decide it.
TEST_F(TcpTransportTest, SubMillisecondDeadlinesAreKept) {
  connect(2);
  std::vector<ControlMessage> msgs;
  auto fastest = Clock::duration::max();
  for (int i = 0; i < 30; ++i) {
    const auto t0 = Clock::now();
    ASSERT_TRUE(t_[0]->pollControl(t0 + 200us, &msgs).isOk());
    const auto took = Clock::now() - t0;
    EXPECT_GE(took, 200us) << "returned before its deadline";
    fastest = std::min(fastest, took);
  }
  EXPECT_TRUE(msgs.empty());
  EXPECT_LT(fastest, 900us);
}

TEST_F(TcpTransportTest, SingleRankHasNoPeers) {
  struct NoStore : Store {
    Status set(const std::string&, const std::vector<uint8_t>&) override {
      ADD_FAILURE() << "store used";
      return Status::ok();
    }
    Status get(const std::string&, std::chrono::milliseconds, std::vector<uint8_t>*) override {
      ADD_FAILURE() << "store used";
      return Status::ok();
    }
  } none;
  std::unique_ptr<TcpTransport> t;
  ASSERT_TRUE(TcpTransport::connect(makeSettings(0, 1, 0), none, "", &t).isOk());
  EXPECT_EQ(t->size(), 1);
  EXPECT_TRUE(t->waitAll().isOk());
  std::vector<ControlMessage> msgs;
  auto t0 = Clock::now();
  EXPECT_TRUE(t->pollControl(t0 + 50ms, &msgs).isOk());
  EXPECT_GE(Clock::now() - t0, 40ms);
}

TEST_F(TcpTransportTest, PeerDestroyedMidReceiveIsPeerLost) {
  connect(3, /*timeout_s=*/30);
  std::vector<uint8_t> buf(1 << 20);
  auto id = t_[1]->postRecv(2, buf.data(), buf.size());
  std::thread killer([&] {
    std::this_thread::sleep_for(100ms);
    t_[2].reset();
  });
  auto t0 = Clock::now();
  Status st = t_[1]->wait(id);
  killer.join();
  EXPECT_EQ(st.code(), StatusCode::kPeerLost) << st.toString();
  EXPECT_NE(st.message().find("rank 2"), std::string::npos) << st.message();
  EXPECT_LT(Clock::now() - t0, 5s);
  // Broken from now on: every call returns the same status...
  std::vector<ControlMessage> msgs;
  EXPECT_EQ(t_[1]->pollControl(Clock::now() + 1s, &msgs).message(), st.message());
  char c = 0;
  EXPECT_EQ(t_[1]->wait(t_[1]->postSend(0, &c, 1)).message(), st.message());
  // ...except that a control socket to a healthy peer still takes one
  // best-effort message (how rank 0 tells survivors which rank was lost).
  EXPECT_TRUE(t_[1]->sendControl(0, {7}).isOk());
  // Rank 0 gets those last words first, then notices rank 2 on its control channel.
  ASSERT_TRUE(t_[0]->pollControl(Clock::now() + 5s, &msgs).isOk());
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].from_rank, 1);
  EXPECT_EQ(msgs[0].bytes, std::vector<uint8_t>{7});
  st = t_[0]->pollControl(Clock::now() + 5s, &msgs);
  while (st.isOk() && Clock::now() - t0 < 5s) st = t_[0]->pollControl(Clock::now() + 5s, &msgs);
  EXPECT_EQ(st.code(), StatusCode::kPeerLost) << st.toString();
  EXPECT_NE(st.message().find("rank 2"), std::string::npos) << st.message();
}

TEST_F(TcpTransportTest, SilentPeerIsPeerLostAfterTheTimeout) {
  connect(2, /*timeout_s=*/0.5);
  char c = 0;
  auto t0 = Clock::now();
  Status st = t_[0]->wait(t_[0]->postRecv(1, &c, 1));
  EXPECT_EQ(st.code(), StatusCode::kPeerLost) << st.toString();
  EXPECT_NE(st.message().find("rank 1: no progress for 0.5 s"), std::string::npos) << st.message();
  EXPECT_GE(Clock::now() - t0, 400ms);
  EXPECT_LT(Clock::now() - t0, 3s);
}

// The heartbeats of ops/peer_liveness.h come from the data path's waits too:
// rank 1 spends 3 timeouts in one wait() for a message rank 2 sends in
// pieces, while rank 0 waits in pollControl(). Without heartbeats from that
// wait rank 0 would take rank 1 for lost after one timeout.
TEST_F(TcpTransportTest, HeartbeatsGoOutDuringALongDataWait) {
  connect(3, /*timeout_s=*/2.0);
  constexpr int kPieces = 16;
  constexpr size_t kPiece = 1024;
  runRanks([&](int me, TcpTransport& t) {
    if (me == 0) {
      const auto until = Clock::now() + 6s;
      std::vector<ControlMessage> msgs;
      while (Clock::now() < until) {
        Status st = t.pollControl(until, &msgs);
        ASSERT_TRUE(st.isOk()) << st.toString();
        EXPECT_TRUE(msgs.empty()) << "a heartbeat reached the inbox";
      }
    } else if (me == 1) {
      std::vector<uint8_t> got(kPieces * kPiece);
      Status st = t.wait(t.postRecv(2, got.data(), got.size()));
      ASSERT_TRUE(st.isOk()) << st.toString();
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], pattern(2, 1, i, 0)) << i;
    } else {
      std::vector<uint8_t> out(kPieces * kPiece);
      for (size_t i = 0; i < out.size(); ++i) out[i] = pattern(2, 1, i, 0);
      for (int k = 0; k < kPieces; ++k) {
        ASSERT_TRUE(t.wait(t.postSend(1, out.data() + k * kPiece, kPiece)).isOk());
        std::this_thread::sleep_for(350ms);  // progress well within the timeout
      }
    }
  });
}

// MemoryStore (tests/support/memory_store.h) gives one rank a different
// secret for the data connections only.
TEST(TcpTransportAuth, WrongSecretOnOneRankIsRefused) {
  MemoryStore store;
  Settings s0 = makeSettings(0, 2, 0, 1.0);
  Settings s1 = makeSettings(1, 2, 0, 1.0);
  s1.secret = "not-the-job-secret";
  std::unique_ptr<TcpTransport> t0, t1;
  Status st0, st1;
  std::thread a([&] { st0 = TcpTransport::connect(s0, store, "", &t0); });
  std::thread b([&] { st1 = TcpTransport::connect(s1, store, "", &t1); });
  a.join();
  b.join();
  EXPECT_EQ(st1.code(), StatusCode::kIoError) << st1.toString();
  EXPECT_NE(st1.message().find("refused"), std::string::npos) << st1.message();
  EXPECT_EQ(st0.code(), StatusCode::kTimeout) << st0.toString();
  EXPECT_NE(st0.message().find("rank 1 published its address but never connected"),
            std::string::npos)
      << st0.message();
  EXPECT_EQ(t0, nullptr);
  EXPECT_EQ(t1, nullptr);
}

TEST(TcpTransportAuth, StrangerAtADataListenerIsDroppedAndSetupGoesOn) {
  MemoryStore store;
  std::unique_ptr<TcpTransport> t0, t1;
  Status st0, st1;
  std::thread a([&] { st0 = TcpTransport::connect(makeSettings(0, 2, 0, 10), store, "", &t0); });
  // Before rank 1 arrives, a stranger talks garbage to rank 0's listener.
  std::vector<uint8_t> addr;
  ASSERT_TRUE(store.get("rank/0/addr", 5000ms, &addr).isOk());
  std::string a0(addr.begin(), addr.end());
  int port = std::stoi(a0.substr(a0.rfind(':') + 1));
  {
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket s(io);
    s.connect({boost::asio::ip::address_v4::loopback(), static_cast<unsigned short>(port)});
    std::vector<uint8_t> junk(200, 0x42);
    boost::system::error_code ec;
    boost::asio::write(s, boost::asio::buffer(junk), ec);
    std::array<uint8_t, 64> buf{};
    while (!ec) s.read_some(boost::asio::buffer(buf), ec);  // until rank 0 drops us
  }
  std::thread b([&] { st1 = TcpTransport::connect(makeSettings(1, 2, 0, 10), store, "", &t1); });
  a.join();
  b.join();
  ASSERT_TRUE(st0.isOk()) << st0.toString();
  ASSERT_TRUE(st1.isOk()) << st1.toString();
  int x = 7, y = 0;
  auto r = t1->postRecv(0, &y, sizeof(y));
  auto s = t0->postSend(1, &x, sizeof(x));
  std::thread w([&] { EXPECT_TRUE(t0->wait(s).isOk()); });
  EXPECT_TRUE(t1->wait(r).isOk());
  w.join();
  EXPECT_EQ(y, 7);
}

TEST_F(TcpTransportTest, IdleWaitingUsesNoCpu) {
  connect(2, /*timeout_s=*/0.6);
  auto cpu = [] {
    rusage u{};
    getrusage(RUSAGE_THREAD, &u);
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 + u.ru_utime.tv_usec + u.ru_stime.tv_usec;
  };
  std::vector<ControlMessage> msgs;
  double c0 = cpu();
  ASSERT_TRUE(t_[0]->pollControl(Clock::now() + 500ms, &msgs).isOk());
  char c = 0;
  Status st = t_[0]->wait(t_[0]->postRecv(1, &c, 1));  // silent peer: times out after 0.6 s
  EXPECT_EQ(st.code(), StatusCode::kPeerLost);
  EXPECT_LT(cpu() - c0, 50e3) << "microseconds of CPU while idle for 1.1 s";
}

TEST_F(TcpTransportTest, WrongSecretAtRendezvousIsRefused) {
  std::unique_ptr<RendezvousClient> c;
  Status st = RendezvousClient::connect("127.0.0.1", server_->port(), "bad", 2000ms, &c);
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.toString();
}

TEST_F(TcpTransportTest, ConnectTimeoutNamesMissingRanks) {
  // Ranks 0 and 2 of 4 start; 1 and 3 never do.
  std::vector<Settings> s = {makeSettings(0, 4, server_->port(), 1.0),
                             makeSettings(2, 4, server_->port(), 1.0)};
  std::vector<Status> st(2);
  std::vector<std::unique_ptr<TcpTransport>> t(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      std::unique_ptr<RendezvousClient> client;
      st[i] =
          RendezvousClient::connect("127.0.0.1", server_->port(), "job-secret", 5000ms, &client);
      if (st[i].isOk()) st[i] = TcpTransport::connect(s[i], *client, "", &t[i]);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(st[0].code(), StatusCode::kTimeout) << st[0].toString();
  EXPECT_NE(st[0].message().find("ranks 1, 3 never published"), std::string::npos)
      << st[0].message();
  EXPECT_EQ(st[1].code(), StatusCode::kTimeout) << st[1].toString();
  EXPECT_NE(st[1].message().find("rank 1 never published"), std::string::npos) << st[1].message();
}

TEST(TcpConnectBackend, UnknownBackendNamesTheAcceptedOnes) {
  Settings s;
  s.backend = "carrier-pigeon";
  BackendBundle b;
  Status st = connectBackend(s, &b);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tcp"), std::string::npos) << st.message();
}

// TUTTI_ALGORITHMS is checked before any connection is tried, so every rank
// fails at once, naming the bad entry and what is accepted.
TEST(TcpConnectBackend, BadAlgorithmsSettingFailsBeforeConnecting) {
  Settings s;
  s.size = 2;
  s.secret = "x";
  s.rendezvous_port = 1;  // would fail differently if anything tried to use it
  s.algorithms = "broadcast:0-64k:binomial,allreduce:0-4k:tree";
  BackendBundle b;
  const Status st = connectBackend(s, &b);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find("TUTTI_ALGORITHMS entry 'allreduce:0-4k:tree'"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("accepted: recursive_doubling, hierarchical, ring"),
            std::string::npos)
      << st.message();
}

TEST(TcpConnectBackend, SingleRankNeedsNoSockets) {
  Settings s;
  s.rendezvous_port = 1;  // would fail if anything tried to use it
  BackendBundle b;
  Status st = connectBackend(s, &b);
  ASSERT_TRUE(st.isOk()) << st.toString();
  ASSERT_TRUE(b.transport && b.backend);
  EXPECT_EQ(b.backend->size(), 1);
}

TEST(TcpConnectBackend, RankZeroHostsTheRendezvous) {
  int port = 0;
  {
    std::unique_ptr<RendezvousServer> probe;
    ASSERT_TRUE(RendezvousServer::start("127.0.0.1", 0, "x", &probe).isOk());
    port = probe->port();
  }
  std::vector<BackendBundle> b(3);
  std::vector<Status> st(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      Settings s = makeSettings(r, 3, port, 10);
      s.rank0_hosts_rendezvous = true;
      st[r] = connectBackend(s, &b[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(st[r].isOk()) << "rank " << r << ": " << st[r].toString();
    EXPECT_EQ(b[r].transport->rank(), r);
  }
  EXPECT_NE(b[0].keepalive, nullptr);
}

}  // namespace
}  // namespace tutti
