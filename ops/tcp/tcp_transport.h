#pragma once

// Transport (ops/transport.h) over TCP with Boost.Asio: a full mesh of one
// authenticated data socket per peer pair, plus one control socket between
// rank 0 and each worker.
//
// Ownership: the transport owns its sockets and one io_context (through its
// TcpMesh, ops/tcp/tcp_mesh.h: one Link per peer); it starts no threads.
// Destroying it closes every connection (peers see "rank R closed its
// connection").
//
// Threading: one thread at a time (the runtime's background thread) except
// wake(), which any thread may call. Progress happens only inside
// wait()/waitAll()/pollControl() on the calling thread, which sleeps in epoll
// until bytes move, a deadline passes or wake() is called: an idle transport
// uses no CPU.
//
// Timeouts (settings.timeout_seconds, in seconds): connect() as a whole
// (an elastic worker: settings.elastic_timeout_seconds); and while waiting,
// no byte moving on an op's connection for that long is kPeerLost "rank R: no
// progress for T s". A host that vanishes silently (no FIN/RST: power off,
// link down) is detected also while nothing is in flight: every peer
// connection has TCP keepalive and TCP_USER_TIMEOUT derived from T
// (ops/tcp/tcp_keepalive.h), so it breaks within about T and is kPeerLost
// naming the rank; a peer that is only slow to reach a collective is not
// (its kernel answers the probes).
//
// Errors: EOF or reset on any connection is kPeerLost naming the rank; after
// the first kPeerLost the transport is broken and every call returns it.
// pollControl() clears `out` and fills it with the messages that arrived.

#include <memory>
#include <string>

#include "core/settings.h"
#include "core/store.h"
#include "ops/transport.h"

namespace tutti {

class TcpMesh;

// What went over this rank's data sockets to TCP peers (not through shared
// memory), since connect.
struct TcpWireStats {
  uint64_t payload_bytes = 0;      // bytes the algorithms sent (postSend)
  uint64_t socket_bytes = 0;       // bytes written on the sockets, frame headers included
  uint64_t frames = 0;             // zstd wire frames sent (0 at level 0: no frames)
  uint64_t compressed_frames = 0;  // of which carried a zstd frame, not raw bytes
};

class TcpTransport : public Transport {
 public:
  // Blocking connection setup, at most settings.timeout_seconds:
  //  1. listen on an ephemeral port (bind settings.hostname, or 0.0.0.0);
  //  2. publish "rank/<r>/addr" = "host:port" in `store`, host =
  //     settings.hostname if set, else `advertise_host` (the local address of
  //     the route to the rendezvous server; "127.0.0.1" if empty);
  //  3. connect to every rank j < r, accept from every j > r; every
  //     connection is authenticated with settings.secret, then says hello;
  //  4. with settings.compression_zstd_level > 0, data to TCP peers goes in
  //     zstd frames (ops/tcp/zstd_link.h); every rank must use the same
  //     level (published as "rank/<r>/zstd_level" before the address and
  //     compared after connecting: kInvalidArgument naming both ranks);
  //  5. peers on the same host (equal "rank/<r>/host" entries, published
  //     before the address; settings.shm == "auto" on both) set up a
  //     shared-memory channel over their data connection and move data
  //     through it from then on; the TCP connection stays open for wake-ups
  //     and to see the peer go (ops/tcp/shm_setup.cc, ops/tcp/shm_link.h). A
  //     failure there is a warning and the pair stays on TCP.
  // Size 1: no sockets, the store is not used. Errors: kTimeout naming the
  // ranks that never published their address or never connected; kIoError
  // for bind/resolve/authentication failures; kInvalidArgument for a peer
  // that disagrees on the job size; the store's kShutdown when its get() says
  // the rendezvous was abandoned (Status::generationSuperseded(),
  // rendezvous/elastic_membership.h), also asked every 0.5 s while waiting for
  // peers to connect.
  static Status connect(const Settings& settings, Store& store, const std::string& advertise_host,
                        std::unique_ptr<TcpTransport>* out);
  ~TcpTransport() override;

  int rank() const override;
  int size() const override;
  OpId postSend(int peer, const void* data, size_t bytes) override;
  OpId postRecv(int peer, void* data, size_t bytes) override;
  Status wait(OpId id) override;
  Status waitAll() override;
  Status sendControl(int peer, std::vector<uint8_t> bytes) override;
  Status pollControl(Clock::time_point deadline, std::vector<ControlMessage>* out) override;
  Status drainControl(Clock::time_point deadline, std::vector<ControlMessage>* out) override;
  void wake() override;
  void cancel(const Status& status) override;
  // How long a wait may see no byte move on a busy connection before the
  // peer counts as lost (default settings.timeout_seconds; <= 0: never).
  // The ordered lane, whose peers may reach an op much later than this rank,
  // sets TUTTI_ORDERED_TIMEOUT_SECONDS. Before the first wait.
  void setProgressTimeout(double seconds);
  // How long each wait keeps polling its connections before it sleeps in
  // epoll (default 0: sleeps at once). Waking a sleeping process costs tens
  // of microseconds on a busy host, a small collective's whole budget; the
  // ordered lane sets TUTTI_ORDERED_SPIN_US. Only inside a wait: an idle
  // transport still uses no CPU. Before the first wait.
  void setSpin(std::chrono::microseconds spin);
  // For a transport whose control channel is never used (the ordered lane:
  // its peers' liveness is the negotiated lane's heartbeats): no heartbeats,
  // and a control connection that fails or closes (a peer that finished its
  // last op and shut down) does not break the data path, which still
  // delivers what that peer sent. Before the first wait.
  void setControlUnused();

  // Peers whose data goes through shared memory rather than TCP (same host,
  // TUTTI_SHM=auto on both; see ops/tcp/shm_channel.h). For tests and logs.
  int sharedMemoryPeers() const;

  // Bytes sent to TCP peers and what the socket carried (what zstd saved).
  // Also logged at info level when the transport is destroyed.
  TcpWireStats wireStats() const;

 private:
  explicit TcpTransport(std::unique_ptr<TcpMesh> impl);
  std::unique_ptr<TcpMesh> impl_;
};

}  // namespace tutti
