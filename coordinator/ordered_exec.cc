// The ordered lane's exchange and collective (coordinator/ordered_lane.h).

#include <string>

#include "coordinator/ordered_lane.h"
#include "coordinator/request_validation.h"
#include "core/wire.h"
#include "ops/algorithms/allgather_bruck.h"
#include "ops/gathered_backend.h"

namespace tutti {

namespace {

// Whether this rank's op may carry its data in its signature block, by its
// own request (every member decides alike when the requests agree). CUDA,
// Adasum and compressed ops never reach the lane
// (RuntimeImpl::takesOrderedLane).
bool inlineKind(const Request& r) {
  if (!r.error.empty()) return false;
  switch (r.type) {
    case OpType::kAllreduce:
    case OpType::kReducescatter:
      return r.prescale == 1.0;
    case OpType::kAllgather:
    case OpType::kBroadcast:
    case OpType::kBarrier:
      return true;
    default:
      return false;
  }
}

}  // namespace

TensorView OrderedLane::payloadOf(const Op& op) const {
  const TensorEntry& e = op.entries[0];
  if (e.request.type == OpType::kBarrier || e.input.data == nullptr) return TensorView{};
  if (e.request.type == OpType::kBroadcast && e.request.root != set_.rankOf(rank_)) {
    return TensorView{};
  }
  return e.input;
}

Status OrderedLane::exchange(const Op& op, std::vector<std::vector<uint8_t>>* blocks,
                             bool* inlined) {
  RequestList mine;
  for (const TensorEntry& e : op.entries) mine.requests.push_back(e.request);
  const TensorEntry& first = op.entries[0];
  const int64_t own_bytes =
      first.request.type == OpType::kBarrier ? 0 : static_cast<int64_t>(first.input.numBytes());
  const int64_t all_bytes = own_bytes * set_.size();
  *inlined =
      op.entries.size() == 1 && inlineKind(first.request) && all_bytes <= options_.inline_bytes;
  const std::vector<uint8_t> signature = serialize(mine);
  BufferWriter w;
  w.putU8(*inlined ? 1 : 0);
  w.putU32(static_cast<uint32_t>(signature.size()));
  w.putRaw(signature.data(), signature.size());
  if (*inlined) {
    const TensorView payload = payloadOf(op);
    if (payload.data != nullptr) w.putRaw(payload.data, payload.numBytes());
  }
  return allgatherBlocksBruck(*conn_.transport, w.take(), blocks);
}

Status OrderedLane::decide(const Op& op, const std::vector<std::vector<uint8_t>>& blocks,
                           std::vector<Response>* responses,
                           std::vector<std::vector<uint8_t>>* payloads, bool* inlined,
                           Status* verdict) {
  const int n = set_.size();
  std::vector<RequestList> lists(static_cast<size_t>(n));
  payloads->assign(static_cast<size_t>(n), {});
  for (int r = 0; r < n; ++r) {
    const std::vector<uint8_t>& b = blocks[static_cast<size_t>(r)];
    BufferReader reader(b);
    uint8_t flag = 0;
    uint32_t len = 0;
    bool ok = reader.getU8(&flag) && reader.getU32(&len) && len <= reader.remaining();
    const size_t at = b.size() - reader.remaining();
    ok = ok && deserialize(std::vector<uint8_t>(b.begin() + at, b.begin() + at + len),
                           &lists[static_cast<size_t>(r)])
                   .isOk();
    if (!ok) {
      return Status::internal("ordered lane of process set " + std::to_string(set_.id) +
                              ": the signature of rank " + std::to_string(set_.ranks[r]) +
                              " does not parse");
    }
    *inlined = *inlined && flag == 1;
    (*payloads)[static_cast<size_t>(r)].assign(b.begin() + at + len, b.end());
  }
  const std::string head = "ordered collective #" + std::to_string(op.seq) + " of process set " +
                           std::to_string(set_.id) + ": ";
  const std::string hint =
      " (ordered collectives, e.g. torch.distributed's, must be issued in the same order with "
      "matching arguments on every rank of the group)";
  for (int r = 1; r < n; ++r) {
    if (lists[static_cast<size_t>(r)].requests.size() != lists[0].requests.size()) {
      *verdict = Status::mismatch(
          head + "ranks issued different numbers of tensors: rank " +
          std::to_string(set_.ranks[0]) + " " + std::to_string(lists[0].requests.size()) +
          ", rank " + std::to_string(set_.ranks[r]) + " " +
          std::to_string(lists[static_cast<size_t>(r)].requests.size()) + hint);
      return Status::ok();
    }
  }
  const std::vector<int>* names = set_.id == kGlobalProcessSet ? nullptr : &set_.ranks;
  for (size_t i = 0; i < op.entries.size(); ++i) {
    std::vector<const Request*> by_rank;
    for (const RequestList& l : lists) by_rank.push_back(&l.requests[i]);
    Response resp = buildResponse(op.entries[i].request.name, by_rank, names);
    if (resp.kind == Response::Kind::kError) {
      *verdict =
          Status(resp.error_code, head + resp.error_message +
                                      (resp.error_code == StatusCode::kMismatch ? hint : ""));
      return Status::ok();
    }
    responses->push_back(std::move(resp));
  }
  return Status::ok();
}

Status OrderedLane::execute(Op& op, std::vector<Completion>* done) {
  if (!conn_.backend) {
    SetBackend opened;
    Status st = connect_(&opened);
    if (!st.isOk()) {
      return Status(st.code(), "ordered lane of process set " + std::to_string(set_.id) +
                                   ": connecting its members: " + st.message());
    }
    std::lock_guard<std::mutex> lock(mu_);
    conn_ = std::move(opened);
    executor_ = std::make_unique<Executor>(*conn_.backend, conn_.backend->rank(),
                                           conn_.backend->size(), &state_);
  }
  std::vector<std::vector<uint8_t>> blocks;
  bool inlined = false;
  TUTTI_RETURN_IF_ERROR(exchange(op, &blocks, &inlined));
  std::vector<Response> responses;
  std::vector<std::vector<uint8_t>> payloads;
  Status verdict;
  TUTTI_RETURN_IF_ERROR(decide(op, blocks, &responses, &payloads, &inlined, &verdict));
  done->assign(op.entries.size(), Completion{});
  if (!verdict.isOk()) {
    for (Completion& c : *done) c = Completion::failure(verdict);
    return Status::ok();
  }
  for (size_t i = 0; i < op.entries.size(); ++i) {
    std::vector<Completion> one;
    const std::vector<const TensorEntry*> entries{&op.entries[i]};
    if (inlined) {
      GatheredBackend gathered(conn_.backend->rank(), payloads);
      Executor local(gathered, conn_.backend->rank(), conn_.backend->size());
      TUTTI_RETURN_IF_ERROR(local.execute(responses[i], entries, &one));
    } else {
      TUTTI_RETURN_IF_ERROR(executor_->execute(responses[i], entries, &one));
    }
    (*done)[i] = std::move(one[0]);
  }
  return Status::ok();
}

}  // namespace tutti
