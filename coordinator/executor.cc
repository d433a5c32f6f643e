#include "coordinator/executor.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "coordinator/op_arithmetic.h"
#include "coordinator/request_validation.h"
#include "coordinator/response_layout.h"
#include "core/check.h"
#include "ops/reduce.h"

namespace tutti {

namespace {

// A fused allreduce runs in pieces of this many bytes (see Executor::allreduce).
constexpr size_t kFusionPieceBytes = 1 << 20;

}  // namespace

Executor::Executor(Backend& backend, int rank, int size, ExecutorState* state)
    : own_state_(state == nullptr ? std::make_unique<ExecutorState>() : nullptr),
      state_(state == nullptr ? *own_state_ : *state),
      counted_(backend, &state_.bytes_sent),
      backend_(counted_),
      rank_(rank),
      size_(size) {}

Status Executor::compressorFor(const Response& r, Compressor** out) {
  *out = nullptr;
  if (r.compression.empty() || r.compression == "none" || !isCompressibleReduceOp(r.reduce_op)) {
    return Status::ok();
  }
  Compressor* c = nullptr;
  TUTTI_RETURN_IF_ERROR(state_.compressors.get(r.compression, &c));
  if (c->appliesTo(r.dtype)) *out = c;
  return Status::ok();
}

Status Executor::execute(const Response& r, const std::vector<const TensorEntry*>& entries,
                         std::vector<Completion>* completions) {
  TUTTI_CHECK_EQ(entries.size(), r.names.size());
  completions->assign(r.names.size(), Completion{});
  collective_ = {};
  if (r.device == DeviceType::kCuda && r.type != OpType::kBarrier && r.type != OpType::kJoin) {
    if (device_ == nullptr) return Status::internal("a CUDA response but no device executor");
    Compressor* compressor = nullptr;
    if (r.type == OpType::kAllreduce) TUTTI_RETURN_IF_ERROR(compressorFor(r, &compressor));
    return device_->execute(r, entries, completions, backend_, rank_, size_, compressor,
                            &state_.compressors);
  }
  switch (r.type) {
    case OpType::kAllreduce:
      return allreduce(r, entries);
    case OpType::kAllgather:
      return allgather(r, entries[0], &(*completions)[0]);
    case OpType::kBroadcast:
      return broadcast(r, entries[0]);
    case OpType::kAlltoall:
      return alltoall(r, entries[0], &(*completions)[0]);
    case OpType::kReducescatter:
      return reducescatter(r, entries[0], &(*completions)[0]);
    case OpType::kBarrier:
      return backend_.barrier();
    case OpType::kJoin:
      (*completions)[0].join_result = r.last_joined_rank;
      return Status::ok();
    case OpType::kSend:
      return pointToPoint(r, entries[0]);
    case OpType::kAddProcessSet:
    case OpType::kRemoveProcessSet:
    case OpType::kRecv:  // requests only: a matched pair is one kSend Response
      break;             // the runtime runs set ops itself (coordinator/process_sets.h)
  }
  return Status::internal("unknown op type in a response");
}

Status Executor::allreduce(const Response& r, const std::vector<const TensorEntry*>& entries) {
  TUTTI_CHECK_EQ(r.sizes.size(), r.names.size());
  Compressor* compressor = nullptr;
  TUTTI_RETURN_IF_ERROR(compressorFor(r, &compressor));
  if (compressor != nullptr) {
    return compressedAllreduce(r, entries, *compressor, state_.compressors, backend_, size_,
                               &compression_scratch_);
  }
  if (r.reduce_op == ReduceOp::kAdasum) return adasum(r, entries);
  if (r.names.size() == 1 && entries[0] != nullptr) return allreduceAlone(r, *entries[0]);
  return allreduceFused(r, entries);
}

Status Executor::allreduceAlone(const Response& r, const TensorEntry& e) {
  // Alone (bigger than the fusion threshold, or nothing to fuse with):
  // reduce directly in the caller's output buffer.
  const size_t elem = dataTypeSize(r.dtype);
  const ReduceOp op = backendOp(r.reduce_op);
  const size_t count = static_cast<size_t>(r.sizes[0]);
  TUTTI_CHECK_EQ(static_cast<int64_t>(count), e.input.numElements());
  if (r.prescale == 1.0) {
    // The backend reads the input as this rank's contribution: no copy.
    TUTTI_RETURN_IF_ERROR(
        backend_.allreduceOutOfPlace(e.input.data, e.output.data, count, r.dtype, op));
  } else {
    if (e.output.data != e.input.data && count > 0) {
      std::memcpy(e.output.data, e.input.data, count * elem);
    }
    scaleInPlace(e.output.data, count, r.dtype, r.prescale);
    TUTTI_RETURN_IF_ERROR(backend_.allreduce(e.output.data, count, r.dtype, op));
  }
  scaleInPlace(e.output.data, count, r.dtype, r.postscale, averageDivisor(r, size_));
  return Status::ok();
}

Status Executor::allreduceFused(const Response& r, const std::vector<const TensorEntry*>& entries) {
  for (size_t i = 0; i < r.names.size(); ++i) {
    if (entries[i] != nullptr) TUTTI_CHECK_EQ(r.sizes[i], entries[i]->input.numElements());
  }
  // The fused tensors, laid end to end, are reduced in pieces of at most
  // kFusionPieceBytes: piece k is staged (prescaled copy, or zeros for a
  // joined rank), reduced and copied out (scaled) while it is still in the
  // cache, through one piece-sized buffer. The pieces depend only on the
  // response, so every rank makes the same backend calls. For the timeline
  // the collective spans the first piece's allreduce to the last one's.
  const size_t elem = dataTypeSize(r.dtype);
  const size_t total =
      static_cast<size_t>(std::accumulate(r.sizes.begin(), r.sizes.end(), int64_t{0}));
  // A lone tensor staged here (this rank joined) is reduced in one call, as
  // the ranks that have it do.
  const size_t piece = r.names.size() > 1 ? std::max<size_t>(1, kFusionPieceBytes / elem)
                                          : std::max<size_t>(1, total);
  uint8_t* buf = fusion_buffer_.reserve(std::min(total, piece) * elem);
  FusedPiece at{0, 0, 0, 0};
  // (At least one call, also for 0 elements, as on the ranks that have a lone
  // tensor.)
  for (at.begin = 0; at.begin == 0 || at.begin < total; at.begin += piece) {
    at.end = std::min(total, at.begin + piece);
    TUTTI_RETURN_IF_ERROR(allreducePiece(r, entries, at, buf));
    while (at.first < r.names.size() &&
           at.first_begin + static_cast<size_t>(r.sizes[at.first]) <= at.end) {
      at.first_begin += static_cast<size_t>(r.sizes[at.first++]);
    }
  }
  return Status::ok();
}

Status Executor::allreducePiece(const Response& r, const std::vector<const TensorEntry*>& entries,
                                const FusedPiece& at, uint8_t* buf) {
  const size_t elem = dataTypeSize(r.dtype);
  // Calls fn(i, from, to, n): n elements of tensor i starting at its element
  // `from`, at element `to` of the piece.
  auto forEachPart = [&](auto&& fn) {
    size_t start = at.first_begin;
    for (size_t i = at.first; i < r.names.size() && start < at.end; ++i) {
      const size_t size = static_cast<size_t>(r.sizes[i]);
      const size_t lo = std::max(start, at.begin);
      const size_t hi = std::min(start + size, at.end);
      if (lo < hi) fn(i, lo - start, lo - at.begin, hi - lo);
      start += size;
    }
  };
  forEachPart([&](size_t i, size_t from, size_t to, size_t n) {
    if (entries[i] != nullptr) {
      std::memcpy(buf + to * elem,
                  static_cast<const uint8_t*>(entries[i]->input.data) + from * elem, n * elem);
      scaleInPlace(buf + to * elem, n, r.dtype, r.prescale);
    } else {
      std::memset(buf + to * elem, 0, n * elem);
    }
  });
  const auto started = std::chrono::steady_clock::now();
  if (at.begin == 0) collective_.start = started;
  TUTTI_RETURN_IF_ERROR(
      backend_.allreduce(buf, at.end - at.begin, r.dtype, backendOp(r.reduce_op)));
  collective_.end = std::chrono::steady_clock::now();
  const int divisor = averageDivisor(r, size_);
  forEachPart([&](size_t i, size_t from, size_t to, size_t n) {
    if (entries[i] == nullptr) return;
    uint8_t* out = static_cast<uint8_t*>(entries[i]->output.data) + from * elem;
    std::memcpy(out, buf + to * elem, n * elem);
    scaleInPlace(out, n, r.dtype, r.postscale, divisor);
  });
  return Status::ok();
}

Status Executor::adasum(const Response& r, const std::vector<const TensorEntry*>& entries) {
  const size_t elem = dataTypeSize(r.dtype);
  const std::vector<size_t> counts(r.sizes.begin(), r.sizes.end());
  if (r.names.size() == 1 && entries[0] != nullptr) {
    // Alone: combined in the caller's output buffer.
    const TensorEntry& e = *entries[0];
    TUTTI_CHECK_EQ(static_cast<int64_t>(counts[0]), e.input.numElements());
    if (e.output.data != e.input.data && counts[0] > 0) {
      std::memcpy(e.output.data, e.input.data, counts[0] * elem);
    }
    scaleInPlace(e.output.data, counts[0], r.dtype, r.prescale);
    TUTTI_RETURN_IF_ERROR(backend_.adasumAllreduce(e.output.data, counts, r.dtype));
    scaleInPlace(e.output.data, counts[0], r.dtype, r.postscale);
    return Status::ok();
  }
  // Fused (or this rank joined: zeros): staged whole, end to end.
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  uint8_t* buf = fusion_buffer_.reserve(total * elem);
  for (size_t i = 0, at = 0; i < counts.size(); at += counts[i++]) {
    uint8_t* part = buf + at * elem;
    if (entries[i] == nullptr) {
      std::memset(part, 0, counts[i] * elem);
      continue;
    }
    TUTTI_CHECK_EQ(static_cast<int64_t>(counts[i]), entries[i]->input.numElements());
    if (counts[i] > 0) std::memcpy(part, entries[i]->input.data, counts[i] * elem);
    scaleInPlace(part, counts[i], r.dtype, r.prescale);
  }
  collective_.start = std::chrono::steady_clock::now();
  TUTTI_RETURN_IF_ERROR(backend_.adasumAllreduce(buf, counts, r.dtype));
  collective_.end = std::chrono::steady_clock::now();
  for (size_t i = 0, at = 0; i < counts.size(); at += counts[i++]) {
    if (entries[i] == nullptr || counts[i] == 0) continue;
    std::memcpy(entries[i]->output.data, buf + at * elem, counts[i] * elem);
    scaleInPlace(entries[i]->output.data, counts[i], r.dtype, r.postscale);
  }
  return Status::ok();
}

Status Executor::allgather(const Response& r, const TensorEntry* e, Completion* done) {
  TUTTI_CHECK(e != nullptr);  // joined ranks never get an allgather (validation)
  const AllgatherLayout layout = allgatherLayout(r, size_);
  if (e->output.data != nullptr && e->output.dtype == r.dtype &&
      e->output.numBytes() == layout.totalBytes()) {
    // Runtime::allgatherInto with a buffer of exactly the result's size.
    return backend_.allgatherv(e->input.data, e->output.data, layout.bytes_per_rank);
  }
  done->setOutput(r.dtype, withFirstDim(e->input.shape, layout.rows), layout.totalBytes());
  return backend_.allgatherv(e->input.data, done->output.bytes.data(), layout.bytes_per_rank);
}

Status Executor::broadcast(const Response& r, const TensorEntry* e) {
  TUTTI_CHECK(e != nullptr);
  const size_t bytes = e->output.numBytes();
  if (rank_ == r.root && e->output.data != e->input.data && bytes > 0) {
    std::memcpy(e->output.data, e->input.data, bytes);
  }
  return backend_.broadcast(e->output.data, bytes, r.root);
}

Status Executor::alltoall(const Response& r, const TensorEntry* e, Completion* done) {
  TUTTI_CHECK(e != nullptr);
  const AlltoallLayout layout = alltoallLayout(r, rank_, size_);
  done->received_splits = layout.received_splits;
  done->setOutput(r.dtype, withFirstDim(e->input.shape, layout.rows), layout.totalBytes());
  return backend_.alltoallv(e->input.data, layout.send_bytes, done->output.bytes.data(),
                            layout.recv_bytes);
}

Status Executor::reducescatter(const Response& r, const TensorEntry* e, Completion* done) {
  const ReducescatterLayout layout = reducescatterLayout(r, size_);
  const int64_t total = layout.total;
  const int64_t first_dim = layout.first_dim;
  const std::vector<size_t>& counts = layout.counts;
  const size_t elem = dataTypeSize(r.dtype);
  // The input is staged (prescaled, or zeros for a joined rank) so the
  // caller's tensor is never modified.
  uint8_t* buf = fusion_buffer_.reserve(static_cast<size_t>(total) * elem);
  if (e != nullptr) {
    if (total > 0) std::memcpy(buf, e->input.data, static_cast<size_t>(total) * elem);
    scaleInPlace(buf, static_cast<size_t>(total), r.dtype, r.prescale);
  } else {
    std::memset(buf, 0, static_cast<size_t>(total) * elem);
  }
  OwnedTensor out;
  out.dtype = r.dtype;
  out.shape = e != nullptr
                  ? withFirstDim(e->input.shape, reducescatterRows(first_dim, rank_, size_))
                  : Shape{static_cast<int64_t>(counts[rank_])};
  out.bytes.resize(counts[rank_] * elem);
  collective_.start = std::chrono::steady_clock::now();
  TUTTI_RETURN_IF_ERROR(
      backend_.reducescatter(buf, out.bytes.data(), counts, r.dtype, backendOp(r.reduce_op)));
  collective_.end = std::chrono::steady_clock::now();
  scaleInPlace(out.bytes.data(), counts[rank_], r.dtype, r.postscale, averageDivisor(r, size_));
  done->has_output = true;
  done->output = std::move(out);
  return Status::ok();
}

Status Executor::pointToPoint(const Response& r, const TensorEntry* e) {
  // Only the pair executes it (RuntimeImpl::executeResponse skips the others).
  TUTTI_CHECK(e != nullptr);
  TUTTI_CHECK_EQ(r.sizes.size(), size_t{2});
  TUTTI_CHECK_EQ(r.sizes[1], e->input.numElements());
  const size_t bytes = static_cast<size_t>(r.sizes[1]) * dataTypeSize(r.dtype);
  if (bytes == 0) return Status::ok();  // both sides know: nothing moves
  const int peer = e->request.root;
  if (e->request.type == OpType::kSend) return backend_.send(e->input.data, bytes, peer);
  return backend_.recv(e->output.data, bytes, peer);
}

}  // namespace tutti
