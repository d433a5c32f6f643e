// CUDA tensors through tutti::Runtime: NCCL at world size 1 (TUTTI_BACKEND=
// nccl), and 4 ranks on the one GPU through the tcp backend (staged through
// pinned host memory). Ranks run as threads (tests/support/thread_harness).
// Needs a GPU (skips without one): runs under scripts/device-check.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "coordinator/runtime.h"
#include "core/compression_spec.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/support/op_checks.h"
#include "tests/support/thread_harness.h"
#include "tutti/config.h"

namespace tutti {
namespace {

using test::IsOk;

using test::DeviceMemory;

TensorView onDevice(const DeviceMemory& m, DataType dtype, Shape shape, void* stream = nullptr) {
  TensorView v;
  v.data = m.get();
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.device = DeviceType::kCuda;
  v.device_id = 0;
  v.stream = stream;
  return v;
}

template <typename T>
std::vector<T> hostValues(const OwnedTensor& t) {
  std::vector<T> out(t.bytes.size() / sizeof(T));
  std::memcpy(out.data(), t.bytes.data(), t.bytes.size());
  return out;
}

// The sum of the ranks' values r + 1 over n ranks: n (n + 1) / 2.
float ranksSum(const Runtime& rt) {
  const int n = rt.size();
  return static_cast<float>(n * (n + 1) / 2);
}

// Fused allreduce of five float32 tensors (one of them empty).
void fusedAllreduce(Runtime& rt) {
  const int r = rt.rank();
  OpOptions o;
  const std::vector<int64_t> sizes = {1, 1000, 3, 65537, 0};
  std::vector<std::unique_ptr<DeviceMemory>> mem;
  std::vector<TensorView> views;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<float> x(sizes[i]);
    for (int64_t j = 0; j < sizes[i]; ++j) x[j] = static_cast<float>((r + 1) * (j % 7 + i));
    mem.push_back(std::make_unique<DeviceMemory>(x.size() * 4));
    mem.back()->upload(x);
    views.push_back(onDevice(*mem.back(), DataType::kFloat32, {sizes[i]}));
  }
  std::vector<Handle> hs;
  o.name = "fused";
  ASSERT_TRUE(IsOk(rt.groupedAllreduce(views, views, o, &hs)));
  for (Handle x : hs) ASSERT_TRUE(IsOk(rt.wait(x)));
  const float ranks_sum = ranksSum(rt);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::vector<float> got = mem[i]->download<float>(sizes[i]);
    for (int64_t j = 0; j < sizes[i]; ++j) {
      ASSERT_EQ(got[j], ranks_sum * (j % 7 + i)) << "tensor " << i << " element " << j;
    }
  }
}

// Average with scale factors on float64, out of place.
void scaledAverage(Runtime& rt) {
  const int r = rt.rank(), n = rt.size();
  Handle h = 0;
  std::vector<double> x(4097, static_cast<double>(r + 1));
  DeviceMemory in(x.size() * 8), out(x.size() * 8);
  in.upload(x);
  OpOptions avg;
  avg.name = "average";
  avg.reduce_op = ReduceOp::kAverage;
  avg.prescale = 2.0;
  avg.postscale = 0.5;
  ASSERT_TRUE(IsOk(rt.allreduce(onDevice(in, DataType::kFloat64, {4097}),
                                onDevice(out, DataType::kFloat64, {4097}), avg, &h)));
  ASSERT_TRUE(IsOk(rt.wait(h)));
  for (double v : out.download<double>(4097)) ASSERT_EQ(v, (n + 1) / 2.0);
  for (double v : in.download<double>(4097)) ASSERT_EQ(v, r + 1.0) << "input unchanged";
}

// int16 (no NCCL type: staged through the host backend on nccl too), max.
void int16Max(Runtime& rt) {
  const int r = rt.rank(), n = rt.size();
  Handle h = 0;
  std::vector<int16_t> x(33, static_cast<int16_t>(100 * r - 7));
  DeviceMemory m(x.size() * 2);
  m.upload(x);
  OpOptions mx;
  mx.name = "int16.max";
  mx.reduce_op = ReduceOp::kMax;
  const TensorView v = onDevice(m, DataType::kInt16, {33});
  ASSERT_TRUE(IsOk(rt.allreduce(v, v, mx, &h)));
  ASSERT_TRUE(IsOk(rt.wait(h)));
  for (int16_t got : m.download<int16_t>(33)) ASSERT_EQ(got, 100 * (n - 1) - 7);
}

// Allgather of uneven first dimensions: rank q has q + 1 rows of 3.
void unevenAllgather(Runtime& rt) {
  const int r = rt.rank(), n = rt.size();
  Handle h = 0;
  OpOptions o;
  std::vector<int32_t> x(static_cast<size_t>(3 * (r + 1)), r);
  DeviceMemory m(x.size() * 4);
  m.upload(x);
  o.name = "allgather";
  ASSERT_TRUE(IsOk(rt.allgather(onDevice(m, DataType::kInt32, {r + 1, 3}), o, &h)));
  ASSERT_TRUE(IsOk(rt.wait(h)));
  const OwnedTensor* out = rt.output(h);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->shape, (Shape{n * (n + 1) / 2, 3}));
  std::vector<int32_t> want;
  for (int q = 0; q < n; ++q) want.insert(want.end(), static_cast<size_t>(3 * (q + 1)), q);
  EXPECT_EQ(hostValues<int32_t>(*out), want);
  ASSERT_TRUE(IsOk(rt.release(h)));
}

// Broadcast from the last rank, in place.
void broadcastFromLast(Runtime& rt) {
  const int r = rt.rank(), n = rt.size();
  Handle h = 0;
  OpOptions o;
  std::vector<float> x(1001, static_cast<float>(r));
  DeviceMemory m(x.size() * 4);
  m.upload(x);
  o.name = "broadcast";
  o.root = n - 1;
  const TensorView v = onDevice(m, DataType::kFloat32, {1001});
  ASSERT_TRUE(IsOk(rt.broadcast(v, v, o, &h)));
  ASSERT_TRUE(IsOk(rt.wait(h)));
  for (float got : m.download<float>(1001)) ASSERT_EQ(got, static_cast<float>(n - 1));
}

// Alltoall with uneven splits: rank q sends p + 1 rows of 2 to rank p.
void unevenAlltoall(Runtime& rt) {
  const int r = rt.rank(), n = rt.size();
  Handle h = 0;
  OpOptions a;
  a.name = "alltoall";
  int64_t rows = 0;
  for (int p = 0; p < n; ++p) {
    a.splits.push_back(p + 1);
    rows += p + 1;
  }
  std::vector<float> x;
  for (int p = 0; p < n; ++p) {
    x.insert(x.end(), static_cast<size_t>(2 * (p + 1)), static_cast<float>(100 * r + p));
  }
  DeviceMemory m(x.size() * 4);
  m.upload(x);
  ASSERT_TRUE(IsOk(rt.alltoall(onDevice(m, DataType::kFloat32, {rows, 2}), a, &h)));
  ASSERT_TRUE(IsOk(rt.wait(h)));
  std::vector<float> want;
  for (int q = 0; q < n; ++q) {
    want.insert(want.end(), static_cast<size_t>(2 * (r + 1)), static_cast<float>(100 * q + r));
  }
  EXPECT_EQ(hostValues<float>(*rt.output(h)), want);
  EXPECT_EQ(rt.receivedSplits(h), std::vector<int64_t>(static_cast<size_t>(n), r + 1));
  ASSERT_TRUE(IsOk(rt.release(h)));
}

// Reducescatter of 2n + 1 rows of 4 (uneven: rank 0 gets one more row).
void unevenReducescatter(Runtime& rt) {
  const int r = rt.rank(), n = rt.size();
  Handle h = 0;
  OpOptions o;
  const int64_t rows = 2 * n + 1;
  std::vector<float> x(static_cast<size_t>(rows * 4));
  for (size_t j = 0; j < x.size(); ++j) x[j] = static_cast<float>((r + 1) * (j / 4));
  DeviceMemory m(x.size() * 4);
  m.upload(x);
  o.name = "reducescatter";
  ASSERT_TRUE(IsOk(rt.reducescatter(onDevice(m, DataType::kFloat32, {rows, 4}), o, &h)));
  ASSERT_TRUE(IsOk(rt.wait(h)));
  const int64_t first = r == 0 ? 0 : 3 + 2 * (r - 1);
  const int64_t mine = r == 0 ? 3 : 2;
  const float ranks_sum = ranksSum(rt);
  const std::vector<float> got = hostValues<float>(*rt.output(h));
  ASSERT_EQ(got.size(), static_cast<size_t>(mine * 4));
  for (size_t j = 0; j < got.size(); ++j) {
    ASSERT_EQ(got[j], ranks_sum * static_cast<float>(first + static_cast<int64_t>(j / 4)));
  }
  ASSERT_TRUE(IsOk(rt.release(h)));
}

// Every collective on CUDA tensors, with exact expected values, in order; a
// fatal failure in one stops the rest (as one function's ASSERTs would).
void runDeviceOps(Runtime& rt) {
  ASSERT_NO_FATAL_FAILURE(fusedAllreduce(rt));
  ASSERT_NO_FATAL_FAILURE(scaledAverage(rt));
  ASSERT_NO_FATAL_FAILURE(int16Max(rt));
  ASSERT_NO_FATAL_FAILURE(unevenAllgather(rt));
  ASSERT_NO_FATAL_FAILURE(broadcastFromLast(rt));
  ASSERT_NO_FATAL_FAILURE(unevenAlltoall(rt));
  ASSERT_NO_FATAL_FAILURE(unevenReducescatter(rt));
}

// Compressed allreduces of CUDA tensors give, bit for bit, what the same op
// gives on CPU tensors (casts: the kernels convert as the host does and the
// 16-bit buffer goes through the same reduction; top-k and int8 run the host
// stage on a pinned copy), with the same error-feedback residuals; fp16 and
// bf16 send half of float32's bytes. The same on nccl at size 1 (its sum of
// one rank is exact) and on tcp staging at several ranks.
void runCompressedDeviceOps(Runtime& rt) {
  const int r = rt.rank();
  const int64_t count = 65537;
  for (const std::string spec : {"none", "fp16", "bf16", "topk:0.01", "int8"}) {
    for (int step = 0; step < 3; ++step) {
      std::vector<float> x(static_cast<size_t>(count));
      for (int64_t j = 0; j < count; ++j) {
        x[j] = std::sin(0.37f * static_cast<float>(j + 101 * r + 7 * step)) *
               std::pow(10.0f, static_cast<float>(j % 5) - 3.0f);
      }
      std::vector<float> on_host = x;
      DeviceMemory m(x.size() * 4);
      m.upload(x);
      OpOptions o;
      o.compression = spec;
      o.reduce_op = step == 1 ? ReduceOp::kAverage : ReduceOp::kSum;
      Handle hc = 0, hg = 0;
      o.name = "cpu." + spec;
      const TensorView cpu{on_host.data(), DataType::kFloat32, {count}};
      ASSERT_TRUE(IsOk(rt.allreduce(cpu, cpu, o, &hc)));
      ASSERT_TRUE(IsOk(rt.wait(hc)));
      const uint64_t before = rt.bytesSent();
      o.name = "gpu." + spec;
      const TensorView gpu = onDevice(m, DataType::kFloat32, {count});
      ASSERT_TRUE(IsOk(rt.allreduce(gpu, gpu, o, &hg)));
      ASSERT_TRUE(IsOk(rt.wait(hg)));
      const uint64_t sent = rt.bytesSent() - before;
      const std::vector<float> got = m.download<float>(x.size());
      ASSERT_EQ(std::memcmp(got.data(), on_host.data(), got.size() * 4), 0)
          << spec << " step " << step;
      if (rt.size() > 1 && step == 0 && (spec == "fp16" || spec == "bf16")) {
        // Ring allreduce of float32 sends 2 (n-1)/n * 4 bytes per element.
        const double float32_bytes = 2.0 * (rt.size() - 1) / rt.size() * 4.0 * count;
        EXPECT_LE(static_cast<double>(sent), 0.51 * float32_bytes) << spec;
        EXPECT_GE(static_cast<double>(sent), 0.49 * float32_bytes) << spec;
      }
    }
  }
  const CompressionResiduals residuals = rt.compressionResiduals();
  for (const std::string spec : {"topk:0.01", "int8"}) {
    std::string canonical;  // the key: "int8" is "int8:256"
    ASSERT_TRUE(IsOk(canonicalizeCompressionSpec(spec, &canonical)));
    ASSERT_EQ(residuals.count(canonical), 1u) << canonical;
    const ResidualMap& kept = residuals.at(canonical);
    ASSERT_EQ(kept.count("gpu." + spec), 1u) << spec;
    EXPECT_EQ(kept.at("gpu." + spec), kept.at("cpu." + spec)) << spec;
  }
}

TEST(GpuRuntimeTest, CompressedAllreduceMatchesTheHostPathOnNccl) {
  TUTTI_REQUIRE_GPU();
  if (!TUTTI_BUILT_NCCL) GTEST_SKIP() << "this build has no NCCL";
  test::ClusterOptions options;
  options.backend = "nccl";
  test::runThreadRanks(1, runCompressedDeviceOps, options);
}

TEST(GpuRuntimeTest, CompressedAllreduceMatchesTheHostPathThroughTcpStaging) {
  TUTTI_REQUIRE_GPU();
  test::ClusterOptions options;
  options.backend = "tcp";
  test::runThreadRanks(3, runCompressedDeviceOps, options);
}

TEST(GpuRuntimeTest, NcclAtWorldSizeOne) {
  TUTTI_REQUIRE_GPU();
  if (!TUTTI_BUILT_NCCL) GTEST_SKIP() << "this build has no NCCL";
  test::ClusterOptions options;
  options.backend = "nccl";
  test::runThreadRanks(1, runDeviceOps, options);
}

TEST(GpuRuntimeTest, FourRanksOnOneGpuThroughTcpStaging) {
  TUTTI_REQUIRE_GPU();
  test::ClusterOptions options;
  options.backend = "tcp";
  options.segment_bytes = 256 << 10;
  test::runThreadRanks(4, runDeviceOps, options);
}

TEST(GpuRuntimeTest, OrderedAfterTheFrameworksStream) {
  TUTTI_REQUIRE_GPU();
  test::ClusterOptions options;
  options.backend = TUTTI_BUILT_NCCL ? "nccl" : "tcp";
  test::runThreadRanks(
      1,
      [](Runtime& rt) {
        const size_t n = size_t{64} << 20;  // floats: 256 MiB, a long memset
        DeviceMemory m(n * 4);
        cudaStream_t user = nullptr;
        TUTTI_ASSERT_CUDA(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
        TUTTI_ASSERT_CUDA(cudaMemsetAsync(m.get(), 0, n * 4, user));
        TUTTI_ASSERT_CUDA(cudaStreamSynchronize(user));
        // 0x3f800000 = 1.0f: set by the framework's stream right before enqueue.
        TUTTI_ASSERT_CUDA(cudaMemsetAsync(m.get(), 0x3f, n * 4, user));
        Handle h = 0;
        OpOptions o;
        o.name = "ordered";
        o.postscale = 2.0;
        const TensorView v = onDevice(m, DataType::kFloat32, {static_cast<int64_t>(n)}, user);
        ASSERT_TRUE(IsOk(rt.allreduce(v, v, o, &h)));
        ASSERT_TRUE(IsOk(rt.wait(h)));
        const float expect = 2.0f * 0.7470588f;  // 0x3f3f3f3f
        for (float got : m.download<float>(1024, n * 4 - 4096)) ASSERT_NEAR(got, expect, 1e-6);
        cudaStreamDestroy(user);
      },
      options);
}

TEST(GpuRuntimeTest, SecondDeviceOnOneRankIsRefused) {
  TUTTI_REQUIRE_GPU();
  test::runThreadRanks(1, [](Runtime& rt) {
    DeviceMemory m(64);
    Handle h = 0;
    OpOptions o;
    o.name = "first";
    const TensorView v = onDevice(m, DataType::kFloat32, {16});
    ASSERT_TRUE(IsOk(rt.allreduce(v, v, o, &h)));
    ASSERT_TRUE(IsOk(rt.wait(h)));
    TensorView other = v;
    other.device_id = 1;
    o.name = "second";
    Status st = rt.allreduce(other, other, o, &h);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  });
}

}  // namespace
}  // namespace tutti
