#pragma once

// A DeviceContext (ops/device.h) whose "device memory" is host memory, so
// that the device executor's logic (staging, casts, which backend moves the
// bytes, the compression paths) runs and is checked on machines without a
// GPU. Every operation runs at once on the calling thread with the host's
// arithmetic (ops/reduce.h scaleInPlace; compression/compressor.h
// toFloat32/fromFloat32 for casts, which the GPU kernels match bit for bit
// except for NaN payloads: GpuKernelsTest.CastsMatchTheCpuConversions), and
// is counted, so a test can
// tell which device operations an op used.
//
// Threading: like CudaDeviceContext (recordOn from any thread, the rest from
// one thread); the counters are atomics.

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "ops/device.h"

namespace tutti::testing {

class HostDeviceContext : public DeviceContext {
 public:
  explicit HostDeviceContext(int device_id = 0) : device_id_(device_id) {}

  int deviceId() const override { return device_id_; }
  void* stream() const override { return nullptr; }
  Status recordOn(void* stream, std::shared_ptr<DeviceEvent>* out) override;
  Status waitFor(const DeviceEvent& event) override;
  Status deviceBuffer(Slot slot, size_t bytes, void** out) override;
  Status pinnedBuffer(size_t bytes, void** out) override;
  Status copyBatch(const std::vector<DeviceCopy>& copies) override;
  Status copy(void* dst, const void* src, size_t bytes) override;
  Status fillZero(void* dst, size_t bytes) override;
  using DeviceContext::scale;
  Status scale(void* buf, size_t count, DataType dtype, double factor, int divisor) override;
  Status cast(const void* in, DataType in_type, void* out, DataType out_type,
              size_t count) override;
  Status synchronize() override;

  // Elements converted by cast() so far, and the calls.
  uint64_t castElements() const { return cast_elements_; }
  uint64_t castCalls() const { return cast_calls_; }
  // Bytes copied into the pinned buffer's range by copy() (device -> host staging).
  uint64_t stagedBytes() const { return staged_bytes_; }

 private:
  // 256-byte aligned growth, as the CUDA context's buffers.
  struct Buffer {
    std::vector<uint8_t> storage;
    uint8_t* data = nullptr;
    size_t bytes = 0;
  };
  static void grow(Buffer* b, size_t bytes);

  const int device_id_;
  Buffer device_[kSlots];
  Buffer pinned_;
  std::atomic<uint64_t> cast_elements_{0};
  std::atomic<uint64_t> cast_calls_{0};
  std::atomic<uint64_t> staged_bytes_{0};
};

}  // namespace tutti::testing
