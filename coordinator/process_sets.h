#pragma once

// Process sets: collectives over a subset of the job's ranks (Horovod's
// process sets, horovod/common/process_set.h).
//
// A process set is an ascending list of distinct global ranks with an id; the
// global set (id 0, every rank) always exists. A set is registered with
// add_process_set() and removed with remove_process_set(); both are
// collective over the global set: every rank calls them in the same order
// with the same arguments. They run through negotiation as ops of their own
// (OpType::kAddProcessSet / kRemoveProcessSet), so every rank registers a set
// at the same point of the response order and gets the same id: the ids count
// up from 1 in registration order and are never reused within a runtime.
//
// How sets negotiate (docs/process-sets.md): rank 0 decides the order of the
// responses of every set, as it does for the global set, so one total order
// covers every set. A rank executes the responses of the sets it belongs to,
// in that order, and skips the others; two overlapping sets therefore can
// never wait on each other in a cycle. Names, the tensor queue, the response
// cache, groups, fusion and stall inspection are per set: a tensor's key is
// (set id, name) (core/message.h tensorKey), fusion never merges responses of
// different sets, and each set's collectives run on a backend over its
// members only (a sub-ring of the tcp mesh, an MPI sub-communicator; for
// CUDA tensors on nccl, an NCCL communicator of the members made at the
// set's first CUDA op, coordinator/device_backend_sets.h).
//
// Threading: ProcessSetTable is thread-safe (one mutex): framework threads
// look sets up at enqueue, the background thread adds and removes them.

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "core/status.h"

namespace tutti {

struct ProcessSetInfo {
  int32_t id = 0;
  std::vector<int> ranks;  // global ranks, ascending
  // The position of `global_rank` in ranks, or -1 when it is not a member.
  int rankOf(int global_rank) const;
  int size() const { return static_cast<int>(ranks.size()); }
};

// kInvalidArgument naming what is wrong unless `ranks` (in any order) are
// distinct ranks in [0, world_size) and at least one.
Status validateProcessSetRanks(const std::vector<int64_t>& ranks, int world_size);

class ProcessSetTable {
 public:
  // Registers the global set (id 0, ranks 0..world_size-1).
  explicit ProcessSetTable(int world_size);

  // The set `id`; kInvalidArgument naming the known ids when there is none.
  Status lookup(int32_t id, ProcessSetInfo* out) const;
  // Every registered set, by id.
  std::vector<ProcessSetInfo> all() const;
  // The id of the set with exactly these (ascending) ranks, if registered.
  std::optional<int32_t> findByRanks(const std::vector<int>& ranks) const;

  // Background thread: registers `ranks` (ascending, valid) under the next
  // id and returns it; removes a set (false for id 0 or an unknown id).
  int32_t add(std::vector<int> ranks);
  bool remove(int32_t id);

  // Per-set counters for generated names, so that the members of a set, which
  // issue the same calls in the same order, generate the same names.
  int64_t nextNameNumber(int32_t id);
  int64_t nextBarrierNumber(int32_t id);
  int32_t nextGroupId(int32_t id);

 private:
  struct Entry {
    ProcessSetInfo info;
    int64_t names = 0;
    int64_t barriers = 0;
    int32_t groups = 0;
  };
  mutable std::mutex mu_;
  std::map<int32_t, Entry> sets_;
  int32_t next_id_ = 1;
};

}  // namespace tutti
