#include "ops/backend_registry.h"

#include <algorithm>
#include <chrono>

#include "core/logging.h"
#include "ops/subset_transport.h"
#include "ops/tcp/tcp_backend.h"
#include "ops/tcp/tcp_transport.h"
#include "rendezvous/elastic_membership.h"
#include "rendezvous/generation_store.h"
#include "rendezvous/rendezvous_client.h"
#include "rendezvous/rendezvous_server.h"

// The one place that knows which backend targets this build links (set by
// ops/CMakeLists.txt on this file only).
#ifndef TUTTI_WITH_MPI
#define TUTTI_WITH_MPI 0
#endif
#if TUTTI_WITH_MPI
#include "ops/mpi/mpi_connect.h"
#include "ops/mpi/mpi_environment.h"
#endif
#ifndef TUTTI_WITH_CUDA
#define TUTTI_WITH_CUDA 0
#endif
#if TUTTI_WITH_CUDA
#include "ops/cuda/cuda_connect.h"
#endif
#ifndef TUTTI_WITH_NCCL
#define TUTTI_WITH_NCCL 0
#endif
#if TUTTI_WITH_NCCL
#include "ops/nccl/nccl_connect.h"
#endif

namespace tutti {
namespace {

// Backends this build registers, for error messages.
#if TUTTI_WITH_MPI && TUTTI_WITH_NCCL
constexpr const char* kBackends = "tcp, mpi, nccl";
#elif TUTTI_WITH_MPI
constexpr const char* kBackends = "tcp, mpi";
#elif TUTTI_WITH_NCCL
constexpr const char* kBackends = "tcp, nccl";
#else
constexpr const char* kBackends = "tcp";
#endif

// Keeps rank 0's rendezvous server and the store client alive as long as the
// bundle (the client is not needed after connecting, but costs nothing).
struct TcpKeepalive {
  std::unique_ptr<RendezvousServer> server;
  std::unique_ptr<RendezvousClient> client;
  int generation = 0;
  bool elastic = false;  // generation is an elastic one (docs/elastic.md)
};

// The store of this runtime's rendezvous generation: "gen/<g>/" counted per
// rank, or the elastic driver's "elastic/gen/<g>/".
std::unique_ptr<Store> generationStore(const TcpKeepalive& keep) {
  if (keep.elastic) return std::make_unique<ElasticGenerationStore>(*keep.client, keep.generation);
  return std::make_unique<GenerationStore>(*keep.client, keep.generation);
}

// BackendBundle::connect_ordered for tcp: a TcpTransport of its own among
// `ranks`, met under "ordered/<set_id>/" of this generation's store.
Status connectOrderedLane(const Settings& settings, const TcpKeepalive& keep,
                          const std::vector<AlgorithmOverride>& overrides,
                          const TcpHierarchy& hierarchy, const std::vector<int>& ranks,
                          int32_t set_id, SetBackend* out) {
  Settings lane = settings;
  lane.rank =
      static_cast<int>(std::lower_bound(ranks.begin(), ranks.end(), settings.rank) - ranks.begin());
  lane.size = static_cast<int>(ranks.size());
  std::unique_ptr<TcpTransport> transport;
  if (lane.size == 1 || !keep.client) {
    // One member (or a one-rank job without a store): no connection.
    struct NoStore : Store {
      Status set(const std::string&, const std::vector<uint8_t>&) override { return Status::ok(); }
      Status get(const std::string& key, std::chrono::milliseconds,
                 std::vector<uint8_t>*) override {
        return Status::internal("a lane of one rank has no store (key '" + key + "')");
      }
    } none;
    TUTTI_RETURN_IF_ERROR(TcpTransport::connect(lane, none, "", &transport));
  } else {
    const auto timeout =
        std::chrono::milliseconds(static_cast<int64_t>(settings.timeout_seconds * 1000.0));
    std::unique_ptr<RendezvousClient> client;
    TUTTI_RETURN_IF_ERROR(RendezvousClient::connect(
        settings.rendezvous_addr, settings.rendezvous_port, settings.secret, timeout, &client));
    TcpKeepalive own{nullptr, std::move(client), keep.generation, keep.elastic};
    std::unique_ptr<Store> generation = generationStore(own);
    PrefixStore store(*generation, "ordered/" + std::to_string(set_id) + "/");
    TUTTI_RETURN_IF_ERROR(
        TcpTransport::connect(lane, store, own.client->localAddress(), &transport));
  }
  transport->setProgressTimeout(settings.ordered_timeout_seconds);
  transport->setSpin(std::chrono::microseconds(settings.ordered_spin_us));
  transport->setControlUnused();
  const TcpHierarchy members{hierarchy.allreduce, hierarchy.allgather,
                             hostIdsOf(hierarchy.host_of_rank, ranks)};
  out->backend = std::make_unique<TcpBackend>(
      *transport, static_cast<size_t>(settings.segment_bytes), overrides, members);
  out->transport = std::move(transport);
  return Status::ok();
}

// CUDA support (any backend) and, for TUTTI_BACKEND=nccl, the NCCL backend
// that meets its peers through the job generation's store.
void addDeviceSupport(const Settings& settings, const std::shared_ptr<TcpKeepalive>& keep,
                      BackendBundle* out) {
#if TUTTI_WITH_CUDA
  out->open_device = openCudaDevice;
#endif
#if TUTTI_WITH_NCCL
  if (settings.backend == "nccl") {
    out->connect_device_backend = [settings, keep](DeviceContext& device,
                                                   std::unique_ptr<DeviceBackend>* backend) {
      if (!keep || !keep->client) return connectNcclBackend(device, nullptr, settings, backend);
      // The store connection has been idle since the rendezvous; the client
      // reconnects on the call after a broken one, so retry once.
      struct RetryOnce : Store {
        explicit RetryOnce(Store& base) : base_(base) {}
        Status set(const std::string& key, const std::vector<uint8_t>& value) override {
          Status st = base_.set(key, value);
          return st.isOk() ? st : base_.set(key, value);
        }
        Status get(const std::string& key, std::chrono::milliseconds timeout,
                   std::vector<uint8_t>* value) override {
          Status st = base_.get(key, timeout, value);
          if (st.isOk() || st.code() == StatusCode::kTimeout) return st;
          return base_.get(key, timeout, value);
        }
        Store& base_;
      };
      std::unique_ptr<Store> generation_store = generationStore(*keep);
      RetryOnce store(*generation_store);
      return connectNcclBackend(device, &store, settings, backend);
    };
    out->connect_device_set = [settings](DeviceContext& device, Backend& set_host,
                                         std::unique_ptr<DeviceBackend>* backend) {
      return connectNcclSetBackend(device, set_host, settings, backend);
    };
  }
#endif
  (void)settings;
  (void)keep;
  (void)out;
}

}  // namespace

int mpiThreadsMultiple() {
#if TUTTI_WITH_MPI
  return tutti::mpiThreadsMultipleLevel();
#else
  return -1;
#endif
}

Status connectBackend(const Settings& settings, BackendBundle* out) {
#if TUTTI_WITH_MPI
  if (settings.backend == "mpi") {
    TUTTI_RETURN_IF_ERROR(connectMpiBackend(settings, out));
    addDeviceSupport(settings, nullptr, out);
    return Status::ok();
  }
#endif
  // nccl: tcp carries the control channel and host tensors; NCCL the CUDA
  // tensors (addDeviceSupport).
  if (settings.backend != "tcp" && !(TUTTI_WITH_NCCL && settings.backend == "nccl")) {
    // "auto" resolves to mpi under mpirun (core/settings.cc), so say so.
    return Status::invalidArgument(
        "TUTTI_BACKEND=" + settings.backend + ": this build has the backends: " + kBackends +
        (settings.backend == "mpi"
             ? " (mpi is also chosen automatically when the job runs under Open MPI's mpirun "
               "and TUTTI_BACKEND is not set; rebuild with Open MPI (libopenmpi-dev) for it, or "
               "set TUTTI_BACKEND=tcp)"
             : ""));
  }
  // Checked before connecting: a bad value fails init on every rank alike.
  std::vector<AlgorithmOverride> overrides;
  TUTTI_RETURN_IF_ERROR(parseAlgorithmOverrides(settings.algorithms, &overrides));
  auto keep = std::make_shared<TcpKeepalive>();
  std::unique_ptr<TcpTransport> transport;
  // A job of one rank needs no store, unless tuttirun serves one: then the
  // rank still checks in, so that the launcher sees it arrive. An elastic
  // worker always meets its generation in the driver's store.
  const bool elastic = settings.elastic_worker_id >= 0;
  if (settings.size > 1 || !settings.rank0_hosts_rendezvous || elastic) {
    if (settings.rank == 0 && settings.rank0_hosts_rendezvous && !elastic) {
      TUTTI_RETURN_IF_ERROR(RendezvousServer::start("0.0.0.0", settings.rendezvous_port,
                                                    settings.secret, &keep->server));
    }
    const auto timeout =
        std::chrono::milliseconds(static_cast<int64_t>(settings.timeout_seconds * 1000.0));
    TUTTI_RETURN_IF_ERROR(RendezvousClient::connect(settings.rendezvous_addr,
                                                    settings.rendezvous_port, settings.secret,
                                                    timeout, &keep->client));
    if (elastic) {
      // The join (coordinator/elastic_worker.h) chose the generation.
      if (settings.elastic_generation < 0) {
        return Status::internal("elastic worker " + std::to_string(settings.elastic_worker_id) +
                                ": connectBackend without a generation");
      }
      keep->generation = static_cast<int>(settings.elastic_generation);
      keep->elastic = true;
    } else {
      TUTTI_RETURN_IF_ERROR(enterNextGeneration(*keep->client, settings.rank, &keep->generation));
    }
    std::unique_ptr<Store> store = generationStore(*keep);
    TUTTI_RETURN_IF_ERROR(
        TcpTransport::connect(settings, *store, keep->client->localAddress(), &transport));
  } else {
    struct NoStore : Store {
      Status set(const std::string&, const std::vector<uint8_t>&) override { return Status::ok(); }
      Status get(const std::string& key, std::chrono::milliseconds,
                 std::vector<uint8_t>*) override {
        return Status::internal("a job of one rank has no store (key '" + key + "')");
      }
    } none;
    TUTTI_RETURN_IF_ERROR(TcpTransport::connect(settings, none, "", &transport));
  }
  const size_t segment_bytes = static_cast<size_t>(settings.segment_bytes);
  // Every rank's host (TUTTI_CROSS_RANK), for hierarchical collectives.
  TcpHierarchy hierarchy{settings.hierarchical_allreduce, settings.hierarchical_allgather, {}};
  TUTTI_RETURN_IF_ERROR(exchangeHostIds(*transport, settings.cross_rank, &hierarchy.host_of_rank));
  out->backend = std::make_unique<TcpBackend>(*transport, segment_bytes, overrides, hierarchy);
  Transport* world = transport.get();
  out->connect_set = [world, segment_bytes, overrides, hierarchy](const std::vector<int>& ranks,
                                                                  SetBackend* set) {
    *set = SetBackend{};
    if (!std::binary_search(ranks.begin(), ranks.end(), world->rank())) return Status::ok();
    set->transport = std::make_unique<SubsetTransport>(*world, ranks);
    const TcpHierarchy members{hierarchy.allreduce, hierarchy.allgather,
                               hostIdsOf(hierarchy.host_of_rank, ranks)};
    set->backend = std::make_unique<TcpBackend>(*set->transport, segment_bytes, overrides, members);
    return Status::ok();
  };
  out->connect_ordered = [settings, keep, overrides, hierarchy](const std::vector<int>& ranks,
                                                                int32_t set_id, SetBackend* set) {
    *set = SetBackend{};
    return connectOrderedLane(settings, *keep, overrides, hierarchy, ranks, set_id, set);
  };
  out->transport = std::move(transport);
  addDeviceSupport(settings, keep, out);
  out->keepalive = std::move(keep);
  return Status::ok();
}

}  // namespace tutti
