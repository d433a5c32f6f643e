#include "coordinator/tensor_queue.h"

#include <unordered_set>

namespace tutti {

namespace {
Status duplicate(const Request& r) {
  return Status::duplicateName(std::string(opTypeName(r.type)) + " '" + r.name +
                               "': a tensor of that name is already in flight on this rank; "
                               "wait for it before reusing the name");
}
}  // namespace

Status TensorQueue::add(std::vector<TensorEntry> entries) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return *closed_;
  std::unordered_set<std::string> seen;
  for (const TensorEntry& e : entries) {
    const std::string key = tensorKey(e.request.process_set, e.request.name);
    if (in_flight_.count(key) || !seen.insert(key).second) {
      return duplicate(e.request);
    }
  }
  const auto now = std::chrono::steady_clock::now();
  for (TensorEntry& e : entries) {
    e.enqueued = now;
    new_requests_.push_back(e.request);
    std::string key = tensorKey(e.request.process_set, e.request.name);
    in_flight_.emplace(std::move(key), std::move(e));
  }
  return Status::ok();
}

Status TensorQueue::announce(Request request) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return *closed_;
  std::string key = tensorKey(request.process_set, request.name);
  if (in_flight_.count(key)) {
    return duplicate(request);
  }
  // The name stays in flight, under handle 0 (never a live handle, so its
  // completion goes nowhere), until the error response for it arrives: a
  // retry under the same name cannot pair with this request at rank 0.
  TensorEntry placeholder;
  placeholder.request = request;
  placeholder.enqueued = std::chrono::steady_clock::now();
  new_requests_.push_back(std::move(request));
  in_flight_.emplace(std::move(key), std::move(placeholder));
  return Status::ok();
}

std::vector<Request> TensorQueue::takeNewRequests() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Request> out;
  out.swap(new_requests_);
  return out;
}

bool TensorQueue::take(const std::string& key, TensorEntry* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_flight_.find(key);
  if (it == in_flight_.end()) return false;
  *out = std::move(it->second);
  in_flight_.erase(it);
  return true;
}

std::vector<TensorEntry> TensorQueue::takeProcessSet(int32_t process_set) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TensorEntry> out;
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (it->second.request.process_set != process_set) {
      ++it;
      continue;
    }
    out.push_back(std::move(it->second));
    it = in_flight_.erase(it);
  }
  return out;
}

std::vector<TensorEntry> TensorQueue::close(const Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_) closed_ = status;
  std::vector<TensorEntry> out;
  out.reserve(in_flight_.size());
  for (auto& [name, entry] : in_flight_) out.push_back(std::move(entry));
  in_flight_.clear();
  new_requests_.clear();
  return out;
}

Status TensorQueue::closedStatus() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_ ? *closed_ : Status::ok();
}

}  // namespace tutti
