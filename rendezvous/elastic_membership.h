#pragma once

// The worker side of elastic training's store protocol (docs/elastic.md; the
// keys and the members text are in core/elastic_members.h): wait for a
// generation that includes this worker, report a lost rank, rendezvous in one
// generation. Talks to the store through a RendezvousClient
// (rendezvous/rendezvous_client.h), which is only declared here.
//
// Threading: the functions are as thread-safe as the client they are given
// (one thread at a time per client). Blocking: waitForGeneration() and
// ElasticGenerationStore::get() poll every kElasticPollInterval until their
// deadline; everything else is one round trip to the store.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/elastic_members.h"
#include "core/status.h"
#include "core/store.h"

namespace tutti {

class RendezvousClient;

// How often a waiting worker looks at the store.
constexpr std::chrono::milliseconds kElasticPollInterval{20};

// ---- worker side: talks to the store -------------------------------------

// A generation this worker belongs to.
struct ElasticAssignment {
  int64_t generation = -1;
  ElasticMember member;
};

// elastic/latest, or -1 when no generation was formed yet.
Status latestGeneration(RendezvousClient& client, int64_t* latest);

// Polls (every kElasticPollInterval) until elastic/latest > `after` names a
// generation whose members include `worker_id`; generations without it are
// skipped. Errors: kShutdown with the driver's message once elastic/failed is
// set; kTimeout at `deadline`, naming the worker id and `timeout_seconds` (the
// length of the wait, for the message); kInvalidArgument/kIoError for a
// malformed key or an unreachable store.
Status waitForGeneration(RendezvousClient& client, int worker_id, int64_t after,
                         std::chrono::steady_clock::time_point deadline, double timeout_seconds,
                         ElasticAssignment* out);

// Writes elastic/report/<generation>/<worker_id> = "<lost_rank>".
Status reportLostRank(RendezvousClient& client, int64_t generation, int worker_id, int lost_rank);

// The rendezvous of one generation: keys are prefixed with
// "elastic/gen/<g>/". get() polls the key every kElasticPollInterval; it
// returns kShutdown, also for a key that exists, once the generation was
// superseded (elastic/latest > g: a member will never arrive, join the newer
// one) or the driver failed the job (elastic/failed). Otherwise as Store::get
// (kTimeout naming the key).
class ElasticGenerationStore : public Store {
 public:
  ElasticGenerationStore(RendezvousClient& client, int64_t generation);
  Status set(const std::string& key, const std::vector<uint8_t>& value) override;
  Status get(const std::string& key, std::chrono::milliseconds timeout,
             std::vector<uint8_t>* value) override;

 private:
  RendezvousClient& client_;
  int64_t generation_;
  std::string prefix_;
};

}  // namespace tutti
