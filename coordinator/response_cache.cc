#include "coordinator/response_cache.h"

#include <algorithm>

namespace tutti {

bool sameSignature(const Request& a, const Request& b) {
  return a.type == b.type && a.name == b.name && a.dtype == b.dtype && a.reduce_op == b.reduce_op &&
         a.shape == b.shape && a.root == b.root && a.prescale == b.prescale &&
         a.postscale == b.postscale && a.splits == b.splits && a.device == b.device &&
         a.group_id == b.group_id && a.group_size == b.group_size &&
         a.compression == b.compression && a.error == b.error && a.process_set == b.process_set;
}

namespace {
bool sameResponse(const Response& a, const Response& b) {
  return a.kind == b.kind && a.type == b.type && a.names == b.names && a.dtype == b.dtype &&
         a.reduce_op == b.reduce_op && a.prescale == b.prescale && a.postscale == b.postscale &&
         a.root == b.root && a.device == b.device && a.sizes == b.sizes &&
         a.joined_ranks == b.joined_ranks && a.compression == b.compression &&
         a.process_set == b.process_set;
}
}  // namespace

ResponseCache::ResponseCache(int64_t capacity)
    : capacity_(std::max<int64_t>(capacity, 0)),
      // Workers lag rank 0 by at most the responses in flight; keep retired
      // requests for several cache generations.
      max_tombstones_(static_cast<size_t>(std::min<int64_t>(capacity_, 1 << 20)) * 4 + 1024) {}

void ResponseCache::insert(const Response& response, const std::optional<Request>& own,
                           std::vector<std::optional<Request>> all_requests) {
  if (!enabled() || response.names.size() != 1) return;
  const std::string name = tensorKey(response.process_set, response.names[0]);
  auto it = entries_.find(name);
  if (it != entries_.end() && sameResponse(it->second.entry.response, response)) {
    // Same decision again: keep the slot, refresh recency and signatures
    // (a signature may change without changing the Response, e.g. a reshape).
    Live& live = it->second;
    live.entry.own = own;
    live.entry.all_requests = std::move(all_requests);
    lru_.splice(lru_.begin(), lru_, live.lru_pos);
    return;
  }
  if (it != entries_.end()) retire(name);
  Live live;
  live.entry.slot = next_slot_++;
  live.entry.response = response;
  live.entry.own = own;
  live.entry.all_requests = std::move(all_requests);
  lru_.push_front(name);
  live.lru_pos = lru_.begin();
  slot_names_[live.entry.slot] = name;
  entries_.emplace(name, std::move(live));
  while (static_cast<int64_t>(entries_.size()) > capacity_) retire(lru_.back());
}

void ResponseCache::setEnabled(bool on) {
  if (!on) {
    while (!lru_.empty()) retire(lru_.back());
  }
  on_ = on;
}

void ResponseCache::retire(const std::string& name) {
  auto it = entries_.find(name);
  if (it == entries_.end()) return;
  Entry& entry = it->second.entry;
  if (!entry.all_requests.empty()) {
    tombstones_[entry.slot] = std::move(entry.all_requests);
    tombstone_order_.push_back(entry.slot);
    while (tombstone_order_.size() > max_tombstones_) {
      tombstones_.erase(tombstone_order_.front());
      tombstone_order_.pop_front();
    }
  }
  slot_names_.erase(entry.slot);
  lru_.erase(it->second.lru_pos);
  entries_.erase(it);
}

int64_t ResponseCache::slotFor(const Request& request) const {
  if (!enabled()) return -1;
  auto it = entries_.find(tensorKey(request.process_set, request.name));
  if (it == entries_.end() || !it->second.entry.own) return -1;
  return sameSignature(*it->second.entry.own, request) ? it->second.entry.slot : -1;
}

std::optional<Request> ResponseCache::requestOf(int64_t slot, int rank) const {
  const std::vector<std::optional<Request>>* all = nullptr;
  auto live = slot_names_.find(slot);
  if (live != slot_names_.end()) {
    all = &entries_.at(live->second).entry.all_requests;
  } else {
    auto dead = tombstones_.find(slot);
    if (dead != tombstones_.end()) all = &dead->second;
  }
  if (all == nullptr || rank < 0 || rank >= static_cast<int>(all->size())) return std::nullopt;
  return (*all)[rank];
}

const Response* ResponseCache::response(int64_t slot) const {
  auto live = slot_names_.find(slot);
  if (live == slot_names_.end()) return nullptr;
  return &entries_.at(live->second).entry.response;
}

}  // namespace tutti
