// The ordered lane's side of RuntimeImpl (coordinator/ordered_lane.h): which
// ops take it, one lane per process set, waiting in the caller's thread,
// closing the lanes.

#include <algorithm>

#include "coordinator/ordered_lane.h"
#include "coordinator/runtime_impl.h"
#include "core/logging.h"

namespace tutti {

namespace {

bool orderedCollective(OpType type) {
  switch (type) {
    case OpType::kAllreduce:
    case OpType::kAllgather:
    case OpType::kBroadcast:
    case OpType::kAlltoall:
    case OpType::kReducescatter:
    case OpType::kBarrier:
      return true;
    default:
      return false;
  }
}

}  // namespace

bool RuntimeImpl::takesOrderedLane(OpType type, const TensorView& input,
                                   const OpOptions& options) const {
  // CUDA tensors (their device executor), Adasum and compressed allreduces
  // stay negotiated; so does every op where the backend has no lane (mpi).
  if (!options.ordered || !connect_ordered_ || !orderedCollective(type)) return false;
  if (type != OpType::kBarrier && input.device != DeviceType::kCpu) return false;
  if (type == OpType::kAllreduce) {
    if (options.reduce_op == ReduceOp::kAdasum) return false;
    const std::string& spec =
        options.compression.empty() ? settings_.compression : options.compression;
    if (!spec.empty() && spec != "none") return false;
  }
  return true;
}

std::shared_ptr<OrderedLane> RuntimeImpl::laneFor(const ProcessSetInfo& set) {
  std::lock_guard<std::mutex> lock(lanes_mu_);
  auto it = lanes_.find(set.id);
  if (it != lanes_.end()) return it->second;
  OrderedLaneOptions options;
  options.inline_bytes = settings_.ordered_inline_bytes;
  options.handoff = std::chrono::microseconds(settings_.ordered_handoff_us);
  options.callers_run = settings_.ordered_execution != "thread";
  auto connect = connect_ordered_;
  const std::vector<int> ranks = set.ranks;
  const int32_t id = set.id;
  auto lane = std::make_shared<OrderedLane>(
      set, rank_, [connect, ranks, id](SetBackend* out) { return connect(ranks, id, out); },
      handles_, executor_state_, options);
  lanes_.emplace(set.id, lane);
  return lane;
}

Status RuntimeImpl::enqueueOrdered(OpType type, const TensorView& input, const TensorView* output,
                                   const OpOptions& options, Handle* handle) {
  std::vector<TensorView> outputs;
  if (output != nullptr) outputs.push_back(*output);
  std::vector<Handle> handles;
  TUTTI_RETURN_IF_ERROR(enqueueOrderedGroup(type, {input}, outputs, options, &handles));
  *handle = handles[0];
  return Status::ok();
}

Status RuntimeImpl::enqueueOrderedGroup(OpType type, const std::vector<TensorView>& inputs,
                                        const std::vector<TensorView>& outputs,
                                        const OpOptions& options, std::vector<Handle>* handles) {
  ProcessSetInfo set;
  TUTTI_RETURN_IF_ERROR(resolveSet(options.process_set, type, "", &set));
  OpOptions named = options;
  named.name = "ordered";  // the lane names it by sequence number (no name counter used)
  const bool grouped = inputs.size() > 1;
  std::vector<TensorEntry> entries(inputs.size());
  Status checked;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TensorEntry& e = entries[i];
    e.request = makeRequest(type, inputs[i], named, set);
    if (grouped) e.request.group_size = static_cast<int32_t>(inputs.size());
    const TensorView* out = i < outputs.size() ? &outputs[i] : nullptr;
    if (checked.isOk()) checked = checkEntry(&e, inputs[i], out, options, set);
    e.input = inputs[i];
    if (out != nullptr) e.output = *out;
  }
  std::shared_ptr<OrderedLane> lane = laneFor(set);
  if (!checked.isOk()) {
    // Still exchanged, so that every member fails this op alike.
    for (TensorEntry& e : entries) {
      e.request.error = checked.message();
      sanitizeForWire(&e.request);
    }
    lane->submit(std::move(entries));
    return checked;
  }
  handles->clear();
  for (TensorEntry& e : entries) {
    e.handle = handles_.create();
    handles->push_back(e.handle);
  }
  const uint64_t seq = lane->submit(std::move(entries));
  std::lock_guard<std::mutex> lock(lanes_mu_);
  for (Handle h : *handles) ordered_handles_[h] = OrderedHandle{lane, seq};
  return Status::ok();
}

Status RuntimeImpl::wait(Handle handle, double timeout_seconds) {
  std::shared_ptr<OrderedLane> lane;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(lanes_mu_);
    auto it = ordered_handles_.find(handle);
    if (it != ordered_handles_.end()) {
      lane = it->second.lane.lock();
      seq = it->second.seq;
    }
  }
  if (lane && seq > 0) {
    Status st = lane->runThrough(seq, timeout_seconds);
    if (!st.isOk()) return st;
  }
  return handles_.wait(handle, timeout_seconds);
}

void RuntimeImpl::nudgeOrdered(Handle handle) {
  std::shared_ptr<OrderedLane> lane;
  {
    std::lock_guard<std::mutex> lock(lanes_mu_);
    auto it = ordered_handles_.find(handle);
    if (it == ordered_handles_.end()) return;
    lane = it->second.lane.lock();
  }
  if (lane) lane->nudge();
}

Status RuntimeImpl::release(Handle handle) {
  TUTTI_RETURN_IF_ERROR(handles_.release(handle));
  std::lock_guard<std::mutex> lock(lanes_mu_);
  ordered_handles_.erase(handle);
  return Status::ok();
}

void RuntimeImpl::closeLanes(const Status& status, int32_t set_id) {
  std::lock_guard<std::mutex> lock(lanes_mu_);
  for (auto& [id, lane] : lanes_) {
    if (set_id < 0 || id == set_id) lane->close(status);
  }
}

void RuntimeImpl::destroyLanes() {
  std::map<int32_t, std::shared_ptr<OrderedLane>> lanes;
  {
    std::lock_guard<std::mutex> lock(lanes_mu_);
    lanes.swap(lanes_);
    ordered_handles_.clear();
  }
  // Each waits for an op that runs (cancelled) and joins its thread; a
  // waiter that still holds a lane finds it closed.
  for (auto& entry : lanes) entry.second->shutdown();
}

}  // namespace tutti
