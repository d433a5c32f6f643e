#include "ops/nccl/nccl_connect.h"

#include "ops/nccl/nccl_backend.h"

namespace tutti {

Status connectNcclBackend(DeviceContext& device, Store* store, const Settings& settings,
                          std::unique_ptr<DeviceBackend>* out) {
  std::unique_ptr<NcclBackend> backend;
  TUTTI_RETURN_IF_ERROR(NcclBackend::create(device, store, settings.rank, settings.size,
                                            settings.timeout_seconds, &backend));
  *out = std::move(backend);
  return Status::ok();
}

Status connectNcclSetBackend(DeviceContext& device, Backend& set_host, const Settings& settings,
                             std::unique_ptr<DeviceBackend>* out) {
  std::unique_ptr<NcclBackend> backend;
  TUTTI_RETURN_IF_ERROR(
      NcclBackend::createOverHost(device, set_host, settings.timeout_seconds, &backend));
  *out = std::move(backend);
  return Status::ok();
}

}  // namespace tutti
