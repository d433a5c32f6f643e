#include "ops/cuda/cuda_device.h"

#include <algorithm>
#include <string>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"

namespace tutti {
namespace cuda {

Status cudaStatus(cudaError_t error, const char* call, const char* file, int line) {
  std::string message = std::string("CUDA error in ") + call + " at " + file + ":" +
                        std::to_string(line) + ": " + cudaGetErrorName(error) + ": " +
                        cudaGetErrorString(error);
  switch (error) {
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorIllegalAddress:
      return Status::invalidArgument(std::move(message));
    default:
      return Status::internal(std::move(message));
  }
}

namespace {

// Buffers grow in whole MiB so that slowly growing fused sizes do not
// reallocate every round.
constexpr size_t kGrowthBytes = size_t{1} << 20;

size_t roundUp(size_t bytes) {
  return (bytes + kGrowthBytes - 1) / kGrowthBytes * kGrowthBytes;
}

class CudaEvent : public DeviceEvent {
 public:
  explicit CudaEvent(cudaEvent_t event) : event_(event) {}
  ~CudaEvent() override { cudaEventDestroy(event_); }  // safe while pending
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_;
};

}  // namespace

int deviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it
    return 0;
  }
  return count;
}

DeviceGuard::DeviceGuard(int device) {
  status_ = [&]() -> Status {
    TUTTI_CUDA_RETURN_IF_ERROR(cudaGetDevice(&previous_));
    if (previous_ != device) {
      TUTTI_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
      restore_ = true;
    }
    return Status::ok();
  }();
}

DeviceGuard::~DeviceGuard() {
  if (restore_) cudaSetDevice(previous_);
}

Status CudaDeviceContext::create(int device_id, std::unique_ptr<CudaDeviceContext>* out) {
  const int count = deviceCount();
  if (count == 0) {
    return Status::invalidArgument(
        "a CUDA tensor was given but this process sees no CUDA device (cudaGetDeviceCount "
        "failed or returned 0; check the driver and CUDA_VISIBLE_DEVICES)");
  }
  if (device_id < 0) TUTTI_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device_id));
  if (device_id >= count) {
    return Status::invalidArgument("CUDA device " + std::to_string(device_id) +
                                   " does not exist: this process sees " + std::to_string(count) +
                                   " device(s), 0.." + std::to_string(count - 1));
  }
  std::unique_ptr<CudaDeviceContext> ctx(new CudaDeviceContext(device_id));
  TUTTI_RETURN_IF_ERROR(ctx->init());
  *out = std::move(ctx);
  return Status::ok();
}

Status CudaDeviceContext::init() {
  DeviceGuard guard(device_);
  TUTTI_RETURN_IF_ERROR(guard.status());
  TUTTI_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  TUTTI_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&done_, cudaEventBlockingSync | cudaEventDisableTiming));
  return Status::ok();
}

CudaDeviceContext::~CudaDeviceContext() {
  DeviceGuard guard(device_);
  if (stream_ != nullptr) (void)synchronizeCurrent();
  for (Buffer& b : device_buffers_) cudaFree(b.data);
  cudaFreeHost(pinned_.data);
  cudaFree(descriptors_);
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Status CudaDeviceContext::recordOn(void* stream, std::shared_ptr<DeviceEvent>* out) {
  DeviceGuard guard(device_);
  TUTTI_RETURN_IF_ERROR(guard.status());
  cudaEvent_t event = nullptr;
  TUTTI_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  auto owned = std::make_shared<CudaEvent>(event);
  TUTTI_CUDA_RETURN_IF_ERROR(cudaEventRecord(event, static_cast<cudaStream_t>(stream)));
  *out = std::move(owned);
  return Status::ok();
}

Status CudaDeviceContext::waitFor(const DeviceEvent& event) {
  DeviceGuard guard(device_);
  TUTTI_RETURN_IF_ERROR(guard.status());
  const auto& e = static_cast<const CudaEvent&>(event);
  TUTTI_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, e.get(), 0));
  return Status::ok();
}

Status CudaDeviceContext::deviceBuffer(Slot slot, size_t bytes, void** out) {
  Buffer& b = device_buffers_[static_cast<int>(slot)];
  if (bytes > b.bytes || b.data == nullptr) {
    DeviceGuard guard(device_);
    TUTTI_RETURN_IF_ERROR(guard.status());
    TUTTI_RETURN_IF_ERROR(synchronizeCurrent());  // queued work may still use the old one
    TUTTI_CUDA_RETURN_IF_ERROR(cudaFree(b.data));
    b = Buffer{};
    const size_t size = roundUp(std::max<size_t>(bytes, 1));
    TUTTI_CUDA_RETURN_IF_ERROR(cudaMalloc(&b.data, size));
    b.bytes = size;
  }
  *out = b.data;
  return Status::ok();
}

Status CudaDeviceContext::pinnedBuffer(size_t bytes, void** out) {
  if (bytes > pinned_.bytes || pinned_.data == nullptr) {
    DeviceGuard guard(device_);
    TUTTI_RETURN_IF_ERROR(guard.status());
    TUTTI_RETURN_IF_ERROR(synchronizeCurrent());
    TUTTI_CUDA_RETURN_IF_ERROR(cudaFreeHost(pinned_.data));
    pinned_ = Buffer{};
    const size_t size = roundUp(std::max<size_t>(bytes, 1));
    TUTTI_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&pinned_.data, size, cudaHostAllocPortable));
    pinned_.bytes = size;
  }
  *out = pinned_.data;
  return Status::ok();
}

Status CudaDeviceContext::copyBatch(const std::vector<DeviceCopy>& copies) {
  const std::vector<CopyLaunch> launches = planCopyLaunches(copies);
  if (launches.empty()) return Status::ok();
  DeviceGuard guard(device_);
  TUTTI_RETURN_IF_ERROR(guard.status());
  size_t most = 0;
  for (const CopyLaunch& l : launches) most = std::max(most, l.descriptors.size());
  if (most > descriptor_capacity_) {
    TUTTI_RETURN_IF_ERROR(synchronizeCurrent());
    TUTTI_CUDA_RETURN_IF_ERROR(cudaFree(descriptors_));
    descriptors_ = nullptr;
    descriptor_capacity_ = 0;
    const size_t capacity = std::max<size_t>(most, 256);
    TUTTI_CUDA_RETURN_IF_ERROR(
        cudaMalloc(reinterpret_cast<void**>(&descriptors_), capacity * sizeof(CopyDescriptor)));
    descriptor_capacity_ = capacity;
  }
  for (const CopyLaunch& l : launches) {
    // From pageable memory: CUDA has consumed the host array when the call
    // returns, and the upload is ordered after the previous launch that read
    // the device array, so one device array serves every launch.
    TUTTI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(descriptors_, l.descriptors.data(),
                                               l.descriptors.size() * sizeof(CopyDescriptor),
                                               cudaMemcpyHostToDevice, stream_));
    TUTTI_CUDA_RETURN_IF_ERROR(
        launchBatchedCopy(descriptors_, static_cast<uint32_t>(l.descriptors.size()),
                          l.virtual_blocks, l.grid, kDefaultChunkBytes, stream_));
  }
  return Status::ok();
}

Status CudaDeviceContext::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return Status::ok();
  DeviceGuard guard(device_);
  TUTTI_RETURN_IF_ERROR(guard.status());
  TUTTI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  return Status::ok();
}

Status CudaDeviceContext::fillZero(void* dst, size_t bytes) {
  if (bytes == 0) return Status::ok();
  DeviceGuard guard(device_);
  TUTTI_RETURN_IF_ERROR(guard.status());
  TUTTI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, 0, bytes, stream_));
  return Status::ok();
}

Status CudaDeviceContext::scale(void* buf, size_t count, DataType dtype, double factor,
                                int divisor) {
  if (divisor < 1) {
    return Status::invalidArgument("scale divisor " + std::to_string(divisor) + ": expected >= 1");
  }
  if (scaleIsNoop(count, dtype, factor, divisor)) return Status::ok();
  DeviceGuard guard(device_);
  TUTTI_RETURN_IF_ERROR(guard.status());
  TUTTI_CUDA_RETURN_IF_ERROR(launchScale(buf, count, dtype, factor, divisor, stream_));
  return Status::ok();
}

Status CudaDeviceContext::cast(const void* in, DataType in_type, void* out, DataType out_type,
                               size_t count) {
  if (!isCastPair(in_type, out_type)) {
    return Status::invalidArgument(std::string("no cast kernel from ") + dataTypeName(in_type) +
                                   " to " + dataTypeName(out_type) +
                                   " (accepted: float32 or float64 to float16 or bfloat16, and "
                                   "back)");
  }
  DeviceGuard guard(device_);
  TUTTI_RETURN_IF_ERROR(guard.status());
  TUTTI_CUDA_RETURN_IF_ERROR(launchCast(in, in_type, out, out_type, count, stream_));
  return Status::ok();
}

Status CudaDeviceContext::synchronize() {
  DeviceGuard guard(device_);
  TUTTI_RETURN_IF_ERROR(guard.status());
  return synchronizeCurrent();
}

Status CudaDeviceContext::synchronizeCurrent() {
  TUTTI_CUDA_RETURN_IF_ERROR(cudaEventRecord(done_, stream_));
  TUTTI_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(done_));
  return Status::ok();
}

}  // namespace cuda
}  // namespace tutti
