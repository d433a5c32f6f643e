#pragma once

// The key-value store the ranks rendezvous through (addresses of peers,
// NCCL unique ids, ...). Served by tuttirun's rendezvous server, or by rank 0
// when a program starts without the launcher.
//
// Thread-safety: implementations are safe to call from any one thread at a
// time; callers serialise their own use.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace tutti {

class Store {
 public:
  virtual ~Store() = default;

  // Sets key to value, replacing what was there.
  virtual Status set(const std::string& key, const std::vector<uint8_t>& value) = 0;

  // Waits until key exists, then returns its value. Blocks at most `timeout`;
  // on expiry returns kTimeout naming the key.
  virtual Status get(const std::string& key, std::chrono::milliseconds timeout,
                     std::vector<uint8_t>* value) = 0;
};

// Where rank r publishes the address of its data listener during a
// rendezvous ("rank/<r>/addr", under the generation's prefix): the tcp
// transport writes and reads it; tuttirun's elastic driver reads it to see
// who joined a generation.
inline std::string rankAddressKey(int rank) {
  return "rank/" + std::to_string(rank) + "/addr";
}

}  // namespace tutti
