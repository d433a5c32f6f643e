#pragma once

// The TCP transport's engine behind TcpTransport (ops/tcp/tcp_transport.h):
// one io_context, the op ids and their deadlines, the stall watch, the
// control channel, and one Link per peer (ops/tcp/link.h: SocketLink,
// ZstdLink or ShmLink, chosen once at connect). The mesh knows no protocol:
// it posts ops to links, drives them in one loop and breaks the transport
// when a link fails. Not a public interface.
//
// Files: tcp_mesh.cc (data and control paths), tcp_connect.cc (connection
// setup), shm_setup.cc (the shared-memory offers after connecting).
//
// Threading: everything runs on the thread that calls into the transport;
// handlers run only inside io_.run_one_until()/poll() on that thread. The one
// exception is wake() (an atomic flag plus a posted no-op).

#include <atomic>
#include <boost/asio.hpp>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/settings.h"
#include "core/store.h"
#include "ops/peer_liveness.h"
#include "ops/tcp/control_channel.h"
#include "ops/tcp/link.h"
#include "ops/tcp/peer_records.h"
#include "ops/tcp/shm_channel.h"
#include "ops/tcp/tcp_transport.h"
#include "ops/transport.h"
#include "rendezvous/auth.h"

namespace tutti {

class TcpMesh final : public LinkHost {
 public:
  using OpId = Transport::OpId;
  using Clock = Transport::Clock;

  explicit TcpMesh(const Settings& settings);
  ~TcpMesh();

  // TcpTransport::connect's steps 1-5 (see there), size > 1.
  Status connect(Store& store, const std::string& advertise_host);
  // How long connecting may take: TUTTI_TIMEOUT_SECONDS, or for an elastic
  // worker TUTTI_ELASTIC_TIMEOUT_SECONDS (a newcomer waits for the old
  // members to arrive at their next commit).
  static double setupTimeoutSeconds(const Settings& settings);

  // tcp_mesh.cc: Transport's calls.
  OpId post(bool send, int peer, uint8_t* data, size_t bytes);
  Status wait(OpId id);
  Status waitAll();
  Status sendControl(int peer, std::vector<uint8_t> bytes);
  Status pollControl(Clock::time_point deadline, std::vector<ControlMessage>* out);
  Status drainControl(Clock::time_point deadline, std::vector<ControlMessage>* out);
  void wake();
  void cancel(const Status& status);  // any thread
  void setProgressTimeout(double seconds) { progress_timeout_s_ = seconds; }
  void setSpin(std::chrono::microseconds spin) { spin_ = spin; }
  // TcpTransport::setControlUnused.
  void setControlUnused() {
    heartbeats_ = false;
    control_.setFailuresBreakMesh(false);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  int shmPeers() const { return shm_peers_; }
  const TcpWireStats& wireStats() const { return wire_; }

  // Tests (tests/ops/tcp_link_test.cc): the io_context links are bound to,
  // and a link made by hand on it, used instead of one connect() would make.
  asio::io_context& io() { return io_; }
  void adoptLink(std::unique_ptr<Link> link);

  // LinkHost
  void opCompleted(OpId id) override { pending_.erase(id); }
  void linkFailed(int peer, Status st) override;
  TcpWireStats& wireStats() override { return wire_; }

 private:
  // tcp_mesh.cc
  // The transport breaks with `st`. failed_peer >= 0: only that peer's link
  // closes, the others stop and the control connections stay open for
  // lastWords()/drainControl(); -1: everything closes.
  void breakWith(Status st, int failed_peer = -1);
  void closeAll();
  // Drives the links until done() or a stall of `watch_peer` (-1: of any
  // link with ops queued).
  template <typename Done>
  Status drive(Done done, int watch_peer);
  // The earliest moment a watched busy link has been silent for the whole
  // timeout (counting from wait_start); *peer = -1 when none is busy.
  Clock::time_point stallAt(Clock::time_point wait_start, int watch_peer, int* peer) const;
  // Runs one handler or returns at `deadline`. asio's own wait rounds its
  // timeout up to whole milliseconds (epoll_wait), so a deadline under
  // kPreciseWait away is armed on deadline_timer_ (a timerfd), which wakes
  // it on time: TUTTI_CYCLE_TIME_MS=0.1 holds 0.1 ms, not 1 ms.
  void runOneUntil(Clock::time_point deadline);
  bool takeInbox(std::vector<ControlMessage>* out);
  // Queues the heartbeats due (ops/peer_liveness.h); true if any. Keeps
  // next_beat_, when the next one falls due.
  bool sendHeartbeats(Clock::time_point now);
  // sendHeartbeats(), and one turn of the handlers when it sent any.
  void keepAlive();
  // A control peer not heard from for the timeout: the transport breaks
  // naming it and its control connection closes; true then. Else *until is
  // when the next one would be.
  bool loseSilentPeer(Clock::time_point* until);
  // The liveness bookkeeping's "is the control connection to this peer open".
  PeerLiveness::IsOpen controlOpen() const;

  // tcp_connect.cc
  Status connectAll(Store& store, const std::string& advertise_host);
  Status publishSelf(Store& store, const std::string& advertise_host);
  Status lowerAddresses(Store& store, std::vector<std::string>* addrs);
  Status awaitConnections(Store& store);
  Status listen(tcp::endpoint* bound);
  void startOutgoing(int peer, Channel kind, const std::string& addr);
  void connectAttempt(int peer, Channel kind, std::shared_ptr<tcp::socket> sock,
                      tcp::resolver::results_type endpoints);
  void acceptNext();
  void onHello(std::shared_ptr<tcp::socket> sock, const Hello& h);
  void install(int peer, Channel kind, std::shared_ptr<tcp::socket> sock);
  Status describeMissing(Store& store);
  // One Link per peer, then control reads start.
  Status makeLinks();

  // shm_setup.cc: the shared-memory channels of same-host peers, by rank,
  // negotiated in three steps (offer, answer, take the answer).
  struct ShmPair;
  Status setupShm(Store& store, std::vector<std::unique_ptr<ShmChannel>>* channels);
  std::vector<int> sameHostPeers(Store& store);
  Status offerShm(ShmPair& pair);
  Status answerShm(ShmPair& pair);
  Status takeShmAnswer(ShmPair& pair);
  // kIoError naming the peer and `what` for a failed step, kTimeout for one
  // that ran past the setup deadline.
  Status shmStep(const ShmPair& pair, const char* what, const boost::system::error_code& ec);
  // Runs one read (write = false) or write of `buffer` on `sock` to its end
  // or the setup deadline (then the socket is closed).
  boost::system::error_code transfer(tcp::socket& sock, bool write, asio::mutable_buffer buffer);

  // Declared first: destroyed last, after every socket bound to it.
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  asio::steady_timer deadline_timer_{io_};
  int rank_;
  int size_;
  double timeout_s_;
  double setup_timeout_s_;  // setupTimeoutSeconds()
  std::string secret_;
  std::string hostname_;
  auth::Key key_{};
  PeerLiveness liveness_;  // before control_, which refers to it
  Clock::time_point next_beat_{};
  ControlChannel control_;
  std::vector<std::unique_ptr<Link>> links_;  // by rank; links_[rank_] null
  OpId next_id_ = 1;
  std::unordered_map<OpId, int> pending_;    // op -> peer, until complete
  std::unordered_map<OpId, Status> failed_;  // ops refused at posting
  std::atomic<bool> woken_{false};
  std::atomic<bool> cancelled_{false};
  std::mutex cancel_mu_;
  Status cancel_status_;           // guarded by cancel_mu_
  double progress_timeout_s_ = 0;  // the stall watch's; <= 0: none
  Clock::duration spin_{};         // how long a wait polls before it sleeps
  bool heartbeats_ = true;         // false: setControlUnused()
  Status broken_;
  // Shared memory: this rank's host identity ("" when TUTTI_SHM=off) and the
  // number of peers that use it.
  std::string shm_identity_;
  int shm_peers_ = 0;
  int zstd_level_ = 0;  // settings.compression_zstd_level
  TcpWireStats wire_;

  // Connection setup state (tcp_connect.cc).
  std::vector<std::shared_ptr<tcp::socket>> data_;  // by rank, until makeLinks()
  std::vector<std::unique_ptr<ShmChannel>> shm_;    // by rank, until makeLinks()
  std::unique_ptr<tcp::acceptor> acceptor_;
  Clock::time_point setup_deadline_{};
  int expected_ = 0;
  int connected_ = 0;
  Status setup_error_;
  std::vector<std::string> last_connect_error_;  // by rank
};

}  // namespace tutti
