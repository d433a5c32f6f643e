// tutti's CUDA kernels: batched copies into and out of the fusion buffer,
// scaling, and float32 <-> float16/bfloat16 casts. Kept to one small
// translation unit with few template instances so that it compiles quickly.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>

#include "ops/cuda/kernels.h"

namespace tutti {
namespace cuda {
namespace {

template <typename W>
__device__ void copyWords(const char* src, char* dst, uint64_t bytes) {
  const uint64_t words = bytes / sizeof(W);
  const W* s = reinterpret_cast<const W*>(src);
  W* d = reinterpret_cast<W*>(dst);
  for (uint64_t i = threadIdx.x; i < words; i += blockDim.x) d[i] = s[i];
  for (uint64_t i = words * sizeof(W) + threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
}

__global__ void batchedCopyKernel(const CopyDescriptor* descriptors, uint32_t count,
                                  uint64_t virtual_blocks, uint64_t chunk_bytes) {
  for (uint64_t b = blockIdx.x; b < virtual_blocks; b += gridDim.x) {
    const CopyDescriptor d = descriptors[findCopy(descriptors, count, b)];
    const uint64_t offset = (b - d.first_block) * chunk_bytes;
    const uint64_t left = d.bytes - offset;
    const uint64_t n = left < chunk_bytes ? left : chunk_bytes;
    const char* src = static_cast<const char*>(d.src) + offset;
    char* dst = static_cast<char*>(d.dst) + offset;
    switch (copyWidth(reinterpret_cast<uintptr_t>(src), reinterpret_cast<uintptr_t>(dst))) {
      case 16:
        copyWords<uint4>(src, dst, n);
        break;
      case 8:
        copyWords<uint2>(src, dst, n);
        break;
      case 4:
        copyWords<uint32_t>(src, dst, n);
        break;
      case 2:
        copyWords<uint16_t>(src, dst, n);
        break;
      default:
        copyWords<uint8_t>(src, dst, n);
        break;
    }
  }
}

// Elementwise loops are grid-stride so that a capped grid covers any count.
#define TUTTI_GRID_STRIDE(i, count)                                           \
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < (count); \
       i += size_t{gridDim.x} * blockDim.x)

template <typename T>
__global__ void scaleFloatKernel(T* buf, size_t count, T factor) {
  TUTTI_GRID_STRIDE(i, count) buf[i] *= factor;
}

__global__ void scaleHalfKernel(uint16_t* buf, size_t count, float factor) {
  TUTTI_GRID_STRIDE(i, count) {
    buf[i] = __half_as_ushort(__float2half_rn(__half2float(__ushort_as_half(buf[i])) * factor));
  }
}

__global__ void scaleBfloat16Kernel(uint16_t* buf, size_t count, float factor) {
  TUTTI_GRID_STRIDE(i, count) {
    buf[i] = __bfloat16_as_ushort(
        __float2bfloat16_rn(__bfloat162float(__ushort_as_bfloat16(buf[i])) * factor));
  }
}

// Integers as ops/reduce.h: in float64, x * factor / divisor truncated
// toward zero, saturated, NaN to 0.
template <typename T>
__global__ void scaleIntegerKernel(T* buf, size_t count, double factor, double divisor, double lo,
                                   double hi, T min_value, T max_value) {
  TUTTI_GRID_STRIDE(i, count) {
    const double v = trunc(static_cast<double>(buf[i]) * factor / divisor);
    if (v != v) {
      buf[i] = 0;
    } else if (v <= lo) {
      buf[i] = min_value;
    } else if (v >= hi) {
      buf[i] = max_value;
    } else {
      buf[i] = static_cast<T>(v);
    }
  }
}

// Cast compression: float32/float64 <-> float16/bfloat16 through float32, as
// compression/compressor.h's toFloat32/fromFloat32 (float64 rounds to
// float32 first, then to the 16-bit type; both round to nearest even).
struct HalfCodec {
  __device__ static uint16_t encode(float x) { return __half_as_ushort(__float2half_rn(x)); }
  __device__ static float decode(uint16_t x) { return __half2float(__ushort_as_half(x)); }
};
struct Bfloat16Codec {
  __device__ static uint16_t encode(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
  __device__ static float decode(uint16_t x) { return __bfloat162float(__ushort_as_bfloat16(x)); }
};

template <typename Codec, typename T>
__global__ void encodeKernel(const T* in, uint16_t* out, size_t count) {
  TUTTI_GRID_STRIDE(i, count) out[i] = Codec::encode(static_cast<float>(in[i]));
}
template <typename Codec, typename T>
__global__ void decodeKernel(const uint16_t* in, T* out, size_t count) {
  TUTTI_GRID_STRIDE(i, count) out[i] = static_cast<T>(Codec::decode(in[i]));
}

#undef TUTTI_GRID_STRIDE

template <typename T>
void scaleInteger(void* buf, size_t count, double factor, double divisor, uint32_t grid,
                  cudaStream_t stream) {
  const T min_value = std::numeric_limits<T>::min();
  const T max_value = std::numeric_limits<T>::max();
  // For int64 the largest T is not exactly representable; 2^63 (the double
  // it rounds to) is out of range, so the kernel compares with >= against it.
  scaleIntegerKernel<T><<<grid, kElementwiseThreads, 0, stream>>>(
      static_cast<T*>(buf), count, factor, divisor, static_cast<double>(min_value),
      static_cast<double>(max_value), min_value, max_value);
}

}  // namespace

cudaError_t launchBatchedCopy(const CopyDescriptor* descriptors, uint32_t count,
                              uint64_t virtual_blocks, uint32_t grid, size_t chunk_bytes,
                              cudaStream_t stream) {
  if (count == 0 || grid == 0) return cudaSuccess;
  batchedCopyKernel<<<grid, kCopyThreads, 0, stream>>>(descriptors, count, virtual_blocks,
                                                       chunk_bytes);
  return cudaGetLastError();
}

cudaError_t launchScale(void* buf, size_t count, DataType dtype, double factor_in, int divisor_in,
                        cudaStream_t stream) {
  if (divisor_in < 1) return cudaErrorInvalidValue;
  if (scaleIsNoop(count, dtype, factor_in, divisor_in)) return cudaSuccess;
  const uint32_t grid = elementwiseGrid(count, kElementwiseThreads, kItemsPerThread);
  const double divisor = divisor_in;
  const double factor = factor_in / divisor;  // floating types multiply by it
  switch (dtype) {
    case DataType::kFloat32:
      scaleFloatKernel<float><<<grid, kElementwiseThreads, 0, stream>>>(
          static_cast<float*>(buf), count, static_cast<float>(factor));
      break;
    case DataType::kFloat64:
      scaleFloatKernel<double>
          <<<grid, kElementwiseThreads, 0, stream>>>(static_cast<double*>(buf), count, factor);
      break;
    case DataType::kFloat16:
      scaleHalfKernel<<<grid, kElementwiseThreads, 0, stream>>>(static_cast<uint16_t*>(buf), count,
                                                                static_cast<float>(factor));
      break;
    case DataType::kBFloat16:
      scaleBfloat16Kernel<<<grid, kElementwiseThreads, 0, stream>>>(
          static_cast<uint16_t*>(buf), count, static_cast<float>(factor));
      break;
    case DataType::kUInt8:
      scaleInteger<uint8_t>(buf, count, factor_in, divisor, grid, stream);
      break;
    case DataType::kInt8:
      scaleInteger<int8_t>(buf, count, factor_in, divisor, grid, stream);
      break;
    case DataType::kInt16:
      scaleInteger<int16_t>(buf, count, factor_in, divisor, grid, stream);
      break;
    case DataType::kInt32:
      scaleInteger<int32_t>(buf, count, factor_in, divisor, grid, stream);
      break;
    case DataType::kInt64:
      scaleInteger<int64_t>(buf, count, factor_in, divisor, grid, stream);
      break;
    case DataType::kUInt16:
      scaleInteger<uint16_t>(buf, count, factor_in, divisor, grid, stream);
      break;
    case DataType::kUInt32:
      scaleInteger<uint32_t>(buf, count, factor_in, divisor, grid, stream);
      break;
    case DataType::kUInt64:
      scaleInteger<uint64_t>(buf, count, factor_in, divisor, grid, stream);
      break;
    case DataType::kBool:
      return cudaSuccess;
  }
  return cudaGetLastError();
}

namespace {

template <typename Codec, typename T>
void launchCastAs(const void* in, bool encode, void* out, size_t count, uint32_t grid,
                  cudaStream_t stream) {
  if (encode) {
    encodeKernel<Codec, T><<<grid, kElementwiseThreads, 0, stream>>>(
        static_cast<const T*>(in), static_cast<uint16_t*>(out), count);
  } else {
    decodeKernel<Codec, T><<<grid, kElementwiseThreads, 0, stream>>>(
        static_cast<const uint16_t*>(in), static_cast<T*>(out), count);
  }
}

}  // namespace

cudaError_t launchCast(const void* in, DataType in_type, void* out, DataType out_type, size_t count,
                       cudaStream_t stream) {
  if (!isCastPair(in_type, out_type)) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  const uint32_t grid = elementwiseGrid(count, kElementwiseThreads, kItemsPerThread);
  const bool encode = in_type == DataType::kFloat32 || in_type == DataType::kFloat64;
  const DataType wide = encode ? in_type : out_type;
  const DataType narrow = encode ? out_type : in_type;
  if (narrow == DataType::kFloat16) {
    if (wide == DataType::kFloat32) {
      launchCastAs<HalfCodec, float>(in, encode, out, count, grid, stream);
    } else {
      launchCastAs<HalfCodec, double>(in, encode, out, count, grid, stream);
    }
  } else if (wide == DataType::kFloat32) {
    launchCastAs<Bfloat16Codec, float>(in, encode, out, count, grid, stream);
  } else {
    launchCastAs<Bfloat16Codec, double>(in, encode, out, count, grid, stream);
  }
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace tutti
