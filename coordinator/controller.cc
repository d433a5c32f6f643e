#include "coordinator/controller.h"

#include <algorithm>

#include "coordinator/request_validation.h"
#include "core/check.h"
#include "core/logging.h"

namespace tutti {

namespace {
constexpr const char* kJoinName = "__join";
}  // namespace

Controller::Controller(int size, const ResponseCache* cache, bool keep_decided)
    : size_(size),
      cache_(cache),
      keep_decided_(keep_decided),
      joined_(size, false),
      shutdown_(size, false) {
  TUTTI_CHECK_GE(size, 1);
}

void Controller::addRequest(const Request& request, int64_t cache_slot, Clock::time_point now) {
  const int rank = request.rank;
  TUTTI_CHECK(rank >= 0 && rank < size_);
  if (shutdownRequested()) {
    int who =
        static_cast<int>(std::find(shutdown_.begin(), shutdown_.end(), true) - shutdown_.begin());
    emit(errorResponse({request.name}, request.type, StatusCode::kShutdown,
                       std::string(opTypeName(request.type)) + " '" + request.name +
                           "' cannot run: rank " + std::to_string(who) +
                           " is shutting down (shutdown())"),
         -1, 0);
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
    for (const auto& [name, p] : table_) order.push_back({p.seq, name});
    std::sort(order.begin(), order.end());
    for (const auto& [seq, name] : order) checkReady(name);
    checkJoin();
    return;
  }
  auto [it, inserted] = table_.try_emplace(request.name);
  Pending& p = it->second;
  if (inserted) {
    p.type = request.type;
    p.seq = next_seq_++;
    p.since = now;
    p.by_rank.resize(size_);
    p.slots.assign(size_, -1);
  }
  if (p.by_rank[rank]) {
    TUTTI_LOG(kWarning) << "rank " << rank << " submitted '" << request.name
                        << "' twice while it was pending; dropping the second request";
    return;
  }
  p.by_rank[rank] = request;
  p.slots[rank] = cache_slot;
  checkReady(request.name);
}

void Controller::checkReady(const std::string& name) {
  auto it = table_.find(name);
  if (it == table_.end()) return;
  Pending& p = it->second;
  bool any_joined_missing = false;
  for (int r = 0; r < size_; ++r) {
    if (p.by_rank[r]) continue;
    // A joined rank is not waited for; buildResponse() turns the collectives
    // joined ranks cannot take part in into an error naming them.
    if (!joined_[r]) return;
    any_joined_missing = true;
  }
  // Fast path: every rank announced the same live cache slot.
  const Response* cached = nullptr;
  if (cache_ != nullptr && !any_joined_missing && p.slots[0] >= 0 &&
      std::all_of(p.slots.begin(), p.slots.end(), [&](int64_t s) { return s == p.slots[0]; })) {
    cached = cache_->response(p.slots[0]);
    if (cached != nullptr && !cached->joined_ranks.empty()) cached = nullptr;
  }
  Response resp;
  if (cached != nullptr) {
    resp = *cached;
  } else {
    std::vector<const Request*> by_rank(size_, nullptr);
    for (int r = 0; r < size_; ++r) by_rank[r] = p.by_rank[r] ? &*p.by_rank[r] : nullptr;
    resp = buildResponse(name, by_rank);
  }
  int group_id = -1;
  int group_size = 0;
  for (const auto& req : p.by_rank) {
    if (req) {
      group_id = req->group_id;
      group_size = req->group_size;
      break;
    }
  }
  if (resp.kind == Response::Kind::kOp && keep_decided_) decided_[name] = std::move(p.by_rank);
  table_.erase(it);
  emit(std::move(resp), group_id, group_size);
}

void Controller::emit(Response response, int group_id, int group_size) {
  if (group_id < 0 || group_size <= 1) {
    ready_.push_back(std::move(response));
    return;
  }
  Group& g = groups_[group_id];
  ++g.decided;
  if (response.kind == Response::Kind::kOp) {
    g.ok.push_back(std::move(response));
  } else {
    ready_.push_back(std::move(response));  // errors are never held back
  }
  if (g.decided >= group_size) {
    for (Response& r : g.ok) ready_.push_back(std::move(r));
    groups_.erase(group_id);
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
    fail(p.name, StatusCode::kShutdown,
         std::string(opTypeName(p.type)) + " '" + p.name + "'" + why);
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

std::vector<std::optional<Request>> Controller::takeDecidedRequests(const std::string& name) {
  auto it = decided_.find(name);
  if (it == decided_.end()) return {};
  std::vector<std::optional<Request>> out = std::move(it->second);
  decided_.erase(it);
  return out;
}

std::vector<Controller::PendingTensor> Controller::pending() const {
  std::vector<std::pair<uint64_t, PendingTensor>> order;
  for (const auto& [name, p] : table_) {
    PendingTensor t{name, p.type, p.since, {}, {}};
    for (int r = 0; r < size_; ++r) {
      if (p.by_rank[r] || joined_[r]) {
        t.submitted.push_back(r);
      } else {
        t.missing.push_back(r);
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

void Controller::fail(const std::string& name, StatusCode code, const std::string& message) {
  auto it = table_.find(name);
  if (it == table_.end()) return;
  OpType type = it->second.type;
  int group_id = -1;
  int group_size = 0;
  for (const auto& req : it->second.by_rank) {
    if (req) {
      group_id = req->group_id;
      group_size = req->group_size;
      break;
    }
  }
  table_.erase(it);
  emit(errorResponse({name}, type, code, message), group_id, group_size);
}

}  // namespace tutti
