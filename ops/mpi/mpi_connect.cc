#include "ops/mpi/mpi_connect.h"

#include "ops/mpi/mpi_backend.h"
#include "ops/mpi/mpi_transport.h"

namespace tutti {

Status connectMpiBackend(const Settings& settings, BackendBundle* out) {
  std::unique_ptr<MpiTransport> transport;
  TUTTI_RETURN_IF_ERROR(MpiTransport::connect(settings, &transport));
  out->placement = transport->placement();
  out->backend = std::make_unique<MpiBackend>(*transport);
  out->transport = std::move(transport);
  return Status::ok();
}

}  // namespace tutti
