#pragma once

// Internals of TcpTransport shared by tcp_transport.cc (data and control
// paths) and tcp_connect.cc (connection setup). Not a public interface.
//
// Threading: everything runs on the thread that calls into the transport;
// handlers run only inside io_.run_one_until()/poll() on that thread. The one
// exception is wake() (an atomic flag plus a posted no-op).
//
// Peers on the same host (tcp_shm.cc): data goes through a ShmChannel
// instead of the data socket, which then carries only doorbell bytes (and
// still reports the peer's EOF). Progress on those peers is made by pumpShm()
// on this thread, inside post() and the wait loops; never by a handler.
//
// zstd on the wire (tcp_zstd.cc): with settings.compression_zstd_level > 0
// the data sockets of TCP peers (not shared-memory ones) carry frames instead
// of a plain byte stream. A send is cut into frames of at most
// kWireFrameBytes raw bytes; each frame is a u32 length (of what follows it),
// then a ZstdStage segment: u8 mode (raw / zstd), u64 raw bytes, and the raw
// bytes or one checksummed zstd frame. Each connection's ZstdStage decides per
// frame whether compressing pays (>= kWireMinSaving) from its running ratio
// and re-probes after backing off. A receiver takes frames as a stream: a
// frame may end inside a posted receive or span several. A frame it cannot
// take (bad mode, sizes out of bounds, a corrupt zstd frame) breaks the
// transport with kPeerLost naming the peer; nothing is written past a posted
// buffer. Level 0: no frames, the wire is the plain byte stream.

#include <atomic>
#include <boost/asio.hpp>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/settings.h"
#include "core/store.h"
#include "core/wire.h"
#include "ops/tcp/auth.h"
#include "ops/tcp/shm_channel.h"
#include "ops/tcp/tcp_transport.h"
#include "ops/tcp/zstd_stage.h"
#include "ops/transport.h"

namespace tutti {

namespace asio = boost::asio;
using asio::ip::tcp;

// Hello after authentication, connecting side to accepting side:
// u32 kHelloMagic, i32 rank, i32 size, u8 channel kind.
constexpr uint32_t kHelloMagic = 0x31485454;  // "TTH1"
constexpr size_t kHelloBytes = 13;
enum class Channel : uint8_t { kData = 1, kControl = 2 };
// Control frames from authenticated peers; anything larger is a bug.
constexpr size_t kMaxControlBytes = 256u << 20;
// zstd wire frames (see above): the length field, the whole frame header, the
// most raw bytes one frame carries (sender and receiver), and the saving a
// zstd frame must bring to be sent instead of the raw bytes.
constexpr size_t kWireLengthBytes = kFrameHeaderBytes;
constexpr size_t kWireHeaderBytes = kWireLengthBytes + ZstdStage::kHeaderBytes;
constexpr size_t kWireFrameBytes = 1u << 20;
constexpr double kWireMinSaving = 0.10;

class TcpTransportImpl {
 public:
  using OpId = Transport::OpId;
  using Clock = Transport::Clock;

  TcpTransportImpl(const Settings& settings);
  ~TcpTransportImpl();

  // tcp_connect.cc
  Status connectAll(Store& store, const std::string& advertise_host);
  // How long connectAll() may take: TUTTI_TIMEOUT_SECONDS, or for an elastic
  // worker TUTTI_ELASTIC_TIMEOUT_SECONDS (a newcomer waits for the old
  // members to arrive at their next commit).
  static double setupTimeoutSeconds(const Settings& settings);

  // tcp_transport.cc
  OpId post(bool send, int peer, uint8_t* data, size_t bytes);
  Status wait(OpId id);
  Status waitAll();
  Status sendControl(int peer, std::vector<uint8_t> bytes);
  Status pollControl(Clock::time_point deadline, std::vector<ControlMessage>* out);
  Status drainControl(Clock::time_point deadline, std::vector<ControlMessage>* out);
  void wake();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int shmPeers() const { return shm_peers_; }
  const TcpWireStats& wireStats() const { return wire_; }

  // tcp_zstd.cc: all ranks publish their level before connecting
  // (publishZstdLevel), then compare after (checkZstdLevel: rank 0 against
  // every rank, the others against rank 0), then frame TCP peers' data.
  Status publishZstdLevel(Store& store);
  Status checkZstdLevel(Store& store);
  Status enableZstd();

 private:
  struct Op {
    OpId id;
    uint8_t* data;
    size_t bytes;
    size_t done;
  };
  struct Peer {
    std::shared_ptr<tcp::socket> data;
    std::shared_ptr<tcp::socket> ctrl;  // rank 0 <-> worker only
    std::deque<Op> sends, recvs;
    bool send_active = false, recv_active = false;
    Clock::time_point last_progress{};
    std::deque<std::vector<uint8_t>> ctrl_out;  // whole frames
    bool ctrl_writing = false;
    FrameHeader ctrl_header{};
    std::vector<uint8_t> ctrl_body;
    // Shared-memory path (tcp_shm.cc); null: data goes over `data`.
    std::unique_ptr<ShmChannel> shm;
    // zstd framing (tcp_zstd.cc); null: `data` carries a plain byte stream.
    std::unique_ptr<ZstdStage> zstd;
    std::vector<uint8_t> send_frame;  // length and segment header (+ zstd frame) being written
    std::array<uint8_t, kWireHeaderBytes> recv_header{};
    std::vector<uint8_t> recv_segment;  // segment header + zstd frame being read
    std::vector<uint8_t> decoded;       // a decoded frame longer than its receive
    size_t decoded_at = 0;              // bytes of `decoded` already delivered
    size_t raw_left = 0;                // bytes of the raw frame being read still to come
    bool bell_active = false;           // a doorbell read is pending on `data`
    bool bell_closed = false;           // that read ended: the peer closed (bell_error)
    bool shm_armed = false;             // our sleeping flag is set for this peer
    boost::system::error_code bell_error;
    std::array<uint8_t, 64> bell_buf{};
  };

  // tcp_transport.cc
  // Counts n bytes done on the front op of `ops`; pops it when complete.
  void advance(std::deque<Op>& ops, size_t n);
  void startSend(int peer);
  void startRecv(int peer);
  void startCtrlRead(int peer);
  void startCtrlWrite(int peer);
  void breakOn(int peer, const boost::system::error_code& ec);
  // failed_peer >= 0: close only that peer's data connection, cancel the
  // others' pending ops, keep control connections for lastWords()/drainControl().
  void breakWith(Status st, int failed_peer = -1);
  Status lastWords(int peer, const std::vector<uint8_t>& bytes);
  // A control connection failed: close it, then breakOn().
  void breakOnControl(int peer, const boost::system::error_code& ec);
  void closeAll();
  // Drives io_ until done() or a stall; `watch` lists the peers whose
  // connections must keep moving (empty: every peer with pending ops).
  template <typename Done>
  Status drive(Done done, int watch_peer);
  void runOneUntil(Clock::time_point deadline);

  // tcp_zstd.cc
  void startSendFramed(int peer);
  void startRecvFramed(int peer);
  void onFrameHeader(int peer);
  void onFramePayload(int peer, size_t raw);
  void deliverDecoded(int peer);
  void breakWire(int peer, const std::string& what);

  // tcp_shm.cc
  Status setupShm(Store& store);
  // Moves bytes between p's op queues and its rings; true if any moved.
  bool pumpShm(int peer);
  bool pumpAllShm();
  bool breakCorrupt(int peer);  // returns false
  // Before sleeping: raise our flags, look again; true if something moved
  // (then the caller must not sleep). disarmShm() lowers them after waking.
  bool armShm();
  void disarmShm();
  // Breaks the transport for a peer whose doorbell socket closed while ops
  // to it cannot progress any more. True if it did.
  bool checkShmClosed();
  void startBell(int peer);
  void ringBell(int peer);

  // tcp_connect.cc
  Status listen(tcp::endpoint* bound);
  void startOutgoing(int peer, Channel kind, const std::string& addr);
  void connectAttempt(int peer, Channel kind, std::shared_ptr<tcp::socket> sock,
                      tcp::resolver::results_type endpoints);
  void acceptNext();
  void install(int peer, Channel kind, std::shared_ptr<tcp::socket> sock);
  Status describeMissing(Store& store);

  // Declared first: destroyed last, after every socket bound to it.
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  int rank_;
  int size_;
  double timeout_s_;
  double setup_timeout_s_;  // setupTimeoutSeconds()
  std::string secret_;
  std::string hostname_;
  auth::Key key_{};
  std::vector<Peer> peers_;  // by rank; peers_[rank_] unused
  OpId next_id_ = 1;
  std::unordered_map<OpId, int> pending_;    // op -> peer, until complete
  std::unordered_map<OpId, Status> failed_;  // ops refused at posting
  std::deque<ControlMessage> inbox_;
  std::atomic<bool> woken_{false};
  Status broken_;
  // Shared memory: this rank's host identity ("" when TUTTI_SHM=off) and the
  // number of peers that use it.
  std::string shm_identity_;
  int shm_peers_ = 0;
  int zstd_level_ = 0;  // settings.compression_zstd_level
  TcpWireStats wire_;

  // Connection setup state (tcp_connect.cc).
  std::unique_ptr<tcp::acceptor> acceptor_;
  Clock::time_point setup_deadline_{};
  int expected_ = 0;
  int connected_ = 0;
  Status setup_error_;
  std::vector<std::string> last_connect_error_;  // by rank
};

}  // namespace tutti
