#pragma once

// The tensor queue: this rank's ops between enqueue and execution.
//
// An entry is the request (what negotiation sees) plus the borrowed tensor
// views and the handle. Enqueueing threads add entries; the background thread
// takes the new requests (to announce them) and later takes each entry out by
// name when its response executes. A name stays "in flight" from add() until
// take(): a second add() of that name in the same process set is
// kDuplicateName.
//
// Threading: every method is thread-safe (one mutex). Nothing blocks.

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/runtime.h"
#include "core/message.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/device.h"

namespace tutti {

struct TensorEntry {
  Request request;    // tensorKey(process_set, name) is the key; request.rank is this rank
  TensorView input;   // borrowed; empty for barrier and join
  TensorView output;  // borrowed; allreduce and broadcast only
  Handle handle = 0;
  // CUDA inputs: the work on the framework's stream before the enqueue
  // (coordinator/device_executor.h); null for CPU tensors.
  std::shared_ptr<DeviceEvent> ready;
  std::chrono::steady_clock::time_point enqueued;  // set by add(); for the timeline
};

class TensorQueue {
 public:
  // Adds `entries` atomically: all or none. kDuplicateName when a name is in
  // flight (or repeated within `entries`), naming it; once close() was
  // called, the status given to close().
  Status add(std::vector<TensorEntry> entries);
  // Announces a request that failed this rank's checks (request.error set)
  // with a placeholder entry of handle 0 (no handle): rank 0 fails the name on
  // every rank, and the error frees the name here too. kDuplicateName when
  // the name is in flight; the close() status once closed.
  Status announce(Request request);
  // Requests added since the last call, in enqueue order.
  std::vector<Request> takeNewRequests();
  // Removes the entry of that key (core/message.h tensorKey(process set,
  // name)); false when there is none.
  bool take(const std::string& key, TensorEntry* out);
  // Removes and returns every entry of a process set (it was removed).
  std::vector<TensorEntry> takeProcessSet(int32_t process_set);
  // From now on add() fails with `status`. Removes and returns every entry in
  // flight (their handles are the caller's to complete). The first close()
  // decides the status; later calls only drain.
  std::vector<TensorEntry> close(const Status& status);
  // OK while open.
  Status closedStatus() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, TensorEntry> in_flight_;
  std::vector<Request> new_requests_;
  std::optional<Status> closed_;
};

}  // namespace tutti
