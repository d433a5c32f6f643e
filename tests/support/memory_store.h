#pragma once

// An in-memory Store for tests that connect ranks as threads in one process
// without a rendezvous server (and can then give one rank a different view).

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/store.h"

namespace tutti {

class MemoryStore : public Store {
 public:
  Status set(const std::string& key, const std::vector<uint8_t>& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    kv_[key] = value;
    cv_.notify_all();
    return Status::ok();
  }
  Status get(const std::string& key, std::chrono::milliseconds timeout,
             std::vector<uint8_t>* value) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return kv_.count(key) > 0; })) {
      return Status::timeout("key '" + key + "'");
    }
    *value = kv_[key];
    return Status::ok();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<uint8_t>> kv_;
};

}  // namespace tutti
