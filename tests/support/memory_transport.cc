#include "tests/support/memory_transport.h"

#include <cstring>
#include <sstream>
#include <thread>

#include "core/check.h"

namespace tutti::testing {

MemoryWorld::MemoryWorld(int size, std::chrono::milliseconds op_timeout)
    : size_(size),
      op_timeout_(op_timeout),
      cvs_(std::make_unique<std::condition_variable[]>(static_cast<size_t>(size))),
      channels_(static_cast<size_t>(size) * size),
      pending_(size),
      next_id_(size, 1),
      control_(size),
      woken_(size, false),
      closed_(size, false) {
  TUTTI_CHECK_LT(0, size);
  for (int r = 0; r < size; ++r) transports_.push_back(std::make_unique<MemoryTransport>(*this, r));
}

void MemoryWorld::run(const std::function<void(MemoryTransport&)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size_; ++r) threads.emplace_back([&, r] { fn(transport(r)); });
  for (std::thread& t : threads) t.join();
}

MemoryWorld::Channel& MemoryWorld::channel(int from, int to) {
  std::unique_ptr<Channel>& ch = channels_[static_cast<size_t>(from) * size_ + to];
  if (!ch) ch = std::make_unique<Channel>();
  return *ch;
}

void MemoryWorld::matchLocked(int from, int to) {
  Channel& ch = channel(from, to);
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
  cvs_[from].notify_all();
  cvs_[to].notify_all();
}

void MemoryWorld::breakLocked(const Status& status) {
  if (broken_.isOk()) broken_ = status;
  for (std::unique_ptr<Channel>& ch : channels_) {
    if (!ch) continue;
    for (auto* q : {&ch->sends, &ch->recvs}) {
      for (auto& op : *q) {
        op->done = true;
        op->status = broken_;
      }
      q->clear();
    }
  }
  for (int r = 0; r < size_; ++r) cvs_[r].notify_all();
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
  const int from = send ? rank_ : peer;
  const int to = send ? peer : rank_;
  MemoryWorld::Channel& ch = world_.channel(from, to);
  (send ? ch.sends : ch.recvs).push_back(op);
  world_.matchLocked(from, to);
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
  if (!world_.cvs_[rank_].wait_until(lock, deadline, [&] { return op->done; })) {
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
  world_.cvs_[peer].notify_all();
  return Status::ok();
}

Status MemoryTransport::pollControl(Clock::time_point deadline, std::vector<ControlMessage>* out) {
  std::unique_lock<std::mutex> lock(world_.mu_);
  auto& queue = world_.control_[rank_];
  world_.cvs_[rank_].wait_until(lock, deadline, [&] {
    return !queue.empty() || world_.woken_[rank_] || !world_.broken_.isOk() ||
           world_.closedControlPeerLocked(rank_) >= 0;
  });
  world_.woken_[rank_] = false;
  if (queue.empty() && world_.broken_.isOk()) {
    const int closed = world_.closedControlPeerLocked(rank_);
    if (closed >= 0) {
      return Status::peerLost(
          closed, "memory transport: rank " + std::to_string(closed) + " closed its connection");
    }
  }
  while (!queue.empty()) {
    out->push_back(std::move(queue.front()));
    queue.pop_front();
  }
  return world_.broken_;
}

void MemoryTransport::close() {
  std::lock_guard<std::mutex> lock(world_.mu_);
  if (world_.closed_[rank_]) return;
  world_.closed_[rank_] = true;
  ++world_.closed_count_;
  const int first = rank_ == 0 ? 1 : 0;
  const int last = rank_ == 0 ? world_.size_ : 1;
  for (int peer = first; peer < last; ++peer) world_.cvs_[peer].notify_all();
}

int MemoryWorld::closedControlPeerLocked(int rank) const {
  if (rank != 0) return closed_[0] ? 0 : -1;
  if (closed_count_ == 0 || (closed_count_ == 1 && closed_[0])) return -1;
  for (int peer = 1; peer < size_; ++peer) {
    if (closed_[peer]) return peer;
  }
  return -1;
}

void MemoryTransport::wake() {
  std::lock_guard<std::mutex> lock(world_.mu_);
  world_.woken_[rank_] = true;
  world_.cvs_[rank_].notify_all();
}

}  // namespace tutti::testing
