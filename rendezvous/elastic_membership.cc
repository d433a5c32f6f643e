#include "rendezvous/elastic_membership.h"

#include <cerrno>
#include <cstdlib>
#include <set>
#include <sstream>
#include <thread>

#include "rendezvous/rendezvous_client.h"

namespace tutti {

using Clock = std::chrono::steady_clock;

namespace {
std::string toText(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}
}  // namespace

// ---- worker side ------------------------------------------------------------

Status latestGeneration(RendezvousClient& client, int64_t* latest) {
  std::vector<uint8_t> value;
  bool found = false;
  TUTTI_RETURN_IF_ERROR(client.tryGet(elastic_keys::latest(), &value, &found));
  if (!found) {
    *latest = -1;
    return Status::ok();
  }
  return parseGeneration(toText(value), latest);
}

namespace {

// kShutdown with the driver's message once elastic/failed is set.
Status checkFailed(RendezvousClient& client) {
  std::vector<uint8_t> value;
  bool found = false;
  TUTTI_RETURN_IF_ERROR(client.tryGet(elastic_keys::failed(), &value, &found));
  if (found) {
    return Status::shutdown("the elastic driver ended the job: " + toText(value))
        .asGenerationSuperseded();
  }
  return Status::ok();
}

}  // namespace

Status waitForGeneration(RendezvousClient& client, int worker_id, int64_t after,
                         Clock::time_point deadline, double timeout_seconds,
                         ElasticAssignment* out) {
  int64_t skipped = after;  // newest generation seen (joined or without us)
  while (true) {
    TUTTI_RETURN_IF_ERROR(checkFailed(client));
    int64_t latest = -1;
    TUTTI_RETURN_IF_ERROR(latestGeneration(client, &latest));
    if (latest > skipped) {
      std::vector<uint8_t> value;
      bool found = false;
      TUTTI_RETURN_IF_ERROR(client.tryGet(elastic_keys::members(latest), &value, &found));
      if (!found) {
        return Status::ioError("elastic generation " + std::to_string(latest) +
                               " has no members key '" + elastic_keys::members(latest) +
                               "' (the driver sets it before elastic/latest)");
      }
      std::vector<ElasticMember> members;
      TUTTI_RETURN_IF_ERROR(parseMembers(toText(value), &members));
      if (const ElasticMember* me = findMember(members, worker_id)) {
        out->generation = latest;
        out->member = *me;
        return Status::ok();
      }
      skipped = latest;  // not a member of it: wait for a later one
    }
    if (Clock::now() + kElasticPollInterval > deadline) {
      std::ostringstream msg;
      msg << "elastic worker " << worker_id << ": no generation after " << after
          << " that includes it within TUTTI_ELASTIC_TIMEOUT_SECONDS=" << timeout_seconds << " s"
          << (skipped > after ? " (generations up to " + std::to_string(skipped) + " left it out)"
                              : std::string());
      return Status::timeout(msg.str());
    }
    std::this_thread::sleep_for(kElasticPollInterval);
  }
}

Status reportLostRank(RendezvousClient& client, int64_t generation, int worker_id, int lost_rank) {
  const std::string text = std::to_string(lost_rank);
  return client.set(elastic_keys::report(generation, worker_id),
                    std::vector<uint8_t>(text.begin(), text.end()));
}

ElasticGenerationStore::ElasticGenerationStore(RendezvousClient& client, int64_t generation)
    : client_(client),
      generation_(generation),
      prefix_(elastic_keys::generationPrefix(generation)) {}

Status ElasticGenerationStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  return client_.set(prefix_ + key, value);
}

Status ElasticGenerationStore::get(const std::string& key, std::chrono::milliseconds timeout,
                                   std::vector<uint8_t>* value) {
  // Polls instead of one blocking GET: a GET cut short by its deadline costs
  // the client a reconnect, and between polls we look for a newer generation.
  const auto deadline = Clock::now() + timeout;
  while (true) {
    // Superseded first: a key of a dead generation is of no use (the
    // transport asks for its own address to learn just that).
    TUTTI_RETURN_IF_ERROR(checkFailed(client_));
    int64_t latest = -1;
    TUTTI_RETURN_IF_ERROR(latestGeneration(client_, &latest));
    if (latest > generation_) {
      return Status::shutdown("elastic generation " + std::to_string(generation_) +
                              " was superseded by generation " + std::to_string(latest) +
                              " while waiting for '" + prefix_ + key + "'")
          .asGenerationSuperseded();
    }
    bool found = false;
    TUTTI_RETURN_IF_ERROR(client_.tryGet(prefix_ + key, value, &found));
    if (found) return Status::ok();
    const auto now = Clock::now();
    if (now >= deadline) {
      return Status::timeout("key '" + prefix_ + key +
                             "' did not appear in the rendezvous store within " +
                             std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(kElasticPollInterval, deadline - now));
  }
}

}  // namespace tutti
