#include "coordinator/device_backend_sets.h"

#include <string>

namespace tutti {

Status DeviceBackendSets::get(int32_t set_id, const Factory& open, DeviceBackend** out) {
  *out = nullptr;
  auto it = open_.find(set_id);
  if (it == open_.end()) {
    std::unique_ptr<DeviceBackend> backend;
    TUTTI_RETURN_IF_ERROR(open(&backend));
    if (!backend) {
      return Status::internal("process set " + std::to_string(set_id) +
                              ": the device backend factory returned no backend");
    }
    it = open_.emplace(set_id, std::move(backend)).first;
  }
  *out = it->second.get();
  return Status::ok();
}

bool DeviceBackendSets::remove(int32_t set_id) {
  return open_.erase(set_id) != 0;
}

}  // namespace tutti
