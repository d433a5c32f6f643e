// zstd on the TCP wire (TUTTI_COMPRESSION_ZSTD_LEVEL): real TcpTransports
// over loopback (shared memory off, so data goes over the sockets), ranks as
// threads, an in-memory store. Allreduce through TcpBackend is bit-exact
// against level 0; the socket byte counts show what zstd saved; a corrupted
// frame (through a byte-flipping proxy) is kPeerLost naming the peer.

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio.hpp>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "ops/tcp/tcp_backend.h"
#include "ops/tcp/tcp_transport.h"
#include "tests/support/memory_store.h"

namespace tutti {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using asio::ip::tcp;

// A view of a store in which one key reads differently (to route a rank
// through the proxy below).
class RewritingStore : public Store {
 public:
  RewritingStore(Store& inner, std::string key, std::string value)
      : inner_(inner), key_(std::move(key)), value_(std::move(value)) {}
  Status set(const std::string& key, const std::vector<uint8_t>& value) override {
    return inner_.set(key, value);
  }
  Status get(const std::string& key, std::chrono::milliseconds timeout,
             std::vector<uint8_t>* value) override {
    if (key != key_) return inner_.get(key, timeout, value);
    std::vector<uint8_t> ignored;
    TUTTI_RETURN_IF_ERROR(inner_.get(key, timeout, &ignored));  // wait until it is there
    value->assign(value_.begin(), value_.end());
    return Status::ok();
  }

 private:
  Store& inner_;
  std::string key_, value_;
};

Settings makeSettings(int rank, int size, int zstd_level) {
  Settings s;
  s.rank = rank;
  s.size = size;
  s.secret = "job-secret";
  s.timeout_seconds = 10;
  s.shm = "off";
  s.compression_zstd_level = zstd_level;
  return s;
}

// Connects ranks as threads; stores[r] is rank r's view of the store.
std::vector<Status> connectRanks(const std::vector<Settings>& settings,
                                 const std::vector<Store*>& stores,
                                 std::vector<std::unique_ptr<TcpTransport>>* out) {
  const size_t n = settings.size();
  out->clear();
  out->resize(n);
  std::vector<Status> st(n);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      st[r] = TcpTransport::connect(settings[r], *stores[r], "127.0.0.1", &(*out)[r]);
    });
  }
  for (auto& t : threads) t.join();
  return st;
}

std::vector<std::unique_ptr<TcpTransport>> connectOrDie(int n, int level) {
  MemoryStore store;
  std::vector<Settings> settings;
  std::vector<Store*> stores;
  for (int r = 0; r < n; ++r) {
    settings.push_back(makeSettings(r, n, level));
    stores.push_back(&store);
  }
  std::vector<std::unique_ptr<TcpTransport>> t;
  auto st = connectRanks(settings, stores, &t);
  for (int r = 0; r < n; ++r) EXPECT_TRUE(st[r].isOk()) << "rank " << r << ": " << st[r].toString();
  return t;
}

// Float32 inputs: compressible (small integers, many repeats: zstd saves most
// of it) or incompressible (random bits of random floats).
std::vector<float> input(int rank, size_t count, bool compressible) {
  std::vector<float> v(count);
  std::mt19937 gen(1234 + rank);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t i = 0; i < count; ++i) {
    v[i] = compressible ? static_cast<float>((i / 64 + rank) % 5) : normal(gen) * 1e-3f;
  }
  return v;
}

// Allreduces (sum) each rank's input over fresh connections at `level`;
// returns every rank's result and the summed wire counters.
std::vector<std::vector<float>> allreduceAt(int n, int level, size_t count, bool compressible,
                                            TcpWireStats* total) {
  auto t = connectOrDie(n, level);
  std::vector<std::vector<float>> bufs(n);
  std::vector<Status> st(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    bufs[r] = input(r, count, compressible);
    threads.emplace_back([&, r] {
      TcpBackend backend(*t[r], 0);
      st[r] = backend.allreduce(bufs[r].data(), count, DataType::kFloat32, ReduceOp::kSum);
    });
  }
  for (auto& th : threads) th.join();
  *total = {};
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(st[r].isOk()) << "rank " << r << ": " << st[r].toString();
    const TcpWireStats w = t[r]->wireStats();
    total->payload_bytes += w.payload_bytes;
    total->socket_bytes += w.socket_bytes;
    total->frames += w.frames;
    total->compressed_frames += w.compressed_frames;
  }
  return bufs;
}

class ZstdWireRanks : public ::testing::TestWithParam<int> {};

TEST_P(ZstdWireRanks, AllreduceIsBitExactAgainstLevelZero) {
  const int n = GetParam();
  const size_t count = 1'000'003;  // several 512 KiB ring segments per chunk, odd tail
  for (bool compressible : {true, false}) {
    SCOPED_TRACE(compressible ? "compressible" : "incompressible");
    TcpWireStats plain, zstd;
    const auto expected = allreduceAt(n, 0, count, compressible, &plain);
    const auto got = allreduceAt(n, 1, count, compressible, &zstd);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(std::memcmp(expected[r].data(), got[r].data(), count * sizeof(float)), 0)
          << "rank " << r;
    }
    // Same payload either way: the ring moves 2 (n-1)/n of the buffer per rank.
    EXPECT_EQ(plain.payload_bytes, zstd.payload_bytes);
    EXPECT_GE(plain.payload_bytes, 2 * (n - 1) * (count * sizeof(float) / n));
    // Level 0: the plain stream, no frames, nothing added.
    EXPECT_EQ(plain.socket_bytes, plain.payload_bytes);
    EXPECT_EQ(plain.frames, 0u);
    EXPECT_GT(zstd.frames, 0u);
    if (compressible) {
      EXPECT_EQ(zstd.compressed_frames, zstd.frames);
      EXPECT_LT(zstd.socket_bytes, zstd.payload_bytes / 20) << "zstd saved too little";
    } else {
      // Random floats do not compress: raw frames, at most a header more each.
      EXPECT_LT(zstd.compressed_frames, zstd.frames);
      EXPECT_GE(zstd.socket_bytes, zstd.payload_bytes);
      EXPECT_LE(zstd.socket_bytes, zstd.payload_bytes + zstd.frames * 13);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ZstdWireRanks, ::testing::Values(2, 3, 4));

TEST(ZstdWire, FramesSpanReceivesOfOtherSizes) {
  // One send taken by three receives (a zstd frame decoded aside, then
  // drained; a raw frame read across receives), and three sends by one.
  auto t = connectOrDie(2, 3);
  for (bool compressible : {true, false}) {
    const std::vector<float> big = input(0, 300'000, compressible);
    std::vector<float> got(big.size(), -1.0f);
    std::thread sender([&] {
      auto a = t[0]->postSend(1, big.data(), 100'000 * sizeof(float));
      auto b = t[0]->postSend(1, big.data() + 100'000, 200'000 * sizeof(float));
      EXPECT_TRUE(t[0]->wait(a).isOk());
      EXPECT_TRUE(t[0]->wait(b).isOk());
    });
    std::vector<Transport::OpId> ids;
    const size_t cuts[] = {0, 70'000, 150'001, big.size()};
    for (int i = 0; i < 3; ++i) {
      ids.push_back(
          t[1]->postRecv(0, got.data() + cuts[i], (cuts[i + 1] - cuts[i]) * sizeof(float)));
    }
    for (auto id : ids) ASSERT_TRUE(t[1]->wait(id).isOk());
    sender.join();
    ASSERT_EQ(std::memcmp(big.data(), got.data(), big.size() * sizeof(float)), 0);
  }
  EXPECT_GT(t[0]->wireStats().compressed_frames, 0u);
}

TEST(ZstdWire, DifferentLevelsAreRefusedAtConnect) {
  MemoryStore store;
  std::vector<std::unique_ptr<TcpTransport>> t;
  auto st = connectRanks({makeSettings(0, 3, 1), makeSettings(1, 3, 1), makeSettings(2, 3, 0)},
                         {&store, &store, &store}, &t);
  EXPECT_TRUE(st[1].isOk()) << st[1].toString();
  for (int r : {0, 2}) {
    EXPECT_EQ(st[r].code(), StatusCode::kInvalidArgument) << st[r].toString();
    EXPECT_NE(st[r].message().find("TUTTI_COMPRESSION_ZSTD_LEVEL is "), std::string::npos)
        << st[r].message();
    EXPECT_NE(st[r].message().find("on rank 2"), std::string::npos) << st[r].message();
  }
}

// Forwards connections to `target`; flips byte `flip_at` (counted from when
// it is armed) of the stream from the connecting side.
class FlippingProxy {
 public:
  FlippingProxy(uint16_t target, size_t flip_at)
      : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        target_(target),
        flip_at_(flip_at) {
    accepter_ = std::thread([this] {
      for (int i = 0; i < 2; ++i) {  // a worker opens a data and a control connection
        auto in = std::make_shared<tcp::socket>(io_);
        boost::system::error_code ec;
        acceptor_.accept(*in, ec);
        if (ec) return;
        auto out = std::make_shared<tcp::socket>(io_);
        out->connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), target_), ec);
        if (ec) return;
        std::lock_guard<std::mutex> lock(mu_);
        sockets_.push_back(in);
        sockets_.push_back(out);
        pumps_.emplace_back([this, in, out] { pump(*in, *out, true); });
        pumps_.emplace_back([this, in, out] { pump(*out, *in, false); });
      }
    });
  }
  ~FlippingProxy() {
    boost::system::error_code ec;
    acceptor_.close(ec);
    accepter_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : sockets_) s->shutdown(tcp::socket::shutdown_both, ec);
    for (auto& p : pumps_) p.join();
  }
  std::string address() const {
    return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }
  void arm() { armed_ = true; }

 private:
  void pump(tcp::socket& from, tcp::socket& to, bool upstream) {
    std::array<uint8_t, 65536> buf;
    boost::system::error_code ec;
    while (true) {
      const size_t n = from.read_some(asio::buffer(buf), ec);
      if (ec) break;
      if (upstream && armed_) {
        const size_t at = seen_.fetch_add(n);
        if (flip_at_ >= at && flip_at_ < at + n) buf[flip_at_ - at] ^= 0xFF;
      }
      asio::write(to, asio::buffer(buf.data(), n), ec);
      if (ec) break;
    }
    to.shutdown(tcp::socket::shutdown_send, ec);
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  uint16_t target_;
  size_t flip_at_;
  std::atomic<bool> armed_{false};
  std::atomic<size_t> seen_{0};
  std::mutex mu_;
  std::vector<std::shared_ptr<tcp::socket>> sockets_;
  std::thread accepter_;
  std::vector<std::thread> pumps_;
};

class ZstdWireCorrupt : public ::testing::TestWithParam<size_t> {};

TEST_P(ZstdWireCorrupt, FlippedByteIsPeerLostNamingThePeer) {
  // Byte 3: the frame length's high byte (oversized); 4: the mode; 8: the
  // raw size; 200: inside the zstd frame (its checksum fails).
  MemoryStore store;
  // Rank 0 listens first; the proxy forwards to its published port.
  std::vector<std::unique_ptr<TcpTransport>> t(2);
  std::unique_ptr<FlippingProxy> proxy;
  Status st0, st1;
  std::thread rank0(
      [&] { st0 = TcpTransport::connect(makeSettings(0, 2, 1), store, "127.0.0.1", &t[0]); });
  std::vector<uint8_t> addr;
  ASSERT_TRUE(store.get("rank/0/addr", 5000ms, &addr).isOk());
  const std::string a(addr.begin(), addr.end());
  proxy = std::make_unique<FlippingProxy>(
      static_cast<uint16_t>(std::stoi(a.substr(a.find(':') + 1))), GetParam());
  RewritingStore via_proxy(store, "rank/0/addr", proxy->address());
  st1 = TcpTransport::connect(makeSettings(1, 2, 1), via_proxy, "127.0.0.1", &t[1]);
  rank0.join();
  ASSERT_TRUE(st0.isOk()) << st0.toString();
  ASSERT_TRUE(st1.isOk()) << st1.toString();
  proxy->arm();

  const std::vector<float> out = input(1, 100'000, true);  // one zstd frame of ~1 KB
  std::vector<float> in(out.size(), 0.0f);
  const auto send = t[1]->postSend(0, out.data(), out.size() * sizeof(float));
  const auto recv = t[0]->postRecv(1, in.data(), in.size() * sizeof(float));
  std::thread sender([&] { (void)t[1]->wait(send); });
  const Status st = t[0]->wait(recv);
  EXPECT_EQ(st.code(), StatusCode::kPeerLost) << st.toString();
  EXPECT_NE(st.message().find("rank 1 sent a data frame"), std::string::npos) << st.message();
  // Broken from now on, with the same error.
  EXPECT_EQ(t[0]->wait(t[0]->postRecv(1, in.data(), 4)).message(), st.message());
  t[0].reset();  // rank 1 sees the connection go
  sender.join();
  t[1].reset();
}

INSTANTIATE_TEST_SUITE_P(Offsets, ZstdWireCorrupt, ::testing::Values(3, 4, 8, 200));

}  // namespace
}  // namespace tutti
