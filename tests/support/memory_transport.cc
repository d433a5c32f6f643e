#include "tests/support/memory_transport.h"

#include <cstring>
#include <sstream>
#include <thread>

#include "core/check.h"

namespace tutti::testing {

MemoryWorld::MemoryWorld(int size, std::chrono::milliseconds op_timeout)
    : size_(size),
      op_timeout_(op_timeout),
      channels_(static_cast<size_t>(size) * size),
      pending_(size),
      next_id_(size, 1),
      control_(size),
      woken_(size, false) {
  TUTTI_CHECK_LT(0, size);
  for (int r = 0; r < size; ++r) transports_.push_back(std::make_unique<MemoryTransport>(*this, r));
}

void MemoryWorld::run(const std::function<void(MemoryTransport&)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size_; ++r) threads.emplace_back([&, r] { fn(transport(r)); });
  for (std::thread& t : threads) t.join();
}

void MemoryWorld::matchLocked(Channel& ch) {
  while (!ch.sends.empty() && !ch.recvs.empty()) {
    std::shared_ptr<Op> s = ch.sends.front();
    std::shared_ptr<Op> r = ch.recvs.front();
    ch.sends.pop_front();
    ch.recvs.pop_front();
    if (s->bytes != r->bytes) {
      std::ostringstream msg;
      msg << "memory transport: a send of " << s->bytes << " bytes met a receive of " << r->bytes
          << " bytes";
      breakLocked(Status::internal(msg.str()));
      s->done = r->done = true;
      s->status = r->status = broken_;
      return;
    }
    if (s->bytes > 0) std::memcpy(r->recv_data, s->send_data, s->bytes);
    s->done = r->done = true;
  }
  cv_.notify_all();
}

void MemoryWorld::breakLocked(const Status& status) {
  if (broken_.isOk()) broken_ = status;
  for (Channel& ch : channels_) {
    for (auto* q : {&ch.sends, &ch.recvs}) {
      for (auto& op : *q) {
        op->done = true;
        op->status = broken_;
      }
      q->clear();
    }
  }
  cv_.notify_all();
}

int MemoryTransport::size() const {
  return world_.size();
}

Transport::OpId MemoryTransport::postSend(int peer, const void* data, size_t bytes) {
  return post(/*send=*/true, peer, data, nullptr, bytes);
}

Transport::OpId MemoryTransport::postRecv(int peer, void* data, size_t bytes) {
  return post(/*send=*/false, peer, nullptr, data, bytes);
}

Transport::OpId MemoryTransport::post(bool send, int peer, const void* send_data, void* recv_data,
                                      size_t bytes) {
  TUTTI_CHECK_LE(0, peer);
  TUTTI_CHECK_LT(peer, world_.size());
  TUTTI_CHECK_NE(peer, rank_);
  ++posted_;
  std::lock_guard<std::mutex> lock(world_.mu_);
  auto op = std::make_shared<MemoryWorld::Op>();
  op->send_data = send_data;
  op->recv_data = recv_data;
  op->bytes = bytes;
  const OpId id = world_.next_id_[rank_]++;
  world_.pending_[rank_][id] = op;
  if (!world_.broken_.isOk()) {
    op->done = true;
    op->status = world_.broken_;
    return id;
  }
  // A send queues on the (this rank -> peer) channel, a receive on (peer -> this rank).
  MemoryWorld::Channel& ch = send ? world_.channel(rank_, peer) : world_.channel(peer, rank_);
  (send ? ch.sends : ch.recvs).push_back(op);
  world_.matchLocked(ch);
  return id;
}

Status MemoryTransport::wait(OpId id) {
  std::unique_lock<std::mutex> lock(world_.mu_);
  auto& pending = world_.pending_[rank_];
  auto it = pending.find(id);
  if (it == pending.end()) {
    return Status::internal("memory transport: rank " + std::to_string(rank_) +
                            " waited for unknown op " + std::to_string(id));
  }
  std::shared_ptr<MemoryWorld::Op> op = it->second;
  const auto deadline = Clock::now() + world_.op_timeout_;
  if (!world_.cv_.wait_until(lock, deadline, [&] { return op->done; })) {
    std::ostringstream msg;
    msg << "memory transport: rank " << rank_ << " op " << id << " (" << op->bytes
        << " bytes) did not complete within " << world_.op_timeout_.count() << " ms";
    world_.breakLocked(Status::timeout(msg.str()));
  }
  pending.erase(id);
  return op->status;
}

Status MemoryTransport::waitAll() {
  std::vector<OpId> ids;
  {
    std::lock_guard<std::mutex> lock(world_.mu_);
    for (const auto& entry : world_.pending_[rank_]) ids.push_back(entry.first);
  }
  Status first;
  for (OpId id : ids) {
    Status st = wait(id);
    if (first.isOk() && !st.isOk()) first = st;
  }
  return first;
}

Status MemoryTransport::sendControl(int peer, std::vector<uint8_t> bytes) {
  TUTTI_CHECK_LE(0, peer);
  TUTTI_CHECK_LT(peer, world_.size());
  std::lock_guard<std::mutex> lock(world_.mu_);
  if (!world_.broken_.isOk()) return world_.broken_;
  world_.control_[peer].push_back(ControlMessage{rank_, std::move(bytes)});
  world_.cv_.notify_all();
  return Status::ok();
}

Status MemoryTransport::pollControl(Clock::time_point deadline, std::vector<ControlMessage>* out) {
  std::unique_lock<std::mutex> lock(world_.mu_);
  auto& queue = world_.control_[rank_];
  world_.cv_.wait_until(lock, deadline, [&] {
    return !queue.empty() || world_.woken_[rank_] || !world_.broken_.isOk();
  });
  world_.woken_[rank_] = false;
  while (!queue.empty()) {
    out->push_back(std::move(queue.front()));
    queue.pop_front();
  }
  return world_.broken_;
}

void MemoryTransport::wake() {
  std::lock_guard<std::mutex> lock(world_.mu_);
  world_.woken_[rank_] = true;
  world_.cv_.notify_all();
}

}  // namespace tutti::testing
