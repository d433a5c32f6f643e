#pragma once

// The device executor: runs the Responses of CUDA tensors (Response.device ==
// kCuda) on this rank. The host Executor (coordinator/executor.h) hands them
// over; everything here goes through ops/device.h, so the coordinator never
// sees CUDA.
//
// Which backend moves the bytes:
//  - direct: with TUTTI_BACKEND=nccl a device backend (NCCL) reduces in
//    device memory. One per process set (coordinator/device_backend_sets.h):
//    the global set's is the bundle's connect_device_backend, opened at the
//    first CUDA response of the global set (every rank executes it at the
//    same point, which makes the opening collective); another set's is the
//    bundle's connect_device_set over the set's members, opened at the set's
//    first CUDA response that needs it (every member executes it at the same
//    point) and freed by removeSet() or with the executor.
//  - staged: otherwise (tcp, mpi; on nccl for dtypes NCCL cannot reduce,
//    int16; and Adasum everywhere) the bytes go to a pinned host buffer
//    (cudaMemcpyAsync), through the host backend (the set's), and back. This
//    is how several ranks share one GPU.
//
// Process sets: a response runs over its set (Response.process_set): rank,
// size, roots, averages and layouts are the set's, as on the host (the
// caller passes the set's executor's rank and size), and the host backend
// is the set's.
//
// Adasum (ReduceOp::kAdasum) on CUDA tensors is staged: the fused buffer
// (prescaled on the device) is copied to pinned host memory, combined by the
// host backend's Adasum (ops/algorithms/allreduce_adasum.h, the same code and
// bytes as for CPU tensors), copied back and postscaled on the device. Cost
// over the CPU path: one device-to-host and one host-to-device copy of the
// buffer and a stream synchronisation; the combine runs on the CPU. Horovod
// runs GPU Adasum hierarchically (NCCL within a node, MPI Adasum across
// nodes); tutti does not.
//
// Per op, on tutti's stream: wait for the framework's stream (the event
// recorded at enqueue), stage (allreduce: every tensor of a fused response
// is copied into the device fusion buffer by one batched-copy kernel, zeros
// for joined ranks; prescale), the collective, postscale, copy out (one
// batched-copy kernel), then synchronize: a handle completes only after its
// device work finished, so the framework may use the outputs on any stream.
// Outputs whose size only the runtime knows (allgather, alltoall,
// reducescatter) are delivered in host memory (Completion::output, device
// CPU, as the C API describes them); the Python binding moves them to the
// input's device.
//
// Compression (allreduce with a compressor, coordinator/executor.h decides):
//  - casts (fp16, bf16): on the device, after staging: the fused buffer is
//    scaled by prescale (and 1/size for average, as on the host, so that
//    float16 sums stay in range), cast to the 16-bit type by a kernel into
//    the kWire slot, allreduced in that type (NCCL directly, or staged
//    through pinned memory: half the bytes over PCIe and the wire; both
//    round each addition to 16 bits, like the host ring, ops/reduce.h), cast
//    back by a kernel and postscaled. Staged, the results equal the host
//    path's for the same inputs (NaN payloads aside: CUDA's conversions give
//    a canonical NaN); on NCCL they are the same up to NCCL's order of
//    additions (its ring follows the topology; trees group differently).
//  - top-k and int8 (error feedback, residuals per tensor name in the
//    runtime's CompressorSet): the staged fused buffer is copied to pinned
//    host memory and goes through the host path
//    (coordinator/compressed_allreduce.h) on the host backend, also under
//    TUTTI_BACKEND=nccl; then back to the device. Their residuals are the
//    same host state the elastic commit saves.
//
// Devices: one CUDA device per rank. The context opens on the first CUDA
// tensor enqueued (its device_id); a later tensor on another device is
// kInvalidArgument at enqueue.
//
// Errors: enqueue: kInvalidArgument (no CUDA in this build, no device, a
// second device, output on another device than the input). Execution: the
// backend's status (kPeerLost, ...) or a CUDA error Status; the caller
// aborts the runtime with it, which fails the op on every rank.
//
// Threading: prepare() on any thread (thread-safe); execute() on the
// background thread only.

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "compression/compressor.h"
#include "coordinator/compressed_allreduce.h"
#include "coordinator/compressor_set.h"
#include "coordinator/device_backend_sets.h"
#include "coordinator/handle_table.h"
#include "coordinator/tensor_queue.h"
#include "core/message.h"
#include "core/status.h"
#include "ops/backend.h"
#include "ops/backend_registry.h"
#include "ops/device.h"

namespace tutti {

class DeviceExecutor {
 public:
  // Copies the bundle's device factories (either may be null).
  DeviceExecutor(const BackendBundle& bundle, int rank, int size);
  ~DeviceExecutor();

  // Enqueue side: checks where `input` (and `output`) live; for CUDA tensors
  // opens the device context on first use and records, on input.stream, the
  // event the op will wait for (*ready). CPU tensors: OK, *ready untouched.
  Status prepare(const Request& request, const TensorView& input, const TensorView* output,
                 std::shared_ptr<DeviceEvent>* ready);

  // Background thread: runs a kCuda Response as the Executor does for host
  // tensors (same arguments, same results). `host` is the host backend.
  // `compressor`: the allreduce's compressor (from `compressors`), or null
  // for an uncompressed op; `compressors` may be null when it is.
  // `rank` and `size`: this rank's in the response's process set and the
  // set's size (host.rank() and host.size() for the backend the caller runs).
  Status execute(const Response& response, const std::vector<const TensorEntry*>& entries,
                 std::vector<Completion>* completions, Backend& host, int rank, int size,
                 Compressor* compressor = nullptr, CompressorSet* compressors = nullptr);

  // Background thread: frees process set `set_id`'s device backend (its
  // NCCL communicator), if one was opened. Called when the set's removal
  // executes; a no-op on ranks outside the set.
  void removeSet(int32_t set_id) { sets_.remove(set_id); }
  // Background thread: whether set `set_id` has an open device backend.
  bool hasDeviceBackend(int32_t set_id) const { return sets_.isOpen(set_id); }

 private:
  // A collective on `bytes` bytes at device address `buf`, run directly on
  // the device backend or staged through pinned memory around the host
  // backend. copy_in: whether buf holds input the collective reads.
  template <typename Fn>
  Status collectiveInPlace(Backend* direct, Backend& host, void* buf, size_t bytes, bool copy_in,
                           Fn&& fn);
  Status context(DeviceContext** out);
  // The device backend of response `r`'s set (null: staged), opened on
  // first use; `host` is the set's host backend.
  Status directBackend(DeviceContext& ctx, const Response& r, Backend& host, DeviceBackend** out);
  Status allreduce(DeviceContext& ctx, Backend* direct, Backend& host, const Response& r,
                   const std::vector<const TensorEntry*>& entries, Compressor* compressor,
                   CompressorSet* compressors);
  // Compressed reductions of an allreduce's staged buffer `buf` (`total`
  // elements of r.dtype), in place; postscale and average included.
  Status castReduce(DeviceContext& ctx, Backend* direct, Backend& host, const Response& r,
                    void* buf, size_t total, const Compressor& compressor);
  Status hostCompressedReduce(DeviceContext& ctx, Backend& host, const Response& r,
                              const std::vector<const TensorEntry*>& entries, void* buf,
                              size_t total, Compressor& compressor, CompressorSet& compressors);
  Status allgather(DeviceContext& ctx, Backend* direct, Backend& host, const Response& r,
                   const TensorEntry* e, Completion* done);
  Status broadcast(DeviceContext& ctx, Backend* direct, Backend& host, const Response& r,
                   const TensorEntry* e);
  Status alltoall(DeviceContext& ctx, Backend* direct, Backend& host, const Response& r,
                  const TensorEntry* e, Completion* done);
  Status reducescatter(DeviceContext& ctx, Backend* direct, Backend& host, const Response& r,
                       const TensorEntry* e, Completion* done);

  // This rank's rank in the process set of the response being executed, and
  // its size (set by execute(); background thread).
  int rank_;
  int size_;
  const decltype(BackendBundle::open_device) open_device_;
  const decltype(BackendBundle::connect_device_backend) connect_device_backend_;
  const decltype(BackendBundle::connect_device_set) connect_device_set_;

  std::mutex mu_;                           // guards opening the context
  std::unique_ptr<DeviceContext> context_;  // set once, under mu_
  std::atomic<DeviceContext*> context_ptr_{nullptr};
  DeviceBackendSets sets_;                  // per process set; background thread; destroyed first
  CompressionScratch compression_scratch_;  // host compression stage (top-k, int8)
};

}  // namespace tutti
