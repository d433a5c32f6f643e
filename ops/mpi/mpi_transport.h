#pragma once

// Transport (ops/transport.h) over MPI point-to-point messages on a
// communicator of tutti's own (MPI_Comm_dup of MPI_COMM_WORLD), for jobs
// started by Open MPI's mpirun.
//
// Control channel: sendControl() is an MPI_Isend whose buffer the transport
// keeps until the send completed; pollControl() receives what arrived with
// MPI_Improbe + MPI_Mrecv. Data: postSend()/postRecv() are MPI_Isend/MPI_Irecv
// (split into messages of at most 1 GiB), completed by wait()/waitAll(),
// which poll them with a bound of TUTTI_TIMEOUT_SECONDS without a message
// completing (ops/mpi/mpi_wait.h).
//
// Waiting, honestly: MPI offers no file descriptor to sleep on, so unlike the
// tcp transport (which sleeps in epoll), an idle pollControl() polls: it
// probes, then sleeps on a condition variable for 20 µs; once nothing has
// arrived for 20 ms the sleep doubles up to 1 ms, and it starts again at
// 20 µs on traffic or wake() (a training loop stays responsive). An
// idle rank therefore wakes up about a thousand times a second for a few
// microseconds each (no busy spinning, but not zero CPU either). wait() and
// waitAll() poll with MPI_Testsome without sleeping, as Open MPI's own
// MPI_Waitall polls its progress engine (it yields the CPU when the node is
// oversubscribed).
//
// Liveness (ops/peer_liveness.h): rank 0 and each worker send each other an
// empty control message whenever they sent nothing for TUTTI_TIMEOUT_SECONDS
// / 4, from pollControl() and from every bounded wait (the backend's
// collectives too, through MpiWaitScope::on_poll); a control peer not heard
// from for TUTTI_TIMEOUT_SECONDS while this rank waits in pollControl() (a
// rank stopped between collectives, or its link cut) is kPeerLost naming it,
// announced and followed by MPI_Abort as a wait that timed out.
//
// Tags: every transport of a process gets a new epoch, and its messages carry
// tags of that epoch, so messages of an earlier runtime of this process that
// nobody received (a peer that had gone) can never match a later one's.
//
// Closing: destroying the transport sends a close notice to every control
// peer that has not closed first (rank 0: every worker; a worker: rank 0), so
// that a peer waiting for the other side to hang up (the shutdown handshake)
// sees kPeerLost "rank R closed its connection" at once, as with tcp. Then
// the ranks close together: an MPI_Ibarrier, while which each rank drains
// the messages still addressed to it, bounded by min(timeout, 10 s); then the
// communicator is freed. (A communicator freed with unreceived messages can
// hang Open MPI's next MPI_Comm_dup in that process.) If a peer never
// closes, the communicator is leaked instead, with a warning. After a wait
// of this process timed out (mpiWedged()), no MPI call is made at all: the
// job is ending with MPI_Abort, and everything is leaked.
//
// Threading: one thread at a time (the runtime's background thread) except
// wake(), which any thread may call. Creation (connect) and destruction may
// happen on different threads (MPI_THREAD_SERIALIZED at least).
//
// Errors: an MPI error is kPeerLost naming the call (ops/mpi/mpi_environment.h);
// a close notice from a peer is kPeerLost naming it. After the first kPeerLost
// the transport is broken and every call returns it. A data wait with no
// message completing for TUTTI_TIMEOUT_SECONDS is kPeerLost naming the peers
// it waited for, and ends the job with MPI_Abort (ops/mpi/mpi_wait.h). When
// any wait of this process times out (the backend's collectives too), the
// transport tells the other ranks, so that those waiting elsewhere (in the
// negotiation) fail too instead of being killed silently: rank 0 sends every
// worker the coordinator's abort notice (a ResponseList, core/message.h) with
// the timeout's message, a worker sends the message to rank 0 on a tag of its
// own, which rank 0 relays to every worker as its abort notice before its
// transport breaks with it. A
// process that dies makes Open MPI's mpirun abort the whole job (every rank is
// killed), which is how a lost peer ends here.

#include <mpi.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/settings.h"
#include "ops/backend_registry.h"
#include "ops/mpi/mpi_wait.h"
#include "ops/peer_liveness.h"
#include "ops/transport.h"

namespace tutti {

class MpiTransport : public Transport {
 public:
  // Collective over MPI_COMM_WORLD (every process calls it, in the same
  // order): initialises MPI if needed (ops/mpi/mpi_environment.h), duplicates
  // MPI_COMM_WORLD and derives the placement: rank and size from the world,
  // local rank and size from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), cross
  // rank and size from a split by local rank. settings.rank and
  // settings.size must agree with MPI's (kInvalidArgument otherwise, on every
  // rank). One MPI transport per process at a time (kInvalidArgument).
  static Status connect(const Settings& settings, std::unique_ptr<MpiTransport>* out);
  ~MpiTransport() override;
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  int rank() const override { return placement_.rank; }
  int size() const override { return placement_.size; }
  const JobPlacement& placement() const { return placement_; }
  // tutti's communicator (errors return); the backend's collectives use it.
  MPI_Comm comm() const { return comm_; }
  // This rank, the global process set and TUTTI_TIMEOUT_SECONDS, for waits.
  MpiWaitScope waitScope();

  OpId postSend(int peer, const void* data, size_t bytes) override;
  OpId postRecv(int peer, void* data, size_t bytes) override;
  Status wait(OpId id) override;
  Status waitAll() override;

  Status sendControl(int peer, std::vector<uint8_t> bytes) override;
  Status pollControl(Clock::time_point deadline, std::vector<ControlMessage>* out) override;
  void wake() override;

  // Largest single MPI message of postSend()/postRecv().
  static constexpr size_t kMaxMessageBytes = size_t{1} << 30;

 private:
  MpiTransport(MPI_Comm comm, JobPlacement placement, int epoch, double timeout_seconds);
  Status fail(int code, const char* call);
  Status progressSends();
  // Posts a nonblocking send of `bytes` to `peer` with `tag`, kept in
  // sends_ until it completes; MPI's return code (not kept unless
  // MPI_SUCCESS).
  int postControlSend(int peer, int tag, std::vector<uint8_t> bytes);
  // Receives every message with `tag` that has arrived, in MPI's order,
  // handing each sender and payload to `take`; an MPI error breaks the
  // transport (fail()) and is returned.
  Status receiveArrived(int tag,
                        const std::function<void(int from, std::vector<uint8_t> bytes)>& take);
  // The liveness bookkeeping's "is the control connection to this peer
  // open": no close notice from it yet.
  PeerLiveness::IsOpen controlOpen() const;
  Status receiveControl(std::vector<ControlMessage>* out);
  void sendCloseNotices();
  void drainIncoming();  // receives and drops every message addressed to this rank
  // Tells the other ranks that a wait of this process timed out (`why`):
  // rank 0 sends every worker an abort notice, a worker tells rank 0.
  void announceWedge(const std::string& why);
  // A worker's wedge notice received: rank 0 relays it to every worker as
  // its abort notice, then the transport breaks with its text.
  Status receiveWedgeNotices();
  // Heartbeats (ops/peer_liveness.h): empty messages on the control tag.
  void sendHeartbeats(Clock::time_point now);
  // A control peer not heard from for the timeout: kPeerLost naming it,
  // and the job ends as after a wait that timed out (wedgeMpi).
  Status loseSilentPeer(int peer);
  // Waits for data requests exchanged with `peers` (ascending), bounded.
  Status waitData(std::vector<MPI_Request>* requests, const std::vector<int>& peers);

  struct PendingSend {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<uint8_t> bytes;
  };

  const MPI_Comm comm_;
  const JobPlacement placement_;
  const int control_tag_;
  const int close_tag_;
  const int data_tag_;
  const int wedge_tag_;
  const double timeout_seconds_;
  PeerLiveness liveness_;
  Clock::time_point next_beat_{};  // sendHeartbeats()
  Status broken_;                  // first error; ok while usable
  std::deque<PendingSend> sends_;  // control sends in flight, oldest first
  std::vector<bool> closed_by_;    // close notice received from that rank
  OpId next_op_ = 1;
  struct DataOp {
    int peer = -1;
    std::vector<MPI_Request> requests;
  };
  std::map<OpId, DataOp> ops_;  // posted data ops
  Clock::duration backoff_;
  Clock::time_point last_traffic_{};  // last control message or wake()

  std::mutex wake_mu_;  // guards woken_ (wake() is called from any thread)
  std::condition_variable wake_cv_;
  bool woken_ = false;
};

}  // namespace tutti
