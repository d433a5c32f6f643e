#include "coordinator/process_sets.h"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace tutti {

int ProcessSetInfo::rankOf(int global_rank) const {
  auto it = std::lower_bound(ranks.begin(), ranks.end(), global_rank);
  if (it == ranks.end() || *it != global_rank) return -1;
  return static_cast<int>(it - ranks.begin());
}

Status validateProcessSetRanks(const std::vector<int64_t>& ranks, int world_size) {
  if (ranks.empty()) {
    return Status::invalidArgument("a process set needs at least one rank (got an empty list)");
  }
  std::vector<int64_t> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= world_size) {
      return Status::invalidArgument("process set rank " + std::to_string(sorted[i]) +
                                     " is out of range: ranks must be in [0, " +
                                     std::to_string(world_size - 1) + "] (the world size is " +
                                     std::to_string(world_size) + ")");
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      return Status::invalidArgument("process set rank " + std::to_string(sorted[i]) +
                                     " is listed twice; each rank may appear once");
    }
  }
  return Status::ok();
}

ProcessSetTable::ProcessSetTable(int world_size) {
  Entry global;
  global.info.id = 0;
  global.info.ranks.resize(static_cast<size_t>(world_size));
  std::iota(global.info.ranks.begin(), global.info.ranks.end(), 0);
  sets_.emplace(0, std::move(global));
}

Status ProcessSetTable::lookup(int32_t id, ProcessSetInfo* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  if (it != sets_.end()) {
    *out = it->second.info;
    return Status::ok();
  }
  std::ostringstream known;
  for (const auto& [k, e] : sets_) known << (k ? ", " : "") << k;
  return Status::invalidArgument("unknown process set id " + std::to_string(id) +
                                 " (registered: " + known.str() +
                                 "; a removed set, or one of an earlier init(), is unknown)");
}

std::vector<ProcessSetInfo> ProcessSetTable::all() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ProcessSetInfo> out;
  for (const auto& [id, e] : sets_) out.push_back(e.info);
  return out;
}

std::optional<int32_t> ProcessSetTable::findByRanks(const std::vector<int>& ranks) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, e] : sets_) {
    if (e.info.ranks == ranks) return id;
  }
  return std::nullopt;
}

int32_t ProcessSetTable::add(std::vector<int> ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry e;
  e.info.id = next_id_++;
  e.info.ranks = std::move(ranks);
  const int32_t id = e.info.id;
  sets_.emplace(id, std::move(e));
  return id;
}

bool ProcessSetTable::remove(int32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (id == 0) return false;
  return sets_.erase(id) > 0;
}

int64_t ProcessSetTable::nextNameNumber(int32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  return it == sets_.end() ? 0 : it->second.names++;
}

int64_t ProcessSetTable::nextBarrierNumber(int32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  return it == sets_.end() ? 0 : it->second.barriers++;
}

int32_t ProcessSetTable::nextGroupId(int32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  return it == sets_.end() ? 0 : it->second.groups++;
}

}  // namespace tutti
