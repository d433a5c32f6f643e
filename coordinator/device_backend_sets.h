#pragma once

// The device backends (NCCL communicators) of the process sets on this rank,
// opened lazily and freed with their set (coordinator/device_executor.h).
//
// A set's device backend is opened at the set's first CUDA response that
// needs it: every member of the set executes that response at the same point
// of the coordinator's one order of every set's responses
// (coordinator/process_sets.h), so the opening, which is collective over the
// members, happens at the same point on each of them; ranks outside the set
// never open it. It stays open until the set is removed (remove(), called
// when the removal executes, which every rank does at the same point) or the
// table is destroyed (the runtime's shutdown). A failed opening is not kept:
// the caller aborts the runtime with its status.
//
// The global set (id 0) is kept here like any other set; its factory is the
// job-wide one.
//
// Threading: the runtime's background thread only (not thread-safe).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "core/status.h"
#include "ops/device.h"

namespace tutti {

class DeviceBackendSets {
 public:
  // Opens a set's backend (collective over the set's members).
  using Factory = std::function<Status(std::unique_ptr<DeviceBackend>* out)>;

  // The backend of set `set_id`; opens it with `open` on first use. On
  // failure nothing is kept and *out is null.
  Status get(int32_t set_id, const Factory& open, DeviceBackend** out);
  // Frees set `set_id`'s backend; false when none was open.
  bool remove(int32_t set_id);
  // Frees every backend.
  void clear() { open_.clear(); }

  bool isOpen(int32_t set_id) const { return open_.count(set_id) != 0; }
  size_t openCount() const { return open_.size(); }

 private:
  std::map<int32_t, std::unique_ptr<DeviceBackend>> open_;
};

}  // namespace tutti
