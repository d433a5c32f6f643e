#include "rendezvous/generation_store.h"

#include <cstdlib>

namespace tutti {

namespace {
constexpr const char* kPrefix = "rank/";
constexpr const char* kSuffix = "/generation";
}  // namespace

std::string generationKey(int rank) {
  return kPrefix + std::to_string(rank) + kSuffix;
}

std::string generationKeyPrefix() {
  return kPrefix;
}

bool parseGenerationKey(const std::string& key, int* rank) {
  const std::string prefix = kPrefix, suffix = kSuffix;
  if (key.size() <= prefix.size() + suffix.size() || key.compare(0, prefix.size(), prefix) != 0 ||
      key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string digits = key.substr(prefix.size(), key.size() - prefix.size() - suffix.size());
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *rank = std::stoi(digits);
  return true;
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
