// The shared-memory path of TcpTransport: the ring buffer and the segment
// (ops/tcp/shm_channel.h), then the transport with shared memory on, off and
// mixed, in threads and across forked processes (SIGKILL).

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <thread>

#include "ops/tcp/shm_channel.h"
#include "ops/tcp/tcp_transport.h"
#include "rendezvous/rendezvous_client.h"
#include "rendezvous/rendezvous_server.h"

namespace tutti {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

uint8_t streamByte(uint64_t i) {
  return static_cast<uint8_t>(i * 131 + (i >> 9) + 7);
}

// A ring over heap memory.
struct HeapRing {
  explicit HeapRing(size_t capacity) : data(capacity), ring(&control, data.data(), capacity) {}
  ShmRingControl control;
  std::vector<uint8_t> data;
  ShmRing ring;
};

TEST(ShmRing, ZeroBytesMoveNothing) {
  HeapRing h(64);
  uint8_t b = 0;
  EXPECT_EQ(h.ring.write(&b, 0), 0u);
  EXPECT_EQ(h.ring.read(&b, 0), 0u);
  EXPECT_EQ(h.ring.read(&b, 1), 0u);  // empty
  EXPECT_EQ(h.ring.readable(), 0u);
  EXPECT_EQ(h.ring.writable(), 64u);
}

TEST(ShmRing, FullRingTakesNoMore) {
  HeapRing h(100);
  std::vector<uint8_t> in(150, 1), out(150);
  EXPECT_EQ(h.ring.write(in.data(), in.size()), 100u);
  EXPECT_EQ(h.ring.write(in.data(), 1), 0u);
  EXPECT_EQ(h.ring.readable(), 100u);
  EXPECT_EQ(h.ring.writable(), 0u);
  EXPECT_EQ(h.ring.read(out.data(), 30), 30u);
  EXPECT_EQ(h.ring.writable(), 30u);
}

TEST(ShmRing, WrapsAroundAndKeepsOrder) {
  // Odd sizes against an odd capacity: every offset wraps somewhere.
  HeapRing h(1009);
  uint64_t wrote = 0, read = 0;
  std::vector<uint8_t> buf(700);
  for (int round = 0; round < 2000; ++round) {
    size_t w = (round * 37) % 700 + 1;
    for (size_t i = 0; i < w; ++i) buf[i] = streamByte(wrote + i);
    wrote += h.ring.write(buf.data(), w);
    size_t r = (round * 53) % 650 + 1;
    size_t got = h.ring.read(buf.data(), r);
    for (size_t i = 0; i < got; ++i) ASSERT_EQ(buf[i], streamByte(read + i)) << read + i;
    read += got;
  }
  EXPECT_GT(read, 100u * 1009u);
}

TEST(ShmRing, StreamMuchLargerThanTheRingAcrossThreads) {
  HeapRing h(4096 + 13);
  const uint64_t kTotal = 8u << 20;
  std::thread producer([&] {
    std::vector<uint8_t> buf(10000);
    uint64_t at = 0;
    while (at < kTotal) {
      size_t n = std::min<uint64_t>(buf.size(), kTotal - at);
      for (size_t i = 0; i < n; ++i) buf[i] = streamByte(at + i);
      size_t done = 0;
      while (done < n) {
        size_t w = h.ring.write(buf.data() + done, n - done);
        ASSERT_NE(w, ShmRing::kCorrupt);
        if (w == 0) std::this_thread::yield();
        done += w;
      }
      at += n;
    }
  });
  std::vector<uint8_t> buf(3001);
  uint64_t at = 0;
  while (at < kTotal) {
    size_t n = h.ring.read(buf.data(), buf.size());
    ASSERT_NE(n, ShmRing::kCorrupt);
    if (n == 0) std::this_thread::yield();
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(buf[i], streamByte(at + i)) << at + i;
    at += n;
  }
  producer.join();
  EXPECT_EQ(h.ring.readable(), 0u);
}

TEST(ShmRing, ImpossibleCountersAreReported) {
  HeapRing h(64);
  h.control.head.store(1000);  // 1000 bytes "written" into 64
  uint8_t b[8];
  EXPECT_EQ(h.ring.read(b, 8), ShmRing::kCorrupt);
  EXPECT_EQ(h.ring.write(b, 8), ShmRing::kCorrupt);
  EXPECT_EQ(h.ring.readable(), 0u);
}

bool shmNameExists(const std::string& name) {
  struct stat st {};
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}

TEST(ShmChannel, CreateOpenBothWaysAndNothingLeftBehind) {
  std::string name;
  std::unique_ptr<ShmChannel> a, b;
  ASSERT_TRUE(ShmChannel::create(1 << 16, &name, &a).isOk());
  EXPECT_EQ(name.rfind("/tutti-" + std::to_string(getpid()) + "-", 0), 0u) << name;
  struct stat st {};
  ASSERT_EQ(stat(("/dev/shm" + name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Status opened = ShmChannel::open(name, 1 << 16, &b);
  ASSERT_TRUE(opened.isOk()) << opened.toString();
  EXPECT_FALSE(shmNameExists(name)) << "the opener unlinks the name";
  ShmChannel::unlinkName(name);  // what the creator does after the answer: harmless

  const uint8_t x[3] = {1, 2, 3};
  uint8_t y[3] = {};
  EXPECT_EQ(a->tx().write(x, 3), 3u);
  EXPECT_EQ(b->rx().read(y, 3), 3u);
  EXPECT_EQ(y[2], 3);
  EXPECT_EQ(b->tx().write(x, 2), 2u);
  EXPECT_EQ(a->rx().read(y, 3), 2u);
  EXPECT_EQ(a->rx().readable(), 0u);

  EXPECT_FALSE(a->takePeerSleeping());
  b->setSleeping(true);
  EXPECT_TRUE(a->takePeerSleeping());
  EXPECT_FALSE(a->takePeerSleeping()) << "taken once";
  a->setSleeping(true);
  a->setSleeping(false);
  EXPECT_FALSE(b->takePeerSleeping());
}

TEST(ShmChannel, OpenRefusesForeignNamesSizesAndMissingSegments) {
  std::unique_ptr<ShmChannel> c;
  EXPECT_FALSE(ShmChannel::open("/etc/passwd", 1 << 16, &c).isOk());
  EXPECT_FALSE(ShmChannel::open("/tutti-1/../x", 1 << 16, &c).isOk());
  EXPECT_FALSE(ShmChannel::open("/tutti-0-doesnotexist", 1 << 16, &c).isOk());
  std::string name;
  std::unique_ptr<ShmChannel> a;
  ASSERT_TRUE(ShmChannel::create(1 << 16, &name, &a).isOk());
  Status st = ShmChannel::open(name, 1 << 17, &c);  // disagrees on the size
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_EQ(c, nullptr);
  EXPECT_FALSE(shmNameExists(name));
}

// ---- the transport ----------------------------------------------------------

Settings rankSettings(int rank, int size, int port, const std::string& shm, double timeout_s = 10) {
  Settings s;
  s.rank = rank;
  s.size = size;
  s.rendezvous_port = port;
  s.rank0_hosts_rendezvous = false;
  s.secret = "shm-secret";
  s.timeout_seconds = timeout_s;
  s.shm = shm;
  return s;
}

Status connectRank(const Settings& s, std::unique_ptr<TcpTransport>* out) {
  std::unique_ptr<RendezvousClient> client;
  TUTTI_RETURN_IF_ERROR(
      RendezvousClient::connect("127.0.0.1", s.rendezvous_port, s.secret, 5000ms, &client));
  return TcpTransport::connect(s, *client, client->localAddress(), out);
}

// Names "/dev/shm/tutti-<pid>-*" left by process `pid`.
int leftovers(pid_t pid) {
  const std::string prefix = "tutti-" + std::to_string(pid) + "-";
  int n = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) n += std::string(e->d_name).rfind(prefix, 0) == 0;
    closedir(d);
  }
  return n;
}

class ShmTransport : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RendezvousServer::start("127.0.0.1", 0, "shm-secret", &server_).isOk());
  }
  // One rank per thread; shm[r] is rank r's TUTTI_SHM.
  void connect(const std::vector<std::string>& shm, double timeout_s = 10) {
    const int n = static_cast<int>(shm.size());
    t_.clear();
    t_.resize(n);
    std::vector<Status> st(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        st[r] = connectRank(rankSettings(r, n, server_->port(), shm[r], timeout_s), &t_[r]);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r)
      ASSERT_TRUE(st[r].isOk()) << "rank " << r << ": " << st[r].toString();
  }
  // Every rank sends messages of `sizes` to every other, all posted at
  // once, and checks what it receives.
  void exchange(const std::vector<size_t>& sizes) {
    const int n = static_cast<int>(t_.size());
    std::vector<std::thread> threads;
    for (int me = 0; me < n; ++me) {
      threads.emplace_back([&, me] {
        TcpTransport& t = *t_[me];
        std::map<std::pair<int, int>, std::vector<uint8_t>> out, in;
        for (int m = 0; m < static_cast<int>(sizes.size()); ++m) {
          for (int p = 0; p < n; ++p) {
            if (p == me) continue;
            auto& o = out[{p, m}];
            o.resize(sizes[m]);
            for (size_t i = 0; i < o.size(); ++i) o[i] = streamByte(i + me * 7 + m * 1000 + p);
            in[{p, m}].assign(sizes[m], 0);
            t.postSend(p, o.data(), o.size());
            t.postRecv(p, in[{p, m}].data(), sizes[m]);
          }
        }
        Status st = t.waitAll();
        ASSERT_TRUE(st.isOk()) << st.toString();
        for (auto& [key, buf] : in) {
          for (size_t i = 0; i < buf.size(); ++i) {
            ASSERT_EQ(buf[i], streamByte(i + key.first * 7 + key.second * 1000 + me))
                << "rank " << me << " from " << key.first << " msg " << key.second << " byte " << i;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
  }

  std::unique_ptr<RendezvousServer> server_;
  std::vector<std::unique_ptr<TcpTransport>> t_;
};

const std::vector<size_t> kSizes = {1, 0, 1000, (4u << 20) + 17, 3, 9u << 20, 65536};

TEST_F(ShmTransport, SameHostPeersUseSharedMemoryAndKeepTheStream) {
  connect({"auto", "auto", "auto"});
  for (auto& t : t_) EXPECT_EQ(t->sharedMemoryPeers(), 2);
  EXPECT_EQ(leftovers(getpid()), 0);
  exchange(kSizes);
  exchange({7, 1u << 20});  // the rings are reused
}

TEST_F(ShmTransport, OffMeansTcp) {
  connect({"off", "off"});
  for (auto& t : t_) EXPECT_EQ(t->sharedMemoryPeers(), 0);
  exchange(kSizes);
}

TEST_F(ShmTransport, BothSidesAgreeWhenOneRankSaysOff) {
  connect({"auto", "off", "auto", "auto"});
  EXPECT_EQ(t_[0]->sharedMemoryPeers(), 2);  // 2 and 3, not 1
  EXPECT_EQ(t_[1]->sharedMemoryPeers(), 0);
  EXPECT_EQ(t_[2]->sharedMemoryPeers(), 2);
  EXPECT_EQ(t_[3]->sharedMemoryPeers(), 2);
  exchange(kSizes);
}

TEST_F(ShmTransport, SilentPeerIsPeerLostAfterTheTimeout) {
  connect({"auto", "auto"}, /*timeout_s=*/0.5);
  // A send larger than the ring stalls once the ring is full.
  std::vector<uint8_t> big(3 * kShmRingBytes);
  auto t0 = Clock::now();
  Status st = t_[0]->wait(t_[0]->postSend(1, big.data(), big.size()));
  EXPECT_EQ(st.code(), StatusCode::kPeerLost) << st.toString();
  EXPECT_NE(st.message().find("rank 1: no progress for 0.5 s"), std::string::npos) << st.message();
  EXPECT_GE(Clock::now() - t0, 400ms);
  EXPECT_LT(Clock::now() - t0, 3s);
}

// A forked rank 1 on the same host sends part of a transfer, then is
// SIGKILLed: rank 0 gets kPeerLost and /dev/shm holds nothing of either.
TEST_F(ShmTransport, SigkilledProcessIsPeerLostAndLeavesNothing) {
  const int port = server_->port();
  const size_t kBytes = 32u << 20;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::unique_ptr<TcpTransport> t;
    if (!connectRank(rankSettings(1, 2, port, "auto"), &t).isOk()) _exit(3);
    std::vector<uint8_t> buf(kBytes / 4, 9);
    if (!t->wait(t->postSend(0, buf.data(), buf.size())).isOk()) _exit(4);
    pause();  // until killed
    _exit(0);
  }
  std::unique_ptr<TcpTransport> t;
  Status st = connectRank(rankSettings(0, 2, port, "auto"), &t);
  ASSERT_TRUE(st.isOk()) << st.toString();
  EXPECT_EQ(t->sharedMemoryPeers(), 1);
  std::vector<uint8_t> buf(kBytes);
  auto id = t->postRecv(1, buf.data(), buf.size());
  std::thread killer([&] {
    std::this_thread::sleep_for(300ms);
    kill(child, SIGKILL);
  });
  auto t0 = Clock::now();
  st = t->wait(id);
  killer.join();
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  EXPECT_EQ(st.code(), StatusCode::kPeerLost) << st.toString();
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.toString();
  EXPECT_LT(Clock::now() - t0, 5s);
  EXPECT_EQ(buf[kBytes / 4 - 1], 9) << "the bytes sent before the kill arrived";
  EXPECT_EQ(leftovers(child), 0);
  EXPECT_EQ(leftovers(getpid()), 0);
}

}  // namespace
}  // namespace tutti
