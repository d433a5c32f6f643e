#pragma once

// The pure parts of the elastic driver (docs/elastic.md): store keys, rank
// order and placement of a generation, the host blacklist with its cooldown.
// No processes, no clock of their own (times are passed in); unit-tested in
// tests/launcher/elastic_generation_test.cc.

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/elastic_members.h"

namespace tutti {
namespace launcher {

// Store keys and the members text: core/elastic_members.h (shared with the
// worker side).

// Places `ordered` = (worker id, host) in rank order: local_rank is the index
// among the members on its host in rank order, cross_rank the index of its
// host with hosts in order of their first member.
std::vector<ElasticMember> placeGeneration(const std::vector<std::pair<int, std::string>>& ordered);

// Rank order of the next generation: the members of `previous` (worker ids
// in rank order) still in `alive`, in their previous order (so the new rank
// 0 holds the committed state), then the other workers of `alive` by id.
std::vector<int> nextRankOrder(const std::vector<int>& previous, const std::set<int>& alive);

// Seconds a host stays blacklisted after its k-th failure (k >= 1):
// min(max, min·2^(k-1)); negative (for the rest of the job) when min is 0.
double blacklistCooldownSeconds(int failures, double min_seconds, double max_seconds);

// Hosts whose workers failed. Not thread-safe (the event loop owns it).
class Blacklist {
 public:
  using Clock = std::chrono::steady_clock;
  // min_seconds 0: a failed host stays blacklisted for the rest of the job.
  Blacklist(double min_seconds, double max_seconds)
      : min_seconds_(min_seconds), max_seconds_(max_seconds) {}

  // Records a failure of `host` at `now`; returns the cooldown in seconds
  // (negative: for good).
  double add(const std::string& host, Clock::time_point now);
  bool contains(const std::string& host, Clock::time_point now) const;
  // Hosts blacklisted at `now`, sorted.
  std::vector<std::string> hosts(Clock::time_point now) const;
  int failures(const std::string& host) const;

 private:
  struct Entry {
    int failures = 0;
    std::optional<Clock::time_point> until;  // none: for good
  };
  double min_seconds_;
  double max_seconds_;
  std::map<std::string, Entry> entries_;
};

}  // namespace launcher
}  // namespace tutti
