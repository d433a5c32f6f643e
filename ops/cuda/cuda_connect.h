#pragma once

// Entry point of CUDA support for ops/backend_registry.cc (which must not
// see CUDA's headers): opens a CudaDeviceContext (ops/cuda/cuda_device.h).

#include <memory>

#include "ops/device.h"

namespace tutti {

// device_id < 0: the calling thread's current device. Errors: see
// CudaDeviceContext::create (kInvalidArgument for no or a missing device).
Status openCudaDevice(int device_id, std::unique_ptr<DeviceContext>* out);

}  // namespace tutti
