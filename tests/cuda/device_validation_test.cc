// What the runtime says about CUDA tensors where it cannot run them: on this
// CI machine (CUDA toolkit, no GPU) and in builds without CUDA. Runs without
// a GPU; on a machine with one, the cases that need its absence skip.

#include <gtest/gtest.h>

#include <vector>

#include "coordinator/runtime.h"
#include "tests/support/op_checks.h"
#include "tests/support/thread_harness.h"
#include "tutti/config.h"

namespace tutti {
namespace {

using test::IsOk;

TensorView cudaView(void* data, int64_t n, int device_id) {
  TensorView v;
  v.data = data;
  v.dtype = DataType::kFloat32;
  v.shape = {n};
  v.device = DeviceType::kCuda;
  v.device_id = device_id;
  return v;
}

TEST(DeviceValidationTest, CudaTensorWithoutUsableCudaIsAnActionableError) {
  // The pointer is never dereferenced: enqueue refuses before.
  static float fake[4];
  test::runThreadRanks(1, [](Runtime& rt) {
    Handle h = 0;
    const TensorView t = cudaView(fake, 4, 0);
    Status st = rt.allreduce(t, t, OpOptions{}, &h);
    if (st.isOk()) {
      GTEST_SKIP() << "a CUDA device is present: covered by tutti_gpu_tests";
    }
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
    if (TUTTI_BUILT_CUDA) {
      EXPECT_NE(st.message().find("no CUDA device"), std::string::npos) << st.message();
    } else {
      EXPECT_NE(st.message().find("no CUDA support"), std::string::npos) << st.message();
    }
    // The runtime goes on: CPU tensors still work.
    std::vector<float> x = {1, 2, 3};
    TensorView cpu{x.data(), DataType::kFloat32, {3}};
    ASSERT_TRUE(IsOk(rt.allreduce(cpu, cpu, OpOptions{}, &h)));
    ASSERT_TRUE(IsOk(rt.wait(h)));
    EXPECT_EQ(x[2], 3.0f);
  });
}

TEST(DeviceValidationTest, InputAndOutputOnDifferentDevicesAreRefused) {
  static float fake[4];
  std::vector<float> host(4, 0.0f);
  test::runThreadRanks(1, [&](Runtime& rt) {
    Handle h = 0;
    const TensorView in = cudaView(fake, 4, 0);
    TensorView out{host.data(), DataType::kFloat32, {4}};
    Status st = rt.allreduce(in, out, OpOptions{}, &h);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
    EXPECT_NE(st.message().find("same device"), std::string::npos) << st.message();
  });
}

TEST(DeviceValidationTest, NegativeDeviceIdIsRefused) {
  static float fake[4];
  test::runThreadRanks(1, [](Runtime& rt) {
    Handle h = 0;
    const TensorView t = cudaView(fake, 4, -1);
    Status st = rt.broadcast(t, t, OpOptions{}, &h);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  });
}

}  // namespace
}  // namespace tutti
