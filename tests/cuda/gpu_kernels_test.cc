// tutti's CUDA kernels against the CPU reference (ops/reduce.h, memcpy),
// through CudaDeviceContext. Needs a GPU (skips without one): runs under
// scripts/device-check.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "ops/cuda/cuda_device.h"
#include "ops/reduce.h"
#include "tests/cuda/gpu_test_util.h"

namespace tutti {
namespace {

using cuda::CudaDeviceContext;
using test::DeviceMemory;

std::unique_ptr<CudaDeviceContext> openContext() {
  std::unique_ptr<CudaDeviceContext> ctx;
  Status st = CudaDeviceContext::create(0, &ctx);
  EXPECT_TRUE(st.isOk()) << st.toString();
  return ctx;
}

std::vector<uint8_t> randomBytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(gen());
  return out;
}

TEST(GpuKernelsTest, BatchedCopyMatchesMemcpyAtAnyAlignmentAndChunkBoundary) {
  TUTTI_REQUIRE_GPU();
  auto ctx = openContext();
  ASSERT_TRUE(ctx);
  constexpr size_t kChunk = cuda::kDefaultChunkBytes;
  const std::vector<size_t> sizes = {0,
                                     1,
                                     2,
                                     3,
                                     15,
                                     16,
                                     17,
                                     255,
                                     kChunk - 1,
                                     kChunk,
                                     kChunk + 1,
                                     3 * kChunk + 5,
                                     (size_t{1} << 20) + 7};
  size_t total = 0;
  for (size_t s : sizes) total += s + 64;
  const std::vector<uint8_t> src_bytes = randomBytes(total, 1);
  DeviceMemory src(total), dst(total);
  src.upload(src_bytes);
  TUTTI_ASSERT_CUDA(cudaMemset(dst.get(), 0, total));
  std::vector<DeviceCopy> copies;
  std::vector<uint8_t> expected(total, 0);
  size_t s_off = 0, d_off = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    // Source and destination misaligned by different amounts.
    const size_t s_at = s_off + i % 16, d_at = d_off + (i * 7) % 16;
    copies.push_back({src.as(s_at), dst.as(d_at), sizes[i]});
    std::memcpy(expected.data() + d_at, src_bytes.data() + s_at, sizes[i]);
    s_off += sizes[i] + 64;
    d_off += sizes[i] + 64;
  }
  ASSERT_TRUE(ctx->copyBatch(copies).isOk());
  ASSERT_TRUE(ctx->synchronize().isOk());
  EXPECT_EQ(dst.download<uint8_t>(total), expected);
}

TEST(GpuKernelsTest, BatchedCopyOfMoreCopiesThanOneLaunchHolds) {
  TUTTI_REQUIRE_GPU();
  auto ctx = openContext();
  ASSERT_TRUE(ctx);
  const size_t n = cuda::kDefaultMaxDescriptors * 2 + 123;
  const size_t each = 12;  // 4-byte aligned, not 16
  const std::vector<uint8_t> src_bytes = randomBytes(n * each, 2);
  DeviceMemory src(n * each), dst(n * each);
  src.upload(src_bytes);
  std::vector<DeviceCopy> copies;
  // Reversed order: a copy's place in the batch says nothing about its address.
  for (size_t i = 0; i < n; ++i) {
    copies.push_back({src.as(i * each), dst.as((n - 1 - i) * each), each});
  }
  ASSERT_TRUE(ctx->copyBatch(copies).isOk());
  ASSERT_TRUE(ctx->synchronize().isOk());
  const std::vector<uint8_t> got = dst.download<uint8_t>(n * each);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::memcmp(got.data() + (n - 1 - i) * each, src_bytes.data() + i * each, each), 0)
        << "copy " << i;
  }
}

// Values that exercise rounding, saturation and specials for each dtype.
std::vector<uint8_t> scaleInput(DataType dtype, size_t n) {
  std::mt19937 gen(static_cast<uint32_t>(dtype) + 7);
  std::uniform_real_distribution<double> real(-1000.0, 1000.0);
  std::vector<uint8_t> bytes(n * dataTypeSize(dtype));
  for (size_t i = 0; i < n; ++i) {
    const double v = i < 4 ? std::vector<double>{0.0, -0.0, 1e30, -1e30}[i] : real(gen);
    void* p = bytes.data() + i * dataTypeSize(dtype);
    switch (dtype) {
      case DataType::kFloat32: {
        const float f = static_cast<float>(v);
        std::memcpy(p, &f, 4);
        break;
      }
      case DataType::kFloat64:
        std::memcpy(p, &v, 8);
        break;
      case DataType::kFloat16: {
        const uint16_t h = floatToHalf(static_cast<float>(v));
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kBFloat16: {
        const uint16_t b = floatToBfloat16(static_cast<float>(v));
        std::memcpy(p, &b, 2);
        break;
      }
      default: {
        // Integers: random bytes cover the whole range, extremes included.
        for (size_t k = 0; k < dataTypeSize(dtype); ++k) {
          static_cast<uint8_t*>(p)[k] = static_cast<uint8_t>(gen());
        }
        if (dtype == DataType::kBool) *static_cast<uint8_t*>(p) &= 1;
      }
    }
  }
  return bytes;
}

class GpuScaleTest : public ::testing::TestWithParam<DataType> {};

TEST_P(GpuScaleTest, MatchesCpuScaleInPlaceBitForBit) {
  TUTTI_REQUIRE_GPU();
  auto ctx = openContext();
  ASSERT_TRUE(ctx);
  const DataType dtype = GetParam();
  const size_t n = 100003;  // prime: a partial last block
  for (const auto& [factor, divisor] : std::vector<std::pair<double, int>>{{0.5, 1},
                                                                           {1.0 / 3.0, 1},
                                                                           {-1.25, 1},
                                                                           {3.7, 1},
                                                                           {1e10, 1},
                                                                           {0.0, 1},
                                                                           {1.0, 2},
                                                                           {1.0, 3},
                                                                           {0.5, 7}}) {
    std::vector<uint8_t> expected = scaleInput(dtype, n);
    DeviceMemory buf(expected.size());
    buf.upload(expected);
    scaleInPlace(expected.data(), n, dtype, factor, divisor);
    ASSERT_TRUE(ctx->scale(buf.get(), n, dtype, factor, divisor).isOk());
    ASSERT_TRUE(ctx->synchronize().isOk());
    const std::vector<uint8_t> got = buf.download<uint8_t>(expected.size());
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) {
      const size_t e = dataTypeSize(dtype);
      if (std::memcmp(got.data() + i * e, expected.data() + i * e, e) != 0) ++wrong;
    }
    EXPECT_EQ(wrong, 0u) << dataTypeName(dtype) << " x " << factor << " / " << divisor;
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GpuScaleTest,
                         ::testing::Values(DataType::kUInt8, DataType::kInt8, DataType::kInt16,
                                           DataType::kInt32, DataType::kInt64, DataType::kFloat16,
                                           DataType::kBFloat16, DataType::kFloat32,
                                           DataType::kFloat64, DataType::kBool, DataType::kUInt16,
                                           DataType::kUInt32, DataType::kUInt64),
                         [](const auto& info) { return std::string(dataTypeName(info.param)); });

TEST(GpuKernelsTest, CastsMatchTheCpuConversions) {
  TUTTI_REQUIRE_GPU();
  auto ctx = openContext();
  ASSERT_TRUE(ctx);
  const size_t n = 65537;
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> real(-70000.0f, 70000.0f);  // beyond float16's range
  std::vector<float> f(n);
  for (auto& x : f) x = real(gen);
  f[0] = 0.0f;
  f[1] = std::numeric_limits<float>::infinity();
  f[2] = 1e-8f;  // float16 subnormal / underflow
  DeviceMemory in(n * 4), half(n * 2), back(n * 4);
  in.upload(f);
  for (DataType narrow : {DataType::kFloat16, DataType::kBFloat16}) {
    ASSERT_TRUE(ctx->cast(in.get(), DataType::kFloat32, half.get(), narrow, n).isOk());
    ASSERT_TRUE(ctx->cast(half.get(), narrow, back.get(), DataType::kFloat32, n).isOk());
    ASSERT_TRUE(ctx->synchronize().isOk());
    const std::vector<uint16_t> got16 = half.download<uint16_t>(n);
    const std::vector<float> got32 = back.download<float>(n);
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint16_t want =
          narrow == DataType::kFloat16 ? floatToHalf(f[i]) : floatToBfloat16(f[i]);
      const float want_back =
          narrow == DataType::kFloat16 ? halfToFloat(want) : bfloat16ToFloat(want);
      if (got16[i] != want || std::memcmp(&got32[i], &want_back, 4) != 0) ++wrong;
    }
    EXPECT_EQ(wrong, 0u) << dataTypeName(narrow);
  }
  EXPECT_FALSE(ctx->cast(in.get(), DataType::kFloat32, back.get(), DataType::kInt32, n).isOk());

  // float64 goes through float32 (round to nearest), as the host's cast
  // compressor does.
  std::vector<double> d(n);
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<double>(f[i]) * (1.0 + 1e-9);
  DeviceMemory wide(n * 8), wide_back(n * 8);
  wide.upload(d);
  for (DataType narrow : {DataType::kFloat16, DataType::kBFloat16}) {
    ASSERT_TRUE(ctx->cast(wide.get(), DataType::kFloat64, half.get(), narrow, n).isOk());
    ASSERT_TRUE(ctx->cast(half.get(), narrow, wide_back.get(), DataType::kFloat64, n).isOk());
    ASSERT_TRUE(ctx->synchronize().isOk());
    const std::vector<uint16_t> got16 = half.download<uint16_t>(n);
    const std::vector<double> got64 = wide_back.download<double>(n);
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) {
      const float rounded = static_cast<float>(d[i]);
      const uint16_t want =
          narrow == DataType::kFloat16 ? floatToHalf(rounded) : floatToBfloat16(rounded);
      const double want_back =
          narrow == DataType::kFloat16 ? halfToFloat(want) : bfloat16ToFloat(want);
      if (got16[i] != want || std::memcmp(&got64[i], &want_back, 8) != 0) ++wrong;
    }
    EXPECT_EQ(wrong, 0u) << "float64 via " << dataTypeName(narrow);
  }
}

TEST(GpuKernelsTest, WaitForOrdersAfterAnotherStream) {
  TUTTI_REQUIRE_GPU();
  auto ctx = openContext();
  ASSERT_TRUE(ctx);
  const size_t bytes = size_t{256} << 20;
  DeviceMemory a(bytes), b(bytes);
  cudaStream_t user = nullptr;
  TUTTI_ASSERT_CUDA(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
  TUTTI_ASSERT_CUDA(cudaMemsetAsync(a.get(), 0, bytes, user));
  TUTTI_ASSERT_CUDA(cudaStreamSynchronize(user));
  // A long memset on the user's stream, then the event; tutti's copy must
  // see its result.
  TUTTI_ASSERT_CUDA(cudaMemsetAsync(a.get(), 0x5a, bytes, user));
  std::shared_ptr<DeviceEvent> ready;
  ASSERT_TRUE(ctx->recordOn(user, &ready).isOk());
  ASSERT_TRUE(ctx->waitFor(*ready).isOk());
  ASSERT_TRUE(ctx->copy(b.get(), a.get(), bytes).isOk());
  ASSERT_TRUE(ctx->synchronize().isOk());
  const std::vector<uint8_t> tail = b.download<uint8_t>(4096, bytes - 4096);
  for (uint8_t v : tail) ASSERT_EQ(v, 0x5a);
  cudaStreamDestroy(user);
}

}  // namespace
}  // namespace tutti
