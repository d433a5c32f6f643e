#pragma once

// Entry point of the mpi backend for ops/backend_registry.cc (which cannot
// see MPI's headers): connects an MpiTransport and an MpiBackend on it.

#include "core/settings.h"
#include "ops/backend_registry.h"

namespace tutti {

// Collective over MPI_COMM_WORLD; see MpiTransport::connect for the rules and
// errors. Fills out->transport, out->backend and out->placement (MPI's view
// of rank, local and cross placement).
Status connectMpiBackend(const Settings& settings, BackendBundle* out);

}  // namespace tutti
