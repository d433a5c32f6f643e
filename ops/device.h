#pragma once

// The coordinator's view of one accelerator (CUDA today), free of CUDA's
// headers: memory, batched copies and scaling on a stream of tutti's own.
// The implementation lives in ops/cuda/ (target tutti_cuda); the coordinator
// reaches it only through this interface and the factory in BackendBundle
// (ops/backend_registry.h), so a CPU-only build has no CUDA anywhere.
//
// Streams and ordering: every operation below is queued on tutti's own
// stream (stream()) and returns without waiting, except synchronize() and the
// host-side buffers' growth. Work the framework queued on its own stream
// before an op was enqueued is ordered before tutti's work with an event
// (recordOn() at enqueue on the framework's thread, waitFor() on the
// background thread): the framework's stream is never blocked on the host,
// and tutti's stream waits on the device, not on the CPU.
//
// Blocking: synchronize() blocks the calling thread, without spinning (a
// blocking-sync event), until everything queued on tutti's stream finished.
// Device work of this interface never waits on peers, so it cannot hang.
//
// Errors: a failed CUDA call is a Status naming the call and CUDA's message
// (kInvalidArgument for an illegal address or bad argument, kInternal for the
// rest); after a sticky CUDA error every later call fails the same way.
//
// Threading: recordOn() and deviceId() may be called from any thread; the
// rest only from the runtime's background thread.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "ops/backend.h"

namespace tutti {

// Marks the work queued on a stream up to some point (a cudaEvent_t).
// Destroying it releases the event; safe while the event is pending.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
};

// One copy of a batch: `bytes` bytes from `src` to `dst`, both device memory
// (or host memory registered with CUDA). Copies of a batch must not overlap.
struct DeviceCopy {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t bytes = 0;
};

class DeviceContext {
 public:
  // Scratch buffers of device memory the executor stages through: the
  // fusion buffer, outputs the runtime sizes, and the 16-bit wire buffer of
  // cast compression.
  enum class Slot { kFusion = 0, kOutput = 1, kWire = 2 };
  static constexpr int kSlots = 3;

  virtual ~DeviceContext() = default;
  // The CUDA device ordinal this context works on.
  virtual int deviceId() const = 0;
  // tutti's stream (a cudaStream_t), for backends that queue on it (NCCL).
  virtual void* stream() const = 0;

  // Any thread: records the work queued so far on `stream` (a cudaStream_t
  // of this context's device; nullptr = the legacy default stream).
  virtual Status recordOn(void* stream, std::shared_ptr<DeviceEvent>* out) = 0;
  // Makes tutti's stream wait (on the device) for `event`.
  virtual Status waitFor(const DeviceEvent& event) = 0;

  // At least `bytes` bytes of device memory, 256-byte aligned; grown (after
  // synchronize()) and never shrunk; contents are lost when it grows.
  virtual Status deviceBuffer(Slot slot, size_t bytes, void** out) = 0;
  // At least `bytes` bytes of pinned host memory for staging; same rules.
  virtual Status pinnedBuffer(size_t bytes, void** out) = 0;

  // Queues every copy of `copies` (zero-byte ones are skipped) as one kernel
  // launch (ops/cuda/copy_plan.h says how the work is split).
  virtual Status copyBatch(const std::vector<DeviceCopy>& copies) = 0;
  // Queues a copy between any two of device, pinned and pageable host
  // memory (cudaMemcpyAsync with cudaMemcpyDefault). With pageable host
  // memory CUDA may return before the copy ran: synchronize() before use.
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;
  // Queues dst[0..bytes) = 0.
  virtual Status fillZero(void* dst, size_t bytes) = 0;
  // Queues buf[i] = buf[i] * factor / divisor for i < count, with
  // scaleInPlace's rules (ops/reduce.h: float16/bfloat16 via float32,
  // integers in float64 truncated toward zero and saturated, bool unchanged).
  // factor == 1 with divisor == 1 queues nothing.
  virtual Status scale(void* buf, size_t count, DataType dtype, double factor, int divisor) = 0;
  Status scale(void* buf, size_t count, DataType dtype, double factor) {
    return scale(buf, count, dtype, factor, 1);
  }
  // Queues out[i] = convert(in[i]) for i < count, for cast compression:
  // float32 or float64 to float16 or bfloat16 and back, with the host's
  // conversions (compression/compressor.h toFloat32/fromFloat32: float64
  // rounds to float32 first; round to nearest even; float16 overflows to
  // +-inf; NaN stays NaN). Other pairs: kInvalidArgument. in and out must not
  // overlap. count == 0 queues nothing.
  virtual Status cast(const void* in, DataType in_type, void* out, DataType out_type,
                      size_t count) = 0;

  // Blocks until everything queued on tutti's stream finished.
  virtual Status synchronize() = 0;
};

// A Backend (ops/backend.h) whose buffers are device memory of one
// DeviceContext: the collectives are queued on the context's stream, after
// whatever the executor queued there, and each call returns once its
// collective finished on this rank (NCCL). Errors and blocking as Backend.
class DeviceBackend : public Backend {
 public:
  // Whether allreduce and reducescatter accept `dtype` (NCCL has no int16);
  // the executor stages the others through the host backend.
  virtual bool reduces(DataType dtype) const = 0;
};

}  // namespace tutti
