#include "launcher/elastic_generation.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace tutti {
namespace launcher {

std::vector<ElasticMember> placeGeneration(
    const std::vector<std::pair<int, std::string>>& ordered) {
  std::vector<std::string> host_order;
  std::map<std::string, int> per_host;
  for (const auto& [id, host] : ordered) {
    if (per_host[host]++ == 0) host_order.push_back(host);
  }
  std::map<std::string, int> seen;
  std::vector<ElasticMember> out;
  for (const auto& [id, host] : ordered) {
    ElasticMember m;
    m.worker_id = id;
    m.rank = static_cast<int>(out.size());
    m.size = static_cast<int>(ordered.size());
    m.local_rank = seen[host]++;
    m.local_size = per_host[host];
    m.cross_rank = static_cast<int>(std::find(host_order.begin(), host_order.end(), host) -
                                    host_order.begin());
    m.cross_size = static_cast<int>(host_order.size());
    m.host = host;
    out.push_back(m);
  }
  return out;
}

std::vector<int> nextRankOrder(const std::vector<int>& previous, const std::set<int>& alive) {
  std::vector<int> order;
  for (int id : previous) {
    if (alive.count(id) != 0) order.push_back(id);
  }
  for (int id : alive) {  // std::set: by id
    if (std::find(previous.begin(), previous.end(), id) == previous.end()) order.push_back(id);
  }
  return order;
}

double blacklistCooldownSeconds(int failures, double min_seconds, double max_seconds) {
  if (min_seconds <= 0) return -1;
  // 2^(k-1) overflows nothing that matters: min() caps it (and k is bounded
  // by the number of failures of one job).
  double v = min_seconds * std::pow(2.0, std::max(0, failures - 1));
  return std::min(max_seconds, v);
}

double Blacklist::add(const std::string& host, Clock::time_point now) {
  Entry& e = entries_[host];
  ++e.failures;
  double s = blacklistCooldownSeconds(e.failures, min_seconds_, max_seconds_);
  if (s < 0) {
    e.until.reset();
  } else {
    e.until = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
  return s;
}

bool Blacklist::contains(const std::string& host, Clock::time_point now) const {
  auto it = entries_.find(host);
  if (it == entries_.end() || it->second.failures == 0) return false;
  return !it->second.until || now < *it->second.until;
}

std::vector<std::string> Blacklist::hosts(Clock::time_point now) const {
  std::vector<std::string> out;
  for (const auto& [host, e] : entries_) {
    if (contains(host, now)) out.push_back(host);
  }
  return out;
}

int Blacklist::failures(const std::string& host) const {
  auto it = entries_.find(host);
  return it == entries_.end() ? 0 : it->second.failures;
}

}  // namespace launcher
}  // namespace tutti
