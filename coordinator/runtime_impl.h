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
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/controller.h"
#include "coordinator/device_executor.h"
#include "coordinator/executor.h"
#include "coordinator/handle_table.h"
#include "coordinator/response_cache.h"
#include "coordinator/runtime.h"
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

  // Compressors (residuals) and the byte count: thread-safe, outlive the executor.
  ExecutorState& executorState() { return executor_state_; }

  // Enqueue side (any thread).
  Status enqueue(OpType type, const TensorView& input, const TensorView* output,
                 const OpOptions& options, Handle* handle);
  Status groupedAllreduce(const std::vector<TensorView>& inputs,
                          const std::vector<TensorView>& outputs, const OpOptions& options,
                          std::vector<Handle>* handles);
  Status barrier(Handle* handle);
  Status join(Handle* handle);

 private:
  // Enqueue helpers (runtime.cc).
  Request makeRequest(OpType type, const TensorView& input, const OpOptions& options);
  // Fills request->compression for an allreduce: the option's spec or the
  // job's, canonical; kInvalidArgument for a bad spec.
  Status resolveCompression(const OpOptions& options, Request* request) const;
  Status submit(std::vector<TensorEntry> entries, std::vector<Handle>* handles);
  // This rank's checks of one entry (compression spec, request_validation.h,
  // device); on success the entry is ready to submit.
  Status checkEntry(TensorEntry* entry, const TensorView& input, const TensorView* output,
                    const OpOptions& options);
  // A request that failed this rank's checks: still announced (with
  // request.error), so that rank 0 fails the name on every rank with the same
  // message; returns that message ("op 'name': rank R: what"), with `failed`'s code.
  Status announceInvalid(std::vector<Request> requests, const Status& failed);
  void wake();

  // Background thread (background_loop.cc).
  void loop();
  Status runLoop();
  Clock::time_point nextDeadline(Clock::time_point now) const;
  Status rank0Round(std::vector<ControlMessage>& messages, Clock::time_point now, bool* done);
  Status workerRound(std::vector<ControlMessage>& messages, Clock::time_point now, bool* done);
  Status sendResponses(std::vector<Response> responses, bool shutdown);
  Status executeList(const ResponseList& list);
  void cacheExecuted(const Response& response, const std::vector<TensorEntry>& taken,
                     const std::vector<const TensorEntry*>& present);
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
  std::atomic<int64_t> name_counter_{0};
  std::atomic<int64_t> barrier_counter_{0};
  std::atomic<int32_t> group_counter_{0};
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
  std::unique_ptr<Executor> executor_;
  ResponseCache cache_;
  std::unique_ptr<Controller> controller_;  // rank 0
  std::unique_ptr<StallInspector> stall_;   // rank 0
  std::vector<Response> held_;              // rank 0: decided, waiting for the cycle time
  Clock::time_point held_since_;
  bool shutdown_started_ = false;
  bool told_by_rank0_ = false;  // worker: the abort came as rank 0's notice
  // Entries whose collective failed: completed by abort() or finishShutdown().
  std::vector<TensorEntry> orphaned_;
  Status orphaned_status_;
  bool shutdown_sent_ = false;
  bool closing_ = false;  // the shutdown ResponseList went out / came in
  Clock::time_point shutdown_deadline_;
  std::vector<bool> acked_;  // rank 0: workers that acked the shutdown list
  int acked_count_ = 0;
};

}  // namespace tutti
