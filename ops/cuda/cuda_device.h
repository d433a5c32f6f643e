#pragma once

// DeviceContext (ops/device.h) on the CUDA runtime: one device, one stream of
// tutti's own (non-blocking with respect to the legacy default stream), two
// device scratch buffers, one pinned staging buffer, and the kernels of
// ops/cuda/kernels.cu.
//
// Devices: every method makes the context's device current for the duration
// of the call and restores the caller's current device afterwards, so that a
// framework thread calling recordOn() keeps its own current device.
//
// Streams, blocking, errors, threading: as ops/device.h. The destructor
// waits for tutti's stream, then frees everything (errors are ignored there).

#include <cuda_runtime_api.h>

#include <memory>

#include "ops/cuda/copy_plan.h"
#include "ops/device.h"

namespace tutti {
namespace cuda {

// Number of CUDA devices this process sees; 0 (and OK) when the driver or
// the devices are missing, so callers can skip GPU work.
int deviceCount();

// Makes `device` current for a scope and restores the previous device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  Status status() const { return status_; }

 private:
  int previous_ = -1;
  bool restore_ = false;
  Status status_;
};

class CudaDeviceContext : public DeviceContext {
 public:
  // device_id < 0: the calling thread's current device.
  static Status create(int device_id, std::unique_ptr<CudaDeviceContext>* out);
  ~CudaDeviceContext() override;
  CudaDeviceContext(const CudaDeviceContext&) = delete;
  CudaDeviceContext& operator=(const CudaDeviceContext&) = delete;

  int deviceId() const override { return device_; }
  void* stream() const override { return stream_; }
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

 private:
  explicit CudaDeviceContext(int device) : device_(device) {}
  Status init();
  Status synchronizeCurrent();  // requires the device to be current

  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
  };

  const int device_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;  // blocking-sync event for synchronize()
  Buffer device_buffers_[kSlots];
  Buffer pinned_;
  CopyDescriptor* descriptors_ = nullptr;  // device copy of one launch's descriptors
  size_t descriptor_capacity_ = 0;
};

}  // namespace cuda
}  // namespace tutti
