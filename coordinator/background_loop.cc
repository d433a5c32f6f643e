// The background thread of RuntimeImpl: one loop per rank that negotiates
// (rank 0: through the Controller), fuses, executes and completes handles.
// The protocol is described in coordinator/controller.h.

#include <algorithm>

#include "coordinator/fusion.h"
#include "coordinator/point_to_point.h"
#include "coordinator/runtime_impl.h"
#include "core/logging.h"

namespace tutti {

namespace {

constexpr auto kMaxIdleWait = std::chrono::hours(1);

RuntimeImpl::Clock::duration seconds(double s) {
  return std::chrono::duration_cast<RuntimeImpl::Clock::duration>(std::chrono::duration<double>(s));
}

// Point-to-point names are used once (coordinator/point_to_point.h): caching
// them would only evict the collectives' entries.
bool cacheable(OpType type) {
  return type != OpType::kBarrier && type != OpType::kJoin && type != OpType::kAddProcessSet &&
         type != OpType::kRemoveProcessSet && !isPointToPoint(type);
}

// True when `m` is rank 0's abort notice; sets *status to what it names.
bool abortNotice(const ControlMessage& m, Status* status) {
  ResponseList list;
  if (m.from_rank != 0 || !deserialize(m.bytes, &list).isOk() ||
      list.abort_code == StatusCode::kOk) {
    return false;
  }
  *status = abortStatus(list);
  return true;
}

}  // namespace

void RuntimeImpl::loop() {
  executor_ = std::make_unique<Executor>(*bundle_.backend, rank_, size_, &executor_state_);
  executor_->setDeviceExecutor(device_.get());
  if (rank_ == 0) {
    controller_ = std::make_unique<Controller>(size_, &cache_, cache_.enabled(), &sets_);
    stall_ = std::make_unique<StallInspector>(settings_.stall_check_time_seconds,
                                              settings_.stall_shutdown_time_seconds, Clock::now());
    if (settings_.autotune) tuner_ = std::make_unique<ParameterManager>(settings_, Clock::now());
  }
  Status st = runLoop();
  if (!st.isOk() && !shutdown_.started()) {
    abort(st);
  } else {
    finishShutdown();
  }
  closeConnections();
}

Status RuntimeImpl::runLoop() {
  std::vector<ControlMessage> messages;
  while (true) {
    Clock::time_point now = Clock::now();
    messages.clear();
    Status st = bundle_.transport->pollControl(nextDeadline(now), &messages);
    if (!st.isOk()) {
      // While closing, the peers hanging up is the expected end.
      if (shutdown_.closing()) return Status::ok();
      return st;
    }
    now = Clock::now();
    timeline_.recordCycle(now);
    if (shutdown_requested_) shutdown_.start(now);
    bool done = false;
    TUTTI_RETURN_IF_ERROR(rank_ == 0 ? rank0Round(messages, now, &done)
                                     : workerRound(messages, now, &done));
    if (done) return Status::ok();
    if (shutdown_.expired(Clock::now())) {
      TUTTI_LOG(kWarning) << "shutdown: the other ranks did not complete the shutdown handshake "
                             "within TUTTI_TIMEOUT_SECONDS="
                          << settings_.timeout_seconds << " s; shutting down locally";
      return Status::ok();
    }
  }
}

RuntimeImpl::Clock::time_point RuntimeImpl::nextDeadline(Clock::time_point now) const {
  Clock::time_point deadline = now + kMaxIdleWait;
  if (shutdown_.started()) deadline = std::min(deadline, shutdown_.deadline());
  if (rank_ == 0) {
    if (!shutdown_.closing()) deadline = std::min(deadline, stall_->nextDeadline(*controller_));
    if (!held_.empty())
      deadline = std::min(deadline, held_since_ + seconds(live_.cycle_time_ms / 1e3));
  }
  // A shutdown() that raced with the previous round has already called
  // wake(), so pollControl returns at once in that case.
  return deadline;
}

Status RuntimeImpl::rank0Round(std::vector<ControlMessage>& messages, Clock::time_point now,
                               bool* done) {
  Controller& ctl = *controller_;
  for (const Request& req : queue_.takeNewRequests()) {
    ctl.addRequest(req, cacheable(req.type) ? cache_.slotFor(req) : -1, now);
    timeline_.recordReady(displayName(req.process_set, req.name), 0, now);
  }
  if (shutdown_.takeAnnouncement()) ctl.addShutdown(0);
  for (ControlMessage& msg : messages) {
    RequestList list;
    Status st = deserialize(msg.bytes, &list);
    if (!st.isOk() || msg.from_rank <= 0 || msg.from_rank >= size_) {
      TUTTI_LOG(kError) << "dropping a malformed request list from rank " << msg.from_rank << ": "
                        << st.toString();
      continue;
    }
    const int from = msg.from_rank;
    if (shutdown_.closing()) {
      if (list.shutdown) shutdown_.ack(from);
      continue;
    }
    for (Request& req : list.requests) {
      req.rank = from;
      ctl.addRequest(req, -1, now);
      timeline_.recordReady(displayName(req.process_set, req.name), from, now);
    }
    for (int64_t slot : list.cache_hits) {
      std::optional<Request> req = cache_.requestOf(slot, from);
      if (!req) {
        return Status::internal("rank " + std::to_string(from) + " announced response-cache slot " +
                                std::to_string(slot) +
                                " that rank 0 no longer knows (the worker lags too far behind)");
      }
      req->rank = from;
      ctl.addRequest(*req, slot, now);
      timeline_.recordReady(displayName(req->process_set, req->name), from, now);
    }
    if (list.shutdown) ctl.addShutdown(from);
  }
  if (shutdown_.closing()) {
    *done = shutdown_.allAcked();
    return Status::ok();
  }
  stall_->check(ctl, now);
  std::vector<Response> fresh = ctl.takeReady();
  if (!fresh.empty() && held_.empty()) held_since_ = now;
  for (Response& r : fresh) held_.push_back(std::move(r));
  // The first shutdown request stops the job: from then on no op could
  // complete on every rank, so nobody waits for the other ranks' shutdown().
  const bool stop = ctl.shutdownRequested();
  const bool due =
      live_.cycle_time_ms <= 0 || now >= held_since_ + seconds(live_.cycle_time_ms / 1e3) || stop;
  if ((held_.empty() || !due) && !stop) return Status::ok();
  std::vector<Response> ready;
  ready.swap(held_);
  TUTTI_RETURN_IF_ERROR(sendResponses(std::move(ready), stop));
  if (stop) {
    shutdown_.close(now);
    *done = size_ == 1;
  }
  return Status::ok();
}

Status RuntimeImpl::sendResponses(std::vector<Response> responses, bool shutdown) {
  ResponseList list;
  list.responses = planFusion(std::move(responses), live_.fusion_threshold_bytes);
  list.shutdown = shutdown;
  if (pending_tuning_) {
    list.has_tuning = true;
    list.tuning = *pending_tuning_;
    pending_tuning_.reset();
  }
  if (size_ > 1) {
    std::vector<uint8_t> bytes = serialize(list);
    for (int w = 1; w < size_; ++w) {
      TUTTI_RETURN_IF_ERROR(bundle_.transport->sendControl(w, bytes));
    }
  }
  TUTTI_RETURN_IF_ERROR(executeList(list));
  if (tuner_) observeForTuning(list);
  return Status::ok();
}

void RuntimeImpl::observeForTuning(const ResponseList& list) {
  if (!tuner_->active()) return;
  std::vector<std::string> names;
  int64_t bytes = 0;
  for (const Response& r : list.responses) {
    if (r.kind != Response::Kind::kOp || r.type != OpType::kAllreduce) continue;
    names.insert(names.end(), r.names.begin(), r.names.end());
    int64_t elements = 0;
    for (int64_t n : r.sizes) elements += n;
    bytes += elements * static_cast<int64_t>(dataTypeSize(r.dtype));
  }
  if (names.empty() || !tuner_->update(names, bytes, Clock::now())) return;
  // Rank 0 plans and holds with the new values from now on; the cache
  // switches on every rank with the next list.
  live_.fusion_threshold_bytes = tuner_->current().fusion_threshold_bytes;
  live_.cycle_time_ms = tuner_->current().cycle_time_ms;
  pending_tuning_ = tuner_->current();
}

void RuntimeImpl::applyTuning(const TunedParameters& tuning) {
  live_ = tuning;
  cache_.setEnabled((tuning.switches & kSwitchResponseCache) != 0);
  allowHierarchical(*bundle_.backend);
  for (auto& [id, exec] : set_exec_) allowHierarchical(*exec.data.backend);
  std::lock_guard<std::mutex> lock(autotune_mu_);
  autotune_history_.push_back({lists_executed_, tuning});
}

void RuntimeImpl::allowHierarchical(Backend& backend) const {
  backend.allowHierarchical((live_.switches & kSwitchHierarchicalAllreduce) != 0,
                            (live_.switches & kSwitchHierarchicalAllgather) != 0);
}

std::vector<AutotuneChange> RuntimeImpl::autotuneHistory() const {
  std::lock_guard<std::mutex> lock(autotune_mu_);
  return autotune_history_;
}

Status RuntimeImpl::workerRound(std::vector<ControlMessage>& messages, Clock::time_point now,
                                bool* done) {
  (void)now;
  if (shutdown_.closing()) return Status::ok();  // waiting for rank 0 to hang up
  RequestList out;
  for (Request& req : queue_.takeNewRequests()) {
    int64_t slot = cacheable(req.type) && req.group_id < 0 ? cache_.slotFor(req) : -1;
    if (slot >= 0) {
      out.cache_hits.push_back(slot);
    } else {
      out.requests.push_back(std::move(req));
    }
  }
  if (shutdown_.takeAnnouncement()) out.shutdown = true;
  if (!out.requests.empty() || !out.cache_hits.empty() || out.shutdown) {
    TUTTI_RETURN_IF_ERROR(bundle_.transport->sendControl(0, serialize(out)));
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ControlMessage& msg = messages[i];
    ResponseList list;
    Status st = deserialize(msg.bytes, &list);
    if (!st.isOk() || msg.from_rank != 0) {
      TUTTI_LOG(kError) << "dropping a malformed response list from rank " << msg.from_rank << ": "
                        << st.toString();
      continue;
    }
    if (list.abort_code != StatusCode::kOk) {
      told_by_rank0_ = true;
      return abortStatus(list);
    }
    st = executeList(list);
    if (!st.isOk()) {
      // Rank 0's abort notice may have come in the same batch, after the
      // list that failed: it names the lost rank, where this rank may only
      // have seen another survivor hang up.
      for (size_t j = i + 1; j < messages.size(); ++j) {
        if (abortNotice(messages[j], &st)) {
          told_by_rank0_ = true;
          break;
        }
      }
      return st;
    }
    if (list.shutdown) {
      // Ack, then wait (bounded by the shutdown deadline) for rank 0 to
      // close, so that both sides' last messages are delivered.
      RequestList ack;
      ack.shutdown = true;
      TUTTI_RETURN_IF_ERROR(bundle_.transport->sendControl(0, serialize(ack)));
      shutdown_.close(Clock::now());
      break;
    }
  }
  *done = false;
  return Status::ok();
}

Status RuntimeImpl::executeList(const ResponseList& list) {
  const Clock::time_point listed = Clock::now();  // for the timeline
  ++lists_executed_;
  if (list.has_tuning) applyTuning(list.tuning);
  for (const Response& resp : list.responses) {
    const size_t n = resp.names.size();
    std::vector<TensorEntry> taken(n);
    std::vector<const TensorEntry*> present(n, nullptr);
    for (size_t i = 0; i < n; ++i) {
      if (queue_.take(tensorKey(resp.process_set, resp.names[i]), &taken[i])) {
        present[i] = &taken[i];
      }
    }
    if (resp.kind == Response::Kind::kError) {
      timeline_.recordError(resp, present, listed);
      const Status st(resp.error_code, resp.error_message);
      for (size_t i = 0; i < n; ++i) {
        if (present[i]) handles_.complete(present[i]->handle, Completion::failure(st));
      }
      continue;
    }
    std::vector<Completion> completions;
    const Clock::time_point started = Clock::now();
    bool executed = false;
    Status st = executeResponse(resp, present, &completions, &executed);
    if (st.isOk() && executed && timeline_.active()) {
      const Executor::CollectiveTimes& c = last_executor_->lastCollective();
      timeline_.recordExecution(resp, present, {listed, started, c.start, c.end, Clock::now()});
    }
    if (!st.isOk()) {
      // Completed by abort() (with the cause rank 0 names, for a lost peer)
      // or finishShutdown(), like every other pending op.
      for (size_t i = 0; i < n; ++i) {
        if (present[i]) orphaned_.push_back(std::move(taken[i]));
      }
      orphaned_status_ = st;
      return st;
    }
    // Also for a set this rank is not in: every rank's cache stays the same.
    cacheExecuted(resp, taken, present);
    if (!executed) continue;
    for (size_t i = 0; i < n; ++i) {
      if (present[i]) handles_.complete(present[i]->handle, std::move(completions[i]));
    }
  }
  return Status::ok();
}

void RuntimeImpl::cacheExecuted(const Response& resp, const std::vector<TensorEntry>& taken,
                                const std::vector<const TensorEntry*>& present) {
  for (size_t i = 0; i < resp.names.size(); ++i) {
    std::vector<std::optional<Request>> all;
    if (controller_) {
      all = controller_->takeDecidedRequests(tensorKey(resp.process_set, resp.names[i]));
      all = byGlobalRank(std::move(all), resp.process_set);
    }
    // Deterministic on every rank: depends only on the Response.
    if (!cache_.enabled() || !cacheable(resp.type) || !resp.joined_ranks.empty()) continue;
    Response one = resp;
    if (resp.names.size() > 1) {
      one.names = {resp.names[i]};
      one.sizes = {resp.sizes[i]};
    }
    std::optional<Request> own;
    if (present[i]) own = taken[i].request;
    cache_.insert(one, own, std::move(all));
  }
}

std::vector<std::optional<Request>> RuntimeImpl::byGlobalRank(
    std::vector<std::optional<Request>> by_set_rank, int32_t process_set) const {
  ProcessSetInfo set;
  if (process_set == kGlobalProcessSet || by_set_rank.empty() ||
      !sets_.lookup(process_set, &set).isOk()) {
    return by_set_rank;
  }
  std::vector<std::optional<Request>> out(static_cast<size_t>(size_));
  for (size_t r = 0; r < by_set_rank.size() && r < set.ranks.size(); ++r) {
    out[static_cast<size_t>(set.ranks[r])] = std::move(by_set_rank[r]);
  }
  return out;
}

RuntimeImpl::Clock::duration RuntimeImpl::abortGrace() const {
  return seconds(std::min(1.0, settings_.timeout_seconds));
}

void RuntimeImpl::abort(const Status& detected) {
  Status status = detected;
  if (rank_ != 0 && status.code() == StatusCode::kPeerLost && !told_by_rank0_) {
    // What this worker saw may be another survivor hanging up, not the rank
    // that was lost. Rank 0 sees every worker's control connection and sends
    // an abort notice naming the lost rank: wait briefly for it and prefer it.
    const auto deadline = Clock::now() + abortGrace();
    std::vector<ControlMessage> messages;
    bool found = false;
    while (!found && Clock::now() < deadline &&
           bundle_.transport->drainControl(deadline, &messages).isOk()) {
      for (const ControlMessage& m : messages) found = abortNotice(m, &status) || found;
    }
  }
  TUTTI_LOG(kError) << "aborting every pending op: " << status.toString();
  closeLanes(status);
  for (TensorEntry& e : queue_.close(status))
    handles_.complete(e.handle, Completion::failure(status));
  for (TensorEntry& e : orphaned_) handles_.complete(e.handle, Completion::failure(status));
  orphaned_.clear();
  if (rank_ == 0 && size_ > 1) {
    // Best effort: the transport may be broken already; closing the
    // connections below tells the workers in any case.
    ResponseList list;
    list.shutdown = true;
    list.abort_code = status.code();
    list.abort_message = status.message();
    list.abort_lost_rank = status.lostRank();
    std::vector<uint8_t> bytes = serialize(list);
    // Every survivor, not stopping at the lost rank: its socket refuses the
    // message, the others still take it.
    for (int w = 1; w < size_; ++w) (void)bundle_.transport->sendControl(w, bytes);
    // Linger (bounded) until the survivors hang up, reading what they send:
    // closing with their unread requests in this side's receive buffer sends
    // a TCP reset, which can destroy the notice before a slow survivor read
    // it (it would then blame rank 0 for the loss).
    const auto until = Clock::now() + abortGrace();
    std::vector<ControlMessage> ignored;
    while (Clock::now() < until && bundle_.transport->drainControl(until, &ignored).isOk()) {
    }
  }
}

void RuntimeImpl::finishShutdown() {
  for (TensorEntry& e : orphaned_)
    handles_.complete(e.handle, Completion::failure(orphaned_status_));
  orphaned_.clear();
  for (TensorEntry& e : queue_.close(Status::shutdown("tutti was shut down"))) {
    handles_.complete(e.handle, Completion::failure(Status::shutdown(
                                    std::string(opTypeName(e.request.type)) + " '" +
                                    e.request.name + "' was pending when tutti shut down")));
  }
}

void RuntimeImpl::closeConnections() {
  set_exec_.clear();
  executor_.reset();
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    transport_open_ = false;
  }
  bundle_.backend.reset();
  bundle_.transport.reset();
  bundle_.keepalive.reset();
}

}  // namespace tutti
