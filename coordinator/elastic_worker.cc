#include "coordinator/elastic_worker.h"

#include <chrono>

#include "core/logging.h"
#include "rendezvous/elastic_membership.h"
#include "rendezvous/rendezvous_client.h"

namespace tutti {

namespace {

using Clock = std::chrono::steady_clock;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Settings of the runtime of one generation: placement from the assignment.
Settings assigned(const Settings& base, const ElasticAssignment& a) {
  Settings s = base;
  s.rank = a.member.rank;
  s.size = a.member.size;
  s.local_rank = a.member.local_rank;
  s.local_size = a.member.local_size;
  s.cross_rank = a.member.cross_rank;
  s.cross_size = a.member.cross_size;
  s.elastic_generation = a.generation;
  return s;
}

// Runs a store call again once after a broken connection: the session's
// client may sit idle for hours between calls, and reconnects on the next.
template <typename Call>
Status retryOnce(Call call) {
  Status st = call();
  if (st.code() == StatusCode::kIoError || st.code() == StatusCode::kTimeout) st = call();
  return st;
}

// Failures of one generation's rendezvous that a newer generation may cure.
bool retryable(const Status& st) {
  return st.code() != StatusCode::kInvalidArgument && st.code() != StatusCode::kInternal;
}

}  // namespace

ElasticWorker::ElasticWorker(const Settings& settings, std::unique_ptr<RendezvousClient> client)
    : settings_(settings), client_(std::move(client)) {}

ElasticWorker::~ElasticWorker() = default;

Status ElasticWorker::create(const Settings& settings, std::unique_ptr<ElasticWorker>* out) {
  if (settings.elastic_worker_id < 0) {
    return Status::invalidArgument(
        "TUTTI_ELASTIC_WORKER_ID is not set: elastic training needs a worker started by tuttirun's "
        "elastic driver (--min-np, --max-np or --host-discovery-script)");
  }
  if (settings.backend != "tcp") {
    return Status::invalidArgument("TUTTI_BACKEND=" + settings.backend +
                                   ": elastic training needs the tcp backend");
  }
  std::unique_ptr<RendezvousClient> client;
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(settings.timeout_seconds * 1000.0));
  TUTTI_RETURN_IF_ERROR(RendezvousClient::connect(
      settings.rendezvous_addr, settings.rendezvous_port, settings.secret, timeout, &client));
  out->reset(new ElasticWorker(settings, std::move(client)));
  return Status::ok();
}

int64_t ElasticWorker::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

Status ElasticWorker::join(std::unique_ptr<Runtime>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  const int id = settings_.elastic_worker_id;
  const double timeout_s = settings_.elastic_timeout_seconds;
  const auto deadline = Clock::now() + seconds(timeout_s);
  int64_t after = generation_;
  Status last_failure;
  while (true) {
    ElasticAssignment assignment;
    Status st = retryOnce(
        [&] { return waitForGeneration(*client_, id, after, deadline, timeout_s, &assignment); });
    if (!st.isOk()) {
      if (st.code() == StatusCode::kTimeout && !last_failure.isOk()) {
        return Status::timeout(st.message() + "; generation " + std::to_string(after) +
                               " failed: " + last_failure.toString());
      }
      return st;
    }
    const int64_t g = assignment.generation;
    TUTTI_LOG(kInfo) << "elastic worker " << id << ": joining generation " << g << " as rank "
                     << assignment.member.rank << " of " << assignment.member.size;
    std::unique_ptr<Runtime> runtime;
    st = Runtime::create(assigned(settings_, assignment), &runtime);
    if (st.isOk()) {
      generation_ = g;
      hosts_checks_ = 0;
      *out = std::move(runtime);
      return Status::ok();
    }
    if (!retryable(st)) return st;
    // Superseded (Status::generationSuperseded() from the generation's store) or a member that
    // never connected: the driver forms a newer generation without it.
    TUTTI_LOG(kWarning) << "elastic worker " << id << ": generation " << g
                        << " did not come together (" << st.toString()
                        << "); waiting for a newer one";
    last_failure = st;
    after = g;
  }
}

Status ElasticWorker::reportLoss(const Runtime& runtime) {
  const int lost = runtime.lostRank();
  if (lost < 0) return Status::ok();
  std::lock_guard<std::mutex> lock(mu_);
  TUTTI_LOG(kInfo) << "elastic worker " << settings_.elastic_worker_id << ": reporting rank "
                   << lost << " of generation " << generation_ << " lost";
  return retryOnce(
      [&] { return reportLostRank(*client_, generation_, settings_.elastic_worker_id, lost); });
}

Status ElasticWorker::hostsUpdated(Runtime& runtime, bool* updated) {
  if (updated == nullptr) return Status::invalidArgument("updated (out) must not be null");
  int32_t flag = 0;
  int64_t check = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t latest = -1;
    Status st = retryOnce([&] { return latestGeneration(*client_, &latest); });
    if (!st.isOk()) {
      TUTTI_LOG(kWarning) << "elastic worker " << settings_.elastic_worker_id
                          << ": cannot read elastic/latest (" << st.toString()
                          << "); this rank sees no newer generation";
    }
    flag = latest > generation_ ? 1 : 0;
    check = hosts_checks_++;
  }
  int32_t any = 0;
  TensorView in, result;
  in.data = &flag;
  in.dtype = DataType::kInt32;
  result.data = &any;
  result.dtype = DataType::kInt32;
  OpOptions options;
  options.name = "tutti.elastic.hosts_updated." + std::to_string(check);
  options.reduce_op = ReduceOp::kMax;
  Handle handle = 0;
  TUTTI_RETURN_IF_ERROR(runtime.allreduce(in, result, options, &handle));
  Status st = runtime.wait(handle);
  (void)runtime.release(handle);
  TUTTI_RETURN_IF_ERROR(st);
  *updated = any != 0;
  return Status::ok();
}

}  // namespace tutti
