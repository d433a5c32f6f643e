#include "coordinator/handle_table.h"

#include <chrono>
#include <string>

namespace tutti {

namespace {
Status unknownHandle(Handle handle) {
  return Status::invalidArgument("unknown handle " + std::to_string(handle) +
                                 " (never returned by an enqueue, or already released)");
}
}  // namespace

HandleTable::~HandleTable() {
  for (auto& [handle, entry] : entries_) {
    if (!entry->done && entry->callback) {
      entry->callback(handle, Status::shutdown("the runtime was destroyed while handle " +
                                               std::to_string(handle) + " was pending"));
    }
  }
}

Handle HandleTable::create() {
  std::lock_guard<std::mutex> lock(mu_);
  Handle handle = next_handle_++;
  entries_.emplace(handle, std::make_unique<Entry>());
  return handle;
}

void HandleTable::erase(Handle handle) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.erase(handle);
}

void HandleTable::complete(Handle handle, Completion completion) {
  CompletionCallback callback;
  Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(handle);
    if (it == entries_.end() || it->second->done) return;
    Entry& entry = *it->second;
    entry.completion = std::move(completion);
    entry.done = true;
    callback = std::move(entry.callback);
    entry.callback = nullptr;
    if (callback) status = entry.completion.status;
  }
  done_cv_.notify_all();
  if (callback) callback(handle, status);
}

Status HandleTable::onComplete(Handle handle, CompletionCallback callback) {
  Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(handle);
    if (it == entries_.end()) return unknownHandle(handle);
    Entry& entry = *it->second;
    if (entry.has_callback) {
      return Status::invalidArgument("handle " + std::to_string(handle) +
                                     " already has a completion callback (one per handle)");
    }
    entry.has_callback = true;
    if (!entry.done) {
      entry.callback = std::move(callback);
      return Status::ok();
    }
    status = entry.completion.status;
  }
  callback(handle, status);  // already completed: run it here, unlocked
  return Status::ok();
}

bool HandleTable::poll(Handle handle) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(handle);
  return it == entries_.end() || it->second->done;
}

bool HandleTable::contains(Handle handle) const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.count(handle) != 0;
}

Status HandleTable::wait(Handle handle, double timeout_seconds) const {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = entries_.find(handle);
  if (it == entries_.end()) return unknownHandle(handle);
  auto done = [&] {
    // Re-find on every wake-up: another thread may have released the handle
    // after it completed.
    auto again = entries_.find(handle);
    return again == entries_.end() || again->second->done;
  };
  if (timeout_seconds < 0) {
    done_cv_.wait(lock, done);
  } else {
    auto limit = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(timeout_seconds));
    if (!done_cv_.wait_for(lock, limit, done)) {
      return Status::timeout("handle " + std::to_string(handle) + " did not complete within " +
                             std::to_string(timeout_seconds) + " s (the op goes on)");
    }
  }
  it = entries_.find(handle);
  if (it == entries_.end()) return unknownHandle(handle);
  return it->second->completion.status;
}

const HandleTable::Entry* HandleTable::findDone(Handle handle) const {
  auto it = entries_.find(handle);
  if (it == entries_.end() || !it->second->done) return nullptr;
  return it->second.get();
}

OwnedTensor* HandleTable::output(Handle handle) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry* entry = findDone(handle);
  if (entry == nullptr || !entry->completion.has_output) return nullptr;
  // The table owns the entry (and its output) until release().
  return const_cast<OwnedTensor*>(&entry->completion.output);
}

std::vector<int64_t> HandleTable::receivedSplits(Handle handle) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry* entry = findDone(handle);
  return entry ? entry->completion.received_splits : std::vector<int64_t>{};
}

int HandleTable::joinResult(Handle handle) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry* entry = findDone(handle);
  return entry ? entry->completion.join_result : -1;
}

Status HandleTable::release(Handle handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(handle);
  if (it == entries_.end()) return unknownHandle(handle);
  if (!it->second->done) {
    return Status::invalidArgument("handle " + std::to_string(handle) +
                                   " is still pending: wait() for it before release()");
  }
  entries_.erase(it);
  return Status::ok();
}

}  // namespace tutti
