#include "ops/mpi/mpi_connect.h"

#include <algorithm>

#include "ops/mpi/mpi_backend.h"
#include "ops/mpi/mpi_environment.h"
#include "ops/mpi/mpi_transport.h"
#include "ops/subset_transport.h"

namespace tutti {

namespace {

// A process set's point-to-point transport plus its communicator (split from
// tutti's own, ranks in the set's order), freed with it.
class MpiSetTransport : public SubsetTransport {
 public:
  MpiSetTransport(MpiTransport& world, std::vector<int> ranks, MPI_Comm comm)
      : SubsetTransport(world, std::move(ranks)), comm_(comm) {}
  ~MpiSetTransport() override {
    if (!mpiWedged()) MPI_Comm_free(&comm_);  // else MPI may still use it: leaked
  }
  MPI_Comm comm() const { return comm_; }

 private:
  MPI_Comm comm_;
};

}  // namespace

Status connectMpiBackend(const Settings& settings, BackendBundle* out) {
  std::unique_ptr<MpiTransport> transport;
  TUTTI_RETURN_IF_ERROR(MpiTransport::connect(settings, &transport));
  out->placement = transport->placement();
  out->backend = std::make_unique<MpiBackend>(*transport);
  MpiTransport* world = transport.get();
  out->connect_set = [world](const std::vector<int>& ranks, SetBackend* set) {
    *set = SetBackend{};
    const bool member = std::binary_search(ranks.begin(), ranks.end(), world->rank());
    // Collective over tutti's communicator: non-members take part too.
    MPI_Comm comm = MPI_COMM_NULL;
    const int code =
        MPI_Comm_split(world->comm(), member ? 0 : MPI_UNDEFINED, world->rank(), &comm);
    if (code != MPI_SUCCESS) return mpiStatus(code, "MPI_Comm_split", world->rank());
    if (!member) return Status::ok();
    auto sub = std::make_unique<MpiSetTransport>(*world, ranks, comm);
    MpiWaitScope scope = world->waitScope();
    scope.where = mpiScopeName(ranks, false);
    set->backend = std::make_unique<MpiBackend>(*sub, sub->comm(), std::move(scope));
    set->transport = std::move(sub);
    return Status::ok();
  };
  out->transport = std::move(transport);
  return Status::ok();
}

}  // namespace tutti
