#include "bench/scale_job.h"

#include <algorithm>
#include <numeric>
#include <thread>

#include "bench/resnet50_shapes.h"
#include "ops/backend_registry.h"

namespace tutti::bench {

ScaleJob::ScaleJob(int size, bool cache, const ScaleOptions& options)
    : size_(size),
      cache_(cache),
      options_(options),
      world_(size, std::chrono::milliseconds(static_cast<int64_t>(options.timeout_seconds * 1e3))),
      ledger_(size),
      counters_(std::make_unique<ControlCounters[]>(static_cast<size_t>(size))),
      done_ns_(std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(size))) {
  int64_t total = 0;
  std::vector<Shape> shapes;
  for (const resnet50_param& p : kResnet50Params) {
    int64_t elements = 1;
    for (int d = 0; d < p.ndim; ++d) elements *= p.dims[d];
    Shape shape(static_cast<size_t>(p.ndim), 1);
    shape[0] = std::max<int64_t>(1, elements / options.shrink);
    total += shape[0];
    shapes.push_back(shape);
    names_.push_back(p.name);
  }
  buffers_.assign(static_cast<size_t>(size), std::vector<float>(static_cast<size_t>(total)));
  size_t offset = 0;
  for (const Shape& s : shapes) {
    views_.push_back(TensorView{nullptr, DataType::kFloat32, s});
    offsets_.push_back(offset);
    offset += static_cast<size_t>(views_.back().numElements());
  }
}

ScaleJob::~ScaleJob() {
  (void)shutdown();
}

Settings ScaleJob::rankSettings(int rank) const {
  Settings s;
  s.rank = rank;
  s.size = size_;
  s.local_rank = rank;
  s.local_size = size_;
  s.timeout_seconds = options_.timeout_seconds;
  s.fusion_threshold_bytes = std::max<int64_t>(1, s.fusion_threshold_bytes / options_.shrink);
  if (!cache_) s.cache_capacity = 0;
  return s;
}

Status ScaleJob::start() {
  runtimes_.resize(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    BackendBundle bundle;
    bundle.transport = std::make_unique<ScaleTransport>(world_.transport(r),
                                                        options_.timeout_seconds, &counters_[r]);
    bundle.backend = std::make_unique<NullBackend>(r, size_, &ledger_);
    TUTTI_RETURN_IF_ERROR(
        Runtime::createConnected(rankSettings(r), std::move(bundle), &runtimes_[r]));
  }
  return Status::ok();
}

Status ScaleJob::enqueueAll(std::mt19937* rng, std::vector<std::vector<Handle>>* handles,
                            Clock::time_point* last) {
  const size_t n = names_.size();
  std::vector<std::vector<size_t>> order(static_cast<size_t>(size_), std::vector<size_t>(n));
  for (auto& o : order) {
    std::iota(o.begin(), o.end(), 0);
    std::shuffle(o.begin(), o.end(), *rng);
  }
  handles->assign(static_cast<size_t>(size_), std::vector<Handle>(n, -1));
  for (size_t i = 0; i < n; ++i) {
    for (int r = 0; r < size_; ++r) {
      const size_t t = order[r][i];
      TensorView view = views_[t];
      view.data = buffers_[r].data() + offsets_[t];
      OpOptions opts;
      opts.name = names_[t];
      Runtime& rt = *runtimes_[r];
      Handle h = -1;
      TUTTI_RETURN_IF_ERROR(rt.allreduce(view, view, opts, &h));
      (*handles)[r][i] = h;
      TUTTI_RETURN_IF_ERROR(rt.onComplete(h, [this, r](Handle, const Status& st) {
        const int64_t now = Clock::now().time_since_epoch().count();
        int64_t seen = done_ns_[r].load();
        while (seen < now && !done_ns_[r].compare_exchange_weak(seen, now)) {
        }
        std::lock_guard<std::mutex> lock(mu_);
        if (!st.isOk()) ++failures_;
        if (--remaining_ == 0) cv_.notify_all();
      }));
    }
  }
  *last = Clock::now();
  return Status::ok();
}

Status ScaleJob::step(std::mt19937* rng, StepFigures* out) {
  const int worker = size_ - 1;
  const ControlSnapshot rank0_before = counters_[0].snapshot();
  const ControlSnapshot worker_before = counters_[worker].snapshot();
  {
    std::lock_guard<std::mutex> lock(mu_);
    remaining_ = static_cast<int64_t>(size_) * static_cast<int64_t>(names_.size());
    failures_ = 0;
  }
  for (int r = 0; r < size_; ++r) done_ns_[r] = 0;
  std::vector<std::vector<Handle>> handles;
  Clock::time_point last;
  TUTTI_RETURN_IF_ERROR(enqueueAll(rng, &handles, &last));
  {
    std::unique_lock<std::mutex> lock(mu_);
    const auto limit = std::chrono::duration<double>(options_.timeout_seconds);
    if (!cv_.wait_for(lock, limit, [&] { return remaining_ == 0; })) {
      return Status::timeout(std::to_string(remaining_) + " handles still pending");
    }
    if (failures_ > 0) return Status::internal(std::to_string(failures_) + " allreduces failed");
  }
  int64_t latest = 0;
  for (int r = 0; r < size_; ++r) latest = std::max(latest, done_ns_[r].load());
  out->latency_s =
      std::chrono::duration<double>(Clock::duration(latest) - last.time_since_epoch()).count();
  // Rank 0 samples its CPU when it next waits, just after its last list.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (int r = 0; r < size_; ++r) {
    for (Handle h : handles[r]) TUTTI_RETURN_IF_ERROR(runtimes_[r]->release(h));
  }
  out->rank0 = counters_[0].snapshot() - rank0_before;
  out->worker = counters_[worker].snapshot() - worker_before;
  out->cycles = out->worker.received_messages;
  return Status::ok();
}

Status ScaleJob::shutdown() {
  Status first;
  for (auto& rt : runtimes_) {
    if (!rt) continue;
    Status st = rt->shutdown();
    if (first.isOk() && !st.isOk()) first = st;
  }
  runtimes_.clear();
  return first;
}

}  // namespace tutti::bench
