#include "ops/tcp/generation_store.h"

#include <cstdlib>

namespace tutti {

std::string generationKey(int rank) {
  return "rank/" + std::to_string(rank) + "/generation";
}

Status enterNextGeneration(RendezvousClient& client, int rank, int* generation) {
  std::vector<uint8_t> value;
  bool found = false;
  TUTTI_RETURN_IF_ERROR(client.tryGet(generationKey(rank), &value, &found));
  int next = 0;
  if (found) {
    std::string text(value.begin(), value.end());
    char* end = nullptr;
    long g = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || g < 0) {
      return Status::ioError("the rendezvous store holds a malformed generation '" + text +
                             "' for rank " + std::to_string(rank));
    }
    next = static_cast<int>(g) + 1;
  }
  std::string text = std::to_string(next);
  TUTTI_RETURN_IF_ERROR(
      client.set(generationKey(rank), std::vector<uint8_t>(text.begin(), text.end())));
  *generation = next;
  return Status::ok();
}

}  // namespace tutti
