#pragma once

// The executor: runs one op Response on this rank's Backend.
//
//  - allreduce: a single tensor is reduced directly into its output buffer
//    (Backend::allreduceOutOfPlace reads the input, no copy; with a prescale
//    the input is copied to the output and scaled there first). A fused
//    response is staged, reduced and copied out in cache-sized pieces
//    (1 MiB) through the fusion buffer: one collective per piece, each piece
//    reduced while it is still in the cache.
//    prescale is applied to the staged copy, postscale (times 1/size for
//    average) to the result; integers scale in float64 and round
//    (ops/reduce.h). A rank without an entry for a name (it joined)
//    contributes zeros of the size the Response gives.
//  - allreduce with ReduceOp::kAdasum: Backend::adasumAllreduce over whole
//    tensors (a fused response is staged at once, with its tensor
//    boundaries, so each tensor is combined on its own); prescale before,
//    postscale after, no average division (Horovod's AdasumMPIAllreduceOp).
//  - allgather, alltoall, reducescatter: the output is allocated into the
//    Completion's OwnedTensor; alltoall also reports the received splits. An
//    allgather whose entry has an output (Runtime::allgatherInto) of exactly
//    the result's bytes and dtype is written there instead (no OwnedTensor).
//  - broadcast: into the output buffer (root copies its input first).
//  - barrier: Backend::barrier(). join: no collective.
//  - send (a matched point-to-point pair, coordinator/point_to_point.h): on
//    the sender Backend::send of the input, on the receiver Backend::recv
//    into the output; an empty message moves nothing.
//
//  - compression: an allreduce (sum/average) whose Response names a
//    compression spec other than "none", of a dtype the compressor applies
//    to, goes through coordinator/compressed_allreduce.h; integer/bool
//    tensors and other ops pass through uncompressed. On CUDA tensors the
//    device executor applies the same compressor (casts as kernels on the
//    device; top-k and int8 through the host stage, staged in pinned memory).
//
// Every backend call goes through a CountingBackend (coordinator/
// counting_backend.h) that adds the bytes this rank sends to
// ExecutorState::bytes_sent.
//
// Errors: the Backend's status (kPeerLost, ...) is returned; the caller
// aborts the runtime with it. Completions are filled only on success.
//
// Threading: used only by the background thread; not reentrant.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "coordinator/compressed_allreduce.h"
#include "coordinator/compressor_set.h"
#include "coordinator/counting_backend.h"
#include "coordinator/device_executor.h"
#include "coordinator/fusion.h"
#include "coordinator/handle_table.h"
#include "coordinator/tensor_queue.h"
#include "core/message.h"
#include "core/status.h"
#include "ops/backend.h"

namespace tutti {

// What outlives one executor: the runtime owns it, so that residuals and the
// byte count can be read from framework threads (both are thread-safe).
struct ExecutorState {
  CompressorSet compressors;
  std::atomic<uint64_t> bytes_sent{0};  // bytes this rank was asked to send
};

class Executor {
 public:
  // `backend` (and `state`, when given) must outlive the executor. Without a
  // state the executor keeps its own.
  Executor(Backend& backend, int rank, int size, ExecutorState* state = nullptr);

  // entries[i] is this rank's entry for response.names[i], or nullptr.
  // completions gets one element per name (ignored where entries[i] is null).
  Status execute(const Response& response, const std::vector<const TensorEntry*>& entries,
                 std::vector<Completion>* completions);

  // Responses on CUDA tensors go to `device` (coordinator/device_executor.h)
  // with this executor's backend as the host backend. Must outlive the
  // executor; null (the default) fails them with kInternal.
  void setDeviceExecutor(DeviceExecutor* device) { device_ = device; }

  // Start and end of the last execute()'s backend collective when it staged
  // its tensors in the fusion buffer (fused allreduce, reducescatter); unset
  // (epoch) otherwise. A fused allreduce in pieces: from the first piece's
  // collective to the end of the last one's (the copies of the pieces between
  // fall inside). For the timeline (coordinator/timeline.h).
  struct CollectiveTimes {
    std::chrono::steady_clock::time_point start, end;
  };
  const CollectiveTimes& lastCollective() const { return collective_; }

 private:
  Status allreduce(const Response& r, const std::vector<const TensorEntry*>& entries);
  // One tensor, present on this rank: reduced in its output buffer.
  Status allreduceAlone(const Response& r, const TensorEntry& e);
  // Fused tensors (or one this rank joined for), in pieces through the fusion buffer.
  Status allreduceFused(const Response& r, const std::vector<const TensorEntry*>& entries);
  // Elements [begin, end) of the fused layout; `first` is the first tensor
  // that ends after `begin`, starting at element `first_begin`.
  struct FusedPiece {
    size_t begin, end, first, first_begin;
  };
  // Stages, reduces and copies out one piece through `buf`.
  Status allreducePiece(const Response& r, const std::vector<const TensorEntry*>& entries,
                        const FusedPiece& at, uint8_t* buf);
  Status adasum(const Response& r, const std::vector<const TensorEntry*>& entries);
  Status allgather(const Response& r, const TensorEntry* entry, Completion* done);
  Status broadcast(const Response& r, const TensorEntry* entry);
  Status alltoall(const Response& r, const TensorEntry* entry, Completion* done);
  Status reducescatter(const Response& r, const TensorEntry* entry, Completion* done);
  Status pointToPoint(const Response& r, const TensorEntry* entry);
  // The compressor that takes this allreduce, or nullptr (uncompressed).
  Status compressorFor(const Response& r, Compressor** out);

  std::unique_ptr<ExecutorState> own_state_;  // when the caller gave none
  ExecutorState& state_;
  CountingBackend counted_;  // wraps the caller's backend
  CompressionScratch compression_scratch_;
  Backend& backend_;  // = counted_
  const int rank_;
  const int size_;
  FusionBuffer fusion_buffer_;
  CollectiveTimes collective_;
  DeviceExecutor* device_ = nullptr;
};

}  // namespace tutti
