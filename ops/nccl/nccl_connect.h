#pragma once

// Entry point of the nccl backend for ops/backend_registry.cc (which must not
// see NCCL's headers): opens an NcclBackend (ops/nccl/nccl_backend.h).

#include <memory>

#include "core/settings.h"
#include "core/store.h"
#include "ops/device.h"

namespace tutti {

// Collective over the job (see NcclBackend::create): rank and size from
// `settings`, bounded by settings.timeout_seconds. `store`: the job
// generation's rendezvous store; null only when settings.size == 1.
Status connectNcclBackend(DeviceContext& device, Store* store, const Settings& settings,
                          std::unique_ptr<DeviceBackend>* out);

// A process set's NCCL communicator (NcclBackend::createOverHost): collective
// over the members, the ncclUniqueId goes over `set_host` (the set's host
// backend, whose rank and size are the set's); bounded by
// settings.timeout_seconds.
Status connectNcclSetBackend(DeviceContext& device, Backend& set_host, const Settings& settings,
                             std::unique_ptr<DeviceBackend>* out);

}  // namespace tutti
