#pragma once

// The one place that knows which backends this build has. The coordinator
// asks it for a connected transport and backend for the job in Settings.

#include <memory>

#include "core/settings.h"
#include "ops/backend.h"
#include "ops/transport.h"

namespace tutti {

struct BackendBundle {
  // Whatever else must live as long as the connection (rank 0's rendezvous
  // server when the job was started without tuttirun). Declared first, so
  // destroyed last.
  std::shared_ptr<void> keepalive;
  std::unique_ptr<Transport> transport;  // negotiation control channel (+ data for tcp)
  std::unique_ptr<Backend> backend;      // collectives; may reference *transport; destroyed first
};

// Rendezvous and connect every rank of the job (blocking, at most
// settings.timeout_seconds; kTimeout names the ranks that never arrived).
// When settings.rank0_hosts_rendezvous, rank 0 serves the rendezvous store on
// settings.rendezvous_port. Errors: kInvalidArgument for an unknown or
// unavailable backend (naming the ones this build has), kIoError for
// bind/resolve/authentication failures.
Status connectBackend(const Settings& settings, BackendBundle* out);

}  // namespace tutti
