#pragma once

// CUDA runtime errors as tutti Status values (NCCL's CUDACHECK, returning
// instead of aborting). The message names the call, file:line, CUDA's error
// name and description, so that a log reads like a backtrace:
//   "CUDA error in cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_)
//    at ops/cuda/cuda_device.cc:120: cudaErrorIllegalAddress: an illegal
//    memory access was encountered"
// Codes: kInvalidArgument for errors the caller's pointers or device ids
// cause (invalid value, device, device pointer, illegal address);
// kInternal for everything else (out of memory included: the message says so).

#include <cuda_runtime_api.h>

#include "core/status.h"

namespace tutti {
namespace cuda {

Status cudaStatus(cudaError_t error, const char* call, const char* file, int line);

}  // namespace cuda
}  // namespace tutti

#define TUTTI_CUDA_RETURN_IF_ERROR(call)                                            \
  do {                                                                              \
    const cudaError_t _tutti_cuda_err = (call);                                     \
    if (_tutti_cuda_err != cudaSuccess) {                                           \
      return ::tutti::cuda::cudaStatus(_tutti_cuda_err, #call, __FILE__, __LINE__); \
    }                                                                               \
  } while (0)
