#pragma once

// The ranks of a transport grouped by host, for hierarchical collectives
// (ops/algorithms/allreduce_hierarchical.h): the host's ranks (the local
// group) and, for this rank's index within its host, the rank with that
// index on every host (the cross group).
//
// Where hosts come from: each rank's host id (TUTTI_CROSS_RANK, which
// tuttirun sets to the index of the rank's host) is exchanged once when the
// backend connects (exchangeHostIds); a process set takes its members'
// entries of the world's list. Everything else here is pure and
// deterministic in the list, so every rank derives the same groups.
//
// Broadcast (ops/algorithms/broadcast_hierarchical.h) uses the same two
// groups: only the ranks at the root's local index cross hosts, and for them
// that column is their own cross group.
//
// Thread-safety: HostGroups is used by the thread that uses its transport
// (the background thread), like the transport itself.

#include <memory>
#include <vector>

#include "core/status.h"
#include "ops/subset_transport.h"
#include "ops/transport.h"

namespace tutti {

struct HostLayout {
  int local_size = 1;  // ranks on each host; 0 when hosts hold different numbers of ranks
  int cross_size = 1;  // hosts
  // Transport ranks of this rank's host, ascending (this rank is at its
  // local index).
  std::vector<int> local_ranks;
  // Transport ranks at this rank's local index, one per host in ascending
  // host id order (the cross ring follows the hosts); empty when local_size
  // is 0.
  std::vector<int> cross_ranks;
  // grid[h][l]: the transport rank at local index l of host h (hosts in
  // ascending host id order); empty when local_size is 0.
  std::vector<std::vector<int>> grid;
  // Every transport rank, host by host (ascending host id, then rank): the
  // order in which a flat ring crosses each link once per step.
  std::vector<int> host_order;
};

// `host_of_rank[r]`: the host id of transport rank r (any ints; equal means
// the same host), one entry per rank. `rank` is this rank.
HostLayout hostLayout(const std::vector<int>& host_of_rank, int rank);

// Allgathers every rank's `host_id` over `transport` (a collective: every
// rank calls it once, in the same place) into `host_of_rank`. Errors are the
// transport's.
Status exchangeHostIds(Transport& transport, int host_id, std::vector<int>* host_of_rank);

// `host_of_rank` restricted to the given ranks (a process set's members):
// entry i is host_of_rank[ranks[i]]; empty stays empty.
std::vector<int> hostIdsOf(const std::vector<int>& host_of_rank, const std::vector<int>& ranks);

class HostGroups {
 public:
  // `transport` must outlive this object. `host_of_rank` as for
  // hostLayout(); empty means every rank on one host.
  HostGroups(Transport& transport, const std::vector<int>& host_of_rank);
  const HostLayout& layout() const { return layout_; }
  // Every host holds the same number of ranks, more than one, on more than
  // one host: local() and cross() exist.
  bool hierarchical() const { return local_ != nullptr; }
  Transport& local() { return *local_; }
  Transport& cross() { return *cross_; }
  // The transport with its ranks in layout().host_order (the transport
  // itself when that is already its order), for flat rings and trees that
  // should cross each link once: allreduce, and allgather, reduce-scatter and
  // broadcast with their blocks or root mapped through host_order.
  Transport& hostOrdered() { return host_ordered_ ? *host_ordered_ : transport_; }
  // The rank of transport rank `rank` in hostOrdered() (its position in
  // layout().host_order); 0 <= rank < the transport's size.
  int hostOrderedRank(int rank) const { return host_ordered_rank_[static_cast<size_t>(rank)]; }

 private:
  Transport& transport_;
  HostLayout layout_;
  std::unique_ptr<SubsetTransport> host_ordered_;
  std::vector<int> host_ordered_rank_;  // inverse of layout_.host_order
  std::unique_ptr<SubsetTransport> local_;
  std::unique_ptr<SubsetTransport> cross_;
};

}  // namespace tutti
