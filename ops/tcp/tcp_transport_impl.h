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

#include <atomic>
#include <boost/asio.hpp>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/settings.h"
#include "core/store.h"
#include "ops/tcp/auth.h"
#include "ops/tcp/shm_channel.h"
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

class TcpTransportImpl {
 public:
  using OpId = Transport::OpId;
  using Clock = Transport::Clock;

  TcpTransportImpl(const Settings& settings);
  ~TcpTransportImpl();

  // tcp_connect.cc
  Status connectAll(Store& store, const std::string& advertise_host);

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
    std::array<uint8_t, 4> ctrl_header{};
    std::vector<uint8_t> ctrl_body;
    // Shared-memory path (tcp_shm.cc); null: data goes over `data`.
    std::unique_ptr<ShmChannel> shm;
    bool bell_active = false;  // a doorbell read is pending on `data`
    bool bell_closed = false;  // that read ended: the peer closed (bell_error)
    bool shm_armed = false;    // our sleeping flag is set for this peer
    boost::system::error_code bell_error;
    std::array<uint8_t, 64> bell_buf{};
  };

  // tcp_transport.cc
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

  // Connection setup state (tcp_connect.cc).
  std::unique_ptr<tcp::acceptor> acceptor_;
  Clock::time_point setup_deadline_{};
  int expected_ = 0;
  int connected_ = 0;
  Status setup_error_;
  std::vector<std::string> last_connect_error_;  // by rank
};

}  // namespace tutti
