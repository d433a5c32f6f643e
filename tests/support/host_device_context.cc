#include "tests/support/host_device_context.h"

#include <cstring>
#include <string>

#include "compression/compressor.h"
#include "ops/cuda/copy_plan.h"
#include "ops/reduce.h"

namespace tutti::testing {

Status HostDeviceContext::recordOn(void* /*stream*/, std::shared_ptr<DeviceEvent>* out) {
  *out = std::make_shared<DeviceEvent>();
  return Status::ok();
}

Status HostDeviceContext::waitFor(const DeviceEvent& /*event*/) {
  return Status::ok();
}

void HostDeviceContext::grow(Buffer* b, size_t bytes) {
  if (b->bytes >= bytes && b->data != nullptr) return;
  b->storage.assign(bytes + 256, 0xA5);  // not zero: code must not rely on fresh zeros
  const auto at = reinterpret_cast<uintptr_t>(b->storage.data());
  b->data = b->storage.data() + (256 - at % 256) % 256;
  b->bytes = bytes;
}

Status HostDeviceContext::deviceBuffer(Slot slot, size_t bytes, void** out) {
  Buffer& b = device_[static_cast<int>(slot)];
  grow(&b, bytes);
  *out = b.data;
  return Status::ok();
}

Status HostDeviceContext::pinnedBuffer(size_t bytes, void** out) {
  grow(&pinned_, bytes);
  *out = pinned_.data;
  return Status::ok();
}

Status HostDeviceContext::copyBatch(const std::vector<DeviceCopy>& copies) {
  for (const DeviceCopy& c : copies) {
    if (c.bytes > 0) std::memcpy(c.dst, c.src, c.bytes);
  }
  return Status::ok();
}

Status HostDeviceContext::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::ok();
  const auto* d = static_cast<const uint8_t*>(dst);
  if (pinned_.data != nullptr && d >= pinned_.data && d < pinned_.data + pinned_.bytes) {
    staged_bytes_ += bytes;
  }
  std::memmove(dst, src, bytes);
  return Status::ok();
}

Status HostDeviceContext::fillZero(void* dst, size_t bytes) {
  if (bytes > 0) std::memset(dst, 0, bytes);
  return Status::ok();
}

Status HostDeviceContext::scale(void* buf, size_t count, DataType dtype, double factor,
                                int divisor) {
  scaleInPlace(buf, count, dtype, factor, divisor);
  return Status::ok();
}

Status HostDeviceContext::cast(const void* in, DataType in_type, void* out, DataType out_type,
                               size_t count) {
  if (!cuda::isCastPair(in_type, out_type)) {
    return Status::invalidArgument(std::string("no cast from ") + dataTypeName(in_type) + " to " +
                                   dataTypeName(out_type));
  }
  ++cast_calls_;
  cast_elements_ += count;
  // Both directions through float32, as the kernels (float64 rounds to
  // float32 first; float32 <-> 16-bit is exact one way, rounds the other).
  std::vector<float> f(count);
  toFloat32(in, count, in_type, f.data());
  fromFloat32(f.data(), count, out_type, out);
  return Status::ok();
}

Status HostDeviceContext::synchronize() {
  return Status::ok();
}

}  // namespace tutti::testing
