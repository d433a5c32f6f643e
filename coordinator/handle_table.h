#pragma once

// The handles of one runtime: what a framework thread waits on.
//
// Ownership: the table owns each handle's completion (status, runtime-sized
// output, received splits, join result) until release(). output() returns a
// pointer into the table that stays valid until that handle is released.
//
// Threading: every method is thread-safe. create() runs on enqueueing threads,
// complete() on the background thread, the rest on any thread. Waiting is on
// a condition variable (no spinning); wait() with a timeout never blocks past
// it.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "coordinator/runtime.h"
#include "core/status.h"
#include "core/tensor.h"

namespace tutti {

// What the background thread hands to a handle when its op finished.
struct Completion {
  Status status;
  bool has_output = false;  // allgather, alltoall, reducescatter
  OwnedTensor output;
  std::vector<int64_t> received_splits;  // alltoall: rows received from each rank
  int join_result = -1;                  // join: the last rank to join

  // The completion of an op that failed with `status` (no output).
  static Completion failure(Status status) {
    Completion c;
    c.status = std::move(status);
    return c;
  }

  // A runtime-sized output of `bytes` bytes (contents left to the op).
  void setOutput(DataType dtype, Shape shape, size_t bytes) {
    has_output = true;
    output.dtype = dtype;
    output.shape = std::move(shape);
    output.bytes.resize(bytes);
  }
};

// Called once when a handle completes, with the handle and its final status.
using CompletionCallback = std::function<void(Handle, const Status&)>;

class HandleTable {
 public:
  HandleTable() = default;
  HandleTable(const HandleTable&) = delete;
  HandleTable& operator=(const HandleTable&) = delete;
  // Calls the callbacks of handles still pending (none after a shutdown,
  // which completes them all) with kShutdown, so that each runs once.
  ~HandleTable();

  // A new pending handle (ids start at 1 and are never reused in a table).
  Handle create();
  // Forgets a pending handle whose enqueue failed (no completion).
  void erase(Handle handle);
  // Completes a pending handle, wakes its waiters and then runs its
  // completion callback (on this thread, without the table's lock held).
  // Completing an unknown or already completed handle is ignored.
  void complete(Handle handle, Completion completion);
  // Sets the handle's completion callback: complete() runs it once, on the
  // completing thread; when the handle already completed it runs here, on
  // the calling thread, before this returns. kInvalidArgument for an unknown
  // handle or a second callback on one handle (nothing runs then).
  Status onComplete(Handle handle, CompletionCallback callback);

  // True once completed; true for an unknown handle too (nothing to wait
  // for: wait() then reports kInvalidArgument).
  bool poll(Handle handle) const;
  // True while the table holds the handle (created and not yet released).
  bool contains(Handle handle) const;
  // The handle's status once completed. timeout_seconds < 0: no deadline;
  // kTimeout on expiry (the op goes on). kInvalidArgument: unknown handle.
  Status wait(Handle handle, double timeout_seconds) const;
  // Runtime-sized output of a completed op; nullptr when pending or none.
  OwnedTensor* output(Handle handle) const;
  std::vector<int64_t> receivedSplits(Handle handle) const;
  int joinResult(Handle handle) const;
  // Forgets a completed handle and frees its output; kInvalidArgument for a
  // pending or unknown handle.
  Status release(Handle handle);

 private:
  struct Entry {
    bool done = false;
    Completion completion;
    CompletionCallback callback;  // run once on completion (empty: none)
    bool has_callback = false;    // set once, even after the callback ran
  };
  const Entry* findDone(Handle handle) const;  // requires mu_

  mutable std::mutex mu_;
  mutable std::condition_variable done_cv_;
  std::unordered_map<Handle, std::unique_ptr<Entry>> entries_;
  Handle next_handle_ = 1;
};

}  // namespace tutti
