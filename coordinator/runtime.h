#pragma once

// tutti's C++ API: the runtime of one rank. The C API (bindings/c) and the
// launcher's tests sit on it.
//
// Lifecycle: Runtime::create() reads placement and knobs from Settings,
// connects to every peer through the rendezvous store, and starts ONE
// background thread (the coordinator thread). shutdown() (or the destructor)
// completes every pending handle with kShutdown and joins the thread. A
// process may create a Runtime again after shutting one down, with another
// world size. Several Runtimes may live in one process at once (the tests run
// N ranks as threads); nothing here is a process global.
//
// Threading: every method is thread-safe. Enqueue methods never block on the
// network: they validate the local input, record a request, wake the
// background thread and return a Handle. Negotiation, fusion and the
// collective run on the background thread.
//
// Memory: input and output TensorViews are borrowed; the caller keeps them
// alive and unchanged (inputs) until the handle completes. Outputs whose size
// only the runtime knows (allgather, alltoall, reducescatter) are owned by the
// handle: output(handle) until release(handle).
//
// Errors: enqueue returns kInvalidArgument (bad local input: the message names
// the rank, the argument and what is accepted; the request still reaches rank
// 0, which fails the name with the same message on every other rank's
// handle, so nobody waits for it), kDuplicateName (a tensor of that name is
// in flight on this rank), kNotInitialized/kShutdown, or the runtime's
// kPeerLost once a peer was lost. A handle completes with kMismatch (ranks
// disagree: the message names the tensor, ranks and values), kPeerLost,
// kStalled or kShutdown.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/compressor_set.h"
#include "coordinator/parameter_manager.h"
#include "coordinator/process_sets.h"
#include "core/message.h"
#include "core/settings.h"
#include "core/status.h"
#include "core/tensor.h"

namespace tutti {

using Handle = int64_t;

struct OpOptions {
  // Tensor name, the key negotiation matches across ranks. "" = a unique name
  // generated from a per-runtime counter (so unnamed ops must be issued in the
  // same order on every rank).
  std::string name;
  ReduceOp reduce_op = ReduceOp::kSum;
  // Allreduce/reducescatter: result = postscale * reduce(prescale * x_r).
  // Integer tensors are scaled in float64 and truncated toward zero (per rank
  // for prescale); kAverage divides by size(), as ops/reduce.h scaleInPlace.
  double prescale = 1.0;
  double postscale = 1.0;
  // Broadcast: the (global) rank whose tensor is sent; a member of the set.
  int root = 0;
  // Alltoall: rows sent to each rank of the set, in the set's rank order
  // (one entry per member); empty = even.
  std::vector<int64_t> splits;
  // Allreduce: compression spec (core/compression_spec.h: none, fp16, bf16,
  // topk:<ratio>, int8[:<block>]); "" = the job's TUTTI_COMPRESSION. Applies
  // to sum/average of floating-point tensors; integer and bool tensors and
  // other reduce ops pass through. Every rank must use the same spec for a
  // tensor (else kMismatch naming the specs). Ignored by other ops.
  std::string compression;
  // The process set the op runs over (coordinator/process_sets.h): its
  // members, in their order, take the place of every rank in the
  // descriptions below (size() is the set's size, ranks are within the set,
  // except `root`). kInvalidArgument at enqueue for an unknown set or one
  // this rank is not in.
  int32_t process_set = kGlobalProcessSet;
  // The ordered lane (coordinator/ordered_lane.h): the caller promises to
  // issue its ordered ops of this set in the same order, with matching
  // arguments, on every member (torch.distributed's contract). Such an op
  // skips the negotiation through rank 0: `name` is ignored (it is named
  // "ordered #<sequence number>"), the members check each other's
  // signatures and a disagreement completes the op with kMismatch on every
  // member (naming the sequence number, ranks and values); wait() runs it on
  // the waiting thread. CUDA tensors, Adasum, compressed allreduces, and
  // every op on a backend without a lane (mpi) are negotiated instead, with
  // `name` (or a generated one). Ordered and negotiated ops may be mixed in
  // a job: the lanes use separate connections.
  bool ordered = false;
};

class RuntimeImpl;
struct BackendBundle;  // ops/backend_registry.h

class Runtime {
 public:
  // Connects to the job described by `settings` and starts the background
  // thread. Blocks until every rank is connected or TUTTI_TIMEOUT_SECONDS
  // passed (kTimeout naming the ranks that never arrived).
  static Status create(const Settings& settings, std::unique_ptr<Runtime>* out);
  // Starts a runtime over a bundle that is already connected (transport and
  // backend non-null, of settings.size ranks, this one settings.rank): for
  // harnesses that bring their own transport (bench/scale runs 1,024 ranks
  // as threads over tests/support/memory_transport.h). Never blocks on
  // peers. Errors: kInvalidArgument (rank/size out of range, a bundle
  // without transport or backend), or the timeline's.
  static Status createConnected(const Settings& settings, BackendBundle bundle,
                                std::unique_ptr<Runtime>* out);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Completes pending handles with kShutdown, tells the peers, joins the
  // background thread. Idempotent.
  Status shutdown();

  int rank() const;
  int size() const;
  int localRank() const;
  int localSize() const;
  int crossRank() const;
  int crossSize() const;
  const Settings& settings() const;

  // The rank whose loss ended this runtime: once the runtime failed with
  // kPeerLost, the rank its status carries (Status::lostRank(); on a worker,
  // the one rank 0's abort notice carries when it came, else what the worker
  // saw itself); -1 while
  // running, after a plain shutdown, or after another error. Elastic workers
  // report it to the driver (docs/elastic.md). Any thread.
  int lostRank() const;

  // Allreduce `input` into `output` (same dtype and shape; may be the same
  // memory). Ops: every ReduceOp; bool allows sum/min/max/product as logical ops;
  // kAdasum: float16/32/64 CPU tensors on a power-of-two number of ranks.
  Status allreduce(const TensorView& input, const TensorView& output, const OpOptions& options,
                   Handle* handle);
  // Allreduce several tensors negotiated and fused as one group: none starts
  // before all are ready on every rank. One handle per tensor. Names are
  // options.name + "." + index (generated when options.name is empty).
  Status groupedAllreduce(const std::vector<TensorView>& inputs,
                          const std::vector<TensorView>& outputs, const OpOptions& options,
                          std::vector<Handle>* handles);
  // Concatenates every rank's input along the first dimension, in rank order.
  // First dimensions may differ per rank; other dimensions must match; a
  // 0-dimensional input is an error. Output: output(handle).
  Status allgather(const TensorView& input, const OpOptions& options, Handle* handle);
  // The same into the caller's `output` (CPU; the input's dtype; borrowed
  // until the handle completes): when it holds exactly the result's bytes
  // (every rank's rows) the result is written there and output(handle) is
  // nullptr; otherwise (or for CUDA tensors) output(handle) holds the result
  // as for allgather(). Saves allocating and copying the result.
  Status allgatherInto(const TensorView& input, const TensorView& output, const OpOptions& options,
                       Handle* handle);
  // Root's input is written to every rank's output (may be the same memory as input).
  Status broadcast(const TensorView& input, const TensorView& output, const OpOptions& options,
                   Handle* handle);
  // Sends options.splits[p] rows of input (consecutive, in rank order) to each
  // rank p; without splits the first dimension is divided evenly (must be
  // divisible by size()). Output: output(handle), received splits:
  // receivedSplits(handle).
  Status alltoall(const TensorView& input, const OpOptions& options, Handle* handle);
  // Reduces the input (same shape on every rank) and gives rank r rows
  // [offset_r, offset_r + rows_r) of the result, where rows_r = d0 / size plus
  // one for the first d0 % size ranks. Output: output(handle).
  Status reducescatter(const TensorView& input, const OpOptions& options, Handle* handle);
  // Completes on every rank (of the set) after every rank entered it.
  // `ordered`: through the ordered lane (OpOptions::ordered).
  Status barrier(Handle* handle, int32_t process_set = kGlobalProcessSet, bool ordered = false);
  // This rank has no more data: until every rank joined, it takes part in
  // other ranks' allreduces with zeros. Completes when all ranks joined;
  // joinResult(handle) is the last rank to join (same on every rank).
  Status join(Handle* handle);

  // Tagged point-to-point messages (coordinator/point_to_point.h), between
  // two ranks of a process set, negotiated through rank 0 but waiting only
  // for the pair. send: `input` goes to global rank `dst`; recv: `output`
  // takes the message from global rank `src`. The n-th send from s to d
  // with a tag meets the n-th recv on d from s with that tag (posting order;
  // no wildcards); messages with other tags or pairs are independent. Any
  // dtype; sender and receiver must agree on the dtype, the device and the
  // number of elements (shapes may differ): else kMismatch on both, naming
  // the message (ranks, tag, number), both dtypes and counts. Zero elements
  // complete without moving data. Memory: borrowed until the handle
  // completes (the input unchanged, the output not read). Errors at enqueue:
  // kInvalidArgument for a peer that is not another member of the set
  // (oneself included), a CUDA tensor (CPU only; the message then also fails
  // on the peer), a bad view; a backend without point-to-point (nccl's
  // device path is not one: CPU tensors go over tcp or mpi) fails the handle
  // with kInvalidArgument naming it. A recv whose sender never sends is a
  // stall (kStalled after TUTTI_STALL_SHUTDOWN_TIME_SECONDS); a lost peer
  // is kPeerLost.
  Status send(const TensorView& input, int dst, int32_t tag, int32_t process_set, Handle* handle);
  Status recv(const TensorView& output, int src, int32_t tag, int32_t process_set, Handle* handle);

  // Process sets (coordinator/process_sets.h). Registers the set of these
  // global ranks (any order, distinct, in [0, size())) and returns its id;
  // collective over the job: every rank calls it, in the same order, with the
  // same ranks. Blocks until registered. Errors, on every rank:
  // kInvalidArgument (bad ranks on some rank, or a set with these ranks exists
  // already), kMismatch (ranks differ across ranks).
  Status addProcessSet(const std::vector<int>& ranks, int32_t* id);
  // Removes a set; collective over the job like addProcessSet. Its pending
  // ops fail with kInvalidArgument. kInvalidArgument for id 0 (the global set)
  // or an unknown id.
  Status removeProcessSet(int32_t id);
  // The registered sets (any thread); lookup: kInvalidArgument when unknown.
  Status processSet(int32_t id, ProcessSetInfo* out) const;
  std::vector<ProcessSetInfo> processSets() const;

  // Handle methods: thread-safe. An unknown or released handle is
  // kInvalidArgument.
  // True once the op completed (successfully or not).
  bool poll(Handle handle) const;
  // True for a handle returned by an enqueue and not yet released.
  bool hasHandle(Handle handle) const;
  // Waits until the op completed and returns its status; timeout_seconds < 0
  // waits without a deadline; on expiry returns kTimeout (the op goes on).
  Status wait(Handle handle, double timeout_seconds = -1) const;
  // Runtime-sized output of a completed allgather/alltoall/reducescatter
  // (nullptr otherwise). Owned by the handle until release().
  OwnedTensor* output(Handle handle) const;
  std::vector<int64_t> receivedSplits(Handle handle) const;
  int joinResult(Handle handle) const;  // join: last rank; add process set: the id
  // Forgets a completed handle and frees its output. Releasing a pending
  // handle is kInvalidArgument.
  Status release(Handle handle);
  // Runs callback(handle, status) once when the op completes: on the thread
  // that completes it (the background thread, or shutdown()'s), or here at
  // once when it already completed. It must not block or call the runtime.
  // kInvalidArgument: unknown handle, or a callback already set on it.
  Status onComplete(Handle handle, std::function<void(Handle, const Status&)> callback);

  // Bytes this rank was asked to send by the collectives it ran so far
  // (algorithm-aware: coordinator/counting_backend.h), compressed sizes for
  // compressed allreduces. Monotonic over the runtime's life. Any thread.
  uint64_t bytesSent() const;

  // Error-feedback residuals of the compressors in use (topk, int8), keyed by
  // canonical spec then tensor name: state that elastic training commits with
  // the model and restores after a membership change. A snapshot taken
  // between steps (no compressed allreduce in flight) is consistent with the
  // model; it is never half a step. setCompressionResiduals replaces the
  // residuals of the specs given (kInvalidArgument for a bad spec, then
  // nothing changes); a residual whose size no longer matches its tensor is
  // reset to zeros on next use. Any thread.
  CompressionResiduals compressionResiduals() const;
  Status setCompressionResiduals(const CompressionResiduals& residuals);

  // Timeline (coordinator/timeline.h, docs/timeline.md). Starts recording this
  // rank's Chrome-trace timeline to timelineFileName(path, rank()), i.e.
  // "t.json" -> "t.rank0.json"; mark_cycles adds a mark per background round.
  // Blocks only to create the file. Errors: kInvalidArgument (empty path, or a
  // timeline is already recording), kIoError (the file cannot be created).
  // TUTTI_TIMELINE starts one at create(); shutdown() stops it.
  Status startTimeline(const std::string& path, bool mark_cycles = false);
  // Writes what is queued and closes the file (valid JSON). Blocks until the
  // writer drained (about kFlushInterval). OK when none is recording;
  // kIoError when a write had failed.
  Status stopTimeline();

  // Autotune (TUTTI_AUTOTUNE=1, docs/autotune.md): every parameter switch this
  // rank made, in order, each with the number of the response list (from 1)
  // it took effect before; the same on every rank of the job. Empty without
  // autotune. Any thread.
  std::vector<AutotuneChange> autotuneHistory() const;

 private:
  explicit Runtime(std::unique_ptr<RuntimeImpl> impl);
  std::unique_ptr<RuntimeImpl> impl_;
};

}  // namespace tutti
