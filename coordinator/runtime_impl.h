#pragma once

// RuntimeImpl: the one object that owns a rank's runtime state (handles,
// tensor queue, connections, and the background thread's controller, cache,
// fusion buffer and executor). Internal to coordinator/; the public face is
// coordinator/runtime.h.
//
// Threading: the enqueue side (runtime.cc) runs on framework threads and
// touches only handles_, queue_, the atomics and wake(). Everything else is
// owned by the background thread (background_loop.cc), which also destroys
// the connections when it exits. The protocol is described in
// coordinator/controller.h.

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "coordinator/controller.h"
#include "coordinator/device_executor.h"
#include "coordinator/executor.h"
#include "coordinator/handle_table.h"
#include "coordinator/ordered_lane.h"
#include "coordinator/parameter_manager.h"
#include "coordinator/process_sets.h"
#include "coordinator/response_cache.h"
#include "coordinator/runtime.h"
#include "coordinator/shutdown_handshake.h"
#include "coordinator/stall_inspector.h"
#include "coordinator/tensor_queue.h"
#include "coordinator/timeline.h"
#include "core/settings.h"
#include "ops/backend_registry.h"

namespace tutti {

class RuntimeImpl {
 public:
  using Clock = std::chrono::steady_clock;

  // Takes a connected bundle (bundle.transport and .backend non-null).
  RuntimeImpl(const Settings& settings, BackendBundle bundle);
  ~RuntimeImpl();  // shutdown()
  RuntimeImpl(const RuntimeImpl&) = delete;
  RuntimeImpl& operator=(const RuntimeImpl&) = delete;

  void start();  // starts the background thread
  Status shutdown();
  const Settings& settings() const { return settings_; }
  HandleTable& handles() { return handles_; }
  const HandleTable& handles() const { return handles_; }
  // Thread-safe; the background thread records into it (coordinator/timeline.h).
  Timeline& timeline() { return timeline_; }

  // What ended the runtime (OK while it runs): the status the queue was
  // closed with. Thread-safe.
  Status failure() const { return queue_.closedStatus(); }

  // Autotune's switches so far (coordinator/parameter_manager.h). Thread-safe.
  std::vector<AutotuneChange> autotuneHistory() const;

  // Compressors (residuals) and the byte count: thread-safe, outlive the executor.
  ExecutorState& executorState() { return executor_state_; }

  // Enqueue side (any thread).
  Status enqueue(OpType type, const TensorView& input, const TensorView* output,
                 const OpOptions& options, Handle* handle);
  Status groupedAllreduce(const std::vector<TensorView>& inputs,
                          const std::vector<TensorView>& outputs, const OpOptions& options,
                          std::vector<Handle>* handles);
  Status barrier(Handle* handle, int32_t process_set, bool ordered);
  Status join(Handle* handle);
  // kSend or kRecv (coordinator/point_to_point.h); `peer` is a global rank.
  Status pointToPoint(OpType type, const TensorView& tensor, int peer, int32_t tag,
                      int32_t process_set, Handle* handle);

  // The ordered lane (ordered_ops.cc, coordinator/ordered_lane.h). wait():
  // an ordered op runs on the waiting thread when no other runs its lane.
  Status wait(Handle handle, double timeout_seconds);
  Status release(Handle handle);
  // A callback was set on the handle or it was polled: if it is an ordered
  // op, its lane's thread runs it soon (OrderedLane::nudge).
  void nudgeOrdered(Handle handle);

  // Process sets (process_set_ops.cc; coordinator/process_sets.h).
  ProcessSetTable& processSets() { return sets_; }
  Status addProcessSet(const std::vector<int>& ranks, int32_t* id);
  Status removeProcessSet(int32_t id);

 private:
  // Enqueue helpers (runtime.cc).
  // The set an op runs over: kInvalidArgument when it is unknown or this
  // rank is not a member (not announced: no other rank waits for this one).
  Status resolveSet(int32_t id, OpType type, const std::string& name, ProcessSetInfo* set) const;
  Request makeRequest(OpType type, const TensorView& input, const OpOptions& options,
                      const ProcessSetInfo& set);
  // Enqueues a process set registration or removal and waits for it.
  Status runProcessSetOp(Request request, Completion* done);
  // Fills request->compression for an allreduce: the option's spec or the
  // job's, canonical; kInvalidArgument for a bad spec.
  Status resolveCompression(const OpOptions& options, Request* request) const;
  Status submit(std::vector<TensorEntry> entries, std::vector<Handle>* handles);
  // This rank's checks of one entry (compression spec, request_validation.h,
  // device); on success the entry is ready to submit.
  Status checkEntry(TensorEntry* entry, const TensorView& input, const TensorView* output,
                    const OpOptions& options, const ProcessSetInfo& set);
  // A request that failed this rank's checks: still announced (with
  // request.error), so that rank 0 fails the name on every rank with the same
  // message; returns that message ("op 'name': rank R: what"), with `failed`'s code.
  Status announceInvalid(std::vector<Request> requests, const Status& failed);
  void wake();
  // Keeps the enums of a request that failed local checks valid for the wire.
  static void sanitizeForWire(Request* r);

  // The ordered lane (ordered_ops.cc).
  // Whether options.ordered takes the lane for this op (CPU, not Adasum, not
  // compressed, a backend with a lane); else it is negotiated.
  bool takesOrderedLane(OpType type, const TensorView& input, const OpOptions& options) const;
  std::shared_ptr<OrderedLane> laneFor(const ProcessSetInfo& set);
  Status enqueueOrdered(OpType type, const TensorView& input, const TensorView* output,
                        const OpOptions& options, Handle* handle);
  // One ordered op of several tensors (a grouped allreduce; outputs may be
  // empty for ops whose output the runtime allocates).
  Status enqueueOrderedGroup(OpType type, const std::vector<TensorView>& inputs,
                             const std::vector<TensorView>& outputs, const OpOptions& options,
                             std::vector<Handle>* handles);
  // Fails the queued ops of every lane (set_id < 0) or of one set's lane.
  void closeLanes(const Status& status, int32_t set_id = -1);
  void destroyLanes();

  // Background thread (background_loop.cc).
  void loop();
  Status runLoop();
  Clock::time_point nextDeadline(Clock::time_point now) const;
  Status rank0Round(std::vector<ControlMessage>& messages, Clock::time_point now, bool* done);
  Status workerRound(std::vector<ControlMessage>& messages, Clock::time_point now, bool* done);
  Status sendResponses(std::vector<Response> responses, bool shutdown);
  Status executeList(const ResponseList& list);
  // Autotune: every rank switches to rank 0's parameters (executeList);
  // rank 0 scores each executed list and decides the next parameters.
  void applyTuning(const TunedParameters& tuning);
  void observeForTuning(const ResponseList& list);
  // Passes live_'s hierarchical switches to `backend`.
  void allowHierarchical(Backend& backend) const;
  // Runs one op Response of any set on this rank (process_set_ops.cc):
  // registration and removal on every rank, a set's collectives on its
  // members; `present` as in executeList.
  Status executeResponse(const Response& resp, const std::vector<const TensorEntry*>& present,
                         std::vector<Completion>* completions, bool* executed);
  Status executeAddProcessSet(const Response& resp, Completion* done);
  Status executeRemoveProcessSet(const Response& resp, Completion* done);
  void cacheExecuted(const Response& response, const std::vector<TensorEntry>& taken,
                     const std::vector<const TensorEntry*>& present);
  // Rank 0: a set's requests (by rank within the set) by global rank, as the
  // response cache keeps them (nullopt for non-members).
  std::vector<std::optional<Request>> byGlobalRank(std::vector<std::optional<Request>> by_set_rank,
                                                   int32_t process_set) const;
  void abort(const Status& status);
  // How long a worker waits for rank 0's abort notice, and rank 0 for the
  // survivors to hang up after it: min(1 s, TUTTI_TIMEOUT_SECONDS).
  Clock::duration abortGrace() const;
  void finishShutdown();
  void closeConnections();

  const Settings settings_;
  const int rank_;
  const int size_;

  // Shared with enqueueing threads.
  HandleTable handles_;
  TensorQueue queue_;
  std::atomic<bool> shutdown_requested_{false};
  // Every registered process set, with its name counters (thread-safe).
  ProcessSetTable sets_;
  std::atomic<int64_t> set_op_counter_{0};  // names of registrations/removals
  // Point-to-point messages posted per (set, sender, receiver, tag): the
  // next one's number in its name. Guarded by p2p_mu_, held from naming to
  // the queue, so that the numbers follow the posting order.
  std::mutex p2p_mu_;
  std::map<std::tuple<int32_t, int, int, int32_t>, int64_t> p2p_posted_;
  // The ordered lanes by set id, and each pending ordered handle's lane and
  // sequence number (guarded by lanes_mu_). connect_ordered_ is the bundle's
  // (copied before the background thread starts; null: no lane).
  std::function<Status(const std::vector<int>&, int32_t, SetBackend*)> connect_ordered_;
  struct OrderedHandle {
    std::weak_ptr<OrderedLane> lane;
    uint64_t seq = 0;
  };
  std::mutex lanes_mu_;
  std::map<int32_t, std::shared_ptr<OrderedLane>> lanes_;
  std::unordered_map<Handle, OrderedHandle> ordered_handles_;
  std::mutex wake_mu_;  // guards the transport's lifetime against wake()
  bool transport_open_ = false;
  std::mutex shutdown_mu_;  // serialises shutdown() callers
  std::thread thread_;
  // CUDA tensors: prepare() on enqueueing threads, execute() through the
  // executor on the background thread (coordinator/device_executor.h).
  std::unique_ptr<DeviceExecutor> device_;
  ExecutorState executor_state_;  // shared with the executor; thread-safe
  Timeline timeline_;             // stopped by shutdown()

  // Background thread only.
  BackendBundle bundle_;
  std::unique_ptr<Executor> executor_;  // the global set's
  // Process sets other than the global one this rank is a member of: their
  // data path and executor (destroyed before bundle_'s transport).
  struct SetExecution {
    SetBackend data;
    std::unique_ptr<Executor> executor;
  };
  std::map<int32_t, SetExecution> set_exec_;
  Executor* last_executor_ = nullptr;  // the one executeResponse() ran, for the timeline
  ResponseCache cache_;
  // The fusion threshold and cycle time in force (rank 0 uses them), and the
  // cache switch as last applied; autotune changes them.
  TunedParameters live_ = initialParameters(settings_);
  std::unique_ptr<ParameterManager> tuner_;        // rank 0 with TUTTI_AUTOTUNE=1
  std::optional<TunedParameters> pending_tuning_;  // rank 0: goes out with the next list
  int64_t lists_executed_ = 0;
  mutable std::mutex autotune_mu_;  // guards autotune_history_
  std::vector<AutotuneChange> autotune_history_;
  std::unique_ptr<Controller> controller_;  // rank 0
  std::unique_ptr<StallInspector> stall_;   // rank 0
  std::vector<Response> held_;              // rank 0: decided, waiting for the cycle time
  Clock::time_point held_since_;
  // The shutdown handshake (shutdown_requested_ is only the other threads' request).
  ShutdownHandshake shutdown_{size_, settings_.timeout_seconds};
  bool told_by_rank0_ = false;  // worker: the abort came as rank 0's notice
  // Entries whose collective failed: completed by abort() or finishShutdown().
  std::vector<TensorEntry> orphaned_;
  Status orphaned_status_;
};

}  // namespace tutti
