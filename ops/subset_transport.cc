#include "ops/subset_transport.h"

#include <algorithm>

#include "core/check.h"

namespace tutti {

SubsetTransport::SubsetTransport(Transport& world, std::vector<int> ranks)
    : world_(world), ranks_(std::move(ranks)) {
  auto it = std::find(ranks_.begin(), ranks_.end(), world.rank());
  TUTTI_CHECK(it != ranks_.end());
  rank_ = static_cast<int>(it - ranks_.begin());
}

Transport::OpId SubsetTransport::postSend(int peer, const void* data, size_t bytes) {
  return world_.postSend(globalRank(peer), data, bytes);
}

Transport::OpId SubsetTransport::postRecv(int peer, void* data, size_t bytes) {
  return world_.postRecv(globalRank(peer), data, bytes);
}

Status SubsetTransport::wait(OpId id) {
  return world_.wait(id);
}

Status SubsetTransport::waitAll() {
  // Only this subset's collective has ops posted: the background thread
  // runs one collective at a time.
  return world_.waitAll();
}

Status SubsetTransport::sendControl(int, std::vector<uint8_t>) {
  return Status::internal("a process set's transport has no control channel");
}

Status SubsetTransport::pollControl(Clock::time_point, std::vector<ControlMessage>*) {
  return Status::internal("a process set's transport has no control channel");
}

void SubsetTransport::wake() {
  world_.wake();
}

}  // namespace tutti
