#pragma once

// The worker side of elastic training (docs/elastic.md) over Runtime: join a
// membership generation of tuttirun's elastic driver, report the rank whose
// loss ended a runtime, and ask (collectively) whether the driver formed a
// newer generation. The store protocol itself is rendezvous/elastic_membership.h.
//
// One ElasticWorker per worker process and session (the C API keeps one for
// the process): it holds the one store client of the session and the number
// of the last generation joined, which outlive each Runtime. The Runtimes it
// creates belong to the caller.
//
// Threading: every method is thread-safe (a mutex serialises the store
// client). join() and reportLoss() block on the store; hostsUpdated() also on
// an allreduce over the runtime's ranks.

#include <cstdint>
#include <memory>
#include <mutex>

#include "coordinator/runtime.h"
#include "core/settings.h"
#include "core/status.h"

namespace tutti {

class RendezvousClient;

class ElasticWorker {
 public:
  // For settings.elastic_worker_id >= 0 (else kInvalidArgument naming
  // TUTTI_ELASTIC_WORKER_ID). Connects the session's store client to
  // settings.rendezvous_addr:port (retrying at most settings.timeout_seconds;
  // kTimeout/kIoError as RendezvousClient::connect).
  static Status create(const Settings& settings, std::unique_ptr<ElasticWorker>* out);
  ~ElasticWorker();
  ElasticWorker(const ElasticWorker&) = delete;
  ElasticWorker& operator=(const ElasticWorker&) = delete;

  int workerId() const { return settings_.elastic_worker_id; }
  // The generation of the last successful join; -1 before the first.
  int64_t generation() const;

  // Waits (polling the store every 20 ms, up to TUTTI_ELASTIC_TIMEOUT_SECONDS)
  // for a generation newer than generation() whose members include this
  // worker, then creates the runtime with that generation's rank, size and
  // local/cross placement, rendezvousing under "elastic/gen/<g>/" (the
  // connection wait is also bounded by TUTTI_ELASTIC_TIMEOUT_SECONDS). A
  // generation superseded while its members meet (one died before arriving),
  // or whose connection failed, is left for the next one the driver forms.
  // Errors: kShutdown with the driver's message (elastic/failed); kTimeout
  // naming the worker id and the timeout (and the last connection failure);
  // kInvalidArgument for bad settings; kIoError for an unreachable store or a
  // malformed members key.
  Status join(std::unique_ptr<Runtime>* out);

  // When `runtime` failed with kPeerLost (Runtime::lostRank() >= 0), writes
  // elastic/report/<generation()>/<worker id> = that rank so that the driver
  // treats its worker as failed; OK and nothing written otherwise. kTimeout/
  // kIoError when the store cannot be reached.
  Status reportLoss(const Runtime& runtime);

  // Collective over the runtime's ranks (every rank calls it at the same
  // point): *updated = true on every rank if any rank sees elastic/latest >
  // generation(). A rank that cannot reach the store counts as not seeing it
  // (logged). Errors: those of an allreduce (kPeerLost, kShutdown, ...).
  Status hostsUpdated(Runtime& runtime, bool* updated);

 private:
  ElasticWorker(const Settings& settings, std::unique_ptr<RendezvousClient> client);

  const Settings settings_;
  mutable std::mutex mu_;  // guards everything below
  std::unique_ptr<RendezvousClient> client_;
  int64_t generation_ = -1;
  int64_t hosts_checks_ = 0;  // numbers the hostsUpdated allreduces of this generation
};

}  // namespace tutti
