#pragma once

// Rendezvous generations. tuttirun's store outlives one init of the runtime:
// init -> shutdown -> init in the same job must not read the peer addresses
// published by the earlier init. Each rank counts its own inits in the store
// ("rank/<r>/generation", written only by rank r, so there is no race) and
// rendezvouses under "gen/<g>/". Ranks that init the same number of times
// meet in the same generation. "rank/<r>/generation" also tells tuttirun
// that rank r reached the rendezvous.
//
// Threading: as the Store it wraps (one thread at a time).

#include <string>
#include <utility>
#include <vector>

#include "core/store.h"
#include "rendezvous/rendezvous_client.h"

namespace tutti {

// Key under which rank r records how many times it has entered the rendezvous.
std::string generationKey(int rank);
// The prefix every generationKey() starts with (for RendezvousServer::keys),
// and the inverse of generationKey(): false for any other key.
std::string generationKeyPrefix();
bool parseGenerationKey(const std::string& key, int* rank);

// Increments rank's generation counter in the store and returns the new
// generation's number (0 for a rank's first init).
Status enterNextGeneration(RendezvousClient& client, int rank, int* generation);

// A view of `base` whose keys are prefixed with `prefix`.
class PrefixStore : public Store {
 public:
  PrefixStore(Store& base, std::string prefix) : base_(base), prefix_(std::move(prefix)) {}
  Status set(const std::string& key, const std::vector<uint8_t>& value) override {
    return base_.set(prefix_ + key, value);
  }
  Status get(const std::string& key, std::chrono::milliseconds timeout,
             std::vector<uint8_t>* value) override {
    return base_.get(prefix_ + key, timeout, value);
  }

 private:
  Store& base_;
  std::string prefix_;
};

// A view of `base` whose keys are prefixed with "gen/<generation>/".
class GenerationStore : public PrefixStore {
 public:
  GenerationStore(Store& base, int generation)
      : PrefixStore(base, "gen/" + std::to_string(generation) + "/") {}
};

}  // namespace tutti
