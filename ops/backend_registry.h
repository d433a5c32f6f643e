#pragma once

// The one place that knows which backends this build has. The coordinator
// asks it for a connected transport and backend for the job in Settings.

#include <functional>
#include <memory>
#include <optional>

#include "core/settings.h"
#include "ops/backend.h"
#include "ops/device.h"
#include "ops/transport.h"

namespace tutti {

// Where this process sits in the job, as the backend itself learned it.
struct JobPlacement {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // among the ranks on this host
  int local_size = 1;
  int cross_rank = 0;  // among the ranks of the same local rank on other hosts
  int cross_size = 1;
};

// A process set's data path (coordinator/process_sets.h): a transport over
// its members and a backend over that transport. Empty on non-members.
struct SetBackend {
  std::unique_ptr<Transport> transport;  // declared first: destroyed last
  std::unique_ptr<Backend> backend;
};

struct BackendBundle {
  // Whatever else must live as long as the connection (rank 0's rendezvous
  // server when the job was started without tuttirun). Declared first, so
  // destroyed last.
  std::shared_ptr<void> keepalive;
  std::unique_ptr<Transport> transport;  // negotiation control channel (+ data for tcp)
  std::unique_ptr<Backend> backend;      // collectives; may reference *transport; destroyed first
  // Set by backends that learn the placement from the job itself (mpi: from
  // MPI_COMM_WORLD; rank and size are checked against Settings, local and
  // cross ranks come from MPI); nullopt when Settings describe it (tcp).
  std::optional<JobPlacement> placement;

  // Device memory (CUDA builds; both null otherwise). open_device opens this
  // rank's DeviceContext on a CUDA device (< 0: the current one); any thread.
  // connect_device_backend (TUTTI_BACKEND=nccl only) opens the collective
  // backend for device memory on that context; it is collective over the job:
  // every rank calls it at the same point of the response order, on the
  // background thread. Without it, device tensors are staged through pinned
  // host memory and reduced by `backend`.
  std::function<Status(int device_id, std::unique_ptr<DeviceContext>* out)> open_device;
  std::function<Status(DeviceContext& device, std::unique_ptr<DeviceBackend>* out)>
      connect_device_backend;
  // connect_device_set (TUTTI_BACKEND=nccl only) opens the device backend of
  // a process set other than the global one: collective over the set's
  // members only (each calls it at the same point of the response order, on
  // the background thread); `set_host` is the set's host backend (rank and
  // size within the set), used during the call to exchange what the
  // members need to meet (NCCL's unique id). Null: a set's device tensors
  // are staged through pinned memory and the set's host backend.
  std::function<Status(DeviceContext& device, Backend& set_host,
                       std::unique_ptr<DeviceBackend>* out)>
      connect_device_set;

  // Opens the data path of a process set with these global ranks (ascending,
  // valid). Collective over the job: every rank calls it at the same point of
  // the response order, members and non-members (mpi splits its
  // communicator); a non-member gets an empty SetBackend. The result uses
  // *transport, and is destroyed before it.
  std::function<Status(const std::vector<int>& ranks, SetBackend* out)> connect_set;

  // Opens the ordered lane's own connections (coordinator/ordered_lane.h)
  // among the global ranks `ranks` (ascending, this rank among them) for
  // process set `set_id`: collective over those ranks only, any thread,
  // through the job's rendezvous store under "ordered/<set_id>/" of this
  // runtime's generation (a store connection of its own per call, so lanes
  // of several sets may connect at once). The transport's progress bound is
  // settings.ordered_timeout_seconds. Null where the backend has no ordered
  // lane (mpi): ordered ops are then negotiated.
  std::function<Status(const std::vector<int>& ranks, int32_t set_id, SetBackend* out)>
      connect_ordered;
};

// Rendezvous and connect every rank of the job (blocking, at most
// settings.timeout_seconds; kTimeout names the ranks that never arrived).
// tcp: when settings.rank0_hosts_rendezvous, rank 0 serves the rendezvous
// store on settings.rendezvous_port; an elastic worker
// (settings.elastic_worker_id >= 0) rendezvouses in the driver's store under
// "elastic/gen/<settings.elastic_generation>/" instead
// (rendezvous/elastic_membership.h), waiting up to
// settings.elastic_timeout_seconds for its peers. mpi: collective over
// MPI_COMM_WORLD (see ops/mpi/mpi_transport.h). nccl: as tcp for the control channel and host
// tensors, plus connect_device_backend for CUDA tensors. Errors: kInvalidArgument for an unknown or
// unavailable backend (naming the ones this build has), kIoError for
// bind/resolve/authentication failures.
Status connectBackend(const Settings& settings, BackendBundle* out);

// Whether MPI (when this build has it and a runtime of this process used it)
// runs with MPI_THREAD_MULTIPLE: 1 yes, 0 a lower level, -1 MPI not used.
int mpiThreadsMultiple();

}  // namespace tutti
