#pragma once

// The response cache: the steady-state fast path of negotiation.
//
// Every rank inserts every executed, non-error op Response, split into one
// entry per tensor name, in execution order. Because every rank executes the
// same responses in the same order, and both the slot ids (a monotonic
// counter, never reused) and the LRU eviction depend only on that order, slot
// s names the same tensor and Response on every rank.
//
// Each rank keeps, per entry, its own request for the name (its "signature").
// When a worker enqueues a tensor whose request equals its signature, it
// announces only the slot id (RequestList.cache_hits) instead of the whole
// request. Rank 0 additionally keeps every rank's request per entry and
// expands the slot id back into the worker's request. Rank 0 may be ahead of
// a worker (it executes first), so entries it evicted or replaced stay
// readable for a while as bounded "tombstones".
//
// What this saves, honestly: request bytes (an 8-byte id instead of a name,
// shape and parameters) and, when every rank announced the same slot and no
// rank has joined, rank 0's cross-rank validation (the cached Response is
// reused). It does NOT save a round trip: rank 0 still decides the order and
// sends the full ResponseList (the wire format has no cached-response field).
//
// Threading: owned and used only by the background thread.

#include <cstdint>
#include <deque>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/message.h"

namespace tutti {

// True when two requests of one rank describe the same op (ignores rank).
bool sameSignature(const Request& a, const Request& b);

class ResponseCache {
 public:
  // capacity 0 disables the cache (insert does nothing, lookups miss).
  explicit ResponseCache(int64_t capacity);
  bool enabled() const { return capacity_ > 0 && on_; }
  // Autotune's switch (coordinator/parameter_manager.h), made by every rank
  // at the same point of the execution order. Off: every entry is retired
  // (rank 0 keeps their requests as tombstones, so that a slot a worker
  // announced before it switched still expands), inserts and lookups stop.
  // On again: the cache refills from empty with new slot ids.
  void setEnabled(bool on);

  // Records one executed tensor. `response` holds exactly that name.
  // `own` is this rank's request (nullopt when this rank did not submit it,
  // e.g. it joined: then its lookups miss). `all_requests` (rank 0 only;
  // empty on workers) holds every rank's request, nullopt for joined ranks.
  void insert(const Response& response, const std::optional<Request>& own,
              std::vector<std::optional<Request>> all_requests);

  // The slot whose signature equals `request`, or -1.
  int64_t slotFor(const Request& request) const;
  // Rank 0: rank `rank`'s request behind slot `slot` (live or tombstone).
  std::optional<Request> requestOf(int64_t slot, int rank) const;
  // The cached Response of a live slot; nullptr when it is not live.
  const Response* response(int64_t slot) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    int64_t slot = 0;
    Response response;
    std::optional<Request> own;
    std::vector<std::optional<Request>> all_requests;
  };
  void retire(const std::string& name);  // moves an entry to the tombstones

  int64_t capacity_;
  bool on_ = true;
  int64_t next_slot_ = 0;
  std::list<std::string> lru_;  // front = most recently executed
  struct Live {
    Entry entry;
    std::list<std::string>::iterator lru_pos;
  };
  std::unordered_map<std::string, Live> entries_;
  std::unordered_map<int64_t, std::string> slot_names_;  // live slots
  // Retired entries' requests (rank 0), oldest first, bounded.
  std::deque<int64_t> tombstone_order_;
  std::unordered_map<int64_t, std::vector<std::optional<Request>>> tombstones_;
  size_t max_tombstones_;
};

}  // namespace tutti
