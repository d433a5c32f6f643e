#pragma once

// Launchers of tutti's CUDA kernels (ops/cuda/kernels.cu). Each queues one
// kernel on `stream` and returns the launch's error (cudaGetLastError); none
// waits for the kernel. Grid sizes come from ops/cuda/copy_plan.h.
//
// Threading: any thread (the caller makes the stream's device current).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "ops/cuda/copy_plan.h"

namespace tutti {
namespace cuda {

constexpr uint32_t kCopyThreads = 256;
constexpr uint32_t kElementwiseThreads = 256;
constexpr uint32_t kItemsPerThread = 4;

// Runs one planned launch; `descriptors` is device-visible memory holding
// launch.descriptors (uploaded by the caller); chunk_bytes as planned.
cudaError_t launchBatchedCopy(const CopyDescriptor* descriptors, uint32_t count,
                              uint64_t virtual_blocks, uint32_t grid, size_t chunk_bytes,
                              cudaStream_t stream);

// buf[i] = buf[i] * factor / divisor with ops/reduce.h's rules (see
// DeviceContext::scale); divisor >= 1.
cudaError_t launchScale(void* buf, size_t count, DataType dtype, double factor, int divisor,
                        cudaStream_t stream);

// out[i] = convert(in[i]) between float32/float64 and float16/bfloat16
// (isCastPair; float64 through float32; round to nearest even, float16
// overflow to +-inf), for cast compression. Other pairs are
// cudaErrorInvalidValue. in and out must not overlap.
cudaError_t launchCast(const void* in, DataType in_type, void* out, DataType out_type, size_t count,
                       cudaStream_t stream);

}  // namespace cuda
}  // namespace tutti
