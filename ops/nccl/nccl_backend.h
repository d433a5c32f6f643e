#pragma once

// DeviceBackend (ops/device.h) on NCCL: ncclAllReduce (in place),
// ncclAllGather (equal blocks) or grouped ncclBroadcast (uneven blocks),
// ncclBroadcast, ncclReduceScatter (equal blocks) or grouped ncclReduce
// (uneven blocks), and grouped ncclSend/ncclRecv for alltoallv. Buffers are
// device memory of the DeviceContext's device.
//
// Creation is collective: every rank of the job calls create() at the same
// point of the response order (the coordinator opens the backend at the
// first CUDA response, which every rank executes in the same order). Rank 0
// makes the ncclUniqueId and sets it in the rendezvous store (the job
// generation's store, so that init -> shutdown -> init meets the new id) under
// "nccl/unique_id"; the others get it, waiting at most the timeout. The
// communicator is non-blocking (ncclConfig_t.blocking = 0) so that its
// initialisation, too, is bounded by the timeout.
//
// A process set's communicator (createOverHost) is made the same way over
// the set's members only, at the set's first CUDA response (which every
// member executes at the same point of the order), with the id broadcast
// over the set's host backend. Not ncclCommSplit of the job's communicator:
// a split is collective over every rank of the parent, and ranks outside a
// set never execute its responses, so they could not take part at that
// point (Horovod, too, initialises a set's communicator from a unique id).
//
// Streams and blocking: every collective is queued on the DeviceContext's
// stream (after what the executor queued there); the call then waits until
// it finished on this rank, polling an event and ncclCommGetAsyncError with
// a sleep that grows from 10 us to 1 ms (only while a collective is in
// flight: an idle job uses no CPU). No progress within `timeout_seconds`
// aborts the communicator: kPeerLost.
//
// Errors: every NCCL call goes through a check that names the call and this
// rank: ncclSystemError and ncclRemoteError (a peer died, a connection broke)
// and timeouts are kPeerLost; ncclInvalidArgument and ncclInvalidUsage are
// kInvalidArgument; the rest kInternal. After the first error the
// communicator is aborted and every later call returns the same status; the
// coordinator then fails every pending op on every rank.
//
// Types: integers, float16, bfloat16, float32, float64 map onto NCCL's; bool
// reduces as uint8 with max (sum, max: logical or) or min (min, product:
// logical and); int16 and uint16 have no NCCL type (reduces() is false).
//
// Threading: the runtime's background thread only. The destructor aborts the
// communicator (local, never waits for peers).

#include <nccl.h>

#include <functional>
#include <memory>
#include <vector>

#include "core/store.h"
#include "ops/device.h"

namespace tutti {

class NcclBackend : public DeviceBackend {
 public:
  // `device` must outlive the backend. `store` is unused (may be null) when
  // size == 1.
  static Status create(DeviceContext& device, Store* store, int rank, int size,
                       double timeout_seconds, std::unique_ptr<NcclBackend>* out);
  // A communicator over the ranks of `host` (a process set's host backend:
  // rank and size are host.rank() and host.size()). Collective over those
  // ranks only: host's rank 0 makes the ncclUniqueId and broadcasts it with
  // host.broadcast (128 bytes); then ncclCommInitRankConfig, non-blocking and
  // bounded by `timeout_seconds`, as create(). `host` is used only during
  // the call.
  static Status createOverHost(DeviceContext& device, Backend& host, double timeout_seconds,
                               std::unique_ptr<NcclBackend>* out);
  ~NcclBackend() override;
  NcclBackend(const NcclBackend&) = delete;
  NcclBackend& operator=(const NcclBackend&) = delete;

  const char* name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool reduces(DataType dtype) const override {
    return dtype != DataType::kInt16 && dtype != DataType::kUInt16;
  }
  Status allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  Status allgatherv(const void* input, void* output,
                    const std::vector<size_t>& bytes_per_rank) override;
  Status broadcast(void* buf, size_t bytes, int root) override;
  Status alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                   const std::vector<size_t>& recv_bytes) override;
  Status reducescatter(const void* input, void* output, const std::vector<size_t>& counts,
                       DataType dtype, ReduceOp op) override;
  Status barrier() override;

 private:
  NcclBackend(DeviceContext& device, int rank, int size, double timeout_seconds);
  // Makes the communicator; `exchange` gives every rank rank 0's id (on
  // rank 0 it receives the new id to publish).
  Status init(const std::function<Status(ncclUniqueId*)>& exchange);
  // Turns a failed NCCL call into the backend's broken status; waits out
  // ncclInProgress (non-blocking communicator) up to the deadline.
  Status check(ncclResult_t result, const char* call);
  // Waits until everything queued on the stream finished, or fails.
  Status finish(const char* call);
  Status fail(Status status);

  DeviceContext& device_;
  const int rank_;
  const int size_;
  const double timeout_seconds_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;  // the DeviceContext's
  cudaEvent_t done_ = nullptr;     // polled by finish()
  float* barrier_buf_ = nullptr;   // one float of device memory
  Status broken_;
};

}  // namespace tutti
