#include "launcher/elastic_driver.h"

#include <algorithm>
#include <climits>

#include "launcher/cli.h"

namespace tutti {
namespace launcher {
namespace {

std::string idList(const std::vector<int>& ids) {
  std::string out;
  for (int id : ids) out += (out.empty() ? "" : ", ") + std::to_string(id);
  return out;
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : ",") + w;
  return out;
}

}  // namespace

ElasticDriver::ElasticDriver(ElasticOptions options, ElasticActions& actions)
    : options_(options),
      actions_(actions),
      blacklist_(options.cooldown_min_seconds, options.cooldown_max_seconds) {}

int ElasticDriver::minNp() const {
  if (options_.min_np > 0) return options_.min_np;
  return options_.np > 0 ? options_.np : 1;
}

std::set<int> ElasticDriver::liveWorkers() const {
  std::set<int> out;
  for (const auto& [id, w] : workers_) {
    if (w.state == State::kLive) out.insert(id);
  }
  return out;
}

int ElasticDriver::liveOn(const std::string& host) const {
  int n = 0;
  for (const auto& [id, w] : workers_) n += w.state == State::kLive && w.host == host;
  return n;
}

int ElasticDriver::lastJoined(int id) const {
  for (auto g = history_.rbegin(); g != history_.rend(); ++g) {
    auto at = std::find(g->second.begin(), g->second.end(), id);
    if (at != g->second.end() &&
        actions_.joined(g->first, static_cast<int>(at - g->second.begin()))) {
      return g->first;
    }
  }
  return -1;
}

std::string ElasticDriver::describe(int id) const {
  auto w = workers_.find(id);
  std::string text = "worker " + std::to_string(id);
  // The generation it was last in: the last it joined, else the current one
  // when it is a member (placed, not seen joining yet).
  int g = lastJoined(id);
  if (g < 0 && std::find(members_.begin(), members_.end(), id) != members_.end()) g = generation_;
  auto h = history_.find(g);
  if (h != history_.end()) {
    auto at = std::find(h->second.begin(), h->second.end(), id);
    text += " (rank " + std::to_string(at - h->second.begin()) + " of generation " +
            std::to_string(g) + ")";
  }
  if (w != workers_.end()) text += " on host " + w->second.host;
  return text;
}

std::string ElasticDriver::capacityText(Clock::time_point now) const {
  std::vector<std::string> usable;
  for (const auto& h : hosts_) {
    if (!blacklist_.contains(h.host, now)) usable.push_back(h.host + ":" + std::to_string(h.slots));
  }
  std::vector<std::string> blacklisted = blacklist_.hosts(now);
  size_t possible = liveWorkers().size();
  return std::to_string(possible) + (possible == 1 ? " worker" : " workers") + " possible (" +
         (usable.empty() ? "no hosts" : "hosts " + joined(usable)) +
         (blacklisted.empty() ? "" : "; blacklisted: " + joined(blacklisted)) + "), --min-np " +
         std::to_string(minNp()) + " needs " + std::to_string(minNp());
}

void ElasticDriver::start(const std::vector<HostSlots>& hosts, Clock::time_point now) {
  hosts_ = hosts;
  top_up_ = true;
  last_event_ = "the start";
  reconcile(now);
}

void ElasticDriver::fail(const std::string& why) {
  if (ended_) return;
  ended_ = true;
  std::string text = "elastic: " + why;
  actions_.publish(elastic_keys::failed(), "tuttirun: " + text);
  actions_.endJob(kExitRankFailed, text);
}

void ElasticDriver::stopOnHost(const std::string& host, int keep) {
  // The newest workers go first.
  for (auto it = workers_.rbegin(); it != workers_.rend() && liveOn(host) > keep; ++it) {
    if (it->second.state != State::kLive || it->second.host != host) continue;
    it->second.state = State::kStopping;
    actions_.stopWorker(it->first);
  }
}

void ElasticDriver::hostFailed(const std::string& host, Clock::time_point now) {
  double cooldown = blacklist_.add(host, now);
  blacklisted_.insert(host);
  std::vector<int> others;
  for (const auto& [id, w] : workers_) {
    if (w.state == State::kLive && w.host == host) others.push_back(id);
  }
  stopOnHost(host, 0);
  actions_.log("elastic: host " + host + " blacklisted " +
               (cooldown < 0 ? std::string("for the rest of the job")
                             : "for " + formatNumber(cooldown) + " s (failure " +
                                   std::to_string(blacklist_.failures(host)) + ")") +
               (others.empty() ? "" : "; stopping its workers (ids " + idList(others) + ")"));
  top_up_ = true;
}

void ElasticDriver::topUp(Clock::time_point now) {
  const bool first = generation_ < 0;
  int want =
      first && options_.np > 0 ? options_.np : (options_.max_np > 0 ? options_.max_np : INT_MAX);
  int live = static_cast<int>(liveWorkers().size());
  for (const auto& h : hosts_) {
    if (live >= want) break;
    if (blacklist_.contains(h.host, now)) continue;
    for (int free = h.slots - liveOn(h.host); free > 0 && live < want; --free) {
      int id = next_id_++;
      Status st = actions_.startWorker(id, h.host);
      if (!st.isOk()) {
        // The Job's message may already name the worker and its host.
        std::string prefix = "worker " + std::to_string(id) + " on host " + h.host + ": ";
        std::string why = st.message();
        if (why.compare(0, prefix.size(), prefix) == 0) why = why.substr(prefix.size());
        std::string what =
            "worker " + std::to_string(id) + " could not start on host " + h.host + ": " + why;
        if (first && workers_.empty()) {
          // Nothing ever ran: a setup error (a missing agent, a bad command).
          ended_ = true;
          actions_.endJob(kExitStartFailed, "elastic: " + what);
          return;
        }
        actions_.log("elastic: " + what);
        hostFailed(h.host, now);
        live = static_cast<int>(liveWorkers().size());
        break;
      }
      workers_[id] = {h.host, State::kLive};
      ++live;
    }
  }
}

void ElasticDriver::reconcile(Clock::time_point now) {
  if (ended_ || finishing_) return;
  if (top_up_) {
    top_up_ = false;
    topUp(now);
    if (ended_) return;
  }
  std::set<int> live = liveWorkers();
  if (static_cast<int>(live.size()) < minNp()) {
    if (!waiting_since_) {
      waiting_since_ = now;
      actions_.log("elastic: " + capacityText(now) + "; waiting up to " +
                   formatNumber(options_.elastic_timeout_seconds) +
                   " s (--elastic-timeout) for more");
    }
    return;
  }
  waiting_since_.reset();
  std::vector<int> order = nextRankOrder(members_, live);
  if (generation_ >= 0 && order == members_) return;
  int g = generation_ + 1;
  if (g > 0 && options_.reset_limit >= 0 && g > options_.reset_limit) {
    fail("--reset-limit " + std::to_string(options_.reset_limit) +
         " reached: " + std::to_string(g - 1) + (g - 1 == 1 ? " reset" : " resets") +
         " done, and another is needed (" + last_event_ + "); giving up");
    return;
  }
  std::vector<std::pair<int, std::string>> placed;
  for (int id : order) placed.emplace_back(id, workers_[id].host);
  std::vector<ElasticMember> members = placeGeneration(placed);
  // Members first: a worker that sees elastic/latest must find them.
  actions_.publish(elastic_keys::members(g), formatMembers(members));
  actions_.publish(elastic_keys::latest(), std::to_string(g));
  generation_ = g;
  members_ = order;
  history_[g] = order;
  std::vector<std::string> per_host;
  for (const auto& m : members) {
    if (m.local_rank == 0) per_host.push_back(m.host + ":" + std::to_string(m.local_size));
  }
  actions_.log("elastic: generation " + std::to_string(g) + ": " + std::to_string(order.size()) +
               (order.size() == 1 ? " worker" : " workers") + " (ids " + idList(order) + " on " +
               joined(per_host) + ")");
}

void ElasticDriver::startFinishing(int id, const std::string& what) {
  finishing_ = true;
  // The generation the worker finished training in; newer ones never formed
  // (their members wait in vain) and are abandoned.
  int g = lastJoined(id);
  if (g < 0) g = generation_;
  auto h = history_.find(g);
  finish_members_ = h == history_.end() ? members_ : h->second;
  std::vector<int> others;
  for (auto& [other, ow] : workers_) {
    if (ow.state != State::kLive) continue;
    if (std::find(finish_members_.begin(), finish_members_.end(), other) != finish_members_.end()) {
      continue;
    }
    ow.state = State::kStopping;
    actions_.stopWorker(other);
    others.push_back(other);
  }
  actions_.log("elastic: " + what + ": the job is finishing (no new generation)" +
               (others.empty() ? ""
                               : "; stopping the workers outside generation " + std::to_string(g) +
                                     " (ids " + idList(others) + ")"));
}

void ElasticDriver::onWorkerExit(int id, bool failed, bool stopped, const std::string& how,
                                 Clock::time_point now) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  Worker& w = it->second;
  if (w.state != State::kLive || stopped || ended_) {
    // Stopped by the driver, already counted as failed, or the job is over.
    if (w.state == State::kLive) w.state = failed ? State::kExited : State::kExitedOk;
    if (w.state == State::kStopping || w.state == State::kFailed) w.state = State::kExited;
    return;
  }
  std::string what = describe(id) + " " + how;
  if (!failed) {
    w.state = State::kExitedOk;
    if (!finishing_) startFinishing(id, what);
    bool running = std::any_of(finish_members_.begin(), finish_members_.end(),
                               [&](int m) { return workers_[m].state == State::kLive; });
    if (!running) {
      ended_ = true;
      actions_.endJob(kExitOk, "");
    }
    return;
  }
  w.state = State::kFailed;
  if (finishing_) {
    fail(what + " while the job was finishing (a worker exited 0, so no new generation)");
    return;
  }
  actions_.log("elastic: " + what);
  last_event_ = what;
  hostFailed(w.host, now);
  reconcile(now);
}

void ElasticDriver::onReports(std::vector<ElasticReport> reports, Clock::time_point now) {
  if (ended_ || finishing_) return;
  auto rankIn = [this](int g, int worker) {
    auto h = history_.find(g);
    if (h == history_.end()) return INT_MAX;
    auto at = std::find(h->second.begin(), h->second.end(), worker);
    return at == h->second.end() ? INT_MAX : static_cast<int>(at - h->second.begin());
  };
  std::sort(reports.begin(), reports.end(), [&](const ElasticReport& a, const ElasticReport& b) {
    if (a.generation != b.generation) return a.generation < b.generation;
    return rankIn(a.generation, a.reporter) < rankIn(b.generation, b.reporter);
  });
  bool changed = false;
  for (const auto& r : reports) {
    auto h = history_.find(r.generation);
    if (h == history_.end() || r.lost_rank < 0 ||
        r.lost_rank >= static_cast<int>(h->second.size())) {
      continue;
    }
    int lost = h->second[static_cast<size_t>(r.lost_rank)];
    auto reporter = workers_.find(r.reporter);
    if (lost == r.reporter || reporter == workers_.end() ||
        reporter->second.state != State::kLive || workers_[lost].state != State::kLive) {
      continue;
    }
    std::string what = "worker " + std::to_string(r.reporter) + " reports rank " +
                       std::to_string(r.lost_rank) + " of generation " +
                       std::to_string(r.generation) + " (worker " + std::to_string(lost) +
                       " on host " + workers_[lost].host + ") lost";
    actions_.log("elastic: " + what);
    last_event_ = what;
    workers_[lost].state = State::kStopping;
    actions_.stopWorker(lost);
    hostFailed(workers_[lost].host, now);
    changed = true;
  }
  if (changed) reconcile(now);
}

void ElasticDriver::onHosts(const std::vector<HostSlots>& hosts, Clock::time_point now) {
  if (ended_) return;
  if (finishing_) {  // no new workers, and the finishing ones are left to finish
    hosts_ = hosts;
    return;
  }
  std::map<std::string, int> before;
  for (const auto& h : hosts_) before[h.host] = h.slots;
  hosts_ = hosts;
  std::set<std::string> listed;
  for (const auto& h : hosts_) {
    listed.insert(h.host);
    auto old = before.find(h.host);
    if (old == before.end() || h.slots > old->second) {
      if (old == before.end()) {
        actions_.log("elastic: host discovery added " + h.host + ":" + std::to_string(h.slots));
      }
      last_event_ = "host discovery added slots on " + h.host;
      top_up_ = true;
    } else if (liveOn(h.host) > h.slots) {
      last_event_ = "host " + h.host + " has fewer slots";
      stopOnHost(h.host, h.slots);
    }
  }
  for (const auto& [host, slots] : before) {
    if (listed.count(host) != 0 || liveOn(host) == 0) continue;
    actions_.log("elastic: host discovery no longer lists " + host + "; stopping its workers");
    last_event_ = "host " + host + " removed";
    stopOnHost(host, 0);
  }
  reconcile(now);
}

void ElasticDriver::onTick(Clock::time_point now) {
  if (ended_) return;
  std::vector<std::string> now_blacklisted = blacklist_.hosts(now);
  for (const auto& host : blacklisted_) {
    if (std::find(now_blacklisted.begin(), now_blacklisted.end(), host) != now_blacklisted.end()) {
      continue;
    }
    actions_.log("elastic: host " + host + " may run workers again (blacklist cooldown over)");
    last_event_ = "host " + host + " back from the blacklist";
    top_up_ = true;
  }
  blacklisted_ = std::set<std::string>(now_blacklisted.begin(), now_blacklisted.end());
  if (waiting_since_ &&
      now - *waiting_since_ >= std::chrono::duration<double>(options_.elastic_timeout_seconds)) {
    fail(capacityText(now) + "; gave up after " + formatNumber(options_.elastic_timeout_seconds) +
         " s (--elastic-timeout)");
    return;
  }
  if (top_up_) reconcile(now);
}

}  // namespace launcher
}  // namespace tutti
