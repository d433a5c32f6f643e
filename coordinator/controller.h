#pragma once

// The negotiation protocol (rank 0's controller and every rank's loop).
//
// Every rank runs one background thread (coordinator/runtime.cc). Rank 0's
// thread also owns this Controller: a message table from tensor name to the
// request each rank submitted for it.
//
// 1. Announce. A framework thread enqueues an op; the tensor queue records a
//    Request (name, op, dtype, shape, root, scale factors, splits, device,
//    group) and wakes the background thread (Transport::wake()). The thread
//    takes every request that arrived since its last round. A worker sends
//    them to rank 0 as one RequestList (control channel); a request whose
//    parameters equal the ones this rank last executed for that name goes as
//    a response-cache slot id instead (coordinator/response_cache.h). Rank 0
//    feeds its own requests to the controller directly.
// 2. Count. Rank 0 adds every request to the table. A name is ready when
//    every rank submitted it, except ranks that have joined (join()), which
//    are left out for allreduce, reducescatter and barrier (they contribute
//    zeros / just take part). Readiness order is the order in which the last
//    missing request arrived at rank 0: that order is the global order.
// 3. Validate. For a ready name, request_validation.cc checks the requests
//    against each other (collective, device, dtype, reduce op, scale factors,
//    root, shape rules per collective). The result is an op Response (with
//    the sizes joined ranks and allgather/alltoall need) or an error Response
//    (kMismatch) that names the tensor, the ranks and the values; a request
//    that failed its own rank's checks (Request.error) makes it a
//    kInvalidArgument error on every rank, naming that rank. When every
//    rank announced the same live cache slot and no rank joined, the cached
//    Response is reused without validation.
// 4. Group. Members of a grouped allreduce (Request.group_id) are held until
//    all group_size members are decided, then released together.
// 5. Fuse and send. Rank 0's loop runs the fusion planner (fusion.h) over
//    the ready responses (compatible small allreduces become one Response
//    with many names), sends the resulting ResponseList to every worker and
//    executes it itself. Workers execute every ResponseList in arrival order.
//    Hence every rank executes the same responses in the same order, so the
//    backend collectives match up and the response caches stay identical.
// 6. Execute. For each Response a rank takes its entries for the names out
//    of its tensor queue (the names become free again), runs the backend
//    collective (or delivers the error) and completes the handles. A rank
//    without an entry for a name ignores an error for it; in an op Response
//    it is a joined rank and contributes zeros.
// Round timing: nothing sleeps. The loop blocks in Transport::pollControl()
// until a control message arrives, an enqueue wakes it, or a deadline (stall
// check, stall shutdown, shutdown timeout) passes. Requests that arrive while
// a round executes are taken by the next round: bursts fuse, a lone op goes
// at once. TUTTI_CYCLE_TIME_MS > 0 makes rank 0 gather for that long first.
// Join. A join request marks its rank as joined; pending names may become
// ready. When every rank joined, rank 0 emits one kJoin Response (name
// "__join") with last_joined_rank = the rank whose join arrived last, and the
// joined set is cleared.
// Stalls. Rank 0's stall inspector (stall_inspector.h) warns about names some
// ranks have not submitted after TUTTI_STALL_CHECK_TIME_SECONDS and, with
// TUTTI_STALL_SHUTDOWN_TIME_SECONDS > 0, fails them with an error Response
// (kStalled) on every rank.
// Shutdown. A rank that shuts down sends RequestList.shutdown. The first such
// request (or rank 0's own) stops the whole job, as in Horovod: rank 0 fails
// every pending name with kShutdown, sends a ResponseList with shutdown set
// (after any responses decided before), and every rank completes its pending
// handles with kShutdown and refuses later ops. No rank's shutdown() waits
// for another rank's user code. Each worker acks with one more
// RequestList.shutdown and waits for rank 0 to close; rank 0 closes once
// every worker acked; both waits are bounded by TUTTI_TIMEOUT_SECONDS.
// Faults. A lost peer (kPeerLost from the transport or backend) completes
// every pending handle with that status and closes the tensor queue with it.
// Rank 0 also sends, best effort, a ResponseList with abort_code so workers
// fail at once; then every rank closes its connections, so that peers still
// waiting on it see the loss promptly instead of after the timeout. A rank
// stopped or cut off between collectives, whose request the others wait
// for, is seen by the transports' heartbeats (ops/peer_liveness.h): the
// control peer that stops hearing from it fails with kPeerLost after
// TUTTI_TIMEOUT_SECONDS, and the rest of this paragraph follows.
//
// Process sets (coordinator/process_sets.h). Every request names its set
// (Request.process_set; 0 = every rank). The table is keyed by (set, name),
// so the same name may be pending in two sets at once; a name is ready when
// every member of its set submitted it; validation runs over the members in
// the set's order and names global ranks; groups are per set; the Response
// carries the set. Rank 0 decides the order of every set's responses in one
// list, as for the global set: each rank executes the responses of the sets
// it belongs to, in that order, and skips the others (their response-cache
// entries are still recorded, so every rank's cache stays the same). With
// one total order, two sets that share ranks cannot wait on each other in a
// cycle: the earliest response not yet done has every member on it.
// Registering and removing a set are ops of the global set
// (kAddProcessSet, kRemoveProcessSet): every rank executes them at the same
// point of the order, so set ids agree everywhere.
//
// Point-to-point messages (coordinator/point_to_point.h): a kSend and a
// kRecv request of one name (the pair and its count) wait for those two
// ranks only, not for the set; joined ranks are waited for; the pair's
// Response is checked by buildPointToPointResponse and never cached.
//
// Threading: Controller is owned and used only by rank 0's background thread.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/process_sets.h"
#include "coordinator/response_cache.h"
#include "core/message.h"

namespace tutti {

class Controller {
 public:
  using Clock = std::chrono::steady_clock;

  // `cache` (may be nullptr) is read for the validation fast path; it must
  // outlive the controller. keep_decided: remember the requests behind each
  // op Response until takeDecidedRequests() (for the response cache).
  // `sets` (membership of every process set) must outlive the controller;
  // the background thread that owns the controller also registers sets.
  // nullptr: the global set only.
  Controller(int size, const ResponseCache* cache, bool keep_decided,
             const ProcessSetTable* sets = nullptr);

  // Rank request.rank submitted `request`. cache_slot >= 0: it was announced
  // as that cache slot. A second submission of a pending name by the same rank
  // is dropped and logged.
  void addRequest(const Request& request, int64_t cache_slot, Clock::time_point now);
  // Rank `rank` asked to shut down.
  void addShutdown(int rank);
  bool shutdownRequested() const { return shutdown_count_ > 0; }

  // Responses decided since the last call, in decision order.
  std::vector<Response> takeReady();
  // Every member's request behind the op Response decided for `key`
  // (tensorKey(set, name)), in the set's rank order (nullopt for joined
  // ranks); empty when unknown. Removes them.
  std::vector<std::optional<Request>> takeDecidedRequests(const std::string& key);

  struct PendingTensor {
    std::string key;  // tensorKey(process_set, name)
    std::string name;
    int32_t process_set = kGlobalProcessSet;
    OpType type;
    Clock::time_point since;  // first request's arrival
    std::vector<int> submitted;
    std::vector<int> missing;  // joined ranks count as submitted where allowed
  };
  // Names waiting for some ranks, oldest first.
  std::vector<PendingTensor> pending() const;
  // Fails a pending tensor (by key) on every rank with an error Response.
  void fail(const std::string& key, StatusCode code, const std::string& message);
  // Fails every pending tensor of process set `id` (it is being removed).
  void failProcessSet(int32_t id, const std::string& why);

 private:
  struct Pending {
    OpType type;
    std::string name;
    int32_t process_set = kGlobalProcessSet;
    std::vector<int> members;  // global ranks of the set, ascending; p2p: {sender, receiver}
    uint64_t seq;              // arrival order, for deterministic scans
    Clock::time_point since;
    std::vector<std::optional<Request>> by_rank;  // by rank within the set
    std::vector<int64_t> slots;                   // cache slot per member, -1 = full request
    size_t submitted = 0;                         // members whose request is in by_rank
  };
  void checkReady(const std::string& key);
  void emit(Response response, int group_id, int group_size);
  void emitInSet(Response response, int32_t set, int group_id, int group_size);
  // The error Response for a request this controller cannot take.
  void refuse(const Request& request, StatusCode code, const std::string& why);
  void checkJoin();

  const int size_;
  const ResponseCache* cache_;
  const bool keep_decided_;
  std::unique_ptr<ProcessSetTable> own_sets_;  // when the caller gave none
  const ProcessSetTable* sets_;
  std::unordered_map<std::string, Pending> table_;
  uint64_t next_seq_ = 0;
  std::vector<Response> ready_;
  std::unordered_map<std::string, std::vector<std::optional<Request>>> decided_;
  // Grouped allreduce: decided members held until the group is complete.
  struct Group {
    int decided = 0;
    std::vector<Response> ok;
  };
  std::map<std::pair<int32_t, int>, Group> groups_;  // by (process set, group id)
  std::vector<bool> joined_;
  int joined_count_ = 0;
  int last_joined_ = -1;
  std::vector<bool> shutdown_;
  int shutdown_count_ = 0;
};

}  // namespace tutti
