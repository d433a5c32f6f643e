// The public Runtime (a thin forwarder) and the enqueue side of RuntimeImpl:
// local validation, naming, handle creation, waking the background thread.
// The background thread itself is in background_loop.cc.

#include "coordinator/runtime.h"

#include "coordinator/point_to_point.h"
#include "coordinator/request_validation.h"
#include "coordinator/runtime_impl.h"
#include "core/compression_spec.h"
#include "core/logging.h"

namespace tutti {

// ---------------------------------------------------------------- RuntimeImpl

RuntimeImpl::RuntimeImpl(const Settings& settings, BackendBundle bundle)
    : settings_(settings),
      rank_(settings.rank),
      size_(settings.size),
      sets_(settings.size),
      transport_open_(true),
      bundle_(std::move(bundle)),
      cache_(settings.cache_capacity) {
  connect_ordered_ = bundle_.connect_ordered;
  device_ = std::make_unique<DeviceExecutor>(bundle_, rank_, size_);
}

RuntimeImpl::~RuntimeImpl() {
  shutdown();
}

void RuntimeImpl::start() {
  thread_ = std::thread([this] { loop(); });
}

Status RuntimeImpl::shutdown() {
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  destroyLanes();
  shutdown_requested_ = true;
  wake();
  // The thread bounds its own shutdown by settings.timeout_seconds, also
  // when peers are gone.
  if (thread_.joinable()) thread_.join();
  // After the join: the background thread records nothing more. The file
  // is complete (closed array) when shutdown() returns.
  Status timeline = timeline_.stop();
  if (!timeline.isOk()) {
    TUTTI_LOG(kWarning) << "timeline: " << timeline.message();
  }
  // Handles enqueued after the thread closed the queue were refused; any
  // left (none expected) are completed here so that no wait hangs.
  for (TensorEntry& e : queue_.close(Status::shutdown("tutti was shut down"))) {
    handles_.complete(e.handle, Completion::failure(Status::shutdown(
                                    "'" + e.request.name + "' was pending when tutti shut down")));
  }
  return Status::ok();
}

void RuntimeImpl::wake() {
  std::lock_guard<std::mutex> lock(wake_mu_);
  if (transport_open_) bundle_.transport->wake();
}

Status RuntimeImpl::resolveSet(int32_t id, OpType type, const std::string& name,
                               ProcessSetInfo* set) const {
  const std::string head =
      std::string(opTypeName(type)) + (name.empty() ? std::string() : " '" + name + "'") + ": ";
  Status known = sets_.lookup(id, set);
  if (!known.isOk()) return Status::invalidArgument(head + known.message());
  if (set->rankOf(rank_) < 0) {
    return Status::invalidArgument(
        head + "rank " + std::to_string(rank_) + " is not in process set " + std::to_string(id) +
        " (ranks " + shapeToString(std::vector<int64_t>(set->ranks.begin(), set->ranks.end())) +
        "); only its members may run its collectives");
  }
  return Status::ok();
}

Request RuntimeImpl::makeRequest(OpType type, const TensorView& input, const OpOptions& options,
                                 const ProcessSetInfo& set) {
  Request r;
  r.rank = rank_;
  r.type = type;
  r.process_set = set.id;
  // Generated even when validation fails below, so that the counter stays in
  // step across the set's ranks that issue the same calls.
  r.name = options.name.empty() ? std::string(opTypeName(type)) + ".noname." +
                                      std::to_string(sets_.nextNameNumber(set.id))
                                : options.name;
  r.dtype = input.dtype;
  r.reduce_op = options.reduce_op;
  r.shape = input.shape;
  // Within the set (checkEntry refuses a root outside it).
  r.root = set.id == kGlobalProcessSet ? options.root : set.rankOf(options.root);
  r.prescale = options.prescale;
  r.postscale = options.postscale;
  r.splits = options.splits;
  r.device = input.device;
  return r;
}

Status RuntimeImpl::resolveCompression(const OpOptions& options, Request* request) const {
  if (request->type != OpType::kAllreduce) return Status::ok();
  const std::string& spec =
      options.compression.empty() ? settings_.compression : options.compression;
  Status st = canonicalizeCompressionSpec(spec, &request->compression);
  if (!st.isOk()) {
    return Status::invalidArgument("allreduce '" + request->name + "': " + st.message());
  }
  return Status::ok();
}

Status RuntimeImpl::checkEntry(TensorEntry* entry, const TensorView& input,
                               const TensorView* output, const OpOptions& options,
                               const ProcessSetInfo& set) {
  const Request& r = entry->request;
  if (set.id != kGlobalProcessSet) {
    const std::string head = std::string(opTypeName(r.type)) + " '" + r.name + "': ";
    if (r.type == OpType::kBroadcast && r.root < 0) {
      return Status::invalidArgument(
          head + "root rank " + std::to_string(options.root) + " is not in process set " +
          std::to_string(set.id) + " (ranks " +
          shapeToString(std::vector<int64_t>(set.ranks.begin(), set.ranks.end())) +
          "); the root is a global rank of one of its members");
    }
  }
  TUTTI_RETURN_IF_ERROR(resolveCompression(options, &entry->request));
  TUTTI_RETURN_IF_ERROR(validateLocalRequest(entry->request, input, output, set.size()));
  return device_->prepare(entry->request, input, output, &entry->ready);
}

Status RuntimeImpl::announceInvalid(std::vector<Request> requests, const Status& failed) {
  Request& bad = requests.front();
  std::string detail = failed.message();
  const std::string own = std::string(opTypeName(bad.type)) + " '" + bad.name + "': ";
  if (detail.compare(0, own.size(), own) == 0) detail.erase(0, own.size());
  const std::string local = own + "rank " + std::to_string(rank_) + ": " + detail;
  for (Request& r : requests) {
    // Only the error is read on rank 0.
    r.error = r.name == bad.name ? detail : "another member of its group: " + local;
    sanitizeForWire(&r);
    Status st = queue_.announce(std::move(r));
    if (!st.isOk()) return st;
  }
  wake();
  return Status(failed.code(), local);
}

void RuntimeImpl::sanitizeForWire(Request* r) {
  if (!isValidDataType(static_cast<int>(r->dtype))) r->dtype = DataType::kUInt8;
  if (!isValidReduceOp(static_cast<int>(r->reduce_op))) r->reduce_op = ReduceOp::kSum;
  if (r->device != DeviceType::kCpu && r->device != DeviceType::kCuda) r->device = DeviceType::kCpu;
}

Status RuntimeImpl::submit(std::vector<TensorEntry> entries, std::vector<Handle>* handles) {
  handles->clear();
  for (TensorEntry& e : entries) {
    e.handle = handles_.create();
    handles->push_back(e.handle);
  }
  Status st = queue_.add(std::move(entries));
  if (!st.isOk()) {
    for (Handle h : *handles) handles_.erase(h);
    handles->clear();
    return st;
  }
  wake();
  return Status::ok();
}

Status RuntimeImpl::enqueue(OpType type, const TensorView& input, const TensorView* output,
                            const OpOptions& options, Handle* handle) {
  if (handle == nullptr) return Status::invalidArgument("handle must not be null");
  TUTTI_RETURN_IF_ERROR(queue_.closedStatus());
  if (takesOrderedLane(type, input, options)) {
    return enqueueOrdered(type, input, output, options, handle);
  }
  ProcessSetInfo set;
  TUTTI_RETURN_IF_ERROR(resolveSet(options.process_set, type, options.name, &set));
  TensorEntry entry;
  entry.request = makeRequest(type, input, options, set);
  Status checked = checkEntry(&entry, input, output, options, set);
  if (!checked.isOk()) return announceInvalid({std::move(entry.request)}, checked);
  entry.input = input;
  if (output != nullptr) entry.output = *output;
  std::vector<Handle> handles;
  std::vector<TensorEntry> entries;
  entries.push_back(std::move(entry));
  TUTTI_RETURN_IF_ERROR(submit(std::move(entries), &handles));
  *handle = handles[0];
  return Status::ok();
}

Status RuntimeImpl::groupedAllreduce(const std::vector<TensorView>& inputs,
                                     const std::vector<TensorView>& outputs,
                                     const OpOptions& options, std::vector<Handle>* handles) {
  if (handles == nullptr) return Status::invalidArgument("handles must not be null");
  TUTTI_RETURN_IF_ERROR(queue_.closedStatus());
  if (inputs.size() != outputs.size() || inputs.empty()) {
    return Status::invalidArgument("grouped allreduce: " + std::to_string(inputs.size()) +
                                   " inputs and " + std::to_string(outputs.size()) +
                                   " outputs; expected the same number, at least one");
  }
  if (takesOrderedLane(OpType::kAllreduce, inputs[0], options)) {
    return enqueueOrderedGroup(OpType::kAllreduce, inputs, outputs, options, handles);
  }
  ProcessSetInfo set;
  TUTTI_RETURN_IF_ERROR(resolveSet(options.process_set, OpType::kAllreduce, options.name, &set));
  const std::string base = options.name.empty()
                               ? "allreduce.noname." + std::to_string(sets_.nextNameNumber(set.id))
                               : options.name;
  const int32_t group_id = sets_.nextGroupId(set.id);
  std::vector<TensorEntry> entries;
  for (size_t i = 0; i < inputs.size(); ++i) {
    OpOptions o = options;
    o.name = base + "." + std::to_string(i);
    TensorEntry e;
    e.request = makeRequest(OpType::kAllreduce, inputs[i], o, set);
    e.request.group_id = group_id;
    e.request.group_size = static_cast<int32_t>(inputs.size());
    e.input = inputs[i];
    e.output = outputs[i];
    entries.push_back(std::move(e));
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    Status checked = checkEntry(&entries[i], inputs[i], &outputs[i], options, set);
    if (checked.isOk()) continue;
    // The whole group fails: every member is announced with the error.
    std::vector<Request> requests;
    for (TensorEntry& e : entries) requests.push_back(std::move(e.request));
    return announceInvalid(std::move(requests), checked);
  }
  return submit(std::move(entries), handles);
}

Status RuntimeImpl::barrier(Handle* handle, int32_t process_set, bool ordered) {
  OpOptions o;
  o.process_set = process_set;
  o.ordered = ordered;
  if (takesOrderedLane(OpType::kBarrier, TensorView{}, o)) {
    return enqueue(OpType::kBarrier, TensorView{}, nullptr, o, handle);
  }
  o.name = "__barrier." + std::to_string(sets_.nextBarrierNumber(process_set));
  return enqueue(OpType::kBarrier, TensorView{}, nullptr, o, handle);
}

Status RuntimeImpl::join(Handle* handle) {
  OpOptions o;
  o.name = "__join";  // one join in flight per rank; the controller answers "__join"
  return enqueue(OpType::kJoin, TensorView{}, nullptr, o, handle);
}

Status RuntimeImpl::pointToPoint(OpType type, const TensorView& tensor, int peer, int32_t tag,
                                 int32_t process_set, Handle* handle) {
  if (handle == nullptr) return Status::invalidArgument("handle must not be null");
  TUTTI_RETURN_IF_ERROR(queue_.closedStatus());
  const char* what = opTypeName(type);
  ProcessSetInfo set;
  TUTTI_RETURN_IF_ERROR(resolveSet(process_set, type, "", &set));
  TUTTI_RETURN_IF_ERROR(checkPointToPointPeer(what, rank_, peer, set.ranks, set.id));
  const bool sends = type == OpType::kSend;
  const int src = sends ? rank_ : peer;
  const int dst = sends ? peer : rank_;
  std::lock_guard<std::mutex> lock(p2p_mu_);
  int64_t& posted = p2p_posted_[{set.id, src, dst, tag}];
  TensorEntry entry;
  Request& r = entry.request;
  r.rank = rank_;
  r.type = type;
  r.name = pointToPointName(src, dst, tag, posted);
  r.dtype = tensor.dtype;
  r.shape = tensor.shape;
  r.root = set.rankOf(peer);
  r.device = tensor.device;
  r.process_set = set.id;
  Status checked = checkPointToPointTensor(what, peer, tensor);
  if (!checked.isOk()) {
    ++posted;  // the peer's message of this number fails with this error
    return announceInvalid({std::move(r)}, checked);
  }
  entry.input = tensor;
  entry.output = tensor;
  std::vector<TensorEntry> entries;
  entries.push_back(std::move(entry));
  std::vector<Handle> handles;
  TUTTI_RETURN_IF_ERROR(submit(std::move(entries), &handles));
  ++posted;
  *handle = handles[0];
  return Status::ok();
}

// -------------------------------------------------------------------- Runtime

namespace {

Status checkCreateArguments(const Settings& settings, const std::unique_ptr<Runtime>* out) {
  if (out == nullptr) return Status::invalidArgument("Runtime::create: out must not be null");
  if (settings.size < 1 || settings.rank < 0 || settings.rank >= settings.size) {
    return Status::invalidArgument("rank " + std::to_string(settings.rank) +
                                   " is out of range for size " + std::to_string(settings.size) +
                                   " (TUTTI_RANK must be in [0, TUTTI_SIZE - 1])");
  }
  return Status::ok();
}

}  // namespace

Status Runtime::create(const Settings& settings, std::unique_ptr<Runtime>* out) {
  TUTTI_RETURN_IF_ERROR(checkCreateArguments(settings, out));
  LogLevel level;
  if (parseLogLevel(settings.log_level, &level)) setLogLevel(level);
  BackendBundle bundle;
  TUTTI_RETURN_IF_ERROR(connectBackend(settings, &bundle));
  if (!bundle.transport || !bundle.backend) {
    return Status::internal("connectBackend returned no transport or backend");
  }
  return createConnected(settings, std::move(bundle), out);
}

Status Runtime::createConnected(const Settings& settings, BackendBundle bundle,
                                std::unique_ptr<Runtime>* out) {
  TUTTI_RETURN_IF_ERROR(checkCreateArguments(settings, out));
  if (!bundle.transport || !bundle.backend) {
    return Status::invalidArgument(
        "Runtime::createConnected: the bundle has no transport or backend");
  }
  // The backend may know the placement better than the environment (mpi:
  // local and cross ranks come from MPI's communicators).
  Settings placed = settings;
  if (bundle.placement) {
    const JobPlacement& p = *bundle.placement;
    placed.rank = p.rank;
    placed.size = p.size;
    placed.local_rank = p.local_rank;
    placed.local_size = p.local_size;
    placed.cross_rank = p.cross_rank;
    placed.cross_size = p.cross_size;
  }
  auto impl = std::make_unique<RuntimeImpl>(placed, std::move(bundle));
  if (!placed.timeline.empty()) {
    Status st = impl->timeline().start(placed.timeline, placed.rank, placed.timeline_mark_cycles);
    if (!st.isOk()) {
      return Status(st.code(), "TUTTI_TIMELINE=" + placed.timeline + ": " + st.message());
    }
  }
  impl->start();
  out->reset(new Runtime(std::move(impl)));
  return Status::ok();
}

Runtime::Runtime(std::unique_ptr<RuntimeImpl> impl) : impl_(std::move(impl)) {}
Runtime::~Runtime() = default;  // ~RuntimeImpl shuts down

Status Runtime::shutdown() {
  return impl_->shutdown();
}
int Runtime::rank() const {
  return impl_->settings().rank;
}
int Runtime::size() const {
  return impl_->settings().size;
}
int Runtime::localRank() const {
  return impl_->settings().local_rank;
}
int Runtime::localSize() const {
  return impl_->settings().local_size;
}
int Runtime::crossRank() const {
  return impl_->settings().cross_rank;
}
int Runtime::crossSize() const {
  return impl_->settings().cross_size;
}
const Settings& Runtime::settings() const {
  return impl_->settings();
}

std::vector<AutotuneChange> Runtime::autotuneHistory() const {
  return impl_->autotuneHistory();
}

int Runtime::lostRank() const {
  const Status failure = impl_->failure();
  if (failure.code() != StatusCode::kPeerLost) return -1;
  // Set by the transport that lost the peer (core/status.h).
  const int rank = failure.lostRank();
  return rank < size() ? rank : -1;
}

Status Runtime::allreduce(const TensorView& input, const TensorView& output,
                          const OpOptions& options, Handle* handle) {
  return impl_->enqueue(OpType::kAllreduce, input, &output, options, handle);
}
Status Runtime::groupedAllreduce(const std::vector<TensorView>& inputs,
                                 const std::vector<TensorView>& outputs, const OpOptions& options,
                                 std::vector<Handle>* handles) {
  return impl_->groupedAllreduce(inputs, outputs, options, handles);
}
Status Runtime::allgather(const TensorView& input, const OpOptions& options, Handle* handle) {
  return impl_->enqueue(OpType::kAllgather, input, nullptr, options, handle);
}
Status Runtime::allgatherInto(const TensorView& input, const TensorView& output,
                              const OpOptions& options, Handle* handle) {
  const bool host = input.device == DeviceType::kCpu && output.device == DeviceType::kCpu;
  return impl_->enqueue(OpType::kAllgather, input, host ? &output : nullptr, options, handle);
}
Status Runtime::broadcast(const TensorView& input, const TensorView& output,
                          const OpOptions& options, Handle* handle) {
  return impl_->enqueue(OpType::kBroadcast, input, &output, options, handle);
}
Status Runtime::alltoall(const TensorView& input, const OpOptions& options, Handle* handle) {
  return impl_->enqueue(OpType::kAlltoall, input, nullptr, options, handle);
}
Status Runtime::reducescatter(const TensorView& input, const OpOptions& options, Handle* handle) {
  return impl_->enqueue(OpType::kReducescatter, input, nullptr, options, handle);
}
Status Runtime::barrier(Handle* handle, int32_t process_set, bool ordered) {
  return impl_->barrier(handle, process_set, ordered);
}
Status Runtime::send(const TensorView& input, int dst, int32_t tag, int32_t process_set,
                     Handle* handle) {
  return impl_->pointToPoint(OpType::kSend, input, dst, tag, process_set, handle);
}
Status Runtime::recv(const TensorView& output, int src, int32_t tag, int32_t process_set,
                     Handle* handle) {
  return impl_->pointToPoint(OpType::kRecv, output, src, tag, process_set, handle);
}
Status Runtime::addProcessSet(const std::vector<int>& ranks, int32_t* id) {
  return impl_->addProcessSet(ranks, id);
}
Status Runtime::removeProcessSet(int32_t id) {
  return impl_->removeProcessSet(id);
}
Status Runtime::processSet(int32_t id, ProcessSetInfo* out) const {
  return impl_->processSets().lookup(id, out);
}
std::vector<ProcessSetInfo> Runtime::processSets() const {
  return impl_->processSets().all();
}
Status Runtime::join(Handle* handle) {
  return impl_->join(handle);
}

bool Runtime::poll(Handle handle) const {
  if (impl_->handles().poll(handle)) return true;
  impl_->nudgeOrdered(handle);
  return impl_->handles().poll(handle);
}
bool Runtime::hasHandle(Handle handle) const {
  return impl_->handles().contains(handle);
}
Status Runtime::wait(Handle handle, double timeout_seconds) const {
  return impl_->wait(handle, timeout_seconds);
}
OwnedTensor* Runtime::output(Handle handle) const {
  return impl_->handles().output(handle);
}
std::vector<int64_t> Runtime::receivedSplits(Handle handle) const {
  return impl_->handles().receivedSplits(handle);
}
int Runtime::joinResult(Handle handle) const {
  return impl_->handles().joinResult(handle);
}
Status Runtime::release(Handle handle) {
  return impl_->release(handle);
}
Status Runtime::onComplete(Handle handle, std::function<void(Handle, const Status&)> callback) {
  TUTTI_RETURN_IF_ERROR(impl_->handles().onComplete(handle, std::move(callback)));
  impl_->nudgeOrdered(handle);
  return Status::ok();
}

Status Runtime::startTimeline(const std::string& path, bool mark_cycles) {
  return impl_->timeline().start(path, rank(), mark_cycles);
}
Status Runtime::stopTimeline() {
  return impl_->timeline().stop();
}

uint64_t Runtime::bytesSent() const {
  return impl_->executorState().bytes_sent.load(std::memory_order_relaxed);
}
CompressionResiduals Runtime::compressionResiduals() const {
  return impl_->executorState().compressors.residuals();
}
Status Runtime::setCompressionResiduals(const CompressionResiduals& residuals) {
  return impl_->executorState().compressors.setResiduals(residuals);
}

}  // namespace tutti
