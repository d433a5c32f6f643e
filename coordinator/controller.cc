#include "coordinator/controller.h"

#include <algorithm>

#include "coordinator/point_to_point.h"
#include "coordinator/request_validation.h"
#include "core/check.h"
#include "core/logging.h"

namespace tutti {

namespace {
constexpr const char* kJoinName = "__join";
}  // namespace

Controller::Controller(int size, const ResponseCache* cache, bool keep_decided,
                       const ProcessSetTable* sets)
    : size_(size),
      cache_(cache),
      keep_decided_(keep_decided),
      own_sets_(sets == nullptr ? std::make_unique<ProcessSetTable>(size) : nullptr),
      sets_(sets == nullptr ? own_sets_.get() : sets),
      joined_(size, false),
      shutdown_(size, false) {
  TUTTI_CHECK_GE(size, 1);
}

void Controller::refuse(const Request& request, StatusCode code, const std::string& why) {
  Response resp =
      errorResponse({request.name}, request.type, code,
                    std::string(opTypeName(request.type)) + " '" + request.name + "' " + why);
  resp.process_set = request.process_set;
  emit(std::move(resp), -1, 0);
}

void Controller::addRequest(const Request& request, int64_t cache_slot, Clock::time_point now) {
  const int rank = request.rank;
  TUTTI_CHECK(rank >= 0 && rank < size_);
  if (shutdownRequested()) {
    int who =
        static_cast<int>(std::find(shutdown_.begin(), shutdown_.end(), true) - shutdown_.begin());
    refuse(request, StatusCode::kShutdown,
           "cannot run: rank " + std::to_string(who) + " is shutting down (shutdown())");
    return;
  }
  if (request.type == OpType::kJoin) {
    if (joined_[rank]) {
      TUTTI_LOG(kWarning) << "rank " << rank << " joined twice; ignoring the second join";
      return;
    }
    joined_[rank] = true;
    ++joined_count_;
    last_joined_ = rank;
    // Names that waited only for this rank may be ready now, oldest first.
    std::vector<std::pair<uint64_t, std::string>> order;
    for (const auto& [key, p] : table_) order.push_back({p.seq, key});
    std::sort(order.begin(), order.end());
    for (const auto& [seq, key] : order) checkReady(key);
    checkJoin();
    return;
  }
  // The set was known on the requesting rank when it enqueued; it may have
  // been removed since (its pending ops then failed on every rank).
  ProcessSetInfo set;
  Status known = sets_->lookup(request.process_set, &set);
  if (!known.isOk()) {
    refuse(request, StatusCode::kInvalidArgument, "cannot run: " + known.message());
    return;
  }
  const int set_rank = set.rankOf(rank);
  if (set_rank < 0) {
    refuse(request, StatusCode::kInvalidArgument,
           "cannot run: rank " + std::to_string(rank) + " is not in process set " +
               std::to_string(set.id));
    return;
  }
  // Who takes part: every member, or a point-to-point message's pair
  // (sender, receiver), in which `index` is this request's place.
  std::vector<int> members = set.ranks;
  int index = set_rank;
  if (isPointToPoint(request.type)) {
    if (request.root < 0 || request.root >= static_cast<int>(set.ranks.size())) {
      refuse(request, StatusCode::kInvalidArgument,
             "cannot run: peer " + std::to_string(request.root) + " is not a rank of process set " +
                 std::to_string(set.id));
      return;
    }
    const int peer = set.ranks[static_cast<size_t>(request.root)];
    const bool sends = request.type == OpType::kSend;
    members = sends ? std::vector<int>{rank, peer} : std::vector<int>{peer, rank};
    index = sends ? 0 : 1;
  }
  const std::string key = tensorKey(request.process_set, request.name);
  auto [it, inserted] = table_.try_emplace(key);
  Pending& p = it->second;
  if (inserted) {
    p.type = request.type;
    p.name = request.name;
    p.process_set = request.process_set;
    p.members = members;
    p.seq = next_seq_++;
    p.since = now;
    p.by_rank.resize(members.size());
    p.slots.assign(members.size(), -1);
  } else if (p.members != members) {
    // Both sides name a message by its pair (point_to_point.h): a request
    // naming another pair, or a collective of that name, is a bug.
    refuse(request, StatusCode::kInternal,
           "does not match the pending " + std::string(opTypeName(p.type)) + " of that name");
    return;
  }
  if (p.by_rank[index]) {
    TUTTI_LOG(kWarning) << "rank " << rank << " submitted '" << request.name
                        << "' twice while it was pending; dropping the second request";
    return;
  }
  p.by_rank[index] = request;
  p.slots[index] = cache_slot;
  ++p.submitted;
  checkReady(key);
}

void Controller::checkReady(const std::string& key) {
  auto it = table_.find(key);
  if (it == table_.end()) return;
  Pending& p = it->second;
  const size_t n = p.members.size();
  // With no rank joined a name waits for every member: O(1) per request
  // instead of a scan of the set (bench/scale: the scan was O(N^2) per step).
  if (joined_count_ == 0 && p.submitted < n) return;
  bool any_joined_missing = false;
  for (size_t r = 0; r < n; ++r) {
    if (p.by_rank[r]) continue;
    // A joined rank is not waited for; buildResponse() turns the collectives
    // joined ranks cannot take part in into an error naming them. Process set
    // registration waits for every rank.
    if (!joined_[p.members[r]] || p.type == OpType::kAddProcessSet ||
        p.type == OpType::kRemoveProcessSet || isPointToPoint(p.type)) {
      return;
    }
    any_joined_missing = true;
  }
  // Fast path: every member announced the same live cache slot.
  const Response* cached = nullptr;
  if (cache_ != nullptr && !any_joined_missing && p.slots[0] >= 0 &&
      std::all_of(p.slots.begin(), p.slots.end(), [&](int64_t s) { return s == p.slots[0]; })) {
    cached = cache_->response(p.slots[0]);
    if (cached != nullptr && !cached->joined_ranks.empty()) cached = nullptr;
  }
  Response resp;
  if (cached != nullptr) {
    resp = *cached;
  } else if (isPointToPoint(p.type)) {
    resp =
        buildPointToPointResponse(p.name, *p.by_rank[0], *p.by_rank[1], p.members[0], p.members[1]);
  } else {
    std::vector<const Request*> by_rank(n, nullptr);
    for (size_t r = 0; r < n; ++r) by_rank[r] = p.by_rank[r] ? &*p.by_rank[r] : nullptr;
    resp =
        buildResponse(p.name, by_rank, p.process_set == kGlobalProcessSet ? nullptr : &p.members);
  }
  resp.process_set = p.process_set;
  int group_id = -1;
  int group_size = 0;
  for (const auto& req : p.by_rank) {
    if (req) {
      group_id = req->group_id;
      group_size = req->group_size;
      break;
    }
  }
  if (resp.kind == Response::Kind::kOp && keep_decided_ && !isPointToPoint(p.type))
    decided_[key] = std::move(p.by_rank);
  const int32_t set = p.process_set;
  table_.erase(it);
  emitInSet(std::move(resp), set, group_id, group_size);
}

void Controller::emit(Response response, int group_id, int group_size) {
  const int32_t set = response.process_set;
  emitInSet(std::move(response), set, group_id, group_size);
}

void Controller::emitInSet(Response response, int32_t set, int group_id, int group_size) {
  if (group_id < 0 || group_size <= 1) {
    ready_.push_back(std::move(response));
    return;
  }
  const std::pair<int32_t, int> group_key{set, group_id};
  Group& g = groups_[group_key];
  ++g.decided;
  if (response.kind == Response::Kind::kOp) {
    g.ok.push_back(std::move(response));
  } else {
    ready_.push_back(std::move(response));  // errors are never held back
  }
  if (g.decided >= group_size) {
    for (Response& r : g.ok) ready_.push_back(std::move(r));
    groups_.erase(group_key);
  }
}

void Controller::checkJoin() {
  if (joined_count_ < size_) return;
  Response resp;
  resp.type = OpType::kJoin;
  resp.names = {kJoinName};
  resp.last_joined_rank = last_joined_;
  ready_.push_back(std::move(resp));
  std::fill(joined_.begin(), joined_.end(), false);
  joined_count_ = 0;
  last_joined_ = -1;
}

void Controller::addShutdown(int rank) {
  TUTTI_CHECK(rank >= 0 && rank < size_);
  if (shutdown_[rank]) return;
  shutdown_[rank] = true;
  if (shutdown_count_++ > 0) return;
  // First shutdown: nothing pending can complete on every rank any more.
  const std::string why = " was cancelled: rank " + std::to_string(rank) +
                          " is shutting down (shutdown()) before every rank submitted it";
  for (const PendingTensor& p : pending()) {
    fail(p.key, StatusCode::kShutdown, std::string(opTypeName(p.type)) + " '" + p.name + "'" + why);
  }
  if (joined_count_ > 0) {
    emit(
        errorResponse({kJoinName}, OpType::kJoin, StatusCode::kShutdown, std::string("join") + why),
        -1, 0);
    std::fill(joined_.begin(), joined_.end(), false);
    joined_count_ = 0;
  }
}

std::vector<Response> Controller::takeReady() {
  std::vector<Response> out;
  out.swap(ready_);
  return out;
}

std::vector<std::optional<Request>> Controller::takeDecidedRequests(const std::string& key) {
  auto it = decided_.find(key);
  if (it == decided_.end()) return {};
  std::vector<std::optional<Request>> out = std::move(it->second);
  decided_.erase(it);
  return out;
}

std::vector<Controller::PendingTensor> Controller::pending() const {
  std::vector<std::pair<uint64_t, PendingTensor>> order;
  for (const auto& [key, p] : table_) {
    PendingTensor t{key, p.name, p.process_set, p.type, p.since, {}, {}};
    for (size_t r = 0; r < p.members.size(); ++r) {
      const int rank = p.members[r];
      if (p.by_rank[r] || joined_[rank]) {
        t.submitted.push_back(rank);
      } else {
        t.missing.push_back(rank);
      }
    }
    order.push_back({p.seq, std::move(t)});
  }
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<PendingTensor> out;
  for (auto& [seq, t] : order) out.push_back(std::move(t));
  return out;
}

void Controller::fail(const std::string& key, StatusCode code, const std::string& message) {
  auto it = table_.find(key);
  if (it == table_.end()) return;
  int group_id = -1;
  int group_size = 0;
  for (const auto& req : it->second.by_rank) {
    if (req) {
      group_id = req->group_id;
      group_size = req->group_size;
      break;
    }
  }
  Response resp = errorResponse({it->second.name}, it->second.type, code, message);
  resp.process_set = it->second.process_set;
  table_.erase(it);
  emit(std::move(resp), group_id, group_size);
}

void Controller::failProcessSet(int32_t id, const std::string& why) {
  for (const PendingTensor& p : pending()) {
    if (p.process_set != id) continue;
    fail(p.key, StatusCode::kInvalidArgument,
         std::string(opTypeName(p.type)) + " '" + p.name + "' " + why);
  }
}

}  // namespace tutti
