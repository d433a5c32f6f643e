#pragma once

// Helpers of the GPU tests (tutti_gpu_tests): skip without a device, device
// memory that frees itself, synchronous uploads and downloads.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "ops/cuda/cuda_device.h"

// Skips the test with a visible message when the process sees no GPU.
#define TUTTI_REQUIRE_GPU()                                                  \
  do {                                                                       \
    if (::tutti::cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

#define TUTTI_ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

namespace tutti {
namespace test {

class DeviceMemory {
 public:
  explicit DeviceMemory(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&data_, bytes == 0 ? 1 : bytes), cudaSuccess);
  }
  ~DeviceMemory() { cudaFree(data_); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* get() const { return data_; }
  template <typename T = uint8_t>
  T* as(size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(data_) + byte_offset);
  }
  size_t bytes() const { return bytes_; }

  template <typename T>
  void upload(const std::vector<T>& values, size_t byte_offset = 0) {
    EXPECT_EQ(cudaMemcpy(as(byte_offset), values.data(), values.size() * sizeof(T),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  template <typename T>
  std::vector<T> download(size_t count, size_t byte_offset = 0) const {
    std::vector<T> out(count);
    EXPECT_EQ(cudaMemcpy(out.data(), as(byte_offset), count * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

}  // namespace test
}  // namespace tutti
