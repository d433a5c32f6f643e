#include "ops/cuda/cuda_connect.h"

#include "ops/cuda/cuda_device.h"

namespace tutti {

Status openCudaDevice(int device_id, std::unique_ptr<DeviceContext>* out) {
  std::unique_ptr<cuda::CudaDeviceContext> ctx;
  TUTTI_RETURN_IF_ERROR(cuda::CudaDeviceContext::create(device_id, &ctx));
  *out = std::move(ctx);
  return Status::ok();
}

}  // namespace tutti
