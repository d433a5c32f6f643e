#pragma once

// A Transport over a subset of another transport's ranks: the data path of a
// process set (coordinator/process_sets.h). Rank i of the subset is global
// rank ranks[i]; postSend/postRecv translate and forward to the world
// transport, so a collective algorithm over the subset moves its bytes on the
// world's connections (TCP sockets, or shared memory between ranks on one
// host) to the members only.
//
// Why this is safe with the world's connections shared: every rank executes
// the responses of all its sets in one order that rank 0 decides (the same
// order on every rank), and between any two ranks operations complete in
// posting order (ops/transport.h). Two ranks therefore post their sends and
// receives to each other in the same order whichever set they belong to.
//
// The control channel belongs to the world: the subset's control calls are
// kInternal (algorithms never use it). Threading, blocking and errors are the
// world transport's; a lost peer is named by its global rank.

#include <vector>

#include "ops/transport.h"

namespace tutti {

class SubsetTransport : public Transport {
 public:
  // `world` must outlive this transport. `ranks`: distinct global ranks,
  // including world.rank(), in the subset's rank order (ascending for a
  // process set; by host for ops/host_groups.h).
  SubsetTransport(Transport& world, std::vector<int> ranks);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ranks_.size()); }
  // The global rank of subset rank `peer`.
  int globalRank(int peer) const { return ranks_[static_cast<size_t>(peer)]; }

  OpId postSend(int peer, const void* data, size_t bytes) override;
  OpId postRecv(int peer, void* data, size_t bytes) override;
  Status wait(OpId id) override;
  Status waitAll() override;

  Status sendControl(int peer, std::vector<uint8_t> bytes) override;
  Status pollControl(Clock::time_point deadline, std::vector<ControlMessage>* out) override;
  void wake() override;

 private:
  Transport& world_;
  const std::vector<int> ranks_;
  int rank_ = -1;
};

}  // namespace tutti
