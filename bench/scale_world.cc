#include "bench/scale_world.h"

#include <time.h>

#include <algorithm>
#include <cstring>
#include <sstream>

namespace tutti::bench {

namespace {

int64_t threadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string joined(const std::vector<size_t>& values) {
  std::ostringstream out;
  for (size_t v : values) out << ' ' << v;
  return out.str();
}

std::string reduction(const char* what, size_t count, DataType dtype, ReduceOp op) {
  std::ostringstream out;
  out << what << ' ' << count << ' ' << dataTypeName(dtype) << ' ' << static_cast<int>(op);
  return out.str();
}

}  // namespace

ControlSnapshot ControlSnapshot::operator-(const ControlSnapshot& earlier) const {
  ControlSnapshot d;
  d.sent_messages = sent_messages - earlier.sent_messages;
  d.sent_bytes = sent_bytes - earlier.sent_bytes;
  d.received_messages = received_messages - earlier.received_messages;
  d.received_bytes = received_bytes - earlier.received_bytes;
  d.heartbeats = heartbeats - earlier.heartbeats;
  d.cpu_ns = cpu_ns - earlier.cpu_ns;
  return d;
}

ControlSnapshot ControlCounters::snapshot() const {
  ControlSnapshot s;
  s.sent_messages = sent_messages.load();
  s.sent_bytes = sent_bytes.load();
  s.received_messages = received_messages.load();
  s.received_bytes = received_bytes.load();
  s.heartbeats = heartbeats.load();
  s.cpu_ns = cpu_ns.load();
  return s;
}

ScaleTransport::ScaleTransport(testing::MemoryTransport& inner, double timeout_seconds,
                               ControlCounters* counters)
    : inner_(inner),
      counters_(counters),
      liveness_(inner.rank(), inner.size(), timeout_seconds, timeout_seconds) {}

void ScaleTransport::sampleCpu() {
  counters_->cpu_ns.store(threadCpuNs(), std::memory_order_relaxed);
}

Status ScaleTransport::sendControl(int peer, std::vector<uint8_t> bytes) {
  counters_->sent_messages.fetch_add(1, std::memory_order_relaxed);
  counters_->sent_bytes.fetch_add(bytes.size(), std::memory_order_relaxed);
  liveness_.sent(peer, Clock::now());
  return inner_.sendControl(peer, std::move(bytes));
}

Status ScaleTransport::pollControl(Clock::time_point deadline, std::vector<ControlMessage>* out) {
  sampleCpu();
  Clock::time_point now = Clock::now();
  if (!started_) {
    liveness_.start(now);
    started_ = true;
  }
  liveness_.enterWait(now);
  const PeerLiveness::IsOpen open = [](int) { return true; };
  Status st;
  while (true) {
    for (int peer : liveness_.heartbeatsDue(now, open)) {
      counters_->heartbeats.fetch_add(1, std::memory_order_relaxed);
      liveness_.sent(peer, now);
      (void)inner_.sendControl(peer, {});
    }
    Clock::time_point silent_until = Clock::time_point::max();
    const int silent = liveness_.silentPeer(now, open, &silent_until);
    if (silent >= 0) {
      st = Status::peerLost(silent, liveness_.silenceMessage(silent));
      break;
    }
    const Clock::time_point until =
        std::min({deadline, liveness_.nextHeartbeat(open), silent_until});
    std::vector<ControlMessage> got;
    st = inner_.pollControl(until, &got);
    now = Clock::now();
    for (ControlMessage& m : got) {
      liveness_.heard(m.from_rank, now);
      if (m.bytes.empty()) {
        counters_->heartbeats.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      counters_->received_messages.fetch_add(1, std::memory_order_relaxed);
      counters_->received_bytes.fetch_add(m.bytes.size(), std::memory_order_relaxed);
      out->push_back(std::move(m));
    }
    // Return on a message, an error, the caller's deadline or a wake();
    // heartbeats alone and this wrapper's own deadlines wait on.
    if (!st.isOk() || !out->empty() || now >= deadline || (got.empty() && now < until)) break;
  }
  liveness_.leftWait(now);
  sampleCpu();
  return st;
}

Status SizeLedger::check(int rank, const std::string& signature) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t call = next_[static_cast<size_t>(rank)]++;
  auto [it, first] = open_.try_emplace(call);
  Entry& e = it->second;
  if (first) {
    e.signature = signature;
    e.first_rank = rank;
  }
  Status st;
  if (e.signature != signature) {
    st = Status::internal("null backend: collective #" + std::to_string(call) + " is '" +
                          signature + "' on rank " + std::to_string(rank) + " but '" + e.signature +
                          "' on rank " + std::to_string(e.first_rank));
  }
  if (++e.seen == size_) {
    open_.erase(it);
    ++completed_;
  }
  return st;
}

uint64_t SizeLedger::completed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_;
}

Status NullBackend::allreduce(void* /*buf*/, size_t count, DataType dtype, ReduceOp op) {
  return ledger_->check(rank_, reduction("allreduce", count, dtype, op));
}

Status NullBackend::allreduceOutOfPlace(const void* in, void* out, size_t count, DataType dtype,
                                        ReduceOp op) {
  if (in != out && count > 0) std::memcpy(out, in, count * dataTypeSize(dtype));
  return ledger_->check(rank_, reduction("allreduce", count, dtype, op));
}

Status NullBackend::allgatherv(const void* /*input*/, void* /*output*/,
                               const std::vector<size_t>& bytes_per_rank) {
  return ledger_->check(rank_, "allgatherv" + joined(bytes_per_rank));
}

Status NullBackend::broadcast(void* /*buf*/, size_t bytes, int root) {
  return ledger_->check(rank_,
                        "broadcast " + std::to_string(bytes) + " root " + std::to_string(root));
}

Status NullBackend::alltoallv(const void* /*input*/, const std::vector<size_t>& send_bytes,
                              void* /*output*/, const std::vector<size_t>& recv_bytes) {
  // Each rank's sizes differ; their number is the world's on every rank.
  return ledger_->check(rank_, "alltoallv " + std::to_string(send_bytes.size()) + " " +
                                   std::to_string(recv_bytes.size()));
}

Status NullBackend::reducescatter(const void* /*input*/, void* /*output*/,
                                  const std::vector<size_t>& counts, DataType dtype, ReduceOp op) {
  return ledger_->check(rank_,
                        reduction("reducescatter", counts.size(), dtype, op) + joined(counts));
}

}  // namespace tutti::bench
