#include "ops/mpi/mpi_transport.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <thread>

#include "core/logging.h"
#include "core/message.h"
#include "core/mpi_exit_notices.h"
#include "ops/mpi/mpi_environment.h"
#include "ops/mpi/mpi_wait.h"

namespace tutti {
namespace {

constexpr auto kMinBackoff = std::chrono::microseconds(20);
constexpr auto kMaxBackoff = std::chrono::milliseconds(1);
// For this long after the last message or wake the poll stays at the minimum
// back-off: in a training loop the next message comes within microseconds to
// milliseconds, and sleeping up to 1 ms then put a ~400 µs floor under every
// small op. Idle longer than this, the back-off grows and the rank sleeps.
constexpr auto kHotWindow = std::chrono::milliseconds(20);
// Tags: kTagBase + 4 * (epoch % kEpochs) + kind. Stays below 32767, the
// smallest MPI_TAG_UB the standard allows.
constexpr int kTagBase = 16;
constexpr int kEpochs = 4096;
constexpr int kControlKind = 0;
constexpr int kCloseKind = 1;
constexpr int kDataKind = 2;
constexpr int kWedgeKind = 3;

std::atomic<int> g_next_epoch{0};           // one per transport created in this process
std::atomic<bool> g_transport_live{false};  // one MPI transport per process at a time

int tagOf(int epoch, int kind) {
  return kTagBase + 4 * (epoch % kEpochs) + kind;
}

// Frees a communicator; MPI_COMM_NULL is left alone.
void freeComm(MPI_Comm* comm) {
  if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
}

}  // namespace

Status MpiTransport::connect(const Settings& settings, std::unique_ptr<MpiTransport>* out) {
  if (g_transport_live.exchange(true)) {
    return Status::invalidArgument(
        "TUTTI_BACKEND=mpi: another tutti runtime on the mpi backend is running in this "
        "process; the mpi backend allows one at a time (shut it down first)");
  }
  Status st = acquireMpi(settings.timeout_seconds);
  if (!st.isOk()) {
    g_transport_live = false;
    return st;
  }
  auto give_up = [](Status status) {
    releaseMpi();
    g_transport_live = false;
    return status;
  };

  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rc != MPI_SUCCESS) return give_up(Status::ioError(mpiErrorText("MPI_Comm_dup", rc)));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);

  JobPlacement p;
  MPI_Comm_rank(comm, &p.rank);
  MPI_Comm_size(comm, &p.size);
  MPI_Comm local = MPI_COMM_NULL, cross = MPI_COMM_NULL;
  rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, p.rank, MPI_INFO_NULL, &local);
  if (rc == MPI_SUCCESS) {
    MPI_Comm_rank(local, &p.local_rank);
    MPI_Comm_size(local, &p.local_size);
    rc = MPI_Comm_split(comm, p.local_rank, p.rank, &cross);
  }
  if (rc == MPI_SUCCESS) {
    MPI_Comm_rank(cross, &p.cross_rank);
    MPI_Comm_size(cross, &p.cross_size);
  }
  freeComm(&local);
  freeComm(&cross);
  if (rc != MPI_SUCCESS) {
    freeComm(&comm);
    return give_up(Status::ioError(mpiErrorText("MPI_Comm_split", rc)));
  }

  // Settings must describe the same job as MPI. Decided together, so that
  // no rank goes on alone to wait for the others.
  int agree = (settings.rank == p.rank && settings.size == p.size) ? 1 : 0;
  int all_agree = 0;
  rc = MPI_Allreduce(&agree, &all_agree, 1, MPI_INT, MPI_MIN, comm);
  if (rc != MPI_SUCCESS || !all_agree) {
    freeComm(&comm);
    if (rc != MPI_SUCCESS) return give_up(Status::ioError(mpiErrorText("MPI_Allreduce", rc)));
    if (!agree) {
      return give_up(Status::invalidArgument(
          "TUTTI_RANK/TUTTI_SIZE say rank " + std::to_string(settings.rank) + " of " +
          std::to_string(settings.size) + ", but MPI_COMM_WORLD says rank " +
          std::to_string(p.rank) + " of " + std::to_string(p.size) +
          ": under mpirun leave TUTTI_RANK and TUTTI_SIZE unset (tutti takes them from MPI)"));
    }
    return give_up(Status::invalidArgument(
        "TUTTI_BACKEND=mpi: another rank's TUTTI_RANK/TUTTI_SIZE disagree with MPI_COMM_WORLD "
        "(see that rank's error)"));
  }
  const int epoch = g_next_epoch.fetch_add(1);
  out->reset(new MpiTransport(comm, p, epoch, settings.timeout_seconds));
  TUTTI_LOG(kDebug) << "mpi transport: rank " << p.rank << "/" << p.size << ", local "
                    << p.local_rank << "/" << p.local_size << ", cross " << p.cross_rank << "/"
                    << p.cross_size;
  return Status::ok();
}

MpiTransport::MpiTransport(MPI_Comm comm, JobPlacement placement, int epoch, double timeout_seconds)
    : comm_(comm),
      placement_(placement),
      control_tag_(tagOf(epoch, kControlKind)),
      close_tag_(tagOf(epoch, kCloseKind)),
      data_tag_(tagOf(epoch, kDataKind)),
      wedge_tag_(tagOf(epoch, kWedgeKind)),
      timeout_seconds_(timeout_seconds),
      liveness_(placement.rank, placement.size, timeout_seconds, timeout_seconds),
      closed_by_(static_cast<size_t>(placement.size), false),
      backoff_(kMinBackoff) {
  setMpiWedgeListener([this](const std::string& why) { announceWedge(why); });
  liveness_.start(Clock::now());
}

MpiTransport::~MpiTransport() {
  setMpiWedgeListener(nullptr);
  if (mpiWedged()) {
    // An MPI call of this process never completed: no MPI call is safe any
    // more, and the job ends with MPI_Abort (mpi_environment.h). Everything
    // MPI may still use is leaked.
    for (PendingSend& s : sends_) new std::vector<uint8_t>(std::move(s.bytes));
    releaseMpi();
    g_transport_live = false;
    return;
  }
  sendCloseNotices();
  // Closing is collective: every rank's background thread gets here within
  // the shutdown handshake. Until all have arrived (MPI_Ibarrier), each rank
  // lets its last sends go out and receives and drops whatever is still
  // addressed to it, so that no message is left unreceived in the
  // communicator when it is freed (Open MPI can then hang the next
  // MPI_Comm_dup of this process).
  MPI_Request barrier = MPI_REQUEST_NULL;
  bool closed = MPI_Ibarrier(comm_, &barrier) == MPI_SUCCESS;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(std::min(timeout_seconds_, 10.0)));
  auto backoff = std::chrono::microseconds(20);
  bool synced = false;
  while (closed && Clock::now() < deadline) {
    if (!progressSends().isOk()) break;
    drainIncoming();
    int done = 0;
    if (MPI_Test(&barrier, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
    if (done && sends_.empty()) {
      synced = true;
      break;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::microseconds(1000));
  }
  drainIncoming();
  if (!synced) {
    // A peer never closed (it hung, or died without Open MPI noticing). MPI
    // may still use the buffers and the communicator: both are leaked on
    // purpose rather than freed under its feet.
    TUTTI_LOG(kWarning) << "mpi transport: rank " << placement_.rank
                        << ": the other ranks did not close within "
                        << std::min(timeout_seconds_, 10.0) << " s; leaving the communicator";
    for (PendingSend& s : sends_) {
      MPI_Request_free(&s.request);
      new std::vector<uint8_t>(std::move(s.bytes));
    }
  }
  // Data ops still posted only after a failure: receives are cancelled,
  // sends released.
  for (auto& [id, op] : ops_) {
    (void)id;
    for (MPI_Request& r : op.requests) {
      if (r == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
  }
  if (synced && ops_.empty()) {
    MPI_Comm comm = comm_;
    freeComm(&comm);
  }
  releaseMpi();
  g_transport_live = false;
}

void MpiTransport::drainIncoming() {
  std::vector<uint8_t> scratch;
  while (true) {
    int found = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    if (MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &found, &message, &status) != MPI_SUCCESS ||
        !found) {
      return;
    }
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    scratch.resize(static_cast<size_t>(std::max(count, 1)));
    if (MPI_Mrecv(scratch.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      return;
    }
  }
}

Status MpiTransport::fail(int code, const char* call) {
  if (broken_.isOk()) broken_ = mpiStatus(code, call, placement_.rank);
  return broken_;
}

Transport::OpId MpiTransport::postSend(int peer, const void* data, size_t bytes) {
  const OpId id = next_op_++;
  DataOp& op = ops_[id];
  op.peer = peer;
  std::vector<MPI_Request>& requests = op.requests;
  const char* p = static_cast<const char*>(data);
  size_t offset = 0;
  do {
    const size_t n = std::min(bytes - offset, kMaxMessageBytes);
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = MPI_Isend(p + offset, static_cast<int>(n), MPI_BYTE, peer, data_tag_, comm_, &r);
    if (rc != MPI_SUCCESS) {
      fail(rc, "MPI_Isend");
      break;
    }
    requests.push_back(r);
    offset += n;
  } while (offset < bytes);
  return id;
}

Transport::OpId MpiTransport::postRecv(int peer, void* data, size_t bytes) {
  const OpId id = next_op_++;
  DataOp& op = ops_[id];
  op.peer = peer;
  std::vector<MPI_Request>& requests = op.requests;
  char* p = static_cast<char*>(data);
  size_t offset = 0;
  do {
    const size_t n = std::min(bytes - offset, kMaxMessageBytes);
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = MPI_Irecv(p + offset, static_cast<int>(n), MPI_BYTE, peer, data_tag_, comm_, &r);
    if (rc != MPI_SUCCESS) {
      fail(rc, "MPI_Irecv");
      break;
    }
    requests.push_back(r);
    offset += n;
  } while (offset < bytes);
  return id;
}

Status MpiTransport::wait(OpId id) {
  auto it = ops_.find(id);
  if (it == ops_.end()) {
    if (!broken_.isOk()) return broken_;
    return Status::internal("mpi transport: wait() on unknown op " + std::to_string(id));
  }
  DataOp op = std::move(it->second);
  ops_.erase(it);
  if (!broken_.isOk()) return broken_;
  return waitData(&op.requests, {op.peer});
}

Status MpiTransport::waitAll() {
  if (ops_.empty()) return Status::ok();
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  for (auto& [id, op] : ops_) {
    (void)id;
    requests.insert(requests.end(), op.requests.begin(), op.requests.end());
    if (std::find(peers.begin(), peers.end(), op.peer) == peers.end()) peers.push_back(op.peer);
  }
  ops_.clear();
  if (!broken_.isOk()) return broken_;
  std::sort(peers.begin(), peers.end());
  return waitData(&requests, peers);
}

Status MpiTransport::waitData(std::vector<MPI_Request>* requests, const std::vector<int>& peers) {
  std::string call = "MPI_Isend/MPI_Irecv with rank";
  for (size_t i = 0; i < peers.size(); ++i) {
    call += (i ? "," : (peers.size() > 1 ? "s " : " ")) + std::to_string(peers[i]);
  }
  Status st = waitMpiRequests(requests, call.c_str(), waitScope());
  if (!st.isOk() && broken_.isOk()) broken_ = st;
  return st;
}

MpiWaitScope MpiTransport::waitScope() {
  std::vector<int> ranks(static_cast<size_t>(placement_.size));
  for (int r = 0; r < placement_.size; ++r) ranks[static_cast<size_t>(r)] = r;
  MpiWaitScope scope{placement_.rank, mpiScopeName(ranks, true), timeout_seconds_, nullptr};
  // The peers waiting in the negotiation meanwhile must hear from this rank.
  // A collective's wait is a wait: its time is no gap of this rank's.
  scope.on_poll = [this] {
    const auto now = Clock::now();
    liveness_.enterWait(now);
    sendHeartbeats(now);
    (void)progressSends();
  };
  return scope;
}

Status MpiTransport::sendControl(int peer, std::vector<uint8_t> bytes) {
  if (!broken_.isOk()) return broken_;
  if (peer < 0 || peer >= placement_.size || peer == placement_.rank ||
      (placement_.rank != 0 && peer != 0)) {
    return Status::internal("mpi transport: rank " + std::to_string(placement_.rank) +
                            " may not send control messages to rank " + std::to_string(peer));
  }
  if (bytes.empty()) {
    return Status::invalidArgument("an empty control message is reserved for heartbeats");
  }
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    return Status::internal("mpi transport: control message of " + std::to_string(bytes.size()) +
                            " bytes is larger than one MPI message allows");
  }
  const int rc = postControlSend(peer, control_tag_, std::move(bytes));
  if (rc != MPI_SUCCESS) return fail(rc, "MPI_Isend");
  backoff_ = kMinBackoff;  // a reply is likely soon
  liveness_.sent(peer, Clock::now());
  return progressSends();
}

int MpiTransport::postControlSend(int peer, int tag, std::vector<uint8_t> bytes) {
  sends_.emplace_back();
  PendingSend& s = sends_.back();
  s.bytes = std::move(bytes);
  const int rc = MPI_Isend(s.bytes.data(), static_cast<int>(s.bytes.size()), MPI_BYTE, peer, tag,
                           comm_, &s.request);
  if (rc != MPI_SUCCESS) sends_.pop_back();
  return rc;
}

Status MpiTransport::receiveArrived(
    int tag, const std::function<void(int from, std::vector<uint8_t> bytes)>& take) {
  while (true) {
    int found = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    int rc = MPI_Improbe(MPI_ANY_SOURCE, tag, comm_, &found, &message, &status);
    if (rc != MPI_SUCCESS) return fail(rc, "MPI_Improbe");
    if (!found) return Status::ok();
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    std::vector<uint8_t> bytes(static_cast<size_t>(count));
    rc = MPI_Mrecv(bytes.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return fail(rc, "MPI_Mrecv");
    take(status.MPI_SOURCE, std::move(bytes));
  }
}

PeerLiveness::IsOpen MpiTransport::controlOpen() const {
  return [this](int peer) { return !closed_by_[static_cast<size_t>(peer)]; };
}

Status MpiTransport::progressSends() {
  while (!sends_.empty()) {
    int done = 0;
    int rc = MPI_Test(&sends_.front().request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return fail(rc, "MPI_Test");
    if (!done) break;
    sends_.pop_front();  // completes in order often enough; later ones are tested next call
  }
  return Status::ok();
}

Status MpiTransport::receiveControl(std::vector<ControlMessage>* out) {
  // Close notices first, then control messages: MPI matches each sender's
  // messages in order, so once a close notice is visible, every message that
  // peer sent before it is already queued and is received below, before the
  // loss is reported. (The other way round, a probe can miss a message that
  // arrives while it runs and then find the close behind it.)
  TUTTI_RETURN_IF_ERROR(receiveWedgeNotices());
  std::vector<int> closed;
  TUTTI_RETURN_IF_ERROR(
      receiveArrived(close_tag_, [&](int from, std::vector<uint8_t>) { closed.push_back(from); }));
  TUTTI_RETURN_IF_ERROR(receiveArrived(control_tag_, [&](int from, std::vector<uint8_t> bytes) {
    liveness_.heard(from, Clock::now());
    if (bytes.empty()) return;  // a heartbeat
    ControlMessage msg;
    msg.from_rank = from;
    msg.bytes = std::move(bytes);
    out->push_back(std::move(msg));
  }));
  for (int from : closed) {
    closed_by_[static_cast<size_t>(from)] = true;
    if (broken_.isOk()) {
      broken_ = Status::peerLost(
          from, "rank " + std::to_string(from) + " closed its connection (it shut down or failed)");
    }
  }
  return Status::ok();
}

Status MpiTransport::pollControl(Clock::time_point deadline, std::vector<ControlMessage>* out) {
  out->clear();
  if (!broken_.isOk()) return broken_;
  while (true) {
    TUTTI_RETURN_IF_ERROR(progressSends());
    const bool was_ok = broken_.isOk();
    Status st = receiveControl(out);  // heartbeats that arrived are heard here
    // Liveness first, also while messages keep coming (a busy stream must
    // neither silence this rank nor hide a stopped peer).
    const auto now = Clock::now();
    liveness_.enterWait(now);
    sendHeartbeats(now);
    const PeerLiveness::IsOpen open = controlOpen();
    auto silent_until = Clock::time_point::max();
    const int silent =
        st.isOk() && broken_.isOk() ? liveness_.silentPeer(now, open, &silent_until) : -1;
    if (silent >= 0) (void)loseSilentPeer(silent);
    if (!out->empty()) {
      // Messages that arrived before a close notice (or the silence) are
      // delivered first; the loss is reported by the next call.
      backoff_ = kMinBackoff;
      last_traffic_ = Clock::now();
      return Status::ok();
    }
    if (!st.isOk() || (was_ok && !broken_.isOk())) return broken_;
    std::unique_lock<std::mutex> lock(wake_mu_);
    if (woken_) {
      woken_ = false;
      backoff_ = kMinBackoff;
      last_traffic_ = Clock::now();
      return Status::ok();
    }
    if (now >= deadline) return Status::ok();
    const auto sleep =
        std::min<Clock::duration>({backoff_, deadline - now, silent_until - now, next_beat_ - now});
    wake_cv_.wait_for(lock, sleep, [this] { return woken_; });
    liveness_.leftWait(Clock::now());
    if (Clock::now() - last_traffic_ > kHotWindow) {
      backoff_ = std::min<Clock::duration>(backoff_ * 2, kMaxBackoff);
    }
  }
}

void MpiTransport::sendHeartbeats(Clock::time_point now) {
  if (!broken_.isOk() || mpiWedged()) {
    next_beat_ = Clock::time_point::max();
    return;
  }
  if (now < next_beat_) return;  // the common case (every poll of a wait): one comparison
  const PeerLiveness::IsOpen open = controlOpen();
  for (int peer : liveness_.heartbeatsDue(now, open)) {
    if (postControlSend(peer, control_tag_, {}) != MPI_SUCCESS) break;
    liveness_.sent(peer, now);
  }
  next_beat_ = liveness_.nextHeartbeat(open);
}

Status MpiTransport::loseSilentPeer(int peer) {
  const double grace = mpiAbortGraceSeconds(timeout_seconds_);
  const std::string why = liveness_.silenceMessage(peer) + "; " +
                          mpiAbortNotice(grace, "an MPI job cannot go on without one of its ranks");
  // Announced to the other ranks (the wedge listener) while the transport
  // still sends; then MPI_Abort ends the job, the stopped rank with it.
  wedgeMpi(why, grace);
  if (broken_.isOk()) broken_ = Status::peerLost(peer, why);
  return broken_;
}

void MpiTransport::wake() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    woken_ = true;
  }
  wake_cv_.notify_one();
}

void MpiTransport::announceWedge(const std::string& why) {
  // Rank 0 sends the coordinator's abort notice (core/message.h), which the
  // workers act on at once; a worker tells rank 0, whose runtime then aborts
  // every worker.
  std::vector<uint8_t> bytes;
  int tag = wedge_tag_;
  std::vector<int> peers;
  if (placement_.rank == 0) {
    ResponseList list;
    list.shutdown = true;
    list.abort_code = StatusCode::kPeerLost;
    list.abort_message = why;
    bytes = serialize(list);
    tag = control_tag_;
    for (int r = 1; r < placement_.size; ++r) peers.push_back(r);
  } else {
    bytes.assign(why.begin(), why.end());
    peers.push_back(0);
  }
  for (int peer : peers) {
    if (closed_by_[static_cast<size_t>(peer)]) continue;
    (void)postControlSend(peer, tag, bytes);
  }
  // Small messages leave at once; give them a moment to be sure (the
  // process may exit right after the error reached the program).
  const auto until = Clock::now() + std::chrono::milliseconds(100);
  while (!sends_.empty() && Clock::now() < until && progressSends().isOk()) {
  }
}

Status MpiTransport::receiveWedgeNotices() {
  return receiveArrived(wedge_tag_, [this](int, std::vector<uint8_t> bytes) {
    if (!broken_.isOk()) return;
    const std::string why(bytes.begin(), bytes.end());
    // Relayed to every worker before the transport breaks (a broken one
    // sends nothing more).
    if (placement_.rank == 0) announceWedge(why);
    broken_ = Status::peerLost(why);
  });
}

void MpiTransport::sendCloseNotices() {
  std::vector<int> peers;
  if (placement_.rank == 0) {
    for (int r = 1; r < placement_.size; ++r) peers.push_back(r);
  } else {
    peers.push_back(0);
  }
  for (int peer : peers) {
    if (closed_by_[static_cast<size_t>(peer)]) continue;  // it hung up first
    if (postControlSend(peer, close_tag_, {}) != MPI_SUCCESS) break;
  }
}

}  // namespace tutti
