// The ordered lane (coordinator/ordered_lane.h): queueing, who runs an op,
// and closing. The exchange and the collective: ordered_exec.cc.

#include "coordinator/ordered_lane.h"

#include <algorithm>
#include <string>

namespace tutti {

OrderedLane::OrderedLane(ProcessSetInfo set, int rank, Connect connect, HandleTable& handles,
                         ExecutorState& state, OrderedLaneOptions options)
    : set_(std::move(set)),
      rank_(rank),
      connect_(std::move(connect)),
      handles_(handles),
      state_(state),
      options_(options) {}

OrderedLane::~OrderedLane() {
  shutdown();
}

void OrderedLane::shutdown() {
  close(Status::shutdown("tutti shut down before this ordered collective ran"));
  std::unique_lock<std::mutex> lock(mu_);
  ++waiters_;
  cv_.wait(lock, [&] { return !running_; });
  --waiters_;
  std::thread thread = std::move(thread_);
  lock.unlock();
  if (thread.joinable()) thread.join();
  lock.lock();
  executor_.reset();
  conn_ = SetBackend{};
}

uint64_t OrderedLane::submit(std::vector<TensorEntry> entries) {
  std::unique_lock<std::mutex> lock(mu_);
  if (closing_) {
    const Status st = closed_;
    lock.unlock();
    for (const TensorEntry& e : entries) {
      if (e.handle != 0) handles_.complete(e.handle, Completion::failure(st));
    }
    return 0;
  }
  Op op;
  op.seq = next_seq_++;
  const std::string name = "ordered #" + std::to_string(op.seq);
  for (size_t i = 0; i < entries.size(); ++i) {
    entries[i].request.name = entries.size() == 1 ? name : name + "." + std::to_string(i);
  }
  op.entries = std::move(entries);
  op.queued = std::chrono::steady_clock::now();
  const uint64_t seq = op.seq;
  last_submit_ = op.queued;
  queue_.push_back(std::move(op));
  if (!thread_.joinable()) thread_ = std::thread([this] { threadMain(); });
  // A thread asleep with a deadline looks at the queue by then: waking it
  // for every op would cost a context switch per op on a busy host.
  if (thread_deadline_ == Clock::time_point::max() || !options_.callers_run) {
    thread_cv_.notify_one();
  }
  return seq;
}

Status OrderedLane::runThrough(uint64_t seq, double timeout_seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(std::max(timeout_seconds, 0.0)));
  std::unique_lock<std::mutex> lock(mu_);
  while (done_seq_ < seq) {
    if (options_.callers_run && !running_ && !queue_.empty()) {
      running_ = true;
      runFront(lock);
      continue;
    }
    ++waiters_;
    std::cv_status woke = std::cv_status::no_timeout;
    if (timeout_seconds < 0) {
      cv_.wait(lock);
    } else {
      woke = cv_.wait_until(lock, deadline);
    }
    --waiters_;
    if (woke == std::cv_status::timeout && done_seq_ < seq) {
      return Status::timeout("ordered collective #" + std::to_string(seq) + " of process set " +
                             std::to_string(set_.id) + " still runs after " +
                             std::to_string(timeout_seconds) + " s");
    }
  }
  return Status::ok();
}

void OrderedLane::runFront(std::unique_lock<std::mutex>& lock) {
  Op op = std::move(queue_.front());
  queue_.pop_front();
  const Status broken = broken_;
  lock.unlock();
  std::vector<Completion> done;
  Status failed = broken.isOk() ? execute(op, &done) : broken;
  complete(op, std::move(done), failed);
  lock.lock();
  if (!failed.isOk() && broken_.isOk()) broken_ = failed;
  done_seq_ = std::max(done_seq_, op.seq);
  running_ = false;
  if (waiters_ > 0) cv_.notify_all();
}

void OrderedLane::threadMain() {
  // A waiting caller runs an op itself (no hand-off); this thread takes the
  // ops nobody came for within the hand-off time. It sleeps until the
  // queue's front is due, or while ops keep coming, for kLinger at a time
  // (submit() then need not wake it); idle, without a deadline.
  constexpr auto kLinger = std::chrono::milliseconds(2);
  std::unique_lock<std::mutex> lock(mu_);
  while (!closing_) {
    const auto now = Clock::now();
    const auto handoff = options_.callers_run ? options_.handoff : Clock::duration::zero();
    if (!running_ && !queue_.empty() && now >= queue_.front().queued + handoff) {
      running_ = true;
      runFront(lock);
      continue;
    }
    if (!queue_.empty()) {
      thread_deadline_ = running_ ? now + kLinger : queue_.front().queued + handoff;
    } else {
      thread_deadline_ = now - last_submit_ < kLinger ? now + kLinger : Clock::time_point::max();
    }
    if (thread_deadline_ == Clock::time_point::max()) {
      thread_cv_.wait(lock);
    } else {
      thread_cv_.wait_until(lock, thread_deadline_);
    }
  }
}

void OrderedLane::nudge() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!queue_.empty()) thread_cv_.notify_one();
}

void OrderedLane::complete(const Op& op, std::vector<Completion> done, const Status& failed) {
  for (size_t i = 0; i < op.entries.size(); ++i) {
    const Handle h = op.entries[i].handle;
    if (h == 0) continue;
    if (!failed.isOk() || i >= done.size()) {
      handles_.complete(
          h, Completion::failure(failed.isOk() ? Status::internal("no completion") : failed));
    } else {
      handles_.complete(h, std::move(done[i]));
    }
  }
}

void OrderedLane::close(const Status& status) {
  std::unique_lock<std::mutex> lock(mu_);
  if (closing_) return;
  closing_ = true;
  closed_ = status;
  std::deque<Op> queued;
  queued.swap(queue_);
  done_seq_ = next_seq_ - 1;
  // An op that is running fails with this status as soon as its waits see it.
  if (running_ && conn_.transport) conn_.transport->cancel(status);
  cv_.notify_all();
  thread_cv_.notify_all();
  lock.unlock();
  for (const Op& op : queued) complete(op, {}, status);
}

}  // namespace tutti
